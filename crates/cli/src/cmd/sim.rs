//! `tranche sim`: a job trace under a policy in virtual time, and the report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tranche_sim::report::{self, Figures, Setup};
use tranche_sim::scenario::Scenario;
use tranche_sim::trace::{self, Columns, TraceJob};
use tranche_sim::{policy, tracesim};

/// Resolution of the report's time series.
const BUCKETS: usize = 600;

#[derive(clap::Args)]
pub struct SimArgs {
    /// The trace: CSV with a header (submit_s, share, gpus, and optionally name, user,
    /// nodes, unit, duration_s, priority, time_limit_s, checkpoint_s).
    #[arg(long)]
    pub trace: PathBuf,
    /// The policy: a scenario file's [environment], [[queues]] and [[shares]] (and
    /// optionally [[nodes]]).
    #[arg(long)]
    pub policy: PathBuf,
    /// The nodes, as COUNT x GPUS UNIT (groups joined by '+'); replaces the policy's
    /// [[nodes]].
    #[arg(long)]
    pub nodes: Option<String>,
    /// How the trace's columns map to fields, FILE_COLUMN=FIELD (FILE_COLUMN=- to
    /// ignore one), e.g. job_id=name,tenant=share,num_gpu=gpus.
    #[arg(long)]
    pub columns: Option<String>,
    /// Only the jobs submitted within this many seconds of the trace's first submit.
    #[arg(long, value_name = "SECONDS")]
    pub until_s: Option<u64>,
    /// Also run the trace as a static partition (every share RESERVE at its max) and
    /// as pooled FIFO (one share with every GPU), and print the three side by side.
    #[arg(long)]
    pub compare: bool,
    /// Write the report there: index.html, plots as PNG and SVG, figures.json.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Print the figures as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One simulated policy: its label, the figures, and how long the run took.
pub struct Run {
    pub label: String,
    pub setup: Setup,
    pub figures: Figures,
    pub passes: u64,
    pub wall_s: f64,
}

pub fn sim(args: &SimArgs) -> ExitCode {
    match sim_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tranche sim: {e}");
            ExitCode::from(2)
        }
    }
}

/// Reads a trace file (with `--columns` and `--until-s`).
pub fn read_trace(
    path: &PathBuf,
    columns: Option<&str>,
    until_s: Option<u64>,
) -> Result<Vec<TraceJob>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let cols = columns.map(Columns::parse).transpose()?.unwrap_or_default();
    let mut jobs = trace::parse(&text, &cols).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(u) = until_s {
        let first = jobs[0].submit;
        jobs.retain(|j| j.submit < first + u * tranche_model::SECOND);
    }
    Ok(jobs)
}

/// Reads a policy file with `--nodes`.
pub fn read_policy(path: &PathBuf, nodes: Option<&str>) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let nodes = nodes.map(policy::parse_nodes).transpose()?;
    policy::load(&text, nodes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Simulates one policy.
pub fn run(label: &str, sc: &Scenario, jobs: &[TraceJob]) -> Result<Run, String> {
    let t0 = Instant::now();
    let out = tracesim::simulate(sc, jobs).map_err(|e| format!("{label}: {e}"))?;
    let wall_s = t0.elapsed().as_secs_f64();
    let setup = Setup::of(sc);
    let figures = report::figures(&setup, &out.runs, BUCKETS);
    Ok(Run {
        label: label.into(),
        setup,
        figures,
        passes: out.passes,
        wall_s,
    })
}

fn sim_inner(args: &SimArgs) -> Result<(), String> {
    let jobs = read_trace(&args.trace, args.columns.as_deref(), args.until_s)?;
    let sc = read_policy(&args.policy, args.nodes.as_deref())?;
    // Every row is checked against the policy before anything runs.
    tracesim::specs(&sc, &jobs).map_err(|e| format!("{}: {e}", args.trace.display()))?;
    let name = args
        .policy
        .file_stem()
        .map_or("policy".into(), |s| s.to_string_lossy().to_string());
    let mut runs = vec![run(&name, &sc, &jobs)?];
    if args.compare {
        runs.push(run(
            "static partition (every share RESERVE)",
            &policy::static_partition(&sc),
            &jobs,
        )?);
        runs.push(run(
            "pooled FIFO (one share, no quotas)",
            &policy::pooled(&sc),
            &policy::pooled_trace(&jobs),
        )?);
    }
    for r in &runs {
        eprintln!(
            "simulated {} jobs under {} in {:.2} s ({} scheduling passes)",
            r.figures.jobs, r.label, r.wall_s, r.passes
        );
    }
    if let Some(dir) = &args.report {
        crate::sim_report::write(dir, &args.trace, &runs)?;
        eprintln!("report written to {}", dir.join("index.html").display());
    }
    if args.json {
        println!("{}", json(&runs));
    } else {
        print!("{}", report::render_table(&runs[0].label, &runs[0].figures));
        if runs.len() > 1 {
            println!();
            print!("{}", comparison(&runs));
        }
    }
    Ok(())
}

pub fn comparison(runs: &[Run]) -> String {
    let rows: Vec<(String, &Figures)> =
        runs.iter().map(|r| (r.label.clone(), &r.figures)).collect();
    report::render_comparison(&rows)
}

/// The figures of every run as one JSON object.
pub fn json(runs: &[Run]) -> serde_json::Value {
    serde_json::json!({
        "runs": runs.iter().map(|r| serde_json::json!({
            "policy": r.label,
            "figures": r.figures,
            "scheduling_passes": r.passes,
            "wall_s": r.wall_s,
        })).collect::<Vec<_>>(),
    })
}
