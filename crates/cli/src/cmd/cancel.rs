//! `tranche cancel`: running jobs get their checkpoint signal and grace first.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::JobRef;
use tranche_proto::ClientCommand;

use super::each_job;

#[derive(clap::Args, Debug)]
pub struct CancelArgs {
    /// Jobs; `42_7` cancels one task of an array, the array's id every task.
    #[arg(required = true)]
    jobs: Vec<JobRef>,
    #[arg(long, default_value = "cancelled by its user")]
    reason: String,
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn cancel(args: &CancelArgs) -> ExitCode {
    each_job("cancel", &args.config, &args.jobs, |job| {
        ClientCommand::Cancel {
            job,
            reason: args.reason.clone(),
        }
    })
}
