//! `tranche shares`: per quota share and unit, its strategy, max, used, lent,
//! borrowed, running and waiting; under a FAIR_SHARE policy, each share's decayed
//! usage, weight and place in the borrow order.

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
        let fair: Vec<_> = rows
            .iter()
            .filter_map(|s| s.fair.as_ref().map(|f| (s, f)))
            .collect();
        if !fair.is_empty() {
            println!();
            println!(
                "{:<14} {:>14} {:>7} {:>10} {:>12}  HALF-LIFE",
                "FAIR SHARE", "DECAYED GPU-H", "WEIGHT", "PER WEIGHT", "BORROWS"
            );
            for (s, f) in fair {
                let used = f.decayed_milli_gpu_hours as f64 / 1000.0;
                println!(
                    "{:<14} {:>14.1} {:>7} {:>10.3} {:>12}  {}",
                    s.name.to_string(),
                    used,
                    f.weight,
                    used / f.weight.max(1) as f64,
                    format!("{} of {}", f.borrow_order, f.of),
                    tranche_proto::text::duration_text(f.half_life_s * 1000)
                );
            }
        }
        Ok(())
    })
}
