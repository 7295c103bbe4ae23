//! `tranche explain`: why a job waits, with numbers, and where it stands.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::JobRef;
use tranche_proto::{JobSummary, Query, Response};

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected};

/// A waiting job's position and estimated start, in words.
pub fn standing_lines(s: &tranche_model::Standing, job: &JobSummary, now: u64) -> Vec<String> {
    use tranche_model::Estimate;
    let start = match s.start {
        Estimate::Now => "now: enough GPUs are free for it and the jobs ahead of it".to_string(),
        Estimate::At(t) => format!(
            "{} (in {}), if the running jobs it waits for end at their time limits",
            crate::text::local_time(t),
            crate::text::duration(t.saturating_sub(now))
        ),
        Estimate::Unknown => {
            "unknown: a running job it would wait for has no time limit".to_string()
        }
    };
    vec![
        format!(
            "position {} of {} waiting in share {}; {} of {} in queue {} (by priority, then submit time)",
            s.in_share, s.share_waiting, job.share, s.in_queue, s.queue_waiting, job.queue
        ),
        format!("estimated start: {start}"),
    ]
}

#[derive(clap::Args, Debug)]
pub struct JobArg {
    /// A job, or `42_7` for one task of an array.
    job: JobRef,
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn explain(args: &JobArg) -> ExitCode {
    run("explain", async {
        let (client, _) = connect(&args.config)?;
        match client
            .read(Query::Explain(args.job), false)
            .await
            .map_err(failed)?
        {
            Response::Explain(e) => {
                println!(
                    "job {} ({}, {})",
                    e.job.job_ref(),
                    e.job.name,
                    e.job.status.as_str()
                );
                for l in e.lines {
                    println!("  {l}");
                }
                if let Some(s) = &e.standing {
                    for l in standing_lines(s, &e.job, crate::text::now_ms()) {
                        println!("  {l}");
                    }
                }
                Ok(())
            }
            other => Err(unexpected(&other)),
        }
    })
}
