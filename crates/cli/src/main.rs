//! `tranche`: the command users, operators and admins run. This binary only parses
//! arguments; the work lives in the library crates and in this crate's modules.

mod bench;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

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
    Scenario(ScenarioCmd),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCmd),
}

#[derive(Subcommand)]
enum ScenarioCmd {
    /// Run a scenario file and check its expectations.
    ///
    /// Exit status: 0 when every expectation holds, 1 when one fails, 2 when the file
    /// is invalid.
    ///
    /// Example: tranche scenario run tests/scenarios/reclaim.toml
    Run {
        /// The scenario file (TOML, version 1).
        file: PathBuf,
        /// One JSON object per transition, then a summary object.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Time full scheduling passes over a large synthetic cluster.
    ///
    /// Example: tranche bench sched --json
    Sched(bench::SchedArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Scenario(ScenarioCmd::Run { file, json }) => scenario_run(&file, json),
        Cmd::Bench(BenchCmd::Sched(args)) => bench::sched(&args),
    }
}

fn scenario_run(file: &PathBuf, json: bool) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let sc = match tranche_sim::Scenario::parse(&text) {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let report = match tranche_sim::run(&sc) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    if json {
        print!("{}", tranche_sim::render_json(&report));
    } else {
        print!("{}", tranche_sim::render_text(&report));
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
