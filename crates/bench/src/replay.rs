//! `tranche bench replay`: a job trace on real daemons. Three controllers, an agent
//! per node of the policy with fake GPUs, and each job a real process that sleeps for
//! its duration / `--speed` (and, with `checkpoint_s`, traps its signal and exits that
//! much later). Submits go in at their trace times / speed. Once every job has ended,
//! the jobs' real attempts are read back, their times scaled back to trace time, and
//! reported with the simulator's figures — beside `tranche sim`'s for the same trace,
//! so that the simulator is checked against the system.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tranche_client::Client;
use tranche_model::{Job, JobId, JobRef, JobSpec, JobStatus, Millis, SECOND};
use tranche_proto::{ClientCommand, JobFilter, Query, Response};
use tranche_sim::report::{self, Figures, JobRun, Setup};
use tranche_sim::runs;
use tranche_sim::scenario::expand_names;
use tranche_sim::trace::TraceJob;
use tranche_sim::tracesim;

use super::{agent_cluster, AgentCluster};
use tranche_client::unexpected_text;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The trace (the format of `tranche sim --trace`).
    #[arg(long)]
    trace: PathBuf,
    /// The policy file (as for `tranche sim`).
    #[arg(long)]
    policy: PathBuf,
    /// The nodes, COUNT x GPUS UNIT; each node is an agent process.
    #[arg(long)]
    nodes: Option<String>,
    /// The trace's column mapping, as for `tranche sim`.
    #[arg(long)]
    columns: Option<String>,
    /// Only the jobs submitted within this many seconds of the first.
    #[arg(long, value_name = "SECONDS")]
    until_s: Option<u64>,
    /// Run the trace this many times faster than it was recorded (submits and
    /// durations divided by it; grace periods are not).
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Where the agents keep their attempts' directories while they run (their
    /// `attempts_dir`), e.g. a tmpfs such as `/dev/shm`: a directory of this run's own
    /// under DIR, removed after it. Their spools (kept output, GPU ledger) and the
    /// controllers' data stay in the run's temporary dir [default: in the spools].
    #[arg(long, value_name = "DIR")]
    attempts_dir: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Largest agreement gaps the replay accepts: utilization points, and the mean
/// wait's relative difference.
const UTIL_POINTS: f64 = 2.0;
const MEAN_WAIT_REL: f64 = 0.10;

pub fn replay_cmd(args: &ReplayArgs) -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(replay(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("tranche bench replay: {e}");
            ExitCode::from(2)
        }
    }
}

fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// Seconds as `sleep` takes them.
fn secs(ms: f64) -> String {
    format!("{:.3}", ms / 1000.0)
}

/// The job as a real process: it sleeps for its duration / speed; with a checkpoint
/// time it traps SIGTERM and exits that much (/ speed) later.
fn real_spec(mut spec: JobSpec, j: &TraceJob, speed: f64) -> Result<JobSpec, String> {
    let run_ms = j
        .duration
        .or(j.time_limit_s.map(|s| s * SECOND))
        .expect("the trace parser requires one") as f64
        / speed;
    spec.command = match j.checkpoint {
        None => vec!["sleep".into(), secs(run_ms)],
        Some(c) => vec![
            "sh".into(),
            "-c".into(),
            format!(
                "trap 'sleep {}; exit 0' TERM; sleep {} & wait $!",
                secs(c as f64 / speed),
                secs(run_ms)
            ),
        ],
    };
    if let Some(t) = j.time_limit_s {
        if speed != 1.0 {
            return Err(format!(
                "line {}: time_limit_s is whole seconds and cannot be sped up; replay this trace at --speed 1",
                j.line
            ));
        }
        spec.time_limit_s = Some(t);
    }
    spec.client_token = Some(format!("replay-{}", j.line));
    Ok(spec)
}

async fn replay(args: &ReplayArgs) -> Result<bool, String> {
    if !(args.speed > 0.0 && args.speed.is_finite()) {
        return Err(format!("--speed must be more than 0, got {}", args.speed));
    }
    let read = |p: &Path| {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        Ok::<_, String>((p.display().to_string(), text))
    };
    let (name, text) = read(&args.trace)?;
    let jobs = runs::load_trace(&name, &text, args.columns.as_deref(), args.until_s)
        .map_err(|e| e.to_string())?;
    let (name, text) = read(&args.policy)?;
    let sc = runs::load_policy(&name, &text, args.nodes.as_deref()).map_err(|e| e.to_string())?;
    let specs =
        tracesim::specs(&sc, &jobs).map_err(|e| format!("{}: {e}", args.trace.display()))?;
    let specs: Vec<JobSpec> = specs
        .into_iter()
        .zip(&jobs)
        .map(|(s, j)| real_spec(s, j, args.speed))
        .collect::<Result<_, _>>()?;
    // The replay's report shows the simulator's figures, not how long it took.
    let sim = runs::run("tranche sim", &sc, &jobs, false, || 0.0).map_err(|e| e.to_string())?;

    // Bound before the cluster, so removed after its processes have stopped.
    let attempts_root = super::own_dir_under(
        &args.attempts_dir,
        "--attempts-dir",
        "tranche-replay-attempts-",
    )?;
    // Bound in this order, dropped in the reverse: the processes first, the dir last.
    let AgentCluster {
        tmp: _tmp,
        _keep,
        agent,
        admin,
        cluster: mut c,
    } = agent_cluster().await?;
    let o = tranche_sim::engine::objects(&sc);
    let mut cmds: Vec<ClientCommand> = o
        .environments
        .into_iter()
        .map(ClientCommand::PutEnvironment)
        .collect();
    cmds.push(ClientCommand::PutPolicy(o.policy));
    cmds.extend(o.queues.into_iter().map(ClientCommand::PutQueue));
    cmds.extend(o.shares.into_iter().map(ClientCommand::PutShare));
    admin
        .apply_all(cmds)
        .await
        .map_err(|e| format!("policy refused: {e}"))?;
    let mut nodes = 0;
    for n in &sc.nodes {
        // Environments select their nodes by these labels.
        let labels: Vec<String> = n
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k:?} = {v:?}"))
            .collect();
        let extra = format!("heartbeat_ms = 1000\nlabels = {{ {} }}", labels.join(", "));
        for name in expand_names(n) {
            let extra = match &attempts_root {
                Some(root) => {
                    let dir = root.path().join(&name).display().to_string();
                    format!("attempts_dir = {}\n{extra}", toml::Value::String(dir))
                }
                None => extra.clone(),
            };
            c.add_agent(&agent, &name, &format!("{} x {}", n.gpus, n.unit), &extra)?;
            nodes += 1;
        }
    }
    wait_nodes(&admin, nodes).await?;
    let admin = Arc::new(admin);

    // Trace time `first` is wall time `t0`.
    let first = jobs[0].submit;
    let (t0, start) = (now_ms(), Instant::now());
    let mut handles = Vec::with_capacity(jobs.len());
    for (j, spec) in jobs.iter().zip(specs) {
        let due = Duration::from_secs_f64((j.submit - first) as f64 / 1000.0 / args.speed);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let a = admin.clone();
        let line = j.line;
        handles.push(tokio::spawn(async move {
            a.submit(spec)
                .await
                .map(|(id, _)| id)
                .map_err(|e| format!("line {line}: submit failed: {e}"))
        }));
    }
    let mut ids = Vec::with_capacity(handles.len());
    for h in handles {
        ids.push(h.await.map_err(|e| e.to_string())??);
    }
    let submitted_s = start.elapsed().as_secs_f64();
    // The simulator's end, at this speed, with room for the system's own delays.
    let expect_s = (sim.figures.makespan_ms as f64 / 1000.0 / args.speed) * 1.5 + 60.0;
    wait_drained(&admin, Duration::from_secs_f64(expect_s)).await?;
    let wall_s = start.elapsed().as_secs_f64();
    let real = fetch(&admin, &ids).await?;
    let runs = scaled(report::runs_from_jobs(real.iter()), t0, first, args.speed);
    let setup = Setup::of(&sc);
    let replayed = report::figures(&setup, &runs, runs::BUCKETS);
    let overhead = overhead(&runs, &jobs, args.speed);
    let phases = phases(&real, &jobs, args.speed);
    let verdict = agreement(&replayed, &sim.figures);
    let ok = verdict.iter().all(|v| v.1);
    if args.json {
        let j = serde_json::json!({
            "replay": replayed,
            "sim": sim.figures,
            "speed": args.speed,
            "wall_s": wall_s,
            "submits_s": submitted_s,
            "held_beyond_duration_ms": overhead,
            "held_beyond_duration_phases_ms": phases,
            "agreement": verdict.iter().map(|(what, ok, detail)| serde_json::json!({
                "what": what, "agrees": ok, "detail": detail,
            })).collect::<Vec<_>>(),
        });
        println!("{j:#}");
    } else {
        print!(
            "{}",
            report::render_table(
                &format!("replay on real daemons at speed {}", args.speed),
                &replayed
            )
        );
        println!();
        let rows = [
            ("real daemons".to_string(), &replayed),
            ("tranche sim".to_string(), &sim.figures),
        ];
        print!("{}", report::render_comparison(&rows));
        println!(
            "\nwall time {:.1} s ({} jobs submitted over {:.1} s); times above are trace time (wall × {})",
            wall_s,
            ids.len(),
            submitted_s,
            args.speed
        );
        if let Some(o) = &overhead {
            println!(
                "a finished attempt held its GPUs {:.0} ms (wall) longer than the job ran: mean, over {} attempts; p99 {:.0} ms",
                o.mean, o.attempts, o.p99
            );
        }
        for (what, o) in [
            ("placed to STARTING", &phases.scheduled_to_starting),
            ("STARTING to RUNNING", &phases.starting_to_running),
            (
                "RUNNING to the end, less the duration",
                &phases.running_to_ended_beyond_duration,
            ),
        ] {
            if let Some(o) = o {
                println!("  {what}: {:.0} ms mean, p99 {:.0} ms", o.mean, o.p99);
            }
        }
        for (what, ok, detail) in &verdict {
            println!(
                "{} {what}: {detail}",
                if *ok { "agrees:" } else { "DIFFERS:" }
            );
        }
    }
    Ok(ok)
}

/// Moves the real attempts' times to trace time.
fn scaled(runs: Vec<JobRun>, t0: Millis, first: Millis, speed: f64) -> Vec<JobRun> {
    let at = |t: Millis| first + ((t as f64 - t0 as f64).max(0.0) * speed).round() as Millis;
    runs.into_iter()
        .map(|mut r| {
            r.submit = at(r.submit);
            for a in &mut r.attempts {
                a.start = at(a.start);
                a.end = a.end.map(at);
            }
            r
        })
        .collect()
}

/// How much longer than its duration a finished attempt held its GPUs, in wall
/// milliseconds: the system's own delays (placement to process start, exit to the
/// report that frees the GPUs).
#[derive(Debug, serde::Serialize)]
struct Overhead {
    attempts: usize,
    mean: f64,
    p99: f64,
}

impl Overhead {
    fn of(mut v: Vec<f64>) -> Option<Overhead> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let p99 = v[((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Overhead {
            attempts: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p99,
        })
    }
}

/// Where the held time beyond the duration goes, in wall milliseconds, over the
/// succeeded jobs' last attempts: placed to STARTING (the plan's commit to the agent's
/// report), STARTING to RUNNING (the agent's start path), and RUNNING to the end less
/// the duration (the job's own start, its exit and the exit's report).
#[derive(Debug, serde::Serialize)]
struct Phases {
    scheduled_to_starting: Option<Overhead>,
    starting_to_running: Option<Overhead>,
    running_to_ended_beyond_duration: Option<Overhead>,
}

fn phases(real: &[Job], jobs: &[TraceJob], speed: f64) -> Phases {
    let dur: std::collections::HashMap<&str, Millis> = jobs
        .iter()
        .filter_map(|j| Some((j.name.as_str(), j.duration?)))
        .collect();
    let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
    for j in real.iter().filter(|j| j.status == JobStatus::Succeeded) {
        // The last attempt's transitions: those after the last SCHEDULED.
        let Some(i) = j
            .transitions
            .iter()
            .rposition(|t| t.to == JobStatus::Scheduled)
        else {
            continue;
        };
        let last = &j.transitions[i..];
        let at = |s: JobStatus| last.iter().find(|t| t.to == s).map(|t| t.at as f64);
        let (sched, starting, running, end) = (
            at(JobStatus::Scheduled),
            at(JobStatus::Starting),
            at(JobStatus::Running),
            at(JobStatus::Succeeded),
        );
        if let (Some(x), Some(y)) = (sched, starting) {
            a.push(y - x);
        }
        if let (Some(x), Some(y)) = (starting, running) {
            b.push(y - x);
        }
        if let (Some(x), Some(y), Some(d)) = (running, end, dur.get(j.spec.name.as_str())) {
            c.push(y - x - *d as f64 / speed);
        }
    }
    Phases {
        scheduled_to_starting: Overhead::of(a),
        starting_to_running: Overhead::of(b),
        running_to_ended_beyond_duration: Overhead::of(c),
    }
}

fn overhead(runs: &[JobRun], jobs: &[TraceJob], speed: f64) -> Option<Overhead> {
    let dur: std::collections::HashMap<String, Millis> = jobs
        .iter()
        .filter_map(|j| Some((j.name.clone(), j.duration?)))
        .collect();
    let v: Vec<f64> = runs
        .iter()
        .filter(|r| r.status == JobStatus::Succeeded)
        .filter_map(|r| {
            let a = r.attempts.last()?;
            let held = a.end? as f64 - a.start as f64;
            Some((held - *dur.get(&r.name)? as f64) / speed)
        })
        .collect();
    Overhead::of(v)
}

/// Whether the replay's utilizations are within [`UTIL_POINTS`] and its mean wait
/// within [`MEAN_WAIT_REL`] of the simulator's.
fn agreement(real: &Figures, sim: &Figures) -> Vec<(&'static str, bool, String)> {
    let pts = |a: f64, b: f64| {
        let d = (a - b).abs() * 100.0;
        (
            d <= UTIL_POINTS,
            format!("{:.1}% vs {:.1}% ({d:.1} points)", a * 100.0, b * 100.0),
        )
    };
    let (u1, d1) = pts(real.utilization, sim.utilization);
    let (u2, d2) = pts(
        real.utilization_while_waiting,
        sim.utilization_while_waiting,
    );
    let rel = if sim.wait.mean > 0.0 {
        (real.wait.mean - sim.wait.mean).abs() / sim.wait.mean
    } else if real.wait.mean < 1000.0 {
        0.0
    } else {
        f64::INFINITY
    };
    vec![
        ("utilization over the makespan", u1, d1),
        ("utilization while jobs wait", u2, d2),
        (
            "mean wait",
            rel <= MEAN_WAIT_REL,
            format!(
                "{} vs {} ({:.1}% apart)",
                report::fmt_mean(real.wait.mean),
                report::fmt_mean(sim.wait.mean),
                rel * 100.0
            ),
        ),
    ]
}

async fn wait_nodes(admin: &Client, n: usize) -> Result<(), String> {
    tranche_local::wait_until(
        "the agents' nodes",
        Duration::from_secs(60),
        async || match admin.read(Query::Nodes, false).await {
            Ok(Response::Nodes(v)) if v.len() >= n => Ok(()),
            Ok(Response::Nodes(v)) => Err(format!("{} of {n} nodes", v.len())),
            Ok(other) => Err(unexpected_text(&other)),
            Err(e) => Err(e.to_string()),
        },
    )
    .await
}

/// Waits until no job is left that has not ended.
async fn wait_drained(admin: &Client, limit: Duration) -> Result<(), String> {
    let filter = JobFilter {
        status: JobStatus::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect(),
        limit: Some(1),
        ..Default::default()
    };
    let deadline = Instant::now() + limit;
    loop {
        match admin.read(Query::Jobs(filter.clone()), true).await {
            Ok(Response::Jobs(v)) if v.is_empty() => return Ok(()),
            Ok(Response::Jobs(_)) => {}
            Ok(other) => return Err(unexpected_text(&other)),
            Err(e) => return Err(format!("cannot list jobs: {e}")),
        }
        if Instant::now() > deadline {
            return Err(format!(
                "jobs were still running {:.0} s after the start, past what the simulator expects",
                limit.as_secs_f64()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Reads every job back, 32 at a time.
async fn fetch(admin: &Arc<Client>, ids: &[JobId]) -> Result<Vec<Job>, String> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(32) {
        let mut hs = vec![];
        for &id in chunk {
            let a = admin.clone();
            hs.push(tokio::spawn(async move {
                match a.read(Query::Job(JobRef::job(id)), false).await {
                    Ok(Response::Job(j)) => Ok(*j),
                    Ok(other) => Err(format!("job {id}: {}", unexpected_text(&other))),
                    Err(e) => Err(format!("job {id}: {e}")),
                }
            }));
        }
        for h in hs {
            out.push(h.await.map_err(|e| e.to_string())??);
        }
    }
    Ok(out)
}
