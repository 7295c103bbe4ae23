//! `tranche-nemesis`: starts 3 controllers and 3 agents (fake GPUs, jobs as real
//! processes) on 127.0.0.1, runs concurrent clients for `--duration` seconds while
//! injecting faults on a seeded schedule, then checks the history: nothing
//! acknowledged is lost or duplicated, no GPU was held twice at once, the controllers
//! converge, and no job is stuck. Prints one JSON summary with `--json`; exits 1 on any
//! violation, 2 when the run itself could not be carried out.

mod check;
mod faults;
mod history;
mod relay;
mod run;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "tranche-nemesis",
    about = "Runs a Tranche cluster under injected faults and checks its history"
)]
pub struct Args {
    /// Seconds of client load and faults.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// Seed of the fault schedule and the clients; random when absent.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Where the cluster's files go (default: a new temporary directory, removed after
    /// a passing run).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the directory even when the run passes.
    #[arg(long)]
    pub keep: bool,
    /// Concurrent user clients (besides one admin/operator client).
    #[arg(long, default_value_t = 3)]
    pub clients: usize,
    /// At most this many seconds after the faults for every job to end or wait with a
    /// reason (settling stops sooner when no job has ended for 60 s).
    #[arg(long, default_value_t = 600)]
    pub settle: u64,
    /// Seconds an ended job stays in the replicated state before it leaves for the
    /// controllers' history stores (`[retention] job_hot_s`); short, so that the run
    /// forgets jobs while faults happen and the checker reads them back from history.
    #[arg(long, default_value_t = 2)]
    pub job_hot_s: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(rand::random);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run::run(args.clone(), seed)) {
        Ok(out) => {
            if args.json {
                println!("{}", serde_json::to_string(&out.summary).expect("json"));
            } else {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&out.summary).expect("json")
                );
            }
            if out.summary.passed {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "tranche-nemesis: FAILED with seed {seed} (rerun: --seed {seed}); files kept in {}",
                    out.dir.display()
                );
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("tranche-nemesis: the run could not be carried out (seed {seed}): {e}");
            ExitCode::from(2)
        }
    }
}
