//! `tranche shares`: per quota share and unit, its strategy, max, used, lent,
//! borrowed, running and waiting.

use std::process::ExitCode;

use tranche_proto::{Query, Response};

use super::ListArgs;
use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected};

pub fn shares(args: &ListArgs) -> ExitCode {
    run("shares", async {
        let (client, _) = connect(&args.config)?;
        let rows = match client.read(Query::Shares, false).await.map_err(failed)? {
            Response::Shares(s) => s,
            other => return Err(unexpected(&other)),
        };
        if args.json {
            println!("{}", serde_json::to_string(&rows).unwrap_or_default());
            return Ok(());
        }
        println!(
            "{:<14} {:<16} {:<6} {:>5} {:>5} {:>5} {:>8} {:>7} {:>7}",
            "SHARE", "STRATEGY", "UNIT", "MAX", "USED", "LENT", "BORROWED", "RUNNING", "WAITING"
        );
        for s in &rows {
            for (i, u) in s.units.iter().enumerate() {
                let (name, strategy, running, waiting) = if i == 0 {
                    (
                        s.name.to_string(),
                        s.strategy.to_string(),
                        s.running.to_string(),
                        s.waiting.to_string(),
                    )
                } else {
                    Default::default()
                };
                println!(
                    "{:<14} {:<16} {:<6} {:>5} {:>5} {:>5} {:>8} {:>7} {:>7}",
                    name,
                    strategy,
                    u.unit.as_str(),
                    u.max,
                    u.used,
                    u.lent,
                    u.borrowed,
                    running,
                    waiting
                );
            }
        }
        Ok(())
    })
}
