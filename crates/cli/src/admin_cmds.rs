//! Operators' and admins' verbs, and the users' remaining ones: `update`, `explain`,
//! `nodes`, `drain`, `resume`, `shares`, `queue`, `controllers`.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::{JobRef, Node};
use tranche_proto::ClientCommand;
use tranche_proto::{ClientRequest, JobSummary, Member, MembershipChange, Query, Response};

use crate::client_cfg::connect;
use crate::fmt::{fit, state_code};
use crate::output::{failed, run, unexpected, usage, Fail};

#[derive(clap::Args, Debug)]
pub struct UpdateArgs {
    /// A job, `42_7` for one task of an array, or an array's id for every task.
    job: JobRef,
    /// The new priority (higher runs first and may preempt within the share).
    #[arg(long)]
    priority: u32,
    #[arg(long)]
    config: Option<PathBuf>,
}

async fn write(client: &tranche_client::Client, cmd: ClientCommand) -> Result<(), Fail> {
    match client.command(cmd).await.map_err(failed)? {
        Ok(_) => Ok(()),
        Err(e) => Err((1, e.to_string())),
    }
}

pub fn update(args: &UpdateArgs) -> ExitCode {
    run("update", async {
        let (client, _) = connect(&args.config)?;
        write(
            &client,
            ClientCommand::UpdatePriority {
                job: args.job,
                priority: args.priority,
            },
        )
        .await
    })
}

/// A waiting job's position and estimated start, in words.
pub fn standing_lines(s: &tranche_model::Standing, job: &JobSummary, now: u64) -> Vec<String> {
    use tranche_model::Estimate;
    let start = match s.start {
        Estimate::Now => "now: enough GPUs are free for it and the jobs ahead of it".to_string(),
        Estimate::At(t) => format!(
            "{} (in {}), if the running jobs it waits for end at their time limits",
            crate::fmt::local_time(t),
            crate::fmt::duration(t.saturating_sub(now))
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
                    for l in standing_lines(s, &e.job, crate::fmt::now_ms()) {
                        println!("  {l}");
                    }
                }
                Ok(())
            }
            other => Err(unexpected(&other)),
        }
    })
}

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

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[arg(long)]
    json: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

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

#[derive(clap::Args, Debug)]
pub struct ControllersArgs {
    #[command(subcommand)]
    change: Option<ControllersChange>,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
pub enum ControllersChange {
    /// Add a controller (start it first with `join = true`).
    Add {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        name: String,
        #[arg(long)]
        peer_addr: String,
        #[arg(long)]
        client_addr: String,
    },
    /// Remove a controller.
    Remove {
        #[arg(long)]
        id: u64,
    },
}

pub fn controllers(args: &ControllersArgs) -> ExitCode {
    run("controllers", async {
        let (client, _) = connect(&args.config)?;
        if let Some(change) = &args.change {
            let change = match change {
                ControllersChange::Add {
                    id,
                    name,
                    peer_addr,
                    client_addr,
                } => MembershipChange::Add(Member {
                    id: *id,
                    name: name.clone(),
                    peer_addr: peer_addr.clone(),
                    client_addr: client_addr.clone(),
                }),
                ControllersChange::Remove { id } => MembershipChange::Remove { id: *id },
            };
            return match client
                .request(&ClientRequest::Membership(change))
                .await
                .map_err(failed)?
            {
                Response::Done => Ok(()),
                Response::Error(e) => Err((1, e.to_string())),
                other => Err(unexpected(&other)),
            };
        }
        // The leader's view has every member's progress.
        let mut st = match client
            .read(Query::Controllers, true)
            .await
            .map_err(failed)?
        {
            Response::Controllers(s) => s,
            other => return Err(unexpected(&other)),
        };
        if let Some(l) = st.leader.filter(|l| *l != st.id) {
            if let Some(m) = st.members.iter().find(|m| m.member.id == l) {
                if let Ok(addr) = m.member.client_addr.parse() {
                    if let Some(i) = client.controllers().iter().position(|a| *a == addr) {
                        if let Ok(Response::Controllers(s)) = client
                            .request_to(
                                i,
                                &ClientRequest::Read {
                                    query: Query::Controllers,
                                    stale: true,
                                },
                            )
                            .await
                        {
                            st = s;
                        }
                    }
                }
            }
        }
        if args.json {
            println!("{}", serde_json::to_string(&st).unwrap_or_default());
            return Ok(());
        }
        println!(
            "term {}  leader {}  commit {}  applied {}  image {}  first log index {}",
            st.term,
            st.leader
                .map(|l| l.to_string())
                .unwrap_or_else(|| "none".into()),
            st.commit,
            st.applied,
            st.image_index,
            st.first_index
        );
        println!(
            "{:>4} {:<10} {:<22} {:<22} {:<6} {:>8} {:>6}",
            "ID", "NAME", "PEER", "CLIENT", "ROLE", "MATCHED", "LAG"
        );
        for m in &st.members {
            let role = if Some(m.member.id) == st.leader {
                "leader"
            } else if m.voter {
                "voter"
            } else {
                "-"
            };
            println!(
                "{:>4} {:<10} {:<22} {:<22} {:<6} {:>8} {:>6}",
                m.member.id,
                m.member.name,
                m.member.peer_addr,
                m.member.client_addr,
                role,
                m.matched
                    .map(|x| x.to_string())
                    .unwrap_or_else(|| "-".into()),
                m.lag.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
            );
        }
        Ok(())
    })
}
