//! `tranche-agent`: the node agent's command line.

use std::process::ExitCode;

use crate::inventory::{FakeInventory, Inventory, NvmlInventory, UnitMap};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "tranche-agent", about = "The Tranche node agent")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Backend {
    Nvml,
    Fake,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the agent: register this node, heartbeat, run and stop the jobs placed here.
    ///
    /// Example: tranche-agent run --config /etc/tranche/agent.toml
    Run {
        /// The agent's TOML configuration.
        #[arg(long)]
        config: std::path::PathBuf,
        /// Log as JSON lines instead of text.
        #[arg(long)]
        json_logs: bool,
    },
    /// Print this node's GPUs as the agent would report them.
    ///
    /// Example: tranche-agent inventory --unit "NVIDIA H100 80GB HBM3=h100" --json
    Inventory {
        /// Where GPUs are read from.
        #[arg(long, value_enum, default_value = "nvml")]
        backend: Backend,
        /// With `--backend fake`: the GPUs, e.g. "8 x h100".
        #[arg(long, default_value = "8 x h100")]
        fake: String,
        /// This node's name.
        #[arg(long, default_value = "localhost")]
        node: String,
        /// A product name and its capacity unit, PRODUCT=UNIT (repeatable).
        #[arg(long = "unit")]
        units: Vec<String>,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Kill every job left in a spool: what `tranche dev` does to its nodes' jobs when
    /// it stops for good. Not for a node in service: its agent adopts its jobs again
    /// when it restarts.
    ///
    /// Example: tranche-agent stop-jobs --spool /tmp/tranche-dev-x/spool-n1
    StopJobs {
        /// The spool directory of the agent whose jobs to kill.
        #[arg(long)]
        spool: std::path::PathBuf,
    },
    /// Fork the shims of the attempts the agent asks for on standard input (started by
    /// the agent itself, not by people).
    #[command(hide = true)]
    ShimLauncher {
        /// The agent's spool directory (to tell the agents of a host apart in `ps`).
        #[arg(long)]
        spool: std::path::PathBuf,
    },
}

/// Parses the command line and runs the chosen subcommand.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Inventory {
            backend,
            fake,
            node,
            units,
            json,
        } => inventory(backend, &fake, &node, &units, json),
        Cmd::ShimLauncher { spool: _ } => crate::exec::launcher_main(),
        Cmd::Run { config, json_logs } => run(&config, json_logs),
        Cmd::StopJobs { spool } => stop_jobs(&spool),
    }
}

fn stop_jobs(spool: &std::path::Path) -> ExitCode {
    let adopted = crate::exec::Executors::new(spool).and_then(|e| e.adopt());
    match adopted {
        Ok(attempts) => {
            for a in attempts {
                let _ = a.kill_all();
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tranche-agent: {}: {e}", spool.display());
            ExitCode::from(1)
        }
    }
}

fn run(config: &std::path::Path, json_logs: bool) -> ExitCode {
    tranche_daemon_kit::logs::init(json_logs, "info");
    let cfg = match crate::config::AgentConfig::load(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tranche-agent: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let agent = match crate::daemon::Agent::new(cfg) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("tranche-agent: {e}");
                return ExitCode::from(2);
            }
        };
        agent
            .run(tranche_daemon_kit::signals::shutdown_on_signals())
            .await;
        ExitCode::SUCCESS
    })
}

fn inventory(backend: Backend, fake: &str, node: &str, units: &[String], json: bool) -> ExitCode {
    let mut map = UnitMap::default();
    for u in units {
        match u.rsplit_once('=') {
            Some((product, unit)) if !product.is_empty() && !unit.is_empty() => {
                map.by_product.insert(product.to_string(), unit.to_string());
            }
            _ => {
                eprintln!("tranche-agent: --unit `{u}`: must be PRODUCT=UNIT");
                return ExitCode::from(2);
            }
        }
    }
    let (inv, driver): (Box<dyn Inventory>, Option<String>) = match backend {
        Backend::Fake => match FakeInventory::parse(fake, node) {
            Ok(f) => {
                for (p, u) in f.unit_map().by_product {
                    map.by_product.entry(p).or_insert(u);
                }
                (Box::new(f), None)
            }
            Err(e) => {
                eprintln!("tranche-agent: {e}");
                return ExitCode::from(2);
            }
        },
        Backend::Nvml => match NvmlInventory::open() {
            Ok(n) => {
                let d = n.driver_version();
                // Give the Xid watcher a moment to register, and say how it went.
                for _ in 0..40 {
                    if n.xid_watch.lock().unwrap().is_some() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                match &*n.xid_watch.lock().unwrap() {
                    Some(Ok(k)) => eprintln!("Xid and ECC events: watching {k} GPU(s)"),
                    Some(Err(e)) => eprintln!("Xid and ECC events: not available: {e}"),
                    None => eprintln!("Xid and ECC events: watcher not ready"),
                }
                (Box::new(n), d)
            }
            Err(e) => {
                eprintln!("tranche-agent: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let gpus = match inv.gpus() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("tranche-agent: {e}");
            return ExitCode::from(2);
        }
    };
    let unit_of = |g| {
        map.unit_for(g)
            .map(|u| u.to_string())
            .map_err(|e| e.to_string())
    };
    if json {
        let rows: Vec<_> = gpus
            .iter()
            .map(|g| {
                let unit = unit_of(g);
                serde_json::json!({
                    "gpu": g,
                    "unit": unit.as_ref().ok(),
                    "unit_error": unit.as_ref().err(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "backend": inv.backend(),
                "driver": driver,
                "node": node,
                "gpus": rows,
            })
        );
    } else {
        println!(
            "backend {}{}, {} GPU(s)",
            inv.backend(),
            driver.map(|d| format!(", driver {d}")).unwrap_or_default(),
            gpus.len()
        );
        println!(
            "{:<4} {:<10} {:<28} {:<14} {:>9}  {:<4} {:<8} UUID",
            "IDX", "UNIT", "PRODUCT", "PCI", "MEM_MB", "MIG", "HEALTH"
        );
        for g in &gpus {
            println!(
                "{:<4} {:<10} {:<28} {:<14} {:>9}  {:<4} {:<8} {}",
                g.index.0,
                unit_of(g).unwrap_or_else(|_| "?".into()),
                g.product,
                g.pci_bus_id,
                g.memory_mb,
                match g.mig_enabled {
                    Some(true) => "on",
                    Some(false) => "off",
                    None => "-",
                },
                if g.unhealthy.is_some() { "BAD" } else { "ok" },
                g.uuid
            );
        }
        for g in &gpus {
            if let Err(e) = unit_of(g) {
                eprintln!("warning: {e}");
            }
        }
    }
    ExitCode::SUCCESS
}
