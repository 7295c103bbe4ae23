//! Where a waiting job stands, and when it may start (design §9's "why is my job not
//! running, and when will it?").
//!
//! **Position**: a RUNNABLE job's place among its share's waiting jobs in the order the
//! scheduler takes them (priority, then submit time), and among its queue's waiting
//! jobs by priority, then submit time (the scheduler takes shares in turns, so across
//! shares this is an approximation of its order).
//!
//! **Estimated start**: the earliest time at which enough GPUs of its unit would be
//! free for it and for every job ahead of it in its share, counting that the running
//! jobs end at their time limits (start + limit): the running jobs are taken by the end
//! of their time limit, and their GPUs added to the free ones until there are enough.
//! A share that may not borrow also needs its own use to fall to its max, which only
//! its own running jobs ending can do. If that needs a running job with no time limit,
//! the estimate is unknown: a figure made up from nothing would mislead. The estimate
//! ignores jobs that may arrive ahead of it later (higher priorities), preemption, and
//! where GPUs are (a gang needs them on enough nodes): it is a lower bound of the wait
//! on the information there is.

use std::collections::BTreeMap;

use tranche_model::*;
use tranche_state::State;

/// The running jobs of one unit (or of one share and unit) that have a time limit, as
/// (end by time limit, GPUs), sorted by end.
struct Ends {
    limited: Vec<(Millis, u32)>,
}

impl Ends {
    fn of<'a>(jobs: impl Iterator<Item = &'a Job>) -> Ends {
        let mut limited = vec![];
        for j in jobs {
            if let (Some(l), Some(s)) = (j.spec.time_limit_s, j.started_at()) {
                limited.push((s + l * SECOND, j.spec.request.total_gpus()));
            }
        }
        limited.sort_unstable();
        Ends { limited }
    }

    /// When `need` more GPUs are free, counting `free` already: `None` when the jobs
    /// with time limits do not free enough.
    fn when(&self, need: i64) -> Option<Estimate> {
        if need <= 0 {
            return Some(Estimate::Now);
        }
        let mut got = 0i64;
        for (end, g) in &self.limited {
            got += *g as i64;
            if got >= need {
                return Some(Estimate::At(*end));
            }
        }
        None
    }
}

fn later(a: Estimate, b: Estimate) -> Estimate {
    match (a, b) {
        (Estimate::Unknown, _) | (_, Estimate::Unknown) => Estimate::Unknown,
        (Estimate::Now, x) | (x, Estimate::Now) => x,
        (Estimate::At(x), Estimate::At(y)) => Estimate::At(x.max(y)),
    }
}

/// The standing of every RUNNABLE job.
pub fn standings(st: &State, now: Millis) -> BTreeMap<JobId, Standing> {
    let mut out = BTreeMap::new();
    // Free GPUs per unit on nodes that take work; running jobs' ends per unit.
    let mut free: BTreeMap<&Unit, i64> = BTreeMap::new();
    for n in st.nodes.values().filter(|n| n.schedulable()) {
        for (g, a) in n.inventory.gpus.iter().zip(&n.allocated) {
            if g.healthy && a.is_none() {
                *free.entry(&g.unit).or_default() += 1;
            }
        }
    }
    let mut active_by_unit: BTreeMap<&Unit, Vec<&Job>> = BTreeMap::new();
    for j in st.active_jobs() {
        active_by_unit
            .entry(&j.spec.request.unit)
            .or_default()
            .push(j);
    }
    let unit_ends: BTreeMap<&Unit, Ends> = active_by_unit
        .iter()
        .map(|(u, js)| (*u, Ends::of(js.iter().copied())))
        .collect();
    // The queue's order: priority, then submit time, across its shares.
    let mut by_queue: BTreeMap<&QueueName, Vec<(std::cmp::Reverse<u32>, Millis, JobId)>> =
        BTreeMap::new();
    for share in st.shares.values() {
        let waiting: Vec<&Job> = st
            .runnable_in(&share.name)
            .filter_map(|(k, _)| st.job(k.id))
            .collect();
        let n = waiting.len() as u32;
        let mut own_jobs: BTreeMap<&Unit, Vec<&Job>> = BTreeMap::new();
        for j in st.active_in(&share.name) {
            own_jobs.entry(&j.spec.request.unit).or_default().push(j);
        }
        let own: BTreeMap<&Unit, Ends> = own_jobs
            .into_iter()
            .map(|(u, js)| (u, Ends::of(js.into_iter())))
            .collect();
        // GPUs the jobs ahead in the share need, per unit.
        let mut ahead: BTreeMap<&Unit, i64> = BTreeMap::new();
        for (i, j) in waiting.iter().enumerate() {
            let unit = &j.spec.request.unit;
            let need = j.spec.request.total_gpus() as i64;
            let before = *ahead.get(unit).unwrap_or(&0);
            // Enough GPUs of the unit free for the jobs ahead and this one.
            let want = before + need - free.get(unit).copied().unwrap_or(0);
            let cap = match unit_ends.get(unit) {
                Some(e) => e.when(want).unwrap_or(Estimate::Unknown),
                None if want <= 0 => Estimate::Now,
                None => Estimate::Unknown,
            };
            // A share that may not borrow: its own use must fall to its max.
            let max = share
                .capacity_limits
                .iter()
                .find(|l| &l.unit == unit)
                .map_or(0, |l| l.max as i64);
            let quota = if share.borrows() {
                Estimate::Now
            } else {
                let used = st.share_used(&share.name, unit) as i64;
                let want = used + before + need - max;
                match own.get(unit) {
                    Some(e) => e.when(want).unwrap_or(Estimate::Unknown),
                    None if want <= 0 => Estimate::Now,
                    None => Estimate::Unknown,
                }
            };
            let start = match later(cap, quota) {
                Estimate::At(t) if t <= now => Estimate::Now,
                e => e,
            };
            *ahead.entry(unit).or_default() += need;
            out.insert(
                j.id,
                Standing {
                    in_share: i as u32 + 1,
                    share_waiting: n,
                    in_queue: 0,
                    queue_waiting: 0,
                    start,
                },
            );
            by_queue.entry(&share.queue).or_default().push((
                std::cmp::Reverse(j.spec.priority),
                j.submitted_at,
                j.id,
            ));
        }
    }
    for list in by_queue.values_mut() {
        list.sort_unstable();
        let n = list.len() as u32;
        for (i, (_, _, id)) in list.iter().enumerate() {
            if let Some(s) = out.get_mut(id) {
                s.in_queue = i as u32 + 1;
                s.queue_waiting = n;
            }
        }
    }
    out
}

/// Room that rule 2 keeps from a waiting job: where its share may borrow and the job
/// would be within the share's max but for the share's waiting jobs of higher priority
/// (those its max could hold at all), their GPUs and how many they are. Such a job may
/// only borrow idle GPUs until they start.
pub fn room_kept_above(st: &State, job: &Job) -> Option<(u32, u32)> {
    let share = st.shares.get(&job.spec.share)?;
    if share.resource_sharing.strategy != Strategy::LendAndBorrow
        || job.status != JobStatus::Runnable
        || job.hold.is_some()
    {
        return None;
    }
    let unit = &job.spec.request.unit;
    let max = share.max_for(unit);
    // A holder's GPUs count in full, as the pass counts them.
    let held: u32 = st
        .holding_jobs()
        .filter(|h| h.spec.share == share.name && &h.spec.request.unit == unit)
        .map(|h| h.spec.request.total_gpus())
        .sum();
    let have = st.share_used(&share.name, unit) + held;
    let need = job.spec.request.total_gpus();
    let units = st.unit_names();
    let (mut gpus, mut jobs) = (0, 0);
    for (k, w) in st.runnable_in(&share.name) {
        if k.priority.0 <= job.spec.priority {
            break;
        }
        let g = w.gpus_per_node * w.nodes;
        if !w.has_hold && g <= max && units.get(w.unit_id as usize) == Some(unit) {
            gpus += g;
            jobs += 1;
        }
    }
    (have + need <= max && have + gpus + need > max).then_some((gpus, jobs))
}
