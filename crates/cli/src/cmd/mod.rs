//! One module per `tranche` command: its clap arguments and the function that runs
//! it. What several commands share (a write, one write per job, list options) is
//! here.

pub mod apply;
pub mod bench;
pub mod cancel;
pub mod certs;
pub mod completions;
pub mod controllers;
pub mod dev;
pub mod drain;
pub mod explain;
pub mod history;
pub mod hold;
pub mod jobs;
pub mod keys;
pub mod logs;
pub mod nodes;
pub mod queue;
pub mod report;
pub mod scenario;
pub mod shares;
pub mod show;
pub mod sim;
pub mod submit;
pub mod token;
pub mod update;

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::JobRef;
use tranche_proto::{ApiError, ClientCommand, Outcome};

use crate::client_cfg::connect;
use crate::exit::{failed, run, CliError};

/// The options of a listing that can also print JSON.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[arg(long)]
    json: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

/// One write; a refusal is the command's failure.
async fn write(client: &tranche_client::Client, cmd: ClientCommand) -> Result<(), CliError> {
    match client.command(cmd).await.map_err(failed)? {
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Sends one command per job; every refusal is reported, with its job.
fn each_job(
    verb: &'static str,
    config: &Option<PathBuf>,
    jobs: &[JobRef],
    cmd: impl Fn(JobRef) -> ClientCommand,
) -> ExitCode {
    run(verb, async {
        let (client, _) = connect(config)?;
        let mut refused = Vec::new();
        for &id in jobs {
            match client.command(cmd(id)).await.map_err(failed)? {
                Ok(Outcome::Done) | Ok(_) => {}
                Err(ApiError::Rejected(e)) => refused.push(format!("job {id}: {e}")),
                Err(e) => refused.push(format!("job {id}: {e}")),
            }
        }
        if refused.is_empty() {
            Ok(())
        } else {
            Err(CliError::RefusedEach(refused))
        }
    })
}
