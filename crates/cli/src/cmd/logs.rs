//! `tranche logs JOB [-f] [--attempt N] [--stderr] [--node NODE | --all]`: a job's
//! output, streamed from the agent of the node it ran on. A gang keeps its output per
//! member: rank 0's by default, one member's with `--node` (its name or its rank), every
//! member's with `--all`, each headed by its node.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use tranche_client::ClientError;
use tranche_model::JobRef;
use tranche_proto::{ApiError, LogRequest, Query, Response, LOGS_LABEL};

use crate::client_cfg;
use crate::exit::{failed, run, unexpected, CliError};

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The job, or `42_7` for one task of an array.
    job: JobRef,
    /// Keep following the output until the attempt ends.
    #[arg(short, long)]
    follow: bool,
    /// Which attempt (default: the latest).
    #[arg(long)]
    attempt: Option<u32>,
    /// stderr instead of stdout.
    #[arg(long)]
    stderr: bool,
    /// For a job on several nodes: which member's output, by node name or rank
    /// (default: rank 0, the allocation's first node).
    #[arg(long, conflicts_with = "all")]
    node: Option<String>,
    /// For a job on several nodes: every member's output in rank order, each headed by
    /// `==> NODE (rank R) <==`.
    #[arg(long, conflicts_with = "follow")]
    all: bool,
    /// The cluster config (default: $TRANCHE_CONFIG).
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn logs(args: &LogsArgs) -> ExitCode {
    run("logs", fetch(args))
}

async fn fetch(args: &LogsArgs) -> Result<(), CliError> {
    let client = client_cfg::client(&args.config)?;
    let job = match client
        .read(Query::Job(args.job), false)
        .await
        .map_err(failed)?
    {
        Response::Job(j) => j,
        other => return Err(unexpected(&other)),
    };
    let attempt = match args.attempt {
        Some(n) => job.attempts.iter().find(|a| a.number == n).ok_or_else(|| {
            CliError::NotFound(format!("job {} has no attempt {n}", job.job_ref()))
        })?,
        None => job.attempts.last().ok_or_else(|| {
            CliError::NotFound(format!(
                "job {} has not run yet: {}",
                job.job_ref(),
                job.status.as_str()
            ))
        })?,
    };
    let members: Vec<_> = attempt.allocation.iter().map(|a| a.node.clone()).collect();
    let chosen: Vec<(usize, tranche_model::NodeName)> = match &args.node {
        _ if args.all => members.iter().cloned().enumerate().collect(),
        Some(n) => {
            let rank = members
                .iter()
                .position(|m| m.as_str() == n)
                .or_else(|| n.parse::<usize>().ok().filter(|r| *r < members.len()));
            let r = rank.ok_or_else(|| {
                CliError::NotFound(format!(
                    "attempt {} of job {} did not run on {n} (its nodes, by rank: {})",
                    attempt.number,
                    job.job_ref(),
                    members
                        .iter()
                        .map(|m| m.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                ))
            })?;
            vec![(r, members[r].clone())]
        }
        None => vec![(0, members[0].clone())],
    };
    let nodes = match client.read(Query::Nodes, true).await.map_err(failed)? {
        Response::Nodes(n) => n,
        other => return Err(unexpected(&other)),
    };
    // A job's output is kept on the nodes it ran on, not in the controllers' state
    // or history: once the agent no longer has it, say so plainly.
    let ended = job.status.is_terminal().then(|| {
        format!(
            "job {} {} at {}; ",
            job.job_ref(),
            job.status.as_str(),
            crate::text::local_time(tranche_state::retention::ended_at(&job))
        )
    });
    let gone = |node: &tranche_model::NodeName, why: String| -> CliError {
        CliError::NotFound(match &ended {
            Some(e) => format!(
                "{e}its output is no longer on node {node} ({why}). The output of an \
                 ended job lives only in the spool of the agent that ran it (or in the \
                 files its --output/--error named), not in the controllers' history"
            ),
            None => why,
        })
    };
    let mut out = std::io::stdout().lock();
    for (rank, node) in chosen {
        let known = nodes.iter().find(|n| n.inventory.name == node);
        if known.is_none() && ended.is_some() {
            return Err(gone(&node, "the node has left the cluster".into()));
        }
        let addr = known
            .and_then(|n| n.inventory.labels.get(LOGS_LABEL))
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| {
                CliError::NotFound(format!(
                    "node {node} publishes no log port (label {LOGS_LABEL})"
                ))
            })?;
        if args.all {
            let _ = writeln!(out, "==> {node} (rank {rank}) <==");
        }
        let req = LogRequest {
            job: job.id,
            attempt: Some(attempt.number),
            stderr: args.stderr,
            follow: args.follow,
            offset: 0,
        };
        client
            .logs(addr, node.as_str(), &req, |b| {
                let _ = out.write_all(b);
                let _ = out.flush();
            })
            .await
            .map_err(|e| match e {
                ClientError::Api(ApiError::NotFound(why)) => gone(&node, why),
                e => failed(e),
            })?;
    }
    Ok(())
}
