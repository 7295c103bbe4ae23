//! The figures of a trace run (DESIGN §12), computed from each job's attempts, so that
//! the simulator and a replay on real daemons are measured by the same code.
//!
//! Definitions:
//! - the run spans from the first submit to the last end (the makespan);
//! - utilization: GPU-time held by jobs (SCHEDULED, STARTING, RUNNING) over all GPUs
//!   × the makespan; "while jobs wait": the same over the time when at least one job
//!   was waiting;
//! - wait: from a job's submit to its first SCHEDULED;
//! - room at arrival: the share's usage, plus its waiting jobs of the same or higher
//!   priority (with those of higher priority submitted at the same instant, which rule
//!   1 puts ahead of it), plus the job's own need, within the share's max when the job
//!   arrived;
//!   such a job "started late" when it waited longer than its share's grace plus one
//!   second (the quota guarantee of DESIGN §3);
//! - borrowed: a share's usage above its max; lent: the borrowed GPUs, spread over the
//!   lending shares in proportion to their idle GPUs (borrowed GPUs beyond those came
//!   from GPUs no share owns);
//! - preempted: GPU-time of the preempted attempts; of it, work lost: the GPU-time
//!   since each one's last checkpoint (all of it for a job without checkpoints, which
//!   starts its work again);
//! - entitlement (the fairness figure): at each instant, a share is owed what its jobs
//!   hold and wait for up to its max (a RESERVE share its whole max), plus, if it may
//!   borrow, a part of the GPUs no share is owed, in proportion to its max
//!   ([`entitlements`]); its shortfall is the entitlement it did not get while it had
//!   jobs waiting, as a share of its entitled GPU-hours.
//!
//! GPUs of several units are added up.

use crate::scenario::Scenario;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use tranche_model::{Job, JobStatus, Millis, Strategy, SECOND};

/// One job as the figures need it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRun {
    pub name: String,
    pub share: String,
    pub gpus: u32,
    pub priority: u32,
    pub submit: Millis,
    pub attempts: Vec<AttemptRun>,
    pub status: JobStatus,
    /// The GPU unit it asked for.
    #[serde(skip)]
    pub unit: String,
    /// Per attempt, the nodes it held and how many GPUs on each.
    #[serde(skip)]
    pub placements: Vec<Vec<(String, u32)>>,
}

/// One attempt: from SCHEDULED until its GPUs were given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AttemptRun {
    pub start: Millis,
    pub end: Option<Millis>,
    pub preempted: bool,
    /// Of the attempt's time, what its checkpoints saved when it ended (0 without).
    pub saved: Millis,
}

/// Reads the runs out of the jobs of a state (the simulator's, or one fetched from a
/// real controller).
pub fn runs_from_jobs<'a>(jobs: impl Iterator<Item = &'a Job>) -> Vec<JobRun> {
    jobs.map(|j| JobRun {
        name: j.spec.name.to_string(),
        share: j.spec.share.to_string(),
        gpus: j.spec.request.total_gpus(),
        priority: j.spec.priority,
        submit: j.submitted_at,
        attempts: j
            .attempts
            .iter()
            .map(|a| AttemptRun {
                start: a.scheduled_at,
                end: a.ended_at,
                preempted: a.was_preempted(),
                saved: a.ended_at.map_or(0, |e| {
                    a.resumes_from(j.spec.checkpoint.every_s, e) - a.scheduled_at
                }),
            })
            .collect(),
        status: j.status,
        unit: j.spec.request.unit.to_string(),
        placements: j
            .attempts
            .iter()
            .map(|a| {
                a.allocation
                    .iter()
                    .map(|p| (p.node.to_string(), p.gpus.len() as u32))
                    .collect()
            })
            .collect(),
    })
    .collect()
}

/// The shares and GPUs the figures are measured against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    pub shares: Vec<ShareInfo>,
    pub total_gpus: u32,
    /// Every node: its unit and GPUs.
    #[serde(skip)]
    pub nodes: BTreeMap<String, (String, u32)>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShareInfo {
    pub name: String,
    pub max: u32,
    pub strategy: Strategy,
    pub grace_s: u64,
}

impl Setup {
    /// Each share's place in [`Setup::shares`], by name.
    pub fn share_index(&self) -> HashMap<&str, usize> {
        self.shares
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect()
    }

    pub fn of(sc: &Scenario) -> Setup {
        Setup {
            shares: sc
                .shares
                .iter()
                .map(|s| ShareInfo {
                    name: s.name.clone(),
                    max: s.capacity_limits.iter().map(|l| l.max).sum(),
                    strategy: s.strategy,
                    grace_s: s.default_grace_s.unwrap_or(60),
                })
                .collect(),
            total_gpus: crate::policy::unit_totals(sc).values().sum(),
            nodes: sc
                .nodes
                .iter()
                .flat_map(|n| {
                    crate::scenario::expand_names(n)
                        .into_iter()
                        .map(move |name| (name, (n.unit.clone(), n.gpus)))
                })
                .collect(),
        }
    }
}

/// Waits of a set of jobs, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Waits {
    pub jobs: u64,
    pub mean: f64,
    pub p50: Millis,
    pub p99: Millis,
    pub max: Millis,
}

impl Waits {
    fn of(sorted: &[Millis]) -> Waits {
        if sorted.is_empty() {
            return Waits::default();
        }
        // Nearest rank: the smallest wait at least q of the jobs do not exceed.
        let rank =
            |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Waits {
            jobs: sorted.len() as u64,
            mean: sorted.iter().sum::<u64>() as f64 / sorted.len() as f64,
            p50: rank(0.50),
            p99: rank(0.99),
            max: *sorted.last().expect("not empty"),
        }
    }
}

/// Figures of one share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShareFigures {
    pub name: String,
    pub max: u32,
    pub strategy: Strategy,
    pub jobs: u64,
    pub wait: Waits,
    pub gpu_hours: f64,
    pub borrowed_gpu_hours: f64,
    pub lent_gpu_hours: f64,
    pub preempted_attempts: u64,
    /// GPU-hours of the preempted attempts.
    pub lost_gpu_hours: f64,
    /// Of those, the work since each one's last checkpoint.
    pub work_lost_gpu_hours: f64,
    pub room_at_arrival: u64,
    pub started_late: u64,
    /// GPU-hours it was entitled to (see [`entitlements`]).
    pub entitled_gpu_hours: f64,
    /// While it had jobs waiting: GPU-hours of its entitlement it did not get.
    pub shortfall_gpu_hours: f64,
}

impl ShareFigures {
    /// A share's figures before any job is counted.
    fn empty(s: &ShareInfo) -> ShareFigures {
        ShareFigures {
            name: s.name.clone(),
            max: s.max,
            strategy: s.strategy,
            jobs: 0,
            wait: Waits::default(),
            gpu_hours: 0.0,
            borrowed_gpu_hours: 0.0,
            lent_gpu_hours: 0.0,
            preempted_attempts: 0,
            lost_gpu_hours: 0.0,
            work_lost_gpu_hours: 0.0,
            room_at_arrival: 0,
            started_late: 0,
            entitled_gpu_hours: 0.0,
            shortfall_gpu_hours: 0.0,
        }
    }
}

/// Each share's entitlement at one instant, in GPUs, from what its jobs hold and wait
/// for (`demand`): its demand up to its max (a RESERVE share: its whole max, which it
/// keeps idle), and of the GPUs no share is owed, a part for each LEND_AND_BORROW share
/// that wants more, in proportion to its max and at most what it wants (water-filled).
pub fn entitlements(shares: &[ShareInfo], demand: &[u64], total: u64) -> Vec<f64> {
    let mut ent: Vec<f64> = shares
        .iter()
        .zip(demand)
        .map(|(s, &d)| match s.strategy {
            Strategy::Reserve => s.max as f64,
            _ => d.min(s.max as u64) as f64,
        })
        .collect();
    let mut idle = (total as f64 - ent.iter().sum::<f64>()).max(0.0);
    let mut want: Vec<usize> = (0..shares.len())
        .filter(|&i| shares[i].strategy == Strategy::LendAndBorrow && demand[i] as f64 > ent[i])
        .collect();
    while idle > 1e-9 && !want.is_empty() {
        let w: f64 = want.iter().map(|&i| shares[i].max.max(1) as f64).sum();
        let per = idle / w;
        let (full, rest): (Vec<usize>, Vec<usize>) = want
            .iter()
            .partition(|&&i| demand[i] as f64 - ent[i] <= per * shares[i].max.max(1) as f64);
        if full.is_empty() {
            for &i in &rest {
                ent[i] += per * shares[i].max.max(1) as f64;
            }
            break;
        }
        for &i in &full {
            idle -= demand[i] as f64 - ent[i];
            ent[i] = demand[i] as f64;
        }
        want = rest;
    }
    ent
}

/// The figures of a whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    pub jobs: u64,
    /// Jobs that never started (a replay stopped early; a job that can never fit).
    pub never_started: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub total_gpus: u32,
    pub makespan_ms: Millis,
    pub utilization: f64,
    pub utilization_while_waiting: f64,
    /// Time during which at least one job waited.
    pub waiting_ms: Millis,
    pub wait: Waits,
    pub gpu_hours: f64,
    pub borrowed_gpu_hours: f64,
    pub lent_gpu_hours: f64,
    pub preempted_attempts: u64,
    /// GPU-hours of the preempted attempts.
    pub lost_gpu_hours: f64,
    /// Of those, the work since each one's last checkpoint.
    pub work_lost_gpu_hours: f64,
    pub room_at_arrival: u64,
    pub started_late: u64,
    /// The longest wait of a job that had room at arrival.
    pub longest_wait_with_room_ms: Millis,
    /// The jobs that started late, each with whether a reclaim could have started it
    /// sooner ([`crate::witness`]).
    pub late_jobs: Vec<crate::witness::LateJob>,
    /// The largest share of its entitlement a share went without while it had jobs
    /// waiting (shortfall over entitled GPU-hours), and that share.
    pub largest_shortfall: f64,
    pub largest_shortfall_share: String,
    pub shares: Vec<ShareFigures>,
    /// Waits by job priority, highest first (the classes of a trace such as Kueue's).
    pub by_priority: Vec<PriorityWaits>,
    #[serde(skip)]
    pub series: Series,
    /// Every share's waits, sorted, for the CDF plot.
    #[serde(skip)]
    pub waits: Vec<Vec<Millis>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriorityWaits {
    pub priority: u32,
    pub wait: Waits,
}

/// Time series for the plots: averages over equal buckets of the makespan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    pub start: Millis,
    pub bucket_ms: Millis,
    /// Per share, per bucket: GPUs in use within the share's max, above it, and jobs
    /// waiting.
    pub own: Vec<Vec<f64>>,
    pub borrowed: Vec<Vec<f64>>,
    pub queued: Vec<Vec<f64>>,
    /// Per bucket: preempted attempts that ended in it.
    pub preemptions: Vec<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// An attempt gave its GPUs back; `true`: the job waits again for another attempt.
    End(bool),
    Submit,
    Start,
}

const HOUR_MS: f64 = 3_600_000.0;

/// Late jobs the text report lists one by one at most (the JSON has them all).
const LATE_LISTED: usize = 10;

/// Per event, for a submit: the GPUs of its share's jobs of higher priority submitted at
/// the same instant after it in the events' order (0 for other events). `evs` is sorted
/// by time, the submits of one instant in the runs' order.
fn same_instant_above(evs: &[(Millis, Ev, usize, usize)], runs: &[JobRun]) -> Vec<u64> {
    use std::ops::Bound::{Excluded, Unbounded};
    let mut above = vec![0; evs.len()];
    let mut i = 0;
    while i < evs.len() {
        let t = evs[i].0;
        let mut k = i;
        while k < evs.len() && evs[k].0 == t {
            k += 1;
        }
        // Walk the instant's submits backwards, gathering GPUs per (share, priority).
        let mut later: HashMap<usize, BTreeMap<u32, u64>> = HashMap::new();
        for x in (i..k).rev() {
            let (_, ev, s, j) = evs[x];
            if ev != Ev::Submit {
                continue;
            }
            let r = &runs[j];
            let by_prio = later.entry(s).or_default();
            above[x] = by_prio
                .range((Excluded(r.priority), Unbounded))
                .map(|(_, n)| n)
                .sum();
            *by_prio.entry(r.priority).or_default() += r.gpus as u64;
        }
        i = k;
    }
    above
}

/// Computes the figures; `buckets` is the resolution of the plots' series.
pub fn figures(setup: &Setup, runs: &[JobRun], buckets: usize) -> Figures {
    let ns = setup.shares.len();
    let share_ix = setup.share_index();
    // (time, event, share, job)
    let mut evs: Vec<(Millis, Ev, usize, usize)> = vec![];
    let mut per_share_waits: Vec<Vec<Millis>> = vec![vec![]; ns];
    let mut per_prio: BTreeMap<std::cmp::Reverse<u32>, Vec<Millis>> = BTreeMap::new();
    let mut sf: Vec<ShareFigures> = setup.shares.iter().map(ShareFigures::empty).collect();
    let mut end = 0;
    let mut start = Millis::MAX;
    let (mut never, mut succeeded, mut failed) = (0, 0, 0);
    for (j, r) in runs.iter().enumerate() {
        let Some(&s) = share_ix.get(r.share.as_str()) else {
            continue;
        };
        sf[s].jobs += 1;
        start = start.min(r.submit);
        end = end.max(r.submit);
        evs.push((r.submit, Ev::Submit, s, j));
        match r.status {
            JobStatus::Succeeded => succeeded += 1,
            JobStatus::Failed => failed += 1,
            _ => {}
        }
        match r.attempts.first() {
            Some(a) => {
                let w = a.start.saturating_sub(r.submit);
                per_share_waits[s].push(w);
                per_prio
                    .entry(std::cmp::Reverse(r.priority))
                    .or_default()
                    .push(w);
            }
            None => never += 1,
        }
        for (i, a) in r.attempts.iter().enumerate() {
            evs.push((a.start, Ev::Start, s, j));
            end = end.max(a.start);
            if let Some(e) = a.end {
                end = end.max(e);
                let again = i + 1 < r.attempts.len();
                evs.push((e, Ev::End(again), s, j));
                if a.preempted {
                    sf[s].preempted_attempts += 1;
                    sf[s].lost_gpu_hours += (e - a.start) as f64 * r.gpus as f64 / HOUR_MS;
                    sf[s].work_lost_gpu_hours +=
                        (e - a.start).saturating_sub(a.saved) as f64 * r.gpus as f64 / HOUR_MS;
                }
            }
        }
    }
    if start == Millis::MAX {
        start = 0;
    }
    evs.sort_by_key(|e| (e.0, e.1));
    let makespan = end - start;
    let buckets = buckets.max(1);
    let bucket_ms = makespan.div_ceil(buckets as u64).max(1);
    let mut series = Series {
        start,
        bucket_ms,
        own: vec![vec![0.0; buckets]; ns],
        borrowed: vec![vec![0.0; buckets]; ns],
        queued: vec![vec![0.0; buckets]; ns],
        preemptions: vec![0; buckets],
    };
    let mut used = vec![0u64; ns];
    let mut queued = vec![0u64; ns];
    // Waiting jobs' GPUs per share, by priority.
    let mut waiting: Vec<BTreeMap<u32, u64>> = vec![BTreeMap::new(); ns];
    let (mut gpu_ms, mut waiting_ms, mut used_waiting_ms) = (0f64, 0u64, 0f64);
    let mut longest_with_room = 0;
    let mut late_ix = Vec::new();
    let above_now = same_instant_above(&evs, runs);
    let mut t_prev = start;
    for (i, &(t, ev, s, j)) in evs.iter().enumerate() {
        if t > t_prev {
            let dt = (t - t_prev) as f64;
            let total: u64 = used.iter().sum();
            gpu_ms += total as f64 * dt;
            if queued.iter().any(|q| *q > 0) {
                waiting_ms += t - t_prev;
                used_waiting_ms += total as f64 * dt;
            }
            let mut borrowed_total = 0.0;
            let mut idle = vec![0.0; ns];
            for i in 0..ns {
                let max = setup.shares[i].max as u64;
                let b = used[i].saturating_sub(max) as f64;
                borrowed_total += b;
                sf[i].gpu_hours += used[i] as f64 * dt / HOUR_MS;
                sf[i].borrowed_gpu_hours += b * dt / HOUR_MS;
                if setup.shares[i].strategy != Strategy::Reserve {
                    idle[i] = max.saturating_sub(used[i]) as f64;
                }
            }
            let demand: Vec<u64> = (0..ns)
                .map(|i| used[i] + waiting[i].values().sum::<u64>())
                .collect();
            let ent = entitlements(&setup.shares, &demand, setup.total_gpus as u64);
            for i in 0..ns {
                sf[i].entitled_gpu_hours += ent[i] * dt / HOUR_MS;
                if queued[i] > 0 {
                    sf[i].shortfall_gpu_hours += (ent[i] - used[i] as f64).max(0.0) * dt / HOUR_MS;
                }
            }
            let idle_total: f64 = idle.iter().sum();
            if borrowed_total > 0.0 && idle_total > 0.0 {
                let lent = borrowed_total.min(idle_total);
                for i in 0..ns {
                    sf[i].lent_gpu_hours += lent * idle[i] / idle_total * dt / HOUR_MS;
                }
            }
            spread(&mut series, t_prev, t, |b, w| {
                for i in 0..ns {
                    let max = setup.shares[i].max as u64;
                    series_add(&mut b.own[i], w.0, used[i].min(max) as f64 * w.1);
                    series_add(
                        &mut b.borrowed[i],
                        w.0,
                        used[i].saturating_sub(max) as f64 * w.1,
                    );
                    series_add(&mut b.queued[i], w.0, queued[i] as f64 * w.1);
                }
            });
            t_prev = t;
        }
        let r = &runs[j];
        let g = r.gpus as u64;
        match ev {
            Ev::Submit => {
                let ahead: u64 =
                    waiting[s].range(r.priority..).map(|(_, n)| n).sum::<u64>() + above_now[i];
                if used[s] + ahead + g <= setup.shares[s].max as u64 {
                    sf[s].room_at_arrival += 1;
                    let wait = r.attempts.first().map(|a| a.start - r.submit);
                    let late = wait.is_none_or(|w| w > (setup.shares[s].grace_s + 1) * SECOND);
                    longest_with_room = longest_with_room.max(wait.unwrap_or(end - r.submit));
                    sf[s].started_late += u64::from(late);
                    if late {
                        late_ix.push(j);
                    }
                }
                *waiting[s].entry(r.priority).or_default() += g;
                queued[s] += 1;
            }
            Ev::Start => {
                used[s] += g;
                queued[s] -= 1;
                take(&mut waiting[s], r.priority, g);
            }
            Ev::End(again) => {
                used[s] -= g;
                if again {
                    queued[s] += 1;
                    *waiting[s].entry(r.priority).or_default() += g;
                }
            }
        }
    }
    for r in runs {
        for a in r.attempts.iter().filter(|a| a.preempted) {
            if let Some(e) = a.end {
                let b = (((e - start) / bucket_ms) as usize).min(buckets - 1);
                series.preemptions[b] += 1;
            }
        }
    }
    for (i, w) in per_share_waits.iter_mut().enumerate() {
        w.sort_unstable();
        sf[i].wait = Waits::of(w);
    }
    let mut all: Vec<Millis> = per_share_waits.iter().flatten().copied().collect();
    all.sort_unstable();
    let cap = setup.total_gpus as f64;
    let worst = sf
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                ratio(s.shortfall_gpu_hours, s.entitled_gpu_hours),
            )
        })
        .fold((String::new(), 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let sum = |f: fn(&ShareFigures) -> f64| sf.iter().map(f).sum::<f64>();
    Figures {
        jobs: sf.iter().map(|s| s.jobs).sum(),
        never_started: never,
        succeeded,
        failed,
        total_gpus: setup.total_gpus,
        makespan_ms: makespan,
        utilization: ratio(gpu_ms, cap * makespan as f64),
        utilization_while_waiting: ratio(used_waiting_ms, cap * waiting_ms as f64),
        waiting_ms,
        wait: Waits::of(&all),
        gpu_hours: gpu_ms / HOUR_MS,
        borrowed_gpu_hours: sum(|s| s.borrowed_gpu_hours),
        lent_gpu_hours: sum(|s| s.lent_gpu_hours),
        preempted_attempts: sf.iter().map(|s| s.preempted_attempts).sum(),
        lost_gpu_hours: sum(|s| s.lost_gpu_hours),
        work_lost_gpu_hours: sum(|s| s.work_lost_gpu_hours),
        room_at_arrival: sf.iter().map(|s| s.room_at_arrival).sum(),
        started_late: sf.iter().map(|s| s.started_late).sum(),
        longest_wait_with_room_ms: longest_with_room,
        late_jobs: crate::witness::late_jobs(setup, runs, &late_ix, end),
        largest_shortfall: worst.1,
        largest_shortfall_share: worst.0,
        shares: sf,
        by_priority: per_prio
            .into_iter()
            .map(|(p, mut w)| {
                w.sort_unstable();
                PriorityWaits {
                    priority: p.0,
                    wait: Waits::of(&w),
                }
            })
            .collect(),
        series,
        waits: per_share_waits,
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn take(m: &mut BTreeMap<u32, u64>, prio: u32, g: u64) {
    if let Some(v) = m.get_mut(&prio) {
        *v = v.saturating_sub(g);
        if *v == 0 {
            m.remove(&prio);
        }
    }
}

fn series_add(v: &mut [f64], b: usize, x: f64) {
    v[b] += x;
}

/// Calls `f(series, (bucket, weight))` for each bucket [t0, t1) overlaps, the weight
/// being the overlap's share of a bucket (so that sums are time averages).
fn spread(s: &mut Series, t0: Millis, t1: Millis, mut f: impl FnMut(&mut Series, (usize, f64))) {
    let (n, bm) = (s.preemptions.len(), s.bucket_ms);
    let (mut a, e) = (t0 - s.start, t1 - s.start);
    while a < e {
        let b = ((a / bm) as usize).min(n - 1);
        let edge = if b == n - 1 {
            e
        } else {
            ((b as u64 + 1) * bm).min(e)
        };
        f(s, (b, (edge - a) as f64 / bm as f64));
        a = edge;
    }
}

/// A duration as people read it: `0.2 s`, `44 s`, `12 min 26 s`, `3 h 05 min`, `2 d 3 h`.
pub fn fmt_duration(ms: Millis) -> String {
    let s = ms / SECOND;
    if ms < 10 * SECOND && !ms.is_multiple_of(SECOND) {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    } else {
        format!("{} d {} h", s / 86_400, s % 86_400 / 3600)
    }
}

/// A mean wait as a duration (whole milliseconds).
pub fn fmt_mean(ms: f64) -> String {
    fmt_duration(ms.round() as Millis)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn hours(h: f64) -> String {
    if h >= 100.0 {
        format!("{h:.0}")
    } else {
        format!("{h:.1}")
    }
}

/// The report as a table for people.
pub fn render_table(title: &str, f: &Figures) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{title}");
    let _ = writeln!(
        s,
        "  {} jobs ({} succeeded, {} failed{}) on {} GPUs over {}",
        f.jobs,
        f.succeeded,
        f.failed,
        if f.never_started > 0 {
            format!(", {} never started", f.never_started)
        } else {
            String::new()
        },
        f.total_gpus,
        fmt_duration(f.makespan_ms)
    );
    let _ = writeln!(
        s,
        "  utilization {} over the makespan, {} while jobs wait (jobs waited {} of it)",
        pct(f.utilization),
        pct(f.utilization_while_waiting),
        fmt_duration(f.waiting_ms)
    );
    let _ = writeln!(
        s,
        "  wait: mean {}, p50 {}, p99 {}, max {}",
        fmt_mean(f.wait.mean),
        fmt_duration(f.wait.p50),
        fmt_duration(f.wait.p99),
        fmt_duration(f.wait.max)
    );
    let _ = writeln!(
        s,
        "  preempted attempts {} ({} GPU-hours preempted, {} of GPU-hours used; {} GPU-hours of work lost); borrowed {} GPU-hours",
        f.preempted_attempts,
        hours(f.lost_gpu_hours),
        pct(ratio(f.lost_gpu_hours, f.gpu_hours)),
        hours(f.work_lost_gpu_hours),
        hours(f.borrowed_gpu_hours)
    );
    let _ = writeln!(
        s,
        "  quota guarantee: {} jobs had room in their share at arrival, {} of them waited past grace + 1 s{}",
        f.room_at_arrival,
        f.started_late,
        if f.started_late > 0 {
            format!(" (longest {})", fmt_duration(f.longest_wait_with_room_ms))
        } else {
            String::new()
        }
    );
    if !f.late_jobs.is_empty() {
        let judged = f.late_jobs.iter().filter(|l| l.judged).count();
        let could = f
            .late_jobs
            .iter()
            .filter(|l| l.reclaim_at.is_some())
            .count();
        let undecided = f
            .late_jobs
            .iter()
            .filter(|l| l.reclaim_at.is_none() && l.undecided_at.is_some())
            .count();
        let _ = writeln!(
            s,
            "    of {}, a reclaim could have freed the nodes of {could} while they waited; \
             no reclaim could for {}{}",
            if judged < f.late_jobs.len() {
                format!("the first {judged} judged")
            } else {
                "those".to_string()
            },
            judged - could - undecided,
            if undecided > 0 {
                format!("; undecided for {undecided}")
            } else {
                String::new()
            }
        );
    }
    // Each late job where they are few; else those a reclaim could have started.
    let few = f.late_jobs.len() <= LATE_LISTED;
    for l in f
        .late_jobs
        .iter()
        .filter(|l| few || l.reclaim_at.is_some() || l.undecided_at.is_some())
        .take(LATE_LISTED)
    {
        let verdict = match (l.reclaim_at, l.undecided_at) {
            (Some(t), _) => format!(
                "a reclaim could have freed its nodes {} after it arrived",
                fmt_duration(t.saturating_sub(l.submit))
            ),
            (None, Some(_)) => "whether a reclaim could have freed its nodes is undecided".into(),
            (None, None) => "no reclaim could have freed its nodes while it waited".into(),
        };
        let _ = writeln!(
            s,
            "    {} ({}, {} GPUs) waited {}: {verdict}",
            l.name,
            l.share,
            l.gpus,
            fmt_duration(l.waited_ms)
        );
    }
    if f.by_priority.len() > 1 {
        let classes: Vec<String> = f
            .by_priority
            .iter()
            .map(|p| {
                format!(
                    "priority {}: mean {} ({} jobs)",
                    p.priority,
                    fmt_mean(p.wait.mean),
                    p.wait.jobs
                )
            })
            .collect();
        let _ = writeln!(s, "  wait by priority: {}", classes.join("; "));
    }
    let _ = writeln!(s);
    s.push_str(&share_table(&f.shares).text("  "));
    s
}

pub fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Reserve => "RESERVE",
        Strategy::Lend => "LEND",
        Strategy::LendAndBorrow => "LEND_AND_BORROW",
    }
}

/// Several runs of the same trace side by side, one row each.
pub fn render_comparison(rows: &[(String, &Figures)]) -> String {
    use std::fmt::Write;
    let mut s = comparison_table(rows).text("");
    for (name, f) in rows.iter().filter(|r| r.1.never_started > 0) {
        let _ = writeln!(
            s,
            "{name}: {} jobs never started (more GPUs than their share can ever have); they are left out of the waits",
            f.never_started
        );
    }
    s
}

/// One column of a [`Table`]: its header, its least width in text, and whether its
/// cells are aligned left (else right).
#[derive(Debug, Clone, Copy)]
struct Column {
    head: &'static str,
    width: usize,
    left: bool,
}

const fn col(head: &'static str, width: usize) -> Column {
    Column {
        head,
        width,
        left: false,
    }
}

const fn left(head: &'static str, width: usize) -> Column {
    Column {
        head,
        width,
        left: true,
    }
}

/// A table of figures, written as aligned text for the terminal or as HTML for the
/// report page: the same columns and cells either way.
#[derive(Debug, Clone)]
pub struct Table {
    columns: &'static [Column],
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The headers.
    pub fn head(&self) -> impl Iterator<Item = &'static str> {
        self.columns.iter().map(|c| c.head)
    }

    /// Aligned text, each line after `indent`: a header line, then a line per row.
    pub fn text(&self, indent: &str) -> String {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| match i {
                // The names' column fits the longest; a wider cell elsewhere only
                // pushes its own row.
                0 => self
                    .rows
                    .iter()
                    .filter_map(|r| r.first())
                    .map(String::len)
                    .fold(c.width, usize::max),
                _ => c.width,
            })
            .collect();
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let cells: Vec<String> = cells
                .zip(self.columns.iter().zip(&widths))
                .map(|(cell, (c, &w))| {
                    if c.left {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                })
                .collect();
            format!("{indent}{}\n", cells.join("  "))
        };
        let mut s = line(&mut self.head());
        for r in &self.rows {
            s += &line(&mut r.iter().map(String::as_str));
        }
        s
    }

    /// An HTML `<table>`, cells escaped.
    pub fn html(&self) -> String {
        let row = |tag: &str, cells: &mut dyn Iterator<Item = &str>| {
            let cells: String = cells
                .map(|c| format!("<{tag}>{}</{tag}>", html_escape(c)))
                .collect();
            format!("<tr>{cells}</tr>\n")
        };
        let mut s = "<table>".to_string() + &row("th", &mut self.head());
        for r in &self.rows {
            s += &row("td", &mut r.iter().map(String::as_str));
        }
        s + "</table>\n"
    }
}

/// `s` with HTML's special characters escaped.
pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The shares of one run, a row each.
pub fn share_table(shares: &[ShareFigures]) -> Table {
    const COLUMNS: &[Column] = &[
        left("share", 5),
        col("max", 4),
        left("strategy", 15),
        col("jobs", 6),
        col("mean wait", 12),
        col("p50 wait", 12),
        col("p99 wait", 12),
        col("GPU-h", 8),
        col("borrowed", 8),
        col("lent", 8),
        col("preempted", 9),
        col("room/late", 9),
        col("entitled", 8),
        col("shortfall", 9),
    ];
    let rows = shares
        .iter()
        .map(|x| {
            vec![
                x.name.clone(),
                x.max.to_string(),
                strategy_name(x.strategy).to_string(),
                x.jobs.to_string(),
                fmt_mean(x.wait.mean),
                fmt_duration(x.wait.p50),
                fmt_duration(x.wait.p99),
                hours(x.gpu_hours),
                hours(x.borrowed_gpu_hours),
                hours(x.lent_gpu_hours),
                x.preempted_attempts.to_string(),
                format!("{}/{}", x.room_at_arrival, x.started_late),
                hours(x.entitled_gpu_hours),
                pct(ratio(x.shortfall_gpu_hours, x.entitled_gpu_hours)),
            ]
        })
        .collect();
    Table {
        columns: COLUMNS,
        rows,
    }
}

/// Several runs of the same trace, a row each: (label, figures).
pub fn comparison_table(rows: &[(String, &Figures)]) -> Table {
    const COLUMNS: &[Column] = &[
        left("policy", 6),
        col("utilization", 11),
        col("while waiting", 13),
        col("mean wait", 12),
        col("p50 wait", 12),
        col("p99 wait", 12),
        col("preempted attempts", 22),
        col("work lost GPU-h", 15),
        col("room/late", 10),
        col("largest shortfall", 17),
    ];
    let rows = rows
        .iter()
        .map(|(name, f)| {
            vec![
                name.clone(),
                pct(f.utilization),
                pct(f.utilization_while_waiting),
                fmt_mean(f.wait.mean),
                fmt_duration(f.wait.p50),
                fmt_duration(f.wait.p99),
                format!(
                    "{} ({} of GPU-h)",
                    f.preempted_attempts,
                    pct(ratio(f.lost_gpu_hours, f.gpu_hours))
                ),
                hours(f.work_lost_gpu_hours),
                format!("{}/{}", f.room_at_arrival, f.started_late),
                format!("{} {}", pct(f.largest_shortfall), f.largest_shortfall_share),
            ]
        })
        .collect();
    Table {
        columns: COLUMNS,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entitlements_give_idle_gpus_to_borrowers_by_max_up_to_their_demand() {
        let share = |name: &str, max, strategy| ShareInfo {
            name: name.into(),
            max,
            strategy,
            grace_s: 30,
        };
        let shares = [
            share("a", 2, Strategy::LendAndBorrow),
            share("b", 4, Strategy::LendAndBorrow),
            share("c", 2, Strategy::Reserve),
            share("d", 2, Strategy::Lend),
        ];
        // a wants 6: its max 2, and all 4 GPUs no share is owed (c keeps its 2).
        assert_eq!(
            entitlements(&shares, &[6, 3, 0, 1], 12),
            vec![6.0, 3.0, 2.0, 1.0]
        );
        // a and b both want more: the 4 left split 2 : 4, as their maxes.
        let e = entitlements(&shares, &[10, 10, 0, 0], 12);
        assert!((e[0] - (2.0 + 4.0 / 3.0)).abs() < 1e-9, "{e:?}");
        assert!((e[1] - (4.0 + 8.0 / 3.0)).abs() < 1e-9, "{e:?}");
        // a wants only 1 more: b gets the rest.
        assert_eq!(
            entitlements(&shares, &[3, 10, 0, 0], 12),
            vec![3.0, 7.0, 2.0, 0.0]
        );
    }

    #[test]
    fn durations_read_as_durations() {
        assert_eq!(fmt_duration(200), "0.2 s");
        assert_eq!(fmt_duration(44_000), "44 s");
        assert_eq!(fmt_duration(746_000), "12 min 26 s");
        assert_eq!(fmt_duration(44_789_000), "12 h 26 min");
        assert_eq!(fmt_duration(213_701_000), "2 d 11 h");
    }

    #[test]
    fn tables_show_the_same_cells_as_text_and_html() {
        let share = |name: &str, max| {
            ShareFigures::empty(&ShareInfo {
                name: name.into(),
                max,
                strategy: Strategy::Lend,
                grace_s: 60,
            })
        };
        let t = share_table(&[share("a<b", 2), share("a-long-share", 16)]);
        let text = t.text("  ");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // The names' column fits the longest name; the others keep their widths.
        assert!(
            lines[0].starts_with("  share          max  strategy  "),
            "{text}"
        );
        assert!(
            lines[1].starts_with("  a<b              2  LEND      "),
            "{text}"
        );
        assert!(
            lines[2].starts_with("  a-long-share    16  LEND      "),
            "{text}"
        );
        assert!(
            t.html()
                .contains("<tr><td>a&lt;b</td><td>2</td><td>LEND</td>"),
            "{}",
            t.html()
        );
    }

    #[test]
    fn nearest_rank_percentiles() {
        let w: Vec<Millis> = (1..=100).collect();
        let x = Waits::of(&w);
        assert_eq!((x.p50, x.p99, x.max), (50, 99, 100));
        assert_eq!(x.mean, 50.5);
        assert_eq!(Waits::of(&[7]).p99, 7);
    }
}
