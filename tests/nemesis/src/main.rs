//! `tranche-nemesis`: starts 3 controllers and 3 agents (fake GPUs, jobs as real
//! processes) on 127.0.0.1, runs concurrent clients for `--duration` seconds while
//! injecting faults on a seeded schedule, then checks the history: nothing
//! acknowledged is lost or duplicated, no GPU was held twice at once, the controllers
//! converge, and no job is stuck. Prints one JSON summary with `--json`; exits 1 on any
//! violation, 2 when the run itself could not be carried out.
//!
//! `--hosts` runs the same on the test bed ([`bed`]): each controller and agent on a
//! host of its own (a network namespace), with network partitions, one-way drops,
//! lossy links, delays, skewed clocks and full disks among the faults,
//! and checks fencing too (no job runs twice at once; a cut agent stops its jobs in
//! time). `tranche-nemesis bed` brings the bed up for a person to try;
//! `tranche-nemesis guide` runs the packages guide with the built Debian packages on
//! the bed's hosts ([`guide`]); `tranche-nemesis sweep` removes what dead runs left.

mod bed;
mod check;
mod faults;
mod guide;
mod history;
mod relay;
mod run;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug, Clone)]
#[command(
    name = "tranche-nemesis",
    about = "Runs a Tranche cluster under injected faults and checks its history"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Cmd>,
    /// Run on the test bed: every controller and agent on a host of its own (a network
    /// namespace; needs root, `ip` and `nft`), with network faults.
    #[arg(long, global = true)]
    pub hosts: bool,
    /// Agents on the bed (`--hosts`, `bed`).
    #[arg(long, default_value_t = 4, global = true)]
    pub agents: usize,
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
    #[arg(long, global = true)]
    pub keep: bool,
    /// Concurrent user clients (besides one admin/operator client).
    #[arg(long, default_value_t = 3)]
    pub clients: usize,
    /// At most this many seconds after the faults for every job to end or wait with a
    /// reason (settling stops sooner when no job has ended for 60 s).
    #[arg(long, default_value_t = 600)]
    pub settle: u64,
    /// On the bed, leave out filling agents' spools (`agent_disk_full`), which the
    /// schedule has by default.
    #[arg(long)]
    pub no_agent_disk_full: bool,
    /// Seconds an ended job stays in the replicated state before it leaves for the
    /// controllers' history stores (`[retention] job_hot_s`); short, so that the run
    /// forgets jobs while faults happen and the checker reads them back from history.
    #[arg(long, default_value_t = 2)]
    pub job_hot_s: u64,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Cmd {
    /// Bring the test bed up with the run's policy, print its hosts and a CLI config,
    /// and keep it until Ctrl-C (or SIGTERM), then remove it all.
    Bed {
        /// Fail on purpose once the bed is up (tests of its teardown).
        #[arg(long, hide = true)]
        fail_when_up: bool,
    },
    /// Measure failover: the time from losing the leader (killed; partitioned away) to
    /// the next acknowledged write, `--rounds` times each, on 127.0.0.1 or, with
    /// `--hosts`, on the bed. Prints one JSON object.
    Failover {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Run the packages guide (docs/operations/packages.md) on the test bed's hosts
    /// with the built Debian packages, checking each step's effect. Exit status 0
    /// passed, 1 failed, 77 not run (saying why).
    Guide {
        /// Where the packages are (`scripts/package.sh` builds them).
        #[arg(long, default_value = "target/debian")]
        debs: PathBuf,
        /// The policy the admin applies (step 4).
        #[arg(long, default_value = "config/policy.toml")]
        policy: PathBuf,
        /// Fail on purpose after this many steps, with the daemons up (tests of the
        /// teardown).
        #[arg(long, hide = true)]
        fail_after: Option<usize>,
    },
    /// Remove what beds of runs no longer alive left (namespaces, processes,
    /// directories); with `--check`, only list what any bed left and exit 1 if
    /// anything is.
    Sweep {
        #[arg(long)]
        check: bool,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match &args.command {
        Some(Cmd::Bed { fail_when_up }) => return run::serve_bed(&args, *fail_when_up),
        Some(Cmd::Guide {
            debs,
            policy,
            fail_after,
        }) => return guide::run_guide(debs, policy, args.keep, *fail_after),
        Some(Cmd::Sweep { check: false }) => {
            for s in bed::sweep() {
                println!("removed {s}");
            }
            return ExitCode::SUCCESS;
        }
        Some(Cmd::Sweep { check: true }) => {
            let left = bed::leftovers(None);
            for l in &left {
                println!("left behind: {l}");
            }
            return if left.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            };
        }
        Some(Cmd::Failover { .. }) | None => {}
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    // On the bed, this process's threads are in the client host (made before the
    // runtime, so that its threads are born there).
    let bed = match args.hosts {
        true => match run::bed_options(&args).and_then(bed::Bed::up) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("tranche-nemesis: the test bed could not be made: {e}");
                return ExitCode::from(2);
            }
        },
        false => None,
    };
    let rt = match &bed {
        Some(b) => b.runtime(),
        None => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string()),
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tranche-nemesis: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(Cmd::Failover { rounds }) = args.command {
        return match rt.block_on(run::failover(args.clone(), bed, rounds)) {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tranche-nemesis failover: {e}");
                ExitCode::from(1)
            }
        };
    }
    match rt.block_on(run::run(args.clone(), seed, bed)) {
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
