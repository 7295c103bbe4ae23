//! `tranche show`: everything about one job: its request, attempts with their
//! allocations and ends, and its transitions with reasons.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::JobRef;
use tranche_proto::{Query, Response};

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected};
use crate::text::{attempt_end, command_line, duration, local_time, now_ms};

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// A job, or `42_7` for one task of an array.
    job: JobRef,
    /// The whole job record as JSON.
    #[arg(long)]
    json: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn show(args: &ShowArgs) -> ExitCode {
    run("show", async {
        let (client, _) = connect(&args.config)?;
        let j = match client
            .read(Query::Job(args.job), false)
            .await
            .map_err(failed)?
        {
            Response::Job(j) => j,
            other => return Err(unexpected(&other)),
        };
        let hidden = j.spec.is_redacted();
        let archived = crate::cmd::history::archived(&client, &j).await?;
        if args.json {
            let mut v = serde_json::to_value(&*j).unwrap_or_default();
            if let (true, Some(m)) = (hidden, v.as_object_mut()) {
                m.insert("hidden".into(), tranche_model::REDACTED_FIELDS.into());
            }
            if let Some(m) = v.as_object_mut() {
                m.insert("archived".into(), (archived == Some(true)).into());
            }
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            return Ok(());
        }
        let now = now_ms();
        let s = &j.spec;
        println!("Job {} \"{}\"  {}", j.job_ref(), s.name, j.status);
        if hidden {
            println!(
                "  (a job of {}: its command, environment, image, working directory, output \
                 files, tags and SageMaker request are shown only to {} and to operators and \
                 admins)",
                s.user, s.user
            );
        }
        if let Some(a) = &j.array {
            let limit = a
                .max_running
                .map(|m| format!(", at most {m} running at once"))
                .unwrap_or_default();
            println!(
                "  task {} of array {} ({} task(s){limit}); job id {}",
                a.index, a.array, a.count, j.id
            );
        }
        if !s.dependency.is_empty() {
            let left: Vec<String> = j
                .deps
                .iter()
                .map(|d| format!("{}:{}", d.kind.as_str(), d.job))
                .collect();
            let left = if left.is_empty() {
                String::new()
            } else {
                format!("  (still waiting on {})", left.join(","))
            };
            println!("  dependency {}{left}", s.dependency);
        }
        if j.held {
            println!(
                "  held: it starts only after tranche release {}",
                j.job_ref()
            );
        }
        for (what, p) in [("output", &s.output), ("error", &s.error)] {
            if let Some(p) = p {
                println!("  {what} {p}");
            }
        }
        println!(
            "  user {}  share {}  queue {}  priority {}",
            s.user, s.share, s.queue, s.priority
        );
        if hidden {
            println!(
                "  request {} x {} GPU(s) of {}",
                s.request.nodes, s.request.gpus_per_node, s.request.unit
            );
        } else {
            println!(
                "  request {} x {} GPU(s) of {}  image {}  command {}",
                s.request.nodes,
                s.request.gpus_per_node,
                s.request.unit,
                s.image,
                command_line(&s.command)
            );
        }
        let grace = s
            .checkpoint
            .grace_s
            .map(|g| format!(" (grace {})", duration(g * 1000)))
            .unwrap_or_default();
        println!(
            "  checkpoint {}{grace}  preemptions {}  failures {}",
            s.checkpoint.signal, j.preemptions, j.failures
        );
        println!("  submitted {}", local_time(j.submitted_at));
        if j.status.is_terminal() {
            let at = local_time(tranche_state::retention::ended_at(&j));
            match archived {
                Some(true) => println!(
                    "  ended {at}; archived: it has left the controllers' state and is read \
                     from the history"
                ),
                _ => println!("  ended {at}"),
            }
        }
        if let Some(r) = &j.pending_reason {
            println!("  waiting: {}", r.render(now));
        }
        for a in &j.attempts {
            let alloc: Vec<String> = a
                .allocation
                .iter()
                .map(|n| {
                    let g: Vec<String> = n.gpus.iter().map(|g| g.0.to_string()).collect();
                    format!("{}[{}]", n.node, g.join(","))
                })
                .collect();
            let mut what = Vec::new();
            match (a.started_at, a.ended_at) {
                (Some(st), Some(end)) => {
                    what.push(format!("started {}", local_time(st)));
                    what.push(format!("ran {}", duration(end.saturating_sub(st))));
                }
                (Some(st), None) => {
                    what.push(format!("started {}", local_time(st)));
                    what.push(format!("running for {}", duration(now.saturating_sub(st))));
                }
                (None, _) => what.push(format!("scheduled {}", local_time(a.scheduled_at))),
            }
            if a.borrowed {
                what.push("on loan (borrowed GPUs)".into());
            }
            if let Some(c) = a.checkpointed_at {
                what.push(format!("last checkpoint {}", local_time(c)));
            }
            what.extend(attempt_end(&j, a));
            println!(
                "  attempt {}: {}  {}",
                a.number,
                alloc.join(" "),
                what.join(", ")
            );
        }
        println!("  transitions:");
        for t in &j.transitions {
            println!(
                "    {}  {} -> {}  {}",
                local_time(t.at),
                t.from,
                t.to,
                t.reason
            );
        }
        Ok(())
    })
}
