//! `tranche queue`: the front of the queue and of every share.

use std::process::ExitCode;

use tranche_proto::{JobSummary, Query, Response};

use super::ListArgs;
use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected};
use crate::text::{fit, state_code};

/// One row of `tranche queue`, fitting a 100-column terminal.
fn summary_line(j: &JobSummary) -> String {
    let line = format!(
        "{:>7} {:<10.10} {:<9.9} {:>3} {:>2} {:>4}  {}",
        j.id.0,
        j.share.as_str(),
        j.user.as_str(),
        j.priority,
        state_code(j.status),
        j.gpus,
        j.reason.clone().unwrap_or_default()
    );
    fit(line, 100)
}

pub fn queue(args: &ListArgs) -> ExitCode {
    run("queue", async {
        let (client, _) = connect(&args.config)?;
        let q = match client
            .read(Query::Queue { limit: 10 }, false)
            .await
            .map_err(failed)?
        {
            Response::Queue(q) => q,
            other => return Err(unexpected(&other)),
        };
        if args.json {
            println!("{}", serde_json::to_string(&q).unwrap_or_default());
            return Ok(());
        }
        println!("Front of the queue:");
        for j in &q.front {
            println!("{}", summary_line(j));
        }
        for (share, jobs) in &q.shares {
            println!("Share {share}:");
            for j in jobs {
                println!("{}", summary_line(j));
            }
        }
        Ok(())
    })
}
