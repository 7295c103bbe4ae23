//! `tranche nodes`: nodes, their state and GPUs per unit (as sinfo shows them).

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::Node;
use tranche_proto::{Query, Response};

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected};

#[derive(clap::Args, Debug)]
pub struct NodesArgs {
    /// List the reasons of drained and down nodes.
    #[arg(short = 'R', long)]
    reasons: bool,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

fn node_state(n: &Node) -> &'static str {
    if n.down.is_some() {
        "down"
    } else if n.unreachable {
        "unreach"
    } else if n.drain.is_some() {
        if n.allocated.iter().any(|a| a.is_some()) {
            "draining"
        } else {
            "drained"
        }
    } else if n.allocated.iter().all(|a| a.is_some()) && !n.allocated.is_empty() {
        "alloc"
    } else if n.allocated.iter().any(|a| a.is_some()) {
        "mix"
    } else {
        "idle"
    }
}

pub fn nodes(args: &NodesArgs) -> ExitCode {
    run("nodes", async {
        let (client, _) = connect(&args.config)?;
        let nodes = match client.read(Query::Nodes, false).await.map_err(failed)? {
            Response::Nodes(n) => n,
            other => return Err(unexpected(&other)),
        };
        if args.json {
            let rows: Vec<_> = nodes
                .iter()
                .map(|n| {
                    serde_json::json!({
                        "name": n.name().as_str(), "state": node_state(n),
                        "gpus": n.inventory.gpus.len(),
                        "gpus_used": n.allocated.iter().filter(|a| a.is_some()).count(),
                        "drain": n.drain, "down": n.down,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(rows));
            return Ok(());
        }
        if args.reasons {
            println!("{:<16} {:<9} REASON", "NODE", "STATE");
            for n in nodes
                .iter()
                .filter(|n| n.drain.is_some() || n.down.is_some())
            {
                let r = n
                    .down
                    .as_ref()
                    .or(n.drain.as_ref())
                    .cloned()
                    .unwrap_or_default();
                println!("{:<16} {:<9} {r}", n.name().as_str(), node_state(n));
            }
            return Ok(());
        }
        println!(
            "{:<16} {:<9} {:>5} {:>5}  GPUS(UNIT:USED/TOTAL)",
            "NODE", "STATE", "CPUS", "MEM_G"
        );
        for n in &nodes {
            let mut per_unit: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
            for (g, a) in n.inventory.gpus.iter().zip(&n.allocated) {
                let e = per_unit.entry(g.unit.as_str()).or_default();
                e.1 += 1;
                if a.is_some() {
                    e.0 += 1;
                }
            }
            let gpus: Vec<String> = per_unit
                .iter()
                .map(|(u, (used, tot))| format!("{u}:{used}/{tot}"))
                .collect();
            println!(
                "{:<16} {:<9} {:>5} {:>5}  {}",
                n.name().as_str(),
                node_state(n),
                n.inventory.cpus,
                n.inventory.memory_mb / 1024,
                gpus.join(" ")
            );
        }
        Ok(())
    })
}
