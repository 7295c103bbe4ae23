//! `tranche bench`: the scheduler alone (`sched`), and local clusters of real
//! processes (`submit`, `failover`, `preempt`, `scale`). Each prints text, or one JSON object
//! with `--json`; a benchmark that cannot run prints why and exits with status 2.

mod cluster;
mod preempt;
mod scale;
mod sched;
mod stats;

use std::path::PathBuf;
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
}

pub fn bench(cmd: BenchCmd) -> ExitCode {
    match cmd {
        BenchCmd::Sched(args) => sched::sched(&args),
        BenchCmd::Submit(args) => block_on("submit", cluster::submit(&args)),
        BenchCmd::Failover(args) => block_on("failover", cluster::failover(&args)),
        BenchCmd::Preempt(args) => block_on("preempt", preempt::preempt(&args)),
        BenchCmd::Scale(args) => block_on("scale", scale::scale(&args)),
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
