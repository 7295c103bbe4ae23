//! `tranche hold` and `tranche release`: waiting jobs kept PENDING, and let go.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::JobRef;
use tranche_proto::ClientCommand;

use super::each_job;

#[derive(clap::Args, Debug)]
pub struct JobsRefArgs {
    /// Jobs; `42_7` names one task of an array, the array's id every task.
    #[arg(required = true)]
    jobs: Vec<JobRef>,
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `tranche hold`: waiting jobs stay PENDING until released.
pub fn hold(args: &JobsRefArgs) -> ExitCode {
    each_job("hold", &args.config, &args.jobs, |job| {
        ClientCommand::Hold { job }
    })
}

/// `tranche release`: held jobs may start once their dependencies are satisfied.
pub fn release(args: &JobsRefArgs) -> ExitCode {
    each_job("release", &args.config, &args.jobs, |job| {
        ClientCommand::Release { job }
    })
}
