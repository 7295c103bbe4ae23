//! `tranche scenario run`: a scenario file in virtual time, its expectations checked.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum ScenarioCmd {
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

pub fn scenario(cmd: ScenarioCmd) -> ExitCode {
    match cmd {
        ScenarioCmd::Run { file, json } => scenario_run(&file, json),
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
