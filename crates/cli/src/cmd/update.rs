//! `tranche update`: a waiting or running job's new priority.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::JobRef;
use tranche_proto::ClientCommand;

use super::write;
use crate::client_cfg::connect;
use crate::exit::run;

#[derive(clap::Args, Debug)]
pub struct UpdateArgs {
    /// A job, `42_7` for one task of an array, or an array's id for every task.
    job: JobRef,
    /// The new priority (higher runs first and may preempt within the share).
    #[arg(long)]
    priority: u32,
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn update(args: &UpdateArgs) -> ExitCode {
    run("update", async {
        let (client, _) = connect(&args.config)?;
        write(
            &client,
            ClientCommand::UpdatePriority {
                job: args.job,
                priority: args.priority,
            },
        )
        .await
    })
}
