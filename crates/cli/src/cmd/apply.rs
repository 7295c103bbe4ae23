//! `tranche apply -f policy.toml [--dry-run]`: creates or updates environments,
//! scheduling policies, queues, quota shares and their groups, idempotently, and prints
//! what changed. Objects are written one by one in dependency order (environments,
//! policies, queues, shares, then groups, each group after the groups it holds).
//! Rules that would refuse one half-way (a share moving queues) are checked before
//! anything is written; any other refusal stops the run and says which objects were
//! already applied. A share moves from one group to another when the group that gives
//! it up comes first in the file.
//!
//! ```toml
//! [[environments]]
//! name = "gpu"
//! capacity_limits = [ { unit = "h100", max = 64 } ]
//! selector = { rack = "r12" }         # optional: node labels
//!
//! [[policies]]
//! name = "fifo"                      # idle_resource_assignment = "FIFO" (the default)
//!
//! [[policies]]
//! name = "fair"
//! idle_resource_assignment = "FAIR_SHARE"  # the share that used least borrows first
//! usage_half_life_s = 604800         # usage weighs half after a week
//!
//! [[queues]]
//! name = "q"
//! environment = "gpu"
//! policy = "fifo"
//! priority = 1
//!
//! [[shares]]
//! name = "vision"
//! queue = "q"
//! capacity_limits = [ { unit = "h100", max = 16 } ]
//! strategy = "LEND_AND_BORROW"       # RESERVE | LEND | LEND_AND_BORROW
//! borrow_limit = 50                  # percent over max; -1: no cap
//! members = ["alice", "bob"]         # empty or absent: every user
//! in_share_preemption = true
//! default_grace_s = 120
//! max_grace_s = 600
//! min_runtime_s = 300
//! loan_min_runtime_s = 1800          # its jobs on loan run this long before a reclaim
//! recall_notice_s = 300              # a reclaim's signal comes this long before grace
//! weight = 16                        # under FAIR_SHARE (default: the sum of its maxes)
//!
//! [[groups]]                         # nested quotas: see design.md, "Nested shares"
//! name = "research"
//! queue = "q"
//! shares = ["vision"]                # its quota shares
//! groups = []                        # groups nested in it (at most 4 levels)
//! capacity_limits = [ { unit = "h100", max = 24 } ]
//! strategy = "LEND_AND_BORROW"       # toward the rest of the queue
//! borrow_limit = -1
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tranche_model::policy_file;
use tranche_model::{JobStatus, QuotaShare};
use tranche_proto::{policy, ClientCommand};
use tranche_proto::{JobFilter, Query, Response};

use crate::client_cfg::connect;
use crate::exit::{failed, run, unexpected, usage, CliError};

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// The policy file.
    #[arg(short = 'f', long = "file", required_unless_present = "delete_group")]
    file: Option<PathBuf>,
    /// Deletes a group of shares (after the file, if any, is applied); its members are
    /// then in no group. A group another group lists is refused until taken out of it.
    #[arg(long = "delete-group", value_name = "GROUP")]
    delete_group: Vec<String>,
    /// Print what would change, and the running jobs the change would make preemptible,
    /// without changing anything.
    #[arg(long)]
    dry_run: bool,
    #[arg(long)]
    config: Option<PathBuf>,
}

pub fn apply(args: &ApplyArgs) -> ExitCode {
    run("apply", async {
        let cmds = match &args.file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| CliError::Io {
                    path: path.clone(),
                    source,
                })?;
                let file = policy_file::parse(&text)
                    .map_err(|e| usage(format!("{}: {e}", path.display())))?;
                policy::commands(file)
            }
            None => vec![],
        };
        let (client, _) = connect(&args.config)?;
        let objects = match client.read(Query::Objects, false).await.map_err(failed)? {
            Response::Objects(o) => o,
            other => return Err(unexpected(&other)),
        };
        // Asked only of a file with groups: controllers of a release without them do
        // not know the question.
        let groups = if policy::has_groups(&cmds) || !args.delete_group.is_empty() {
            match client.read(Query::Groups, false).await.map_err(failed)? {
                Response::Groups(g) => g,
                other => return Err(unexpected(&other)),
            }
        } else {
            vec![]
        };
        // Rules the controllers would refuse half-way are checked first, so that a file
        // that breaks them changes nothing.
        for (_, name, cmd) in &cmds {
            if let ClientCommand::PutShare(s) = cmd {
                if let Some(old) = objects.shares.iter().find(|x| x.name == s.name) {
                    if old.queue != s.queue {
                        return Err(CliError::Conflict(format!(
                            "share {name}: field `queue`: it belongs to queue {}; a share cannot move to another queue (nothing was changed)",
                            old.queue
                        )));
                    }
                }
            }
        }
        let mut done: Vec<String> = Vec::new();
        let (mut created, mut updated, mut same) = (0, 0, 0);
        let mut shrunk: Vec<&QuotaShare> = Vec::new();
        for (kind, name, cmd) in &cmds {
            let verb = match policy::compare(cmd, &objects, &groups) {
                Some(true) => {
                    same += 1;
                    continue;
                }
                Some(false) => {
                    updated += 1;
                    if let ClientCommand::PutShare(s) = cmd {
                        shrunk.push(s);
                    }
                    "update"
                }
                None => {
                    created += 1;
                    "create"
                }
            };
            let verb = if args.dry_run {
                format!("would {verb}")
            } else {
                verb.to_string()
            };
            if !args.dry_run {
                match client.command(cmd.clone()).await.map_err(failed)? {
                    Ok(_) => done.push(format!("{kind} {name}")),
                    Err(e) => {
                        let before = if done.is_empty() {
                            "nothing was changed".to_string()
                        } else {
                            format!("already applied: {}", done.join(", "))
                        };
                        return Err(CliError::Stopped {
                            object: format!("{kind} {name}"),
                            source: Box::new(e),
                            before,
                        });
                    }
                }
            }
            println!("{verb} {kind} {name}");
        }
        if args.dry_run {
            preemptible(&client, &shrunk).await?;
            loans_cut(&client, &objects.shares, &shrunk).await?;
            order_changes(&cmds, &objects, &groups);
        }
        let mut deleted = 0;
        for name in &args.delete_group {
            if !groups.iter().any(|g| g.name.as_str() == name) {
                return Err(CliError::Conflict(format!(
                    "group {name} does not exist{}",
                    if done.is_empty() {
                        " (nothing was changed)".to_string()
                    } else {
                        format!(" (already applied: {})", done.join(", "))
                    }
                )));
            }
            if !args.dry_run {
                let cmd = ClientCommand::DeleteGroup(name.as_str().into());
                if let Err(e) = client.command(cmd).await.map_err(failed)? {
                    let before = if done.is_empty() {
                        "nothing was changed".to_string()
                    } else {
                        format!("already applied: {}", done.join(", "))
                    };
                    return Err(CliError::Stopped {
                        object: format!("group {name}"),
                        source: Box::new(e),
                        before,
                    });
                }
                done.push(format!("deleted group {name}"));
            }
            deleted += 1;
            println!(
                "{} group {name}",
                if args.dry_run {
                    "would delete"
                } else {
                    "delete"
                }
            );
        }
        let deleted = match deleted {
            0 => String::new(),
            n => format!(", {n} deleted"),
        };
        println!(
            "{created} created, {updated} updated, {same} unchanged{deleted}{}",
            if args.dry_run {
                " (dry run: nothing changed)"
            } else {
                ""
            }
        );
        Ok(())
    })
}

/// For shares whose loan minimum the change shortens: the jobs on loan that would be
/// reclaimable at once (they have run the new minimum, not the old one).
async fn loans_cut(
    client: &tranche_client::Client,
    before: &[QuotaShare],
    changed: &[&QuotaShare],
) -> Result<(), CliError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for s in changed {
        let Some(old) = before.iter().find(|o| o.name == s.name) else {
            continue;
        };
        let (was, will) = (old.loan_min_runtime_s(), s.loan_min_runtime_s());
        if will >= was {
            continue;
        }
        for j in jobs_of(client, s, vec![JobStatus::Running]).await? {
            let Some(started) = j.started_at else {
                continue;
            };
            let ran_s = now.saturating_sub(started) / 1000;
            if ran_s < will || ran_s >= was {
                continue;
            }
            let on_loan = match client
                .read(Query::Job(j.job_ref()), false)
                .await
                .map_err(failed)?
            {
                Response::Job(full) => full.attempts.last().is_some_and(|a| a.borrowed),
                other => return Err(unexpected(&other)),
            };
            if on_loan {
                println!(
                    "  would make reclaimable now: job {} ({} GPU(s) of {}, user {}) on loan in share {}: ran {}, loan_min_runtime_s {will} (was {was})",
                    j.id,
                    j.gpus,
                    j.unit,
                    j.user,
                    s.name,
                    tranche_proto::text::duration_text(ran_s * 1000)
                );
            }
        }
    }
    Ok(())
}

/// Changes that reorder borrowing and reclaim (a policy's idle assignment, a share's
/// fair-share weight, groups) preempt no running job by themselves: said once each.
fn order_changes(
    cmds: &[(&'static str, String, ClientCommand)],
    objects: &tranche_proto::Objects,
    groups: &[tranche_model::ShareGroup],
) {
    for (kind, name, cmd) in cmds {
        let what = match cmd {
            ClientCommand::PutPolicy(p) => objects
                .policies
                .iter()
                .find(|o| o.name == p.name)
                .filter(|o| o.idle_resource_assignment != p.idle_resource_assignment)
                .map(|_| "its idle assignment changes the order of borrowing and reclaim"),
            ClientCommand::PutShare(s) => objects
                .shares
                .iter()
                .find(|o| o.name == s.name)
                .filter(|o| o.weight != s.weight)
                .map(|_| "its fair-share weight changes its place in the borrow and reclaim order"),
            ClientCommand::PutGroup(g) => (groups.iter().find(|o| o.name == g.name) != Some(g))
                .then_some(
                "its groups' limits bound borrowers when they start, and closeness orders reclaim",
            ),
            _ => None,
        };
        if let Some(what) = what {
            println!("  {kind} {name}: {what}; no running job is preempted by the change itself");
        }
    }
}

/// For shares whose new limits are below their use: the running jobs that would be
/// over the new max, hence reclaimable, youngest first (the order reclaim takes them).
async fn preemptible(
    client: &tranche_client::Client,
    shares: &[&QuotaShare],
) -> Result<(), CliError> {
    for s in shares {
        let mut jobs = jobs_of(
            client,
            s,
            vec![
                JobStatus::Scheduled,
                JobStatus::Starting,
                JobStatus::Running,
            ],
        )
        .await?;
        jobs.sort_by_key(|j| (j.priority, std::cmp::Reverse(j.started_at)));
        let mut used: BTreeMap<String, u32> = BTreeMap::new();
        for j in &jobs {
            *used.entry(j.unit.to_string()).or_default() += j.gpus;
        }
        for j in &jobs {
            let u = j.unit.to_string();
            let max = s.max_for(&j.unit);
            let now_used = used[&u];
            if now_used > max {
                println!(
                    "  would make preemptible: job {} ({} GPU(s) of {u}, user {}) in share {}: {now_used} used > new max {max}",
                    j.id, j.gpus, j.user, s.name
                );
                *used.get_mut(&u).unwrap() -= j.gpus;
            }
        }
    }
    Ok(())
}

/// The share's jobs in these states.
async fn jobs_of(
    client: &tranche_client::Client,
    share: &QuotaShare,
    status: Vec<JobStatus>,
) -> Result<Vec<tranche_proto::JobSummary>, CliError> {
    let filter = JobFilter {
        share: Some(share.name.clone()),
        user: None,
        status,
        limit: None,
        array: None,
        standing: false,
    };
    match client
        .read(Query::Jobs(filter), false)
        .await
        .map_err(failed)?
    {
        Response::Jobs(j) => Ok(j),
        other => Err(unexpected(&other)),
    }
}
