//! `tranche drain` and `tranche resume`: nodes taken out of service, with a reason,
//! and put back.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_proto::ClientCommand;

use super::write;
use crate::client_cfg::connect;
use crate::exit::{run, usage};

#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    #[arg(required = true)]
    nodes: Vec<String>,
    /// Why (mandatory: it is shown to everyone whose jobs wait).
    #[arg(long)]
    reason: Option<String>,
    /// Also stop the jobs running there (checkpoint signal and grace, then requeue).
    #[arg(long)]
    now: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn drain(args: &DrainArgs) -> ExitCode {
    run("drain", async {
        let reason = args
            .reason
            .clone()
            .filter(|r| !r.trim().is_empty())
            .ok_or_else(|| usage("--reason is required: say why the node is drained"))?;
        let (client, _) = connect(&args.config)?;
        for n in &args.nodes {
            write(
                &client,
                ClientCommand::DrainNode {
                    node: n.as_str().into(),
                    reason: reason.clone(),
                    now: args.now,
                },
            )
            .await?;
        }
        Ok(())
    })
}

#[derive(clap::Args, Debug)]
pub struct ResumeArgs {
    #[arg(required = true)]
    nodes: Vec<String>,
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn resume(args: &ResumeArgs) -> ExitCode {
    run("resume", async {
        let (client, _) = connect(&args.config)?;
        for n in &args.nodes {
            write(
                &client,
                ClientCommand::ResumeNode {
                    node: n.as_str().into(),
                },
            )
            .await?;
        }
        Ok(())
    })
}
