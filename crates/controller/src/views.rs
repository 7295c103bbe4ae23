//! Read views of the applied state for the client API.

use std::collections::BTreeMap;

use tranche_model::{Job, JobId, JobStatus, Millis, QueueName, ShareName, Standing, Unit};
use tranche_proto::text::{duration_text, stop_kind_text};
use tranche_proto::{
    Explanation, FairStanding, GpuBinding, JobFilter, JobSummary, NodeWork, Objects, QueueSnapshot,
    Rendezvous, ShareUsage, StateDigest, StopOrder, UnitUsage, WorkItem,
};
use tranche_state::State;

pub fn summary(job: &Job, now: Millis) -> JobSummary {
    JobSummary {
        id: job.id,
        name: job.spec.name.to_string(),
        queue: job.spec.queue.clone(),
        share: job.spec.share.clone(),
        user: job.spec.user.clone(),
        status: job.status,
        priority: job.spec.priority,
        unit: job.spec.request.unit.clone(),
        gpus: job.spec.request.total_gpus(),
        nodes: job.allocation().iter().map(|a| a.node.clone()).collect(),
        submitted_at: job.submitted_at,
        started_at: job.status.is_active().then(|| job.started_at()).flatten(),
        reason: job
            .pending_reason
            .as_ref()
            .filter(|_| !job.status.is_active() && !job.status.is_terminal())
            .map(|r| r.render(now)),
        preemptions: job.preemptions,
        client_token: job.spec.client_token.clone(),
        array: job.array.clone(),
        standing: None,
    }
}

/// The summaries of the jobs with ids above `after` that `f` keeps, lowest ids first,
/// at most `f.limit` of them: the scan starts at `after` and stops at the limit, so a
/// page costs its own size (plus the jobs its filters skip), not the whole state.
/// `standings`: every waiting job's standing, where `f.standing` asks for them.
pub fn jobs(
    state: &State,
    f: &JobFilter,
    after: JobId,
    now: Millis,
    standings: Option<&BTreeMap<JobId, Standing>>,
) -> Vec<JobSummary> {
    let limit = f.limit.map(|l| l as usize).unwrap_or(usize::MAX);
    let all: Box<dyn Iterator<Item = &Job>> = match f.array {
        Some(a) => match state.job(a).and_then(|j| j.array.as_ref()) {
            Some(t) if t.array == a => {
                Box::new(state.tasks_of(a, t.count).filter(move |j| j.id > after))
            }
            _ => Box::new(std::iter::empty()),
        },
        None => Box::new(
            state
                .jobs
                .range((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
                .map(|(_, j)| j),
        ),
    };
    all.filter(|j| f.share.as_ref().is_none_or(|s| &j.spec.share == s))
        .filter(|j| f.user.as_ref().is_none_or(|u| &j.spec.user == u))
        .filter(|j| f.status.is_empty() || f.status.contains(&j.status))
        .take(limit)
        .map(|j| JobSummary {
            standing: standings.and_then(|s| s.get(&j.id)).cloned(),
            ..summary(j, now)
        })
        .collect()
}

/// `standings`: every waiting job's standing (only a RUNNABLE job's is shown).
pub fn explain(
    state: &State,
    job: &Job,
    now: Millis,
    standings: &BTreeMap<JobId, Standing>,
) -> Explanation {
    let mut lines = Vec::new();
    let s = summary(job, now);
    lines.push(format!("status {}", job.status.as_str()));
    match job.status {
        JobStatus::Runnable | JobStatus::Pending | JobStatus::Submitted => {
            if let Some(r) = &s.reason {
                lines.push(format!("waiting: {r}"));
            } else {
                lines.push("waiting for the next scheduling pass".into());
            }
            if let Some(r) = &job.pending_reason {
                lines.push(format!("starts when: {}", would_start(r, now)));
            }
        }
        st if st.is_active() => {
            let nodes: Vec<String> = s.nodes.iter().map(|n| n.to_string()).collect();
            lines.push(format!("holds {} GPU(s) on {}", s.gpus, nodes.join(",")));
            let current = job.current_attempt();
            if let Some(a) = current.filter(|a| a.borrowed) {
                lines.push(loan_text(state.shares.get(&job.spec.share), a, now));
            }
            if let Some(a) = current {
                lines.push(checkpoint_text(job, a, now));
            }
            if let Some(stop) = &job.stop {
                lines.push(format!(
                    "being stopped: {}; signalled {} ago, {}",
                    if tranche_state::is_gang_stop(stop) {
                        stop.reason.clone()
                    } else {
                        format!("{} ({})", stop_kind_text(&stop.kind), stop.reason)
                    },
                    duration_text(now.saturating_sub(stop.signalled_at)),
                    if stop.deadline > now {
                        format!(
                            "killed in {} unless it exits",
                            duration_text(stop.deadline - now)
                        )
                    } else {
                        "its grace is over".to_string()
                    }
                ));
            }
        }
        _ => {}
    }
    if let Some(f) = fair_standings(state, now).get(&job.spec.share) {
        lines.push(fair_text(&job.spec.share, f));
    }
    if let Some(share) = state.shares.get(&job.spec.share) {
        let unit = &job.spec.request.unit;
        lines.push(format!(
            "share {}: {} of {} {} GPU(s) in use, strategy {}",
            share.name,
            state.share_used(&share.name, unit),
            share.max_for(unit),
            unit,
            share.resource_sharing.strategy
        ));
        // Its groups, nearest first: what their shares use together, against each
        // group's max and the ceiling its borrowers stay within.
        for g in state.groups_above(&share.name) {
            let Some(max) = g.max_for(unit) else { continue };
            let ceiling = match g.ceiling_for(unit) {
                Some(c) if c == max as u64 => "its borrowers stay within its max".to_string(),
                Some(c) => format!("its borrowers stay within {c}"),
                None => "its borrowers may borrow outside it without a cap".to_string(),
            };
            lines.push(format!(
                "group {}: its shares use {} of {max} {unit} GPU(s), strategy {}; {ceiling}",
                g.name,
                state.group_used(g, unit),
                g.resource_sharing.strategy
            ));
        }
        if let Some((gpus, jobs)) = tranche_sched::estimate::room_kept_above(state, job) {
            lines.push(format!(
                "the share's room is kept for its {jobs} waiting job(s) of higher priority \
                 ({gpus} {unit} GPU(s)): until they start this job may only borrow idle GPUs"
            ));
        }
    }
    let standing = (job.status == JobStatus::Runnable)
        .then(|| standings.get(&job.id).cloned())
        .flatten();
    Explanation {
        job: s,
        standing,
        lines,
    }
}

/// Why an attempt is being stopped: its kind and reason (`reclaimed for job 12:
/// share vision needs its GPUs`), or for a gang that one member's failure stops, how
/// that member ended (`a member of the gang exited with code 1`).
fn stop_text(stop: &tranche_model::Stop) -> String {
    if tranche_state::is_gang_stop(stop) {
        stop.reason.clone()
    } else {
        format!("{}: {}", stop_kind_text(&stop.kind), stop.reason)
    }
}

/// What would let a job waiting for this reason start; times are spans from `now`.
fn would_start(r: &tranche_model::PendingReason, now: Millis) -> String {
    use tranche_model::PendingReasonOf::*;
    let from_now = |t: Millis| duration_text(t.saturating_sub(now));
    match r {
        NotYetScheduled => "the next scheduling pass looks at it (within a second)".into(),
        ShareDisabled { share } => format!("an admin enables share {share}"),
        QueueDisabled { queue } => format!("an admin enables queue {queue}"),
        EnvironmentDisabled { env } => format!("an admin enables environment {env}"),
        AtMaxNoBorrow { share, used, max, need, unit, .. } => format!(
            "share {share} has {need} {unit} GPU(s) free under its max: {} more must finish \
             (it uses {used} of {max}), or an admin raises its max or lets it borrow",
            (used + need).saturating_sub(*max)
        ),
        BorrowLimit { used, limit, need, unit } => format!(
            "its share's use drops to {} {unit} GPU(s) or less (now {used}, borrow ceiling {limit})",
            limit.saturating_sub(*need as u64)
        ),
        WaitingForPreempted { jobs, grace_ends_at } => format!(
            "its {jobs} preempted job(s) exit; their grace ends in {}",
            from_now(*grace_ends_at)
        ),
        EnvironmentCap { env, used, cap, need, unit } => format!(
            "environment {env} has {need} {unit} GPU(s) under its cap: {} more must finish \
             (it uses {used} of {cap})",
            (used + need).saturating_sub(*cap)
        ),
        ReserveHeld { share, idle, unit } => format!(
            "RESERVE share {share} uses its {idle} idle {unit} GPU(s), or an admin changes its strategy"
        ),
        NoCapacity { need_per_node, nodes, unit, free, fitting_nodes } => format!(
            "{nodes} node(s) each have {need_per_node} free {unit} GPU(s) at once \
             ({free} free in all, {fitting_nodes} node(s) fit now)"
        ),
        NoNodes { unit, env } => format!(
            "a usable node with {unit} GPUs joins environment {env} (or drained ones resume)"
        ),
        MinRuntime { until } => format!(
            "the jobs it would preempt pass their share's min_runtime_s, in {}",
            from_now(*until)
        ),
        AboveCeiling { share, need, unit, .. } => format!(
            "an admin raises share {share}'s max (or lets it borrow more) to at least {need} {unit}"
        ),
        Held => "it is released (tranche release)".into(),
        Dependency { job, .. } => format!(
            "job {job} ends as its dependency needs (and any other dependencies are satisfied)"
        ),
        ArrayLimit { array, .. } => format!("one of array {array}'s running tasks ends"),
    }
}

/// Each FAIR_SHARE share's standing at `now`, by share.
pub fn fair_standings(state: &State, now: Millis) -> BTreeMap<ShareName, FairStanding> {
    let usage = tranche_sched::fair::Usage::at(state, now, &mut vec![]);
    // Per queue: its shares' usage per weight.
    let mut by_queue: BTreeMap<&QueueName, Vec<(tranche_sched::fair::Standing, &ShareName, u64)>> =
        BTreeMap::new();
    for share in state.shares.values() {
        if let Some(f) = usage.standing(state, share) {
            by_queue
                .entry(&share.queue)
                .or_default()
                .push((f, &share.name, share.fair_weight()));
        }
    }
    let mut out = BTreeMap::new();
    for (_, mut list) in by_queue {
        list.sort_by(|a, b| a.0.per_weight.total_cmp(&b.0.per_weight));
        let of = list.len() as u32;
        let mut order = 0;
        for k in 0..list.len() {
            if k == 0 || list[k].0.per_weight != list[k - 1].0.per_weight {
                order = k as u32 + 1;
            }
            let (f, name, weight) = list[k];
            out.insert(
                name.clone(),
                FairStanding {
                    half_life_s: f.half_life_s,
                    decayed_milli_gpu_hours: (f.used * 1000.0).round() as u64,
                    weight,
                    borrow_order: order,
                    of,
                },
            );
        }
    }
    out
}

pub fn shares(state: &State, now: Millis) -> Vec<ShareUsage> {
    let mut fair = fair_standings(state, now);
    // Per unit, how much every share uses beyond its own capacity.
    let mut borrowed_total: BTreeMap<Unit, u32> = BTreeMap::new();
    let mut rows = Vec::new();
    for share in state.shares.values() {
        let mut units = Vec::new();
        for lim in &share.capacity_limits {
            let used = state.share_used(&share.name, &lim.unit);
            let borrowed = used.saturating_sub(lim.max);
            *borrowed_total.entry(lim.unit.clone()).or_default() += borrowed;
            units.push(UnitUsage {
                unit: lim.unit.clone(),
                max: lim.max,
                used,
                lent: 0,
                borrowed,
            });
        }
        let running = state.active_in(&share.name).count() as u32;
        let waiting = state.runnable_in(&share.name).count() as u32;
        rows.push(ShareUsage {
            name: share.name.clone(),
            strategy: share.resource_sharing.strategy,
            units,
            running,
            waiting,
            fair: fair.remove(&share.name),
        });
    }
    for row in &mut rows {
        for u in &mut row.units {
            let others = borrowed_total.get(&u.unit).copied().unwrap_or(0) - u.borrowed;
            u.lent = u.max.saturating_sub(u.used).min(others);
        }
    }
    rows
}

pub fn queue(state: &State, limit: u32, now: Millis) -> QueueSnapshot {
    let limit = limit as usize;
    let mut all: Vec<&Job> = Vec::new();
    let mut per_share = Vec::new();
    for share in state.shares.keys() {
        let front: Vec<&Job> = state
            .runnable_in(share)
            .filter_map(|(k, _)| state.job(k.id))
            .take(limit)
            .collect();
        all.extend(front.iter().copied());
        per_share.push((
            share.clone(),
            front.iter().map(|j| summary(j, now)).collect(),
        ));
    }
    all.sort_by_key(|j| (std::cmp::Reverse(j.spec.priority), j.submitted_at, j.id));
    all.truncate(limit);
    QueueSnapshot {
        front: all.into_iter().map(|j| summary(j, now)).collect(),
        shares: per_share,
    }
}

pub fn digest(state: &State, applied: u64) -> StateDigest {
    StateDigest {
        applied,
        digest: tranche_proto::fnv1a(&state.snapshot()),
        jobs: state.jobs.len() as u64,
    }
}

pub fn objects(state: &State) -> Objects {
    Objects {
        environments: state.environments.values().cloned().collect(),
        policies: state.policies.values().cloned().collect(),
        queues: state.queues.values().cloned().collect(),
        shares: state.shares.values().cloned().collect(),
    }
}

/// What the agent of `node` must run or stop: every active attempt with GPUs there.
/// Found through the node's GPU holders, so the cost is that of one node.
pub fn node_work(
    state: &State,
    node: &tranche_model::NodeName,
    applied: u64,
    now: Millis,
) -> NodeWork {
    let Some(n) = state.nodes.get(node) else {
        return NodeWork {
            applied,
            now,
            registered: false,
            items: vec![],
        };
    };
    let mut ids: Vec<JobId> = n.allocated.iter().flatten().copied().collect();
    ids.sort();
    ids.dedup();
    let mut items = Vec::new();
    for id in ids {
        let Some(job) = state.job(id) else { continue };
        if !job.status.is_active() {
            continue;
        }
        let Some(att) = job.current_attempt() else {
            continue;
        };
        let Some(here) = att.allocation.iter().find(|a| &a.node == node) else {
            continue;
        };
        let gpus = here
            .gpus
            .iter()
            .map(|g| {
                let uuid = n
                    .inventory
                    .gpus
                    .iter()
                    .find(|x| x.index == *g)
                    .map(|x| x.uuid.clone())
                    .unwrap_or_default();
                GpuBinding { index: *g, uuid }
            })
            .collect();
        let stop = job.stop.as_ref().map(|s| StopOrder {
            why: stop_text(s),
            deadline_ms: s.deadline,
            grace_ms: s.deadline.saturating_sub(s.signalled_at),
        });
        let spec = &job.spec;
        let rendezvous = rendezvous(state, id, att, node);
        items.push(WorkItem {
            job: id,
            attempt: att.number,
            status: job.status,
            share: spec.share.clone(),
            restarts: job.attempts.len().saturating_sub(1) as u32,
            image: spec.image.clone(),
            command: spec.command.clone(),
            env: attempt_env(state, spec, att),
            cpus: spec.cpus_per_node,
            memory_mb: spec.memory_mb_per_node,
            gpus,
            time_limit_s: spec.time_limit_s,
            scheduled_at: att.scheduled_at,
            started_at: att.started_at,
            signal: spec.checkpoint.signal.clone(),
            stop,
            user: spec.user.clone(),
            cwd: spec.cwd.clone(),
            rendezvous,
            name: spec.name.to_string(),
            array: job.array.clone(),
            output: spec.output.clone(),
            error: spec.error.clone(),
            sagemaker: spec.sagemaker.clone(),
        });
    }
    NodeWork {
        applied,
        now,
        registered: true,
        items,
    }
}

/// A share's fair-share standing as `explain` says it.
fn fair_text(share: &ShareName, f: &FairStanding) -> String {
    format!(
        "fair share: share {share} used {:.1} GPU-hours (decayed, half-life {}), weight {}: {} of {} to borrow idle GPUs, {} of {} to be reclaimed from",
        f.decayed_milli_gpu_hours as f64 / 1000.0,
        duration_text(f.half_life_s * tranche_model::SECOND),
        f.weight,
        ordinal(f.borrow_order),
        f.of,
        ordinal(f.of + 1 - f.borrow_order),
        f.of,
    )
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, x) if x != 11 => "st",
        (2, x) if x != 12 => "nd",
        (3, x) if x != 13 => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// What an attempt on borrowed GPUs may count on: its share's loan terms.
fn loan_text(
    share: Option<&tranche_model::QuotaShare>,
    a: &tranche_model::Attempt,
    now: Millis,
) -> String {
    let Some(share) = share else {
        return "on loan: it runs on borrowed GPUs, and a reclaim may take it".into();
    };
    let start = a.started_at.unwrap_or(a.scheduled_at);
    let protected_until = start + share.loan_min_runtime_s() * tranche_model::SECOND;
    let protection = if protected_until > now {
        format!(
            "no reclaim takes it for {} more",
            duration_text(protected_until - now)
        )
    } else {
        "a reclaim may take it now".into()
    };
    let notice = match share.loans.recall_notice_s {
        0 => "no recall notice".to_string(),
        n => format!("recall notice {}", duration_text(n * tranche_model::SECOND)),
    };
    format!("on loan: it runs on borrowed GPUs; {protection}; {notice}")
}

/// What a stop now would lose: the work since the attempt's last checkpoint.
fn checkpoint_text(job: &Job, a: &tranche_model::Attempt, now: Millis) -> String {
    let from = a.resumes_from(job.spec.checkpoint.every_s, now);
    let lost = duration_text(now.saturating_sub(from));
    match (a.checkpointed_at, job.spec.checkpoint.every_s) {
        (Some(at), _) => format!(
            "last checkpoint reported {} ago: a stop now loses {lost} of work",
            duration_text(now.saturating_sub(at))
        ),
        (None, Some(e)) => format!(
            "checkpoints every {} (declared): a stop now loses {lost} of work",
            duration_text(e * tranche_model::SECOND)
        ),
        (None, None) => format!("no checkpoint known: a stop now loses all {lost} of its work"),
    }
}

/// The job's environment with its loan contract (design §3, *Checkpoints and loans*):
/// `TRANCHE_ON_LOAN` is `1` for an attempt placed on borrowed GPUs, with its share's
/// loan terms beside it, and `0` otherwise; a job cannot set these itself.
fn attempt_env(
    state: &State,
    spec: &tranche_model::JobSpec,
    att: &tranche_model::Attempt,
) -> std::collections::BTreeMap<String, String> {
    let mut env = spec.env.clone();
    for k in [
        "TRANCHE_ON_LOAN",
        "TRANCHE_RECALL_NOTICE_S",
        "TRANCHE_LOAN_MIN_RUNTIME_S",
    ] {
        env.remove(k);
    }
    env.insert(
        "TRANCHE_ON_LOAN".into(),
        if att.borrowed { "1" } else { "0" }.into(),
    );
    if let (true, Some(share)) = (att.borrowed, state.shares.get(&spec.share)) {
        env.insert(
            "TRANCHE_RECALL_NOTICE_S".into(),
            share.loans.recall_notice_s.to_string(),
        );
        env.insert(
            "TRANCHE_LOAN_MIN_RUNTIME_S".into(),
            share.loan_min_runtime_s().to_string(),
        );
    }
    env
}

/// Where `node` stands in attempt `att` of job `id`: the members in allocation order,
/// its rank, and rank 0's address and port. The port comes from the range that rank 0's
/// agent publishes ([`tranche_proto::RENDEZVOUS_PORTS_LABEL`]), so every member gets
/// the same one from this one place.
fn rendezvous(
    state: &State,
    id: JobId,
    att: &tranche_model::Attempt,
    node: &tranche_model::NodeName,
) -> Rendezvous {
    let nodes: Vec<_> = att.allocation.iter().map(|a| a.node.clone()).collect();
    let rank = nodes.iter().position(|n| n == node).unwrap_or(0) as u32;
    let first = nodes.first().and_then(|n| state.nodes.get(n));
    let range = first
        .and_then(|n| {
            n.inventory
                .labels
                .get(tranche_proto::RENDEZVOUS_PORTS_LABEL)
        })
        .and_then(|r| tranche_proto::parse_port_range(r))
        .unwrap_or(tranche_proto::DEFAULT_RENDEZVOUS_PORTS);
    Rendezvous {
        rank,
        gpus_per_node: att.allocation.first().map_or(0, |a| a.gpus.len() as u32),
        master_addr: first
            .map(|n| n.inventory.address.clone())
            .unwrap_or_default(),
        master_port: tranche_proto::master_port(id, att.number, range),
        nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fair_standing_reads_as_a_sentence_with_both_orders() {
        let f = FairStanding {
            half_life_s: 7 * 24 * 3600,
            decayed_milli_gpu_hours: 12_345,
            weight: 8,
            borrow_order: 1,
            of: 3,
        };
        let text = fair_text(&ShareName::from("vision"), &f);
        assert_eq!(
            text,
            format!(
                "fair share: share vision used 12.3 GPU-hours (decayed, half-life {}), weight 8: 1st of 3 to borrow idle GPUs, 3rd of 3 to be reclaimed from",
                duration_text(7 * 24 * 3600 * 1000)
            )
        );
        assert_eq!(
            [1, 2, 3, 4, 11, 12, 13, 21, 22, 101].map(ordinal),
            ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
        );
    }
}
