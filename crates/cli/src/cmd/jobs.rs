//! `tranche jobs`: the jobs in the controllers' state as squeue lists them, or with
//! `--history` the jobs that have ended (as sacct does).

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::{JobId, JobStatus};
use tranche_proto::{JobFilter, Query, Response};

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected, usage, CliError};
use crate::text::now_ms;

#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    #[arg(long)]
    share: Option<String>,
    /// A state (PENDING, RUNNABLE, RUNNING, ...), or several comma-separated;
    /// repeatable. With --history: SUCCEEDED, FAILED, CANCELLED.
    #[arg(long = "state")]
    states: Vec<String>,
    #[arg(long)]
    user: Option<String>,
    /// Only my jobs.
    #[arg(long)]
    me: bool,
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Redraw every 2 seconds until interrupted.
    #[arg(long)]
    watch: bool,
    /// Only the tasks of this array.
    #[arg(long)]
    array: Option<u64>,
    /// Also each waiting job's position in its share and estimated start (the `pos`
    /// and `start` columns).
    #[arg(long, short = 'l')]
    long: bool,
    /// Columns, comma-separated: id, name, queue, share, user, st, state, priority,
    /// time, gpus, unit, submitted, preemptions, nodes, pos, start, reason, where.
    #[arg(long, short = 'o')]
    format: Option<String>,
    /// The jobs that have ended, newest end first (like sacct): id, name, user, share,
    /// state, end time, run time and exit code. They include the jobs that have left
    /// the controllers' state for their history store.
    #[arg(long, conflicts_with_all = ["watch", "array", "long", "format"])]
    history: bool,
    /// With --history: jobs that ended since a local date or time (2026-11-01,
    /// 2026-11-01T08:00) or a span back from now (7d, 24h, 90m) [default: 1d].
    #[arg(long, requires = "history")]
    since: Option<String>,
    /// With --history: at most this many jobs, fetched a page at a time [default: 100].
    #[arg(long, requires = "history")]
    limit: Option<u32>,
    /// With --history: the jobs that ended before this cursor (`<ended_at>.<id>`, as
    /// the previous listing's last line gives it).
    #[arg(long, requires = "history")]
    before: Option<String>,
    #[arg(long)]
    config: Option<PathBuf>,
}

/// The width `tranche jobs` fits its rows to.
const LINE_WIDTH: usize = 100;

pub fn jobs(args: &JobsArgs) -> ExitCode {
    run("jobs", async {
        loop {
            if args.watch {
                // Clear the screen and go home, as `watch` does.
                print!("\x1b[2J\x1b[H");
            }
            list_jobs(args).await?;
            if !args.watch {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
    })
}

async fn list_jobs(args: &JobsArgs) -> Result<(), CliError> {
    let (client, me) = connect(&args.config)?;
    let user = if args.me {
        Some(me.clone())
    } else {
        args.user.clone()
    };
    if args.history {
        let h = crate::cmd::history::HistoryArgs {
            since: args.since.as_deref(),
            user,
            share: args.share.as_deref(),
            states: &args.states,
            limit: args.limit,
            before: args.before.as_deref(),
            json: args.json,
        };
        return crate::cmd::history::list(&client, &h).await;
    }
    let mut status = Vec::new();
    for s in args.states.iter().flat_map(|s| s.split(',')).map(str::trim) {
        status.push(JobStatus::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
                usage(format!("--state {s}: not a job state (PENDING, RUNNABLE, SCHEDULED, STARTING, RUNNING, SUCCEEDED, FAILED, CANCELLED)"))
            })?);
    }
    let filter = JobFilter {
        share: args.share.as_deref().map(Into::into),
        user: user.as_deref().map(Into::into),
        status,
        limit: None,
        array: args.array.map(JobId),
        standing: args.long,
    };
    let jobs = match client
        .read(Query::Jobs(filter), false)
        .await
        .map_err(failed)?
    {
        Response::Jobs(j) => j,
        other => return Err(unexpected(&other)),
    };
    if args.json {
        let rows: Vec<_> = jobs
            .iter()
            .map(|j| {
                serde_json::json!({
                    "id": j.id.0, "job": j.job_ref().to_string(),
                    "array_job_id": j.array.as_ref().map(|a| a.array.0),
                    "array_task_id": j.array.as_ref().map(|a| a.index),
                    "name": j.name, "queue": j.queue.as_str(), "share": j.share.as_str(),
                    "user": j.user.as_str(), "state": j.status.as_str(), "priority": j.priority,
                    "unit": j.unit.as_str(), "gpus": j.gpus,
                    "nodes": j.nodes.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
                    "reason": j.reason, "preemptions": j.preemptions,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    let default = if args.long {
        crate::job_list::LONG_FORMAT
    } else {
        crate::job_list::DEFAULT_FORMAT
    };
    let cols =
        crate::job_list::parse_format(args.format.as_deref().unwrap_or(default)).map_err(usage)?;
    let rows = crate::job_list::rows(&jobs);
    for line in crate::job_list::table(&rows, &cols, now_ms(), LINE_WIDTH) {
        println!("{line}");
    }
    Ok(())
}
