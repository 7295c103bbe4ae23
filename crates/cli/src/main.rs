//! `tranche`: the command users, operators and admins run. This binary only parses
//! arguments; the work lives in the library crates and in this crate's modules.

mod alloc;
mod client_cfg;
mod cmd;
mod exit;
mod job_list;
mod leader_cache;
mod parse;
mod text;
mod timing;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use cmd::*;

#[derive(Parser)]
#[command(
    name = "tranche",
    version,
    about = "Tranche: quota-share GPU scheduling for bare-metal racks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Try a policy in virtual time: the real state machine and scheduler, simulated jobs.
    #[command(subcommand)]
    Scenario(scenario::ScenarioCmd),
    /// Replay a job trace under a policy in virtual time and report utilization, waits,
    /// the quota guarantee and preemptions (with --report, plots too).
    ///
    /// Example: tranche sim --trace jobs.csv --policy policy.toml --nodes "64 x 8 h100" --compare
    Sim(sim::SimArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// The cluster's CA and the certificates of controllers, agents, admins, operators
    /// and users.
    #[command(subcommand)]
    Certs(certs::CertsCmd),
    /// Submit a job.
    ///
    /// Example: tranche submit --share vision --gpus 8 --time 4h -- python train.py
    Submit(submit::SubmitArgs),
    /// List jobs (like squeue); with --history, the jobs that have ended (like sacct).
    ///
    /// Example: tranche jobs --me --state RUNNING
    ///
    /// Example: tranche jobs --history --since 7d --state FAILED
    Jobs(jobs::JobsArgs),
    /// Everything about one job: attempts, allocation, transitions with reasons.
    ///
    /// Example: tranche show 42
    Show(show::ShowArgs),
    /// Cancel jobs (running ones get their checkpoint signal and grace first).
    ///
    /// Example: tranche cancel 42 43
    Cancel(cancel::CancelArgs),
    /// Keep waiting jobs PENDING until released.
    ///
    /// Example: tranche hold 42
    Hold(hold::JobsRefArgs),
    /// Let held jobs start (once their dependencies are satisfied).
    ///
    /// Example: tranche release 42
    Release(hold::JobsRefArgs),
    /// Create or update environments, policies, queues and quota shares from a file,
    /// idempotently; prints what changed.
    ///
    /// Example: tranche apply -f policy.toml --dry-run
    Apply(apply::ApplyArgs),
    /// Change a waiting or running job's priority.
    ///
    /// Example: tranche update 42 --priority 90
    Update(update::UpdateArgs),
    /// Why a job waits, with numbers.
    ///
    /// Example: tranche explain 42
    Explain(explain::JobArg),
    /// Nodes, their state and GPUs per unit (like sinfo).
    ///
    /// Example: tranche nodes -R
    Nodes(nodes::NodesArgs),
    /// Drain nodes: nothing new is placed there (`--now` also stops their jobs).
    ///
    /// Example: tranche drain gpu07 --reason "PSU swap"
    Drain(drain::DrainArgs),
    /// Put drained nodes back in service.
    ///
    /// Example: tranche resume gpu07
    Resume(drain::ResumeArgs),
    /// Per quota share: strategy, max, used, lent, borrowed, running, waiting.
    ///
    /// Example: tranche shares
    Shares(ListArgs),
    /// The front of the queue and of every share.
    ///
    /// Example: tranche queue
    Queue(ListArgs),
    /// The controllers: members, leader, term, commit and applied index, lag; or add and
    /// remove one.
    ///
    /// Example: tranche controllers
    Controllers(controllers::ControllersArgs),
    /// A whole local cluster on loopback: 3 controllers, 4 agents with fake GPUs, a demo
    /// policy. Prints the line that points the CLI at it; Ctrl-C stops everything.
    ///
    /// Example: tranche dev
    Dev(dev::DevArgs),
    /// Shell completions for bash, zsh, fish, elvish or powershell.
    ///
    /// Example: tranche completions bash > /etc/bash_completion.d/tranche
    Completions { shell: clap_complete::Shell },
    /// Who used the GPUs, and who lent to whom: GPU-hours used, borrowed, lent, kept
    /// idle by RESERVE and lost to preemption (like sreport).
    ///
    /// Example: tranche report --since 2026-11-01 --by user
    Report(report::ReportArgs),
    /// Bearer tokens for the HTTPS API, for this config's certificate.
    ///
    /// Example: export TRANCHE_TOKEN=$(tranche token issue --ttl 8h)
    #[command(subcommand)]
    Token(token::TokenCmd),
    /// Access keys for the AWS Batch-compatible endpoint (SigV4): issue, list, revoke.
    ///
    /// Example: eval "$(tranche keys issue)"
    #[command(subcommand)]
    Keys(keys::KeysCmd),
    /// A job's output, from the agent of the node it ran on.
    ///
    /// Example: tranche logs 42 -f
    Logs(logs::LogsArgs),
}

/// The system's malloc for short commands, mimalloc for long-running ones (see
/// [`alloc`]).
#[global_allocator]
static GLOBAL: alloc::Alloc = alloc::Alloc;

fn main() -> ExitCode {
    timing::mark("main");
    let cli = Cli::parse();
    timing::mark("args");
    if matches!(
        cli.cmd,
        Cmd::Scenario(_) | Cmd::Sim(_) | Cmd::Bench(_) | Cmd::Dev(_)
    ) {
        alloc::use_mimalloc();
    }
    match cli.cmd {
        Cmd::Scenario(cmd) => scenario::scenario(cmd),
        Cmd::Sim(args) => sim::sim(&args),
        Cmd::Bench(cmd) => bench::bench(cmd),
        Cmd::Certs(cmd) => certs::certs(cmd),
        Cmd::Logs(args) => logs::logs(&args),
        Cmd::Report(args) => report::report(&args),
        Cmd::Dev(args) => dev::dev(&args),
        Cmd::Token(cmd) => token::token(cmd),
        Cmd::Keys(cmd) => keys::keys(cmd),
        Cmd::Completions { shell } => {
            completions::completions(shell, <Cli as clap::CommandFactory>::command())
        }
        Cmd::Submit(args) => submit::submit_cmd(args),
        Cmd::Jobs(args) => jobs::jobs(&args),
        Cmd::Show(args) => show::show(&args),
        Cmd::Cancel(args) => cancel::cancel(&args),
        Cmd::Hold(args) => hold::hold(&args),
        Cmd::Release(args) => hold::release(&args),
        Cmd::Update(args) => update::update(&args),
        Cmd::Apply(args) => apply::apply(&args),
        Cmd::Explain(args) => explain::explain(&args),
        Cmd::Nodes(args) => nodes::nodes(&args),
        Cmd::Drain(args) => drain::drain(&args),
        Cmd::Resume(args) => drain::resume(&args),
        Cmd::Shares(args) => shares::shares(&args),
        Cmd::Queue(args) => queue::queue(&args),
        Cmd::Controllers(args) => controllers::controllers(&args),
    }
}
