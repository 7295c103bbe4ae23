//! `tranche sim`: a job trace under a policy in virtual time, and the report. The
//! simulation, its figures and the report's contents are `tranche_sim`'s; this module
//! reads the files, times the runs, prints, and writes the report directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;
use tranche_sim::report;
use tranche_sim::runs::{self, Run};
use tranche_sim::scenario::Scenario;
use tranche_sim::trace::TraceJob;
use tranche_sim::tracesim;

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
    /// Also run the trace under FAIR_SHARE (a FIFO policy's shares, half-life 7 days),
    /// as a static partition (every share RESERVE at its max) and as pooled FIFO (one
    /// share with every GPU), and print them side by side.
    #[arg(long)]
    pub compare: bool,
    /// Write the report there: index.html, plots as PNG and SVG, figures.json.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Print the figures as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Look at every waiting job on its own in each scheduling pass, rather than once
    /// per class of interchangeable jobs: the same figures, slower (for checking).
    #[arg(long)]
    pub every_job: bool,
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

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Reads a trace file (with `--columns` and `--until-s`).
pub fn read_trace(
    path: &Path,
    columns: Option<&str>,
    until_s: Option<u64>,
) -> Result<Vec<TraceJob>, String> {
    runs::load_trace(&path.display().to_string(), &read(path)?, columns, until_s)
        .map_err(|e| e.to_string())
}

/// Reads a policy file with `--nodes`.
pub fn read_policy(path: &Path, nodes: Option<&str>) -> Result<Scenario, String> {
    runs::load_policy(&path.display().to_string(), &read(path)?, nodes).map_err(|e| e.to_string())
}

/// Simulates one policy, timed.
pub fn run(label: &str, sc: &Scenario, jobs: &[TraceJob], every_job: bool) -> Result<Run, String> {
    let t0 = Instant::now();
    runs::run(label, sc, jobs, every_job, || t0.elapsed().as_secs_f64()).map_err(|e| e.to_string())
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
    let runs = runs::variants(&name, &sc, &jobs, args.compare)
        .iter()
        .map(|v| run(&v.label, &v.scenario, &v.jobs, args.every_job))
        .collect::<Result<Vec<_>, _>>()?;
    for r in &runs {
        eprintln!(
            "simulated {} jobs under {} in {:.2} s ({} scheduling passes)",
            r.figures.jobs, r.label, r.wall_s, r.passes
        );
    }
    if let Some(dir) = &args.report {
        write_report(dir, &args.trace, &runs)?;
        eprintln!("report written to {}", dir.join("index.html").display());
    }
    if args.json {
        println!("{}", runs::json(&runs));
    } else {
        print!("{}", report::render_table(&runs[0].label, &runs[0].figures));
        if runs.len() > 1 {
            println!();
            print!("{}", runs::comparison(&runs));
        }
    }
    Ok(())
}

/// Fonts looked for when `TRANCHE_FONT` is not set (Debian, Fedora, Arch, macOS).
const FONTS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Reads and registers the labels' font.
fn font() -> Result<(), String> {
    let candidates: Vec<PathBuf> = match std::env::var_os("TRANCHE_FONT") {
        Some(p) => vec![PathBuf::from(p)],
        None => FONTS.iter().map(PathBuf::from).collect(),
    };
    for p in &candidates {
        if let Ok(bytes) = std::fs::read(p) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return tranche_sim::plot::use_font(bytes).map_err(|e| format!("{}: {e}", p.display()));
        }
    }
    Err(format!(
        "no font for the plots' labels (looked for {}); set TRANCHE_FONT to a .ttf file",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Writes the report's files into `dir`, plots too when a font is found.
fn write_report(dir: &Path, trace: &Path, runs: &[Run]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let plots = match font() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("tranche sim: the report has no plots: {e}");
            false
        }
    };
    let trace = trace.display().to_string();
    for (name, bytes) in tranche_sim::page::files(&trace, runs, plots).map_err(|e| e.to_string())? {
        std::fs::write(dir.join(&name), bytes)
            .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    }
    Ok(())
}
