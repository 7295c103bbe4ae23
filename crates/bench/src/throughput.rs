//! `tranche bench throughput`: what a user's shell loop of `tranche submit` gets from a
//! local cluster of real processes (3 controllers, 4 agents with 8 fake GPUs each, the
//! process executor): (a) separate CLI processes run one after another, (c) the time
//! from the first of them until every job has ended, then (b) one array submit of as
//! many one-GPU tasks (`tranche submit --array 0-999`, Slurm's `sbatch --array`): the
//! submit process's time, and from its start until every task has ended.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tranche_client::Client;
use tranche_local::{demo, LocalCluster};
use tranche_model::{CapacityLimit, JobStatus, Strategy};
use tranche_proto::{ClientCommand, JobFilter, Query, Response};
use tranche_tls::{Role, TlsFiles};

use super::agent_cluster_spooled;
use super::stats::{print_json, Spread};
use crate::timing;
use tranche_client::unexpected_text;

/// Agents, and fake GPUs on each.
const NODES: usize = 4;
const GPUS_PER_NODE: u32 = 8;
/// The share every job is submitted to.
const SHARE: &str = "bench";
/// The user whose certificate the CLI presents.
const USER: &str = "bench";

#[derive(clap::Args, Debug)]
pub struct ThroughputArgs {
    /// `tranche submit --gpus 1 -- true` processes to run, one after another.
    #[arg(long, default_value_t = 1000)]
    submits: usize,
    /// Where the agents keep their spools (each attempt's files and kept output), e.g.
    /// a tmpfs [default: the cluster's temporary dir, beside the controllers' data].
    #[arg(long, value_name = "DIR")]
    spool_dir: Option<PathBuf>,
    /// Tasks of the array submitted after the loop (0: no array).
    #[arg(long, default_value_t = 1000)]
    array_tasks: usize,
    /// Have each `tranche submit` mark the end of its phases (`TRANCHE_TIMING`), and
    /// report the median of each phase.
    #[arg(long)]
    timing: bool,
    /// The `tranche` binary to run [default: this one].
    #[arg(long)]
    cli: Option<PathBuf>,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// One submit process: its time from spawn to exit, and its phases' marks.
struct Run {
    ms: f64,
    marks: Vec<(String, f64)>,
}

/// The `tranche` binary to run: `--cli`, else this one.
fn find_cli(flag: &Option<PathBuf>) -> Result<PathBuf, String> {
    match flag {
        Some(p) if p.exists() => Ok(p.clone()),
        Some(p) => Err(format!("--cli {}: no such file", p.display())),
        None => std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}")),
    }
}

/// The cluster config the CLI processes read, as a user would write it.
fn write_cli_config(dir: &Path, c: &LocalCluster, tls: &TlsFiles) -> Result<PathBuf, String> {
    let controllers: Vec<String> = c
        .client_addrs()
        .iter()
        .map(|a| format!("\"{a}\""))
        .collect();
    let text = format!(
        "controllers = [{}]\n\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        controllers.join(", "),
        tls.ca.display(),
        tls.cert.display(),
        tls.key.display()
    );
    let path = dir.join("cli.toml");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The policy: one environment of all the GPUs, and one share open to every user
/// that may use them all.
fn policy() -> Vec<ClientCommand> {
    let gpus = NODES as u32 * GPUS_PER_NODE;
    let mut cmds = demo::base(vec![CapacityLimit {
        unit: "h100".into(),
        max: gpus,
    }]);
    cmds.push(ClientCommand::PutShare(tranche_model::QuotaShare {
        limits: tranche_model::JobLimits::widest(),
        ..demo::share(SHARE, Strategy::Lend, gpus, &[])
    }));
    cmds
}

async fn jobs(admin: &Client, status: Vec<JobStatus>, limit: Option<u32>) -> Result<usize, String> {
    let q = Query::Jobs(JobFilter {
        share: Some(SHARE.into()),
        user: None,
        status,
        limit,
        array: None,
        standing: false,
    });
    match admin.read(q, false).await {
        Ok(Response::Jobs(j)) => Ok(j.len()),
        Ok(other) => Err(unexpected_text(&other)),
        Err(e) => Err(e.to_string()),
    }
}

/// The tasks of array `id` in one of `status`.
async fn array_jobs(admin: &Client, id: u64, status: Vec<JobStatus>) -> Result<usize, String> {
    let q = Query::Jobs(JobFilter {
        status,
        array: Some(tranche_model::JobId(id)),
        ..Default::default()
    });
    match admin.read(q, false).await {
        Ok(Response::Jobs(j)) => Ok(j.len()),
        Ok(other) => Err(unexpected_text(&other)),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits until the cluster's agents have registered their nodes.
async fn wait_nodes(admin: &Client) -> Result<(), String> {
    tranche_local::wait_until(
        "the agents' nodes",
        Duration::from_secs(30),
        async || match admin.read(Query::Nodes, false).await {
            Ok(Response::Nodes(n)) if n.len() >= NODES => Ok(()),
            Ok(Response::Nodes(n)) => Err(format!("{} of {NODES} nodes", n.len())),
            Ok(other) => Err(unexpected_text(&other)),
            Err(e) => Err(e.to_string()),
        },
    )
    .await
}

/// Runs one `tranche submit` to its end.
fn submit_once(cli: &Path, config: &Path, cache: &Path, timed: bool) -> Result<Run, String> {
    submit_with(cli, config, cache, timed, &[]).map(|(run, _)| run)
}

/// Runs one `tranche submit` with `extra` options to its end; its run and stdout.
fn submit_with(
    cli: &Path,
    config: &Path,
    cache: &Path,
    timed: bool,
    extra: &[&str],
) -> Result<(Run, String), String> {
    let mut cmd = Command::new(cli);
    cmd.args(["submit", "--share", SHARE, "--gpus", "1", "--parsable"])
        .args(extra)
        .arg("--config")
        .arg(config)
        .args(["--", "true"])
        .env("XDG_CACHE_HOME", cache)
        .env_remove(timing::ENV)
        .stdin(Stdio::null());
    if timed {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| e.to_string())?;
        cmd.env(timing::ENV, now.as_nanos().to_string());
    }
    let t = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cli.display()))?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if !out.status.success() {
        return Err(format!(
            "`tranche submit` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let marks = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(timing::parse)
        .map(|(p, ms)| (p.to_string(), ms))
        .collect();
    Ok((
        Run { ms, marks },
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    ))
}

/// Each phase's median length over the runs, in the order the phases end; the last,
/// `reaped`, runs from the final mark until the parent saw the process exit.
fn phases(runs: &[Run]) -> Vec<(String, f64)> {
    let mut order: Vec<String> = Vec::new();
    let mut lengths: std::collections::HashMap<String, Vec<f64>> = Default::default();
    for r in runs {
        let mut prev = 0.0;
        let ends = r
            .marks
            .iter()
            .cloned()
            .chain([("reaped".to_string(), r.ms)]);
        for (phase, at) in ends {
            if !order.contains(&phase) {
                order.push(phase.clone());
            }
            lengths.entry(phase).or_default().push(at - prev);
            prev = at;
        }
    }
    order
        .into_iter()
        .map(|p| {
            let m = Spread::of(&lengths[&p]).p50;
            (p, m)
        })
        .collect()
}

pub async fn throughput(args: &ThroughputArgs) -> Result<(), String> {
    if args.submits == 0 {
        return Err("--submits must be at least 1".into());
    }
    let cli = find_cli(&args.cli)?;
    // Dropped last: after the cluster's processes.
    let _spools: Option<tempfile::TempDir>;
    // Its fields drop in order: the processes first, the dir last.
    let mut ac = {
        // A directory of this run's own under --spool-dir, removed after it: agents
        // adopt whatever attempts they find in their spools.
        let spools = super::own_dir_under(&args.spool_dir, "--spool-dir", "tranche-bench-spool-")?;
        let root = spools.as_ref().map(|t| t.path().to_path_buf());
        _spools = spools;
        agent_cluster_spooled(root).await?
    };
    let (c, admin, agent, tmp) = ac.parts();
    admin
        .apply_all(policy())
        .await
        .map_err(|e| format!("policy refused: {e}"))?;
    for i in 1..=NODES {
        c.add_agent(
            agent,
            &format!("n{i}"),
            &format!("{GPUS_PER_NODE} x h100"),
            "heartbeat_ms = 1000",
        )?;
    }
    wait_nodes(admin).await?;
    let user = c.issue(Role::User, USER)?;
    let config = write_cli_config(tmp, c, &user)?;
    // The CLI's cache (the leader it last used) starts empty, in the cluster's dir.
    let cache = tmp.join("cache");

    // (a) The loop: each submit a fresh process, as a shell loop runs them.
    let n = args.submits;
    let mut runs = Vec::with_capacity(n);
    let timed = args.timing;
    let first = Instant::now();
    for _ in 0..n {
        let (cli, config, cache) = (cli.clone(), config.clone(), cache.clone());
        let run = tokio::task::spawn_blocking(move || submit_once(&cli, &config, &cache, timed))
            .await
            .map_err(|e| e.to_string())??;
        runs.push(run);
    }
    let each_ms: Vec<f64> = runs.iter().map(|r| r.ms).collect();
    let loop_s = first.elapsed().as_secs_f64();

    // (c) Until every job has ended.
    let not_ended: Vec<JobStatus> = JobStatus::ALL
        .into_iter()
        .filter(|s| !s.is_terminal())
        .collect();
    tranche_local::wait_until(
        "every job to end",
        Duration::from_secs(300),
        async || match jobs(admin, not_ended.clone(), Some(1)).await? {
            0 => Ok(()),
            _ => Err("jobs still waiting or running".into()),
        },
    )
    .await?;
    let all_ended_s = first.elapsed().as_secs_f64();
    let succeeded = jobs(admin, vec![JobStatus::Succeeded], None).await?;
    let total = jobs(admin, Vec::new(), None).await?;
    if total != n || succeeded != n {
        return Err(format!(
            "{n} submits made {total} jobs, of which {succeeded} succeeded"
        ));
    }

    // (b) One array of as many tasks, on the now idle cluster.
    let array = if args.array_tasks > 0 {
        let spec = format!("0-{}", args.array_tasks - 1);
        let started = Instant::now();
        let (cli, config, cache) = (cli.clone(), config.clone(), cache.clone());
        let (run, out) = tokio::task::spawn_blocking(move || {
            submit_with(&cli, &config, &cache, false, &["--array", &spec])
        })
        .await
        .map_err(|e| e.to_string())??;
        let id: u64 = out
            .parse()
            .map_err(|_| format!("the array submit printed {out:?}, not a job id"))?;
        let open: Vec<JobStatus> = JobStatus::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect();
        tranche_local::wait_until("every task to end", Duration::from_secs(300), async || {
            match array_jobs(admin, id, open.clone()).await? {
                0 => Ok(()),
                n => Err(format!("{n} tasks still waiting or running")),
            }
        })
        .await?;
        let ended_s = started.elapsed().as_secs_f64();
        let ok = array_jobs(admin, id, vec![JobStatus::Succeeded]).await?;
        if ok != args.array_tasks {
            return Err(format!(
                "{ok} of the array's {} tasks succeeded",
                args.array_tasks
            ));
        }
        Some((run.ms, ended_s))
    } else {
        None
    };

    let rate = n as f64 / loop_s;
    let Spread { p50, p99, max, .. } = Spread::of(&each_ms);
    let phases = if timed { phases(&runs) } else { Vec::new() };
    if args.json {
        let mut v = serde_json::json!({
            "submits": n, "nodes": NODES, "gpus_per_node": GPUS_PER_NODE,
            "loop_s": loop_s, "submits_per_s": rate,
            "submit_p50_ms": p50, "submit_p99_ms": p99, "submit_max_ms": max,
            "all_ended_s": all_ended_s, "succeeded": succeeded,
        });
        if let Some((ms, s)) = array {
            v["array_tasks"] = args.array_tasks.into();
            v["array_submit_ms"] = ms.into();
            v["array_all_ended_s"] = s.into();
        }
        if timed {
            v["phases_p50_ms"] = phases
                .iter()
                .map(|(p, ms)| (p.clone(), serde_json::json!(ms)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        print_json(v);
    } else {
        println!(
            "cluster                   3 controllers, {NODES} agents x {GPUS_PER_NODE} fake GPUs"
        );
        println!("CLI loop                  {n} submits in {loop_s:.2} s: {rate:.1} submits/s");
        println!("one submit process        p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms");
        println!("first submit -> all ended {all_ended_s:.2} s ({succeeded} SUCCEEDED)");
        if let Some((ms, s)) = array {
            println!(
                "array of {} tasks        submit {ms:.1} ms; submit -> all ended {s:.2} s",
                args.array_tasks
            );
        }
        if timed {
            println!("phases of one submit, median of each:");
            for (p, ms) in &phases {
                println!("  {p:<24}{ms:.2} ms");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{phases, Run};

    fn run(ms: f64, marks: &[(&str, f64)]) -> Run {
        Run {
            ms,
            marks: marks.iter().map(|(p, t)| (p.to_string(), *t)).collect(),
        }
    }

    #[test]
    fn phases_are_the_median_gaps_between_marks_in_order() {
        let runs = [
            run(10.0, &[("main", 1.0), ("connect", 4.0), ("exit", 9.0)]),
            run(14.0, &[("main", 2.0), ("connect", 4.0), ("exit", 13.0)]),
            run(12.0, &[("main", 3.0), ("connect", 7.0), ("exit", 11.0)]),
        ];
        let got = phases(&runs);
        let names: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(names, ["main", "connect", "exit", "reaped"]);
        let ms: Vec<f64> = got.iter().map(|(_, m)| *m).collect();
        assert_eq!(ms, [2.0, 3.0, 5.0, 1.0]);
    }

    #[test]
    fn a_binary_without_marks_has_only_its_whole_time() {
        let got = phases(&[run(10.0, &[]), run(20.0, &[]), run(30.0, &[])]);
        assert_eq!(got, [("reaped".to_string(), 20.0)]);
    }
}
