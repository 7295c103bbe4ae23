//! Tranche's benchmarks, run by `tranche bench`: the scheduler alone (`sched`), local
//! clusters of real processes (`submit`, `failover`, `preempt`, `scale`,
//! `throughput`, `replay`), what one tenant can do to the controllers
//! (`array-memory`, `flood`), and a year of jobs (`soak`). Each prints text, or JSON
//! with `--json` (one object; `soak` one per report and one for its summary); a
//! benchmark that cannot run prints why and exits with status 2.
//!
//! May depend on `tranche-local` (which starts `tranched` and `tranche-agent` as
//! processes), the client, the protocol, the TLS files, and the core (model, state,
//! sched, sim). Must never link the controller or the agent as libraries: what it
//! measures runs in their own processes, as in production.

mod cluster;
mod preempt;
mod replay;
mod scale;
mod sched;
mod soak;
mod stats;
mod tenants;
mod throughput;
pub mod timing;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum BenchCmd {
    /// Time full scheduling passes over a large synthetic cluster.
    ///
    /// Example: tranche bench sched --json
    Sched(sched::SchedArgs),
    /// Durable submits per second and latency against a local controller trio
    /// (real `tranched` processes, QUIC with mutual TLS, fsync'd redb storage).
    ///
    /// Example: tranche bench submit --clients 64 --duration 10 --json
    Submit(cluster::SubmitArgs),
    /// Kill the leader with SIGKILL under load; time until the next write is
    /// acknowledged, and check that no acknowledged write was lost.
    ///
    /// Example: tranche bench failover --rounds 5 --json
    Failover(cluster::FailoverArgs),
    /// Preemption on a local cluster with agents: from the committed plan to the
    /// victim's signal, and from placement to the job's first instruction.
    ///
    /// Example: tranche bench preempt --jobs 40 --json
    Preempt(preempt::PreemptArgs),
    /// Many simulated agents (real QUIC, their own certificates, fake GPUs) against a
    /// local controller trio: Raft entries/s and the leader's CPU at rest, heartbeat
    /// answers, and from a placement's entry to its agent learning of it.
    ///
    /// Example: tranche bench scale --nodes 10000 --json
    Scale(scale::ScaleArgs),
    /// A shell loop of `tranche submit --gpus 1 -- true` (separate CLI processes, one
    /// after another) against 3 controllers and 4 agents with 8 fake GPUs each: submits
    /// per second, and from the first submit until every job has ended.
    ///
    /// Example: tranche bench throughput --submits 1000 --json
    Throughput(throughput::ThroughputArgs),
    /// A job trace on real daemons (3 controllers, an agent per node with fake GPUs,
    /// jobs that sleep for duration / speed), reported with `tranche sim`'s figures
    /// beside the simulator's for the same trace.
    ///
    /// Example: tranche bench replay --trace tests/traces/replay/jobs.csv --policy tests/traces/replay/policy.toml --speed 2
    Replay(replay::ReplayArgs),
    /// The controllers' resident memory before and after one array job with a large
    /// environment (held, so nothing runs), on a local controller trio.
    ///
    /// Example: tranche bench array-memory --tasks 10000 --env-bytes 64000
    ArrayMemory(tenants::ArrayMemoryArgs),
    /// One user submits as fast as it can on many connections while another submits at
    /// a steady pace: the steady user's latency beside a quiet baseline, and how many of
    /// the flood's submits were accepted and refused.
    ///
    /// Example: tranche bench flood --duration 60 --clients 32
    Flood(tenants::FloodArgs),
    /// A year of jobs through a local controller trio with fsync: jobs that end at once
    /// (nodes whose agents this process plays), the retention clock driven fast
    /// (`--hot-s` seconds stand for a day); every `--report-every` ended jobs, the
    /// controllers' memory, hot jobs, state image size, a fresh controller's snapshot
    /// install time, history size on disk, history and show latency, submit latency.
    ///
    /// Example: tranche bench soak --jobs 1000000 --report-every 100000 --json
    Soak(soak::SoakArgs),
}

/// Runs one benchmark; its exit status.
pub fn run(cmd: BenchCmd) -> ExitCode {
    match cmd {
        BenchCmd::Sched(args) => sched::sched(&args),
        BenchCmd::Submit(args) => block_on("submit", cluster::submit(&args)),
        BenchCmd::Failover(args) => block_on("failover", cluster::failover(&args)),
        BenchCmd::Preempt(args) => block_on("preempt", preempt::preempt(&args)),
        BenchCmd::Scale(args) => block_on("scale", scale::scale(&args)),
        BenchCmd::Throughput(args) => block_on("throughput", throughput::throughput(&args)),
        BenchCmd::Replay(args) => replay::replay_cmd(&args),
        BenchCmd::ArrayMemory(args) => block_on("array-memory", tenants::array_memory(&args)),
        BenchCmd::Flood(args) => block_on("flood", tenants::flood(&args)),
        BenchCmd::Soak(args) => block_on("soak", soak::soak(&args)),
    }
}

/// Runs a cluster benchmark on two worker threads (the benchmark's clients and
/// marks, beside the processes it measures); its error goes to stderr with exit
/// status 2.
fn block_on(what: &str, f: impl std::future::Future<Output = Result<(), String>>) -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tranche bench {what}: {e}");
            ExitCode::from(2)
        }
    }
}

/// This machine's wall clock, in ms since the epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A local cluster for the benchmarks with agents: three controllers started in a
/// temporary dir, a leader elected, an admin client, and the agent binary to add
/// agents with. The controllers log warnings only, unless `TRANCHE_LOG` says more.
struct AgentCluster {
    // Dropped in this order: the processes, then the copy kept with `TRANCHE_KEEP`,
    // then the dir.
    cluster: tranche_local::LocalCluster,
    admin: tranche_client::Client,
    agent: PathBuf,
    _keep: KeptCopy,
    tmp: tempfile::TempDir,
}

impl AgentCluster {
    /// The cluster, the admin client, the agent binary and the temporary dir.
    fn parts(
        &mut self,
    ) -> (
        &mut tranche_local::LocalCluster,
        &tranche_client::Client,
        &Path,
        &Path,
    ) {
        (&mut self.cluster, &self.admin, &self.agent, self.tmp.path())
    }
}

/// A directory of this run's own under `dir` (the option `flag`'s value), removed when
/// dropped; `None` without one.
fn own_dir_under(
    dir: &Option<std::path::PathBuf>,
    flag: &str,
    prefix: &str,
) -> Result<Option<tempfile::TempDir>, String> {
    dir.as_ref()
        .map(|d| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(d)
                .map_err(|e| format!("{flag} {}: {e}", d.display()))
        })
        .transpose()
}

async fn agent_cluster() -> Result<AgentCluster, String> {
    agent_cluster_spooled(None).await
}

/// [`agent_cluster`], its agents' spools under `spool_root` when given.
async fn agent_cluster_spooled(
    spool_root: Option<std::path::PathBuf>,
) -> Result<AgentCluster, String> {
    use tranche_local::{find_agent, find_tranched, LocalCluster, LocalOptions};
    let (tranched, agent) = (find_tranched(), find_agent());
    for (b, what) in [(&tranched, "tranched"), (&agent, "tranche-agent")] {
        if !b.exists() {
            return Err(format!(
                "`{what}` not found at {}; build the workspace (cargo build --release --workspace)",
                b.display()
            ));
        }
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let keep = KeepDir::at(tmp.path());
    let mut opts = LocalOptions::new(tranched);
    opts.spool_root = spool_root;
    if std::env::var("TRANCHE_LOG").is_err() {
        opts.log_filter = "warn".into();
    }
    let mut cluster = LocalCluster::create(tmp.path(), 3, opts)?;
    cluster.start_all()?;
    let admin = cluster.client(tranche_tls::Role::Admin, "admin")?;
    cluster
        .wait_leader(&admin, std::time::Duration::from_secs(15))
        .await
        .ok_or("no leader elected")?;
    Ok(AgentCluster {
        cluster,
        admin,
        agent,
        _keep: keep,
        tmp,
    })
}

/// Keeps the cluster's dir (logs, data) after the run when `TRANCHE_KEEP` is set.
struct KeepDir(Option<tempfile::TempDir>);

impl KeepDir {
    /// For a temporary dir owned elsewhere: with `TRANCHE_KEEP` set, a copy of its
    /// contents is left in `<dir>.kept` when this guard drops.
    fn at(dir: &std::path::Path) -> KeptCopy {
        KeptCopy(dir.to_path_buf())
    }
}

/// See [`KeepDir::at`].
struct KeptCopy(PathBuf);

impl Drop for KeptCopy {
    fn drop(&mut self) {
        if std::env::var_os("TRANCHE_KEEP").is_some() {
            let to = self.0.with_extension("kept");
            let _ = std::process::Command::new("cp")
                .arg("-a")
                .arg(&self.0)
                .arg(&to)
                .status();
            eprintln!("kept the cluster's files in {}", to.display());
        }
    }
}

impl Drop for KeepDir {
    fn drop(&mut self) {
        if std::env::var_os("TRANCHE_KEEP").is_some() {
            if let Some(d) = self.0.take() {
                let _ = d.keep();
            }
        }
    }
}
