//! For each job that had room in its share on arrival and started late (the quota
//! guarantee of DESIGN §3 missed), whether any plan could have started it sooner: at
//! each instant it waited with room in its share, could a reclaim that rule 3 allows
//! have freed the nodes it needs?
//!
//! Rule 3 takes victims only from shares over their max, each only while its share is
//! still over its max when it is taken. At each instant (each start or end of any
//! attempt from the job's arrival to its first start) with room in its share (its
//! share's GPUs in use plus its own need within the max), the nodes of the job's unit
//! are tried: a node can serve when its free GPUs plus those of over-max jobs on it
//! reach the job's need per node. Every set of the job's node count among those nodes
//! is tried, with every set of victims on each node that frees enough; rule 3 allows a
//! share's victims, taken in some order each while the share is still over its max,
//! exactly when all of them but the largest (taken last) fit in what the share had
//! above its max. A choice that frees every node is a plan that could have started the
//! job ([`LateJob::reclaim_at`]); a search that tried 200,000 choices without an answer
//! leaves the instant undecided ([`LateJob::undecided_at`]). Otherwise no plan could
//! have started the job at that instant.
//!
//! In-share preemption is not counted (a job with room may also take its own share's
//! lower-priority work where its share allows it): the trace policies this serves have
//! none.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use tranche_model::Millis;

use crate::report::{JobRun, Setup};

/// A job that had room in its share on arrival and started late.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LateJob {
    pub name: String,
    pub share: String,
    pub gpus: u32,
    pub submit: Millis,
    /// From its submit to its first start (to the run's end when it never started).
    pub waited_ms: Millis,
    /// The first instant at which a reclaim rule 3 allows would have freed its nodes.
    pub reclaim_at: Option<Millis>,
    /// The first instant the search could not decide (see the module's text).
    pub undecided_at: Option<Millis>,
    /// Whether it was judged: only the first [`JUDGED`] late jobs of a run are.
    pub judged: bool,
}

/// Late jobs judged at most per run, the first by submit: where more start late, the
/// cluster is short of its shares' maxes and the guarantee says little.
pub const JUDGED: usize = 100;

/// A job's need: how many nodes, and GPUs on each.
fn shape(setup: &Setup, r: &JobRun) -> (usize, u32) {
    if let Some(first) = r.placements.first().filter(|p| !p.is_empty()) {
        let k = first.len();
        return (k, r.gpus / k as u32);
    }
    let per_node = setup
        .nodes
        .values()
        .filter(|(u, _)| *u == r.unit)
        .map(|(_, g)| *g)
        .max()
        .unwrap_or(r.gpus)
        .max(1);
    if r.gpus <= per_node {
        (1, r.gpus)
    } else {
        (r.gpus.div_ceil(per_node) as usize, per_node)
    }
}

/// What runs on each node at one instant: (share, GPUs) per job.
type Occupancy = HashMap<String, Vec<(usize, u32)>>;

/// What has been taken from each share so far: the GPUs of its victims and its largest
/// victim. Rule 3 can take a share's victims in some order, each while the share is
/// still over its max, exactly when all of them but the largest (taken last) fit in
/// what the share has above its max: `sum - largest < over`.
#[derive(Clone, Copy, Default)]
struct Taken {
    sum: i64,
    largest: i64,
}

impl Taken {
    fn with(self, g: u32) -> Taken {
        let g = i64::from(g);
        Taken {
            sum: self.sum + g,
            largest: self.largest.max(g),
        }
    }

    fn allowed(self, over: i64) -> bool {
        self.sum == 0 || self.sum - self.largest < over
    }
}

/// Victims at most per node whose every subset is tried (a node of 8 GPUs holds at
/// most 8 jobs); a node with more is tried with its largest ones.
const VICTIMS: usize = 12;

/// Nodes tried at most, per instant, before the search says undecided.
const STEPS: usize = 200_000;

/// Every set of victims on a node (from shares over their max) that frees `need` GPUs,
/// smallest first; none when even all of them do not.
fn victim_sets(cap: u32, on: &[(usize, u32)], over: &[i64], need: u32) -> Vec<Vec<(usize, u32)>> {
    let free = cap.saturating_sub(on.iter().map(|(_, g)| g).sum());
    if free >= need {
        return vec![vec![]];
    }
    let mut victims: Vec<(usize, u32)> = on.iter().copied().filter(|(s, _)| over[*s] > 0).collect();
    victims.sort_by_key(|(_, g)| std::cmp::Reverse(*g));
    victims.truncate(VICTIMS);
    if free + victims.iter().map(|(_, g)| g).sum::<u32>() < need {
        return vec![];
    }
    let mut sets: Vec<Vec<(usize, u32)>> = (1u32..1 << victims.len())
        .map(|m| {
            (0..victims.len())
                .filter(|i| m & (1 << i) != 0)
                .map(|i| victims[i])
                .collect::<Vec<_>>()
        })
        .filter(|set| free + set.iter().map(|(_, g)| g).sum::<u32>() >= need)
        .collect();
    sets.sort_by_key(|set| set.iter().map(|(_, g)| *g).sum::<u32>());
    sets
}

/// One instant: `Some(true)` a plan exists, `Some(false)` none, `None` undecided.
fn judge(
    setup: &Setup,
    occ: &Occupancy,
    used: &[u64],
    unit: &str,
    (k, per_node): (usize, u32),
) -> Option<bool> {
    let over: Vec<i64> = setup
        .shares
        .iter()
        .zip(used)
        .map(|(s, &u)| u as i64 - i64::from(s.max))
        .collect();
    let empty = Vec::new();
    let cands: Vec<Vec<Vec<(usize, u32)>>> = setup
        .nodes
        .iter()
        .filter(|(_, (u, _))| u == unit)
        .map(|(n, (_, cap))| victim_sets(*cap, occ.get(n).unwrap_or(&empty), &over, per_node))
        .filter(|sets| !sets.is_empty())
        .collect();
    if cands.len() < k {
        return Some(false);
    }
    let mut taken = vec![Taken::default(); over.len()];
    let mut steps = STEPS;
    search(&cands, 0, k, &over, &mut taken, &mut steps)
}

/// Whether `k` of the nodes `cands[from..]` can be freed together, each by one of its
/// victim sets, every share's victims allowed together; `None` once `steps` ran out.
fn search(
    cands: &[Vec<Vec<(usize, u32)>>],
    from: usize,
    k: usize,
    over: &[i64],
    taken: &mut [Taken],
    steps: &mut usize,
) -> Option<bool> {
    if k == 0 {
        return Some(true);
    }
    let mut undecided = false;
    for i in from..cands.len() {
        if cands.len() - i < k {
            break;
        }
        for set in &cands[i] {
            if *steps == 0 {
                return None;
            }
            *steps -= 1;
            let saved: Vec<(usize, Taken)> = set.iter().map(|(s, _)| (*s, taken[*s])).collect();
            let mut ok = true;
            for &(s, g) in set {
                taken[s] = taken[s].with(g);
                ok &= taken[s].allowed(over[s]);
            }
            let r = if ok {
                search(cands, i + 1, k - 1, over, taken, steps)
            } else {
                Some(false)
            };
            for (s, t) in saved.into_iter().rev() {
                taken[s] = t;
            }
            match r {
                Some(true) => return Some(true),
                None => undecided = true,
                Some(false) => {}
            }
        }
    }
    if undecided {
        None
    } else {
        Some(false)
    }
}

/// The late jobs `late` (indices into `runs`), each judged at every instant it waited.
pub fn late_jobs(setup: &Setup, runs: &[JobRun], late: &[usize], end: Millis) -> Vec<LateJob> {
    let share_ix = setup.share_index();
    let mut out: Vec<LateJob> = late
        .iter()
        .map(|&j| {
            let r = &runs[j];
            let first = r.attempts.first().map_or(end, |a| a.start);
            LateJob {
                name: r.name.clone(),
                share: r.share.clone(),
                gpus: r.gpus,
                submit: r.submit,
                waited_ms: first.saturating_sub(r.submit),
                reclaim_at: None,
                undecided_at: None,
                judged: false,
            }
        })
        .collect();
    let mut by_submit: Vec<usize> = (0..late.len()).collect();
    by_submit.sort_by_key(|&i| (runs[late[i]].submit, i));
    for &i in by_submit.iter().take(JUDGED) {
        out[i].judged = true;
    }
    if late.is_empty() {
        return out;
    }
    // (time, start?, job, attempt); ends before starts at one instant.
    let mut evs: BTreeMap<Millis, Vec<(bool, usize, usize)>> = BTreeMap::new();
    // Each late job is judged at its arrival too.
    for (i, &j) in late.iter().enumerate() {
        if out[i].judged {
            evs.entry(runs[j].submit).or_default();
        }
    }
    for (j, r) in runs.iter().enumerate() {
        if !share_ix.contains_key(r.share.as_str()) {
            continue;
        }
        for (a, at) in r.attempts.iter().enumerate() {
            evs.entry(at.start).or_default().push((true, j, a));
            if let Some(e) = at.end {
                evs.entry(e).or_default().push((false, j, a));
            }
        }
    }
    let mut occ: Occupancy = HashMap::new();
    let mut used = vec![0u64; setup.shares.len()];
    let window: Vec<(Millis, Millis)> = out
        .iter()
        .map(|l| (l.submit, l.submit + l.waited_ms))
        .collect();
    for (&t, list) in &mut evs {
        list.sort_by_key(|(start, _, _)| *start);
        for &(start, j, a) in list.iter() {
            let r = &runs[j];
            let s = share_ix[r.share.as_str()];
            let Some(placed) = r.placements.get(a) else {
                continue;
            };
            for (node, g) in placed {
                let on = occ.entry(node.clone()).or_default();
                if start {
                    on.push((s, *g));
                } else if let Some(p) = on.iter().position(|x| *x == (s, *g)) {
                    on.swap_remove(p);
                }
            }
            if start {
                used[s] += u64::from(r.gpus);
            } else {
                used[s] = used[s].saturating_sub(u64::from(r.gpus));
            }
        }
        for (i, &j) in late.iter().enumerate() {
            let (from, to) = window[i];
            if t < from || t >= to || !out[i].judged || out[i].reclaim_at.is_some() {
                continue;
            }
            let r = &runs[j];
            let s = share_ix[r.share.as_str()];
            let need = shape(setup, r);
            if used[s] + u64::from(r.gpus) > u64::from(setup.shares[s].max) {
                continue;
            }
            match judge(setup, &occ, &used, &r.unit, need) {
                Some(true) => out[i].reclaim_at = Some(t),
                None if out[i].undecided_at.is_none() => out[i].undecided_at = Some(t),
                _ => {}
            }
        }
    }
    out
}
