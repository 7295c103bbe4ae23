//! Property tests over random clusters, policies and event streams. After every settled
//! step they check the scheduling invariants of `docs/design.md` §3.

use proptest::prelude::{
    prop_oneof, proptest, Just, ProptestConfig, Strategy as Gen, TestCaseError,
};
use std::collections::{BTreeMap, BTreeSet};
use tranche_model::*;
use tranche_sim::scenario::*;
use tranche_sim::Sim;
use tranche_state::State;

/// Cases per property: 96, or `PROPTEST_CASES` for a longer sweep by hand.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

fn limit(max: u32) -> Vec<LimitSpec> {
    vec![LimitSpec {
        unit: "h100".into(),
        max,
    }]
}

fn shares() -> impl Gen<Value = Vec<ShareSpec>> {
    let one = (
        prop_oneof![
            Just(Strategy::Reserve),
            Just(Strategy::Lend),
            Just(Strategy::LendAndBorrow)
        ],
        0u32..17,
        prop_oneof![
            Just(None),
            Just(Some(-1i64)),
            Just(Some(0)),
            Just(Some(50)),
            Just(Some(100))
        ],
        proptest::bool::ANY,
        prop_oneof![Just(0u64), Just(0), Just(30)],
        prop_oneof![2 => Just(None), 1 => Just(Some(0u64)), 1 => Just(Some(45))],
        prop_oneof![2 => Just(None), 1 => Just(Some(15u64))],
    );
    proptest::collection::vec(one, 2..5).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(
                |(i, (strategy, max, bl, in_share, min_rt, loan_rt, notice))| ShareSpec {
                    // Under FAIR_SHARE, weights other than the max.
                    weight: (i % 2 == 1).then_some(i as u32 * 3),
                    name: format!("s{i}"),
                    queue: None,
                    capacity_limits: limit(max),
                    strategy,
                    borrow_limit: if strategy == Strategy::LendAndBorrow {
                        bl
                    } else {
                        None
                    },
                    in_share_preemption: Some(in_share),
                    default_grace_s: Some(20),
                    max_grace_s: None,
                    min_runtime_s: Some(min_rt),
                    loan_min_runtime_s: loan_rt,
                    recall_notice_s: notice,
                    state: None,
                },
            )
            .collect()
    })
}

/// Groups over the shares (which number at least 2), or none: `g0` holds the first
/// shares, and may sit in `g1` with the next one; strategies and maxes (at least the
/// sum of the members', up to 8 more) at random.
fn groups() -> impl Gen<Value = Vec<(usize, Strategy, Option<i64>, u32)>> {
    let one = (
        prop_oneof![
            Just(Strategy::Reserve),
            Just(Strategy::Lend),
            Just(Strategy::LendAndBorrow)
        ],
        prop_oneof![Just(None), Just(Some(-1i64)), Just(Some(0)), Just(Some(50))],
        0u32..9,
    );
    prop_oneof![
        3 => Just(vec![]),
        1 => (2usize..4, one.clone()).prop_map(|(k, (s, b, x))| vec![(k, s, b, x)]),
        1 => (2usize..3, one.clone(), one).prop_map(|(k, (s, b, x), (s2, b2, x2))| vec![(k, s, b, x), (1, s2, b2, x2)]),
    ]
}

/// The groups `groups()` drew, for these shares: `g0` holds the first `k` shares (as
/// many as there are), `g1` holds `g0` and the next share, if there is one.
fn group_specs(
    shares: &[ShareSpec],
    drawn: &[(usize, Strategy, Option<i64>, u32)],
) -> Vec<GroupSpec> {
    let max_of = |s: &ShareSpec| s.capacity_limits[0].max;
    let mut out: Vec<GroupSpec> = vec![];
    let mut below: u32 = 0;
    let mut taken = 0;
    for (i, &(k, strategy, bl, extra)) in drawn.iter().enumerate() {
        let members: Vec<String> = shares
            .iter()
            .skip(taken)
            .take(k)
            .map(|s| s.name.clone())
            .collect();
        if members.is_empty() {
            break;
        }
        below += shares.iter().skip(taken).take(k).map(max_of).sum::<u32>();
        taken += members.len();
        out.push(GroupSpec {
            name: format!("g{i}"),
            queue: None,
            shares: members,
            groups: if i > 0 {
                vec![format!("g{}", i - 1)]
            } else {
                vec![]
            },
            capacity_limits: limit(below + extra),
            strategy,
            borrow_limit: if strategy == Strategy::LendAndBorrow {
                bl
            } else {
                None
            },
        });
        below += extra;
    }
    out
}

#[derive(Debug, Clone)]
enum Ev {
    Submit {
        share: usize,
        gpus: u32,
        nodes: u32,
        prio: u32,
        runtime: Option<u64>,
        on_signal: &'static str,
        every: Option<u64>,
    },
    Checkpoint(usize),
    Cancel(usize),
    Priority(usize, u32),
    Drain(usize, bool),
    Resume(usize),
    Down(usize),
    Up(usize),
}

fn events() -> impl Gen<Value = Vec<(u64, Ev)>> {
    let ev = prop_oneof![
        8 => (0usize..4, prop_oneof![Just(1u32), Just(2), Just(4), Just(8), 1u32..9], prop_oneof![4 => Just(1u32), 1 => Just(2)],
              0u32..4, prop_oneof![Just(None), (5u64..200).prop_map(Some)],
              prop_oneof![Just("exit_after:0"), Just("exit_after:5"), Just("exit_after:60"), Just("ignore")],
              prop_oneof![3 => Just(None), 1 => Just(Some(60u64))])
            .prop_map(|(share, gpus, nodes, prio, runtime, on_signal, every)| Ev::Submit { share, gpus, nodes, prio, runtime, on_signal, every }),
        1 => (0usize..40).prop_map(Ev::Checkpoint),
        1 => (0usize..40).prop_map(Ev::Cancel),
        1 => (0usize..40, 0u32..6).prop_map(|(j, p)| Ev::Priority(j, p)),
        1 => (0usize..3, proptest::bool::ANY).prop_map(|(n, now)| Ev::Drain(n, now)),
        1 => (0usize..3).prop_map(Ev::Resume),
        1 => (0usize..3).prop_map(Ev::Down),
        1 => (0usize..3).prop_map(Ev::Up),
    ];
    proptest::collection::vec((0u64..30, ev), 1..40).prop_map(|v| {
        let mut t = 0;
        v.into_iter()
            .map(|(dt, e)| {
                t += dt;
                (t, e)
            })
            .collect()
    })
}

fn to_event(
    at: u64,
    e: &Ev,
    submitted: &mut Vec<String>,
    nshares: usize,
    nodes: &[String],
) -> Option<EventSpec> {
    let mut spec = EventSpec {
        at,
        submit: None,
        cancel: None,
        update_priority: None,
        update_share: None,
        drain: None,
        resume: None,
        node_down: None,
        node_up: None,
        checkpoint: None,
    };
    match e {
        Ev::Submit {
            share,
            gpus,
            nodes: n,
            prio,
            runtime,
            on_signal,
            every,
        } => {
            let name = format!("j{}", submitted.len());
            submitted.push(name.clone());
            spec.submit = Some(SubmitSpec {
                name,
                share: format!("s{}", share % nshares),
                unit: "h100".into(),
                gpus: *gpus,
                nodes: Some(*n),
                priority: Some(*prio),
                runtime_s: *runtime,
                exit_code: None,
                on_signal: Some(on_signal.to_string()),
                grace_s: None,
                preemption_retries: None,
                retry_attempts: None,
                checkpoint_every_s: *every,
            });
        }
        Ev::Cancel(_) | Ev::Priority(..) | Ev::Checkpoint(_) if submitted.is_empty() => {
            return None
        }
        Ev::Checkpoint(j) => spec.checkpoint = Some(submitted[j % submitted.len()].clone()),
        Ev::Cancel(j) => spec.cancel = Some(submitted[j % submitted.len()].clone()),
        Ev::Priority(j, p) => {
            spec.update_priority = Some(PrioritySpec {
                job: submitted[j % submitted.len()].clone(),
                priority: *p,
            })
        }
        Ev::Drain(n, now) => {
            spec.drain = Some(DrainSpec {
                node: nodes[n % nodes.len()].clone(),
                reason: "test".into(),
                now: Some(*now),
            })
        }
        Ev::Resume(n) => spec.resume = Some(nodes[n % nodes.len()].clone()),
        Ev::Down(n) => spec.node_down = Some(nodes[n % nodes.len()].clone()),
        Ev::Up(n) => spec.node_up = Some(nodes[n % nodes.len()].clone()),
    }
    Some(spec)
}

/// The invariants, checked on the settled state at time `now`.
fn check(
    sim: &Sim,
    capacity_lost_now: bool,
    reprioritized_now: bool,
    cancelled_now: bool,
    stopping_before: &BTreeSet<JobId>,
) -> Result<(), String> {
    let st = &sim.state;
    let now = sim.now;
    let unit = Unit::from("h100");
    // No node or unit over-committed, every allocation consistent.
    st.check_index()?;
    let free_usable: u32 = st
        .nodes
        .values()
        .filter(|n| n.schedulable())
        .map(|n| n.free_gpus(&unit).count() as u32)
        .sum();
    let mut reserve_idle = 0;
    for s in st.shares.values() {
        let used = st.share_used(&s.name, &unit);
        // No share above max × (1 + borrow_limit/100).
        if let Some(c) = s.ceiling_for(&unit) {
            if used as u64 > c {
                return Err(format!(
                    "share {} holds {used} above its ceiling {c}",
                    s.name
                ));
            }
        }
        if s.resource_sharing.strategy == Strategy::Reserve {
            reserve_idle += s.max_for(&unit).saturating_sub(footprint(st, &s.name));
        }
    }
    // A RESERVE share's idle GPUs are never taken by another share: whenever another
    // share's job started now, at least the reserved idle count is still free.
    let other_started_now = st.active_jobs().any(|j| {
        j.current_attempt().is_some_and(|a| a.scheduled_at == now)
            && st
                .shares
                .get(&j.spec.share)
                .is_some_and(|s| s.resource_sharing.strategy != Strategy::Reserve)
    });
    // (Skipped at an instant where a drain or node loss took capacity away after the
    // placement was made, or where a cancel gave a RESERVE share room back: its job,
    // or a hold it had for a preemptor, which the placement counted.)
    if other_started_now && !capacity_lost_now && !cancelled_now && free_usable < reserve_idle {
        return Err(format!("RESERVE shares have {reserve_idle} idle GPUs but only {free_usable} are free after another share started a job"));
    }
    for j in st.jobs.values() {
        // Requeued jobs keep their submit time.
        if j.submitted_at != j.transitions[0].at {
            return Err(format!("job {} submit time moved", j.id));
        }
        // Victims are only ever taken for a within-max job of another share, or by a
        // strictly higher-priority job of their own share.
        if let Some(stop) = j.stop.as_ref().filter(|s| s.signalled_at == now) {
            match &stop.kind {
                StopKind::Reclaim { for_job } => {
                    let p = &st.jobs[for_job];
                    let ps = &st.shares[&p.spec.share];
                    if p.spec.share == j.spec.share {
                        return Err(format!(
                            "job {} reclaimed for job {} of its own share",
                            j.id, p.id
                        ));
                    }
                    // The share's own jobs that borrowed in the same pass, after the
                    // decision, do not count against it.
                    let borrowed_now: u32 = st
                        .active_in(&ps.name)
                        .filter(|b| {
                            b.current_attempt()
                                .is_some_and(|a| a.borrowed && a.scheduled_at == now)
                        })
                        .map(|b| b.spec.request.total_gpus())
                        .sum();
                    // GPUs of the share's own jobs being stopped (for its in-share
                    // preemptors, whose holds are counted) are counted once.
                    let stopping = stopping_in(st, &ps.name);
                    let have = st.share_used(&ps.name, &unit) + held_for(st, &ps.name)
                        - borrowed_now
                        - stopping;
                    if have > ps.max_for(&unit) {
                        return Err(format!(
                            "job {} reclaimed for job {} whose share is over max ({have})",
                            j.id, p.id
                        ));
                    }
                }
                StopKind::InShare { for_job } => {
                    let p = &st.jobs[for_job];
                    // (A priority update at the same instant, after the decision, may
                    // have changed either job's priority since.)
                    if p.spec.share != j.spec.share
                        || (!reprioritized_now && p.spec.priority <= j.spec.priority)
                    {
                        return Err(format!(
                            "job {} preempted in-share by job {} without a higher priority",
                            j.id, p.id
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    // No within-max job waits while an over-max share holds GPUs it could reclaim on a
    // node (unless min_runtime_s protects them), where freeing them would also let the
    // environment's cap take the job beside the idle room RESERVE shares keep.
    let room = Room::of(st);
    for j in st.jobs.values().filter(|j| {
        j.status == JobStatus::Runnable && j.hold.is_none() && j.spec.request.nodes == 1
    }) {
        let Some(s) = st.shares.get(&j.spec.share) else {
            continue;
        };
        if s.state != ObjState::Enabled {
            continue;
        }
        let g = j.spec.request.gpus_per_node;
        let kept = room_kept_above(st, s, j, &unit);
        if st.share_used(&s.name, &unit) + held_for(st, &s.name) + kept + g > s.max_for(&unit) {
            continue;
        }
        for n in st.nodes.values().filter(|n| n.schedulable()) {
            let held_here = held_on(st, n.name());
            let free = n.free_gpus(&unit).count() as u32;
            // Victims on this node in the designed order (lowest priority, then most
            // recently started), each taken only while its share is still over max.
            let mut victims: Vec<&Job> = st
                .active_jobs()
                .filter(|v| {
                    v.stop.is_none()
                        && v.spec.share != s.name
                        && v.allocation().iter().any(|a| a.node == *n.name())
                })
                .collect();
            victims.sort_by_key(|v| {
                (
                    v.spec.priority,
                    std::cmp::Reverse(v.started_at()),
                    std::cmp::Reverse(v.id),
                )
            });
            let mut excess: BTreeMap<&ShareName, i64> = BTreeMap::new();
            let mut reclaimable = 0;
            for v in victims {
                let Some(ts) = st.shares.get(&v.spec.share) else {
                    continue;
                };
                let ex = excess
                    .entry(&v.spec.share)
                    .or_insert_with(|| excess_of(st, &ts.name));
                let young = v.started_at().unwrap_or(0) + ts.loan_min_runtime_s() * SECOND > now;
                if *ex <= 0 || young {
                    continue;
                }
                *ex -= v.spec.request.total_gpus() as i64;
                reclaimable += v
                    .allocation()
                    .iter()
                    .filter(|a| a.node == *n.name())
                    .map(|a| a.gpus.len() as u32)
                    .sum::<u32>();
            }
            let cap_fits = room.cap_headroom(st).is_none_or(|r| {
                (g + room.reserve_idle(st, &s.name)) as i64 <= r + reclaimable as i64
            });
            if cap_fits && reclaimable >= g + held_here.saturating_sub(free) {
                return Err(format!(
                    "job {} (share {}, needs {g}) waits ({}) while {reclaimable} GPUs of over-max shares on {} could be reclaimed",
                    j.id,
                    s.name,
                    j.pending_reason.as_ref().map(|r| r.render(now)).unwrap_or_default(),
                    n.name()
                ));
            }
        }
    }
    work_conservation(sim)?;
    no_needless_preemption(sim, stopping_before)?;
    gangs_get_whole_nodes(sim)?;
    Ok(())
}

/// Jobs being stopped now.
fn stopping(sim: &Sim) -> BTreeSet<JobId> {
    sim.state.stopping_jobs().map(|j| j.id).collect()
}

fn reason_of(j: &Job, now: Millis) -> String {
    j.pending_reason
        .as_ref()
        .map(|r| r.render(now))
        .unwrap_or_default()
}

/// What a job may use now, as `docs/design.md` §3 defines it: per schedulable node, the
/// free GPUs no hold covers; and whether the share's limit (max, or the borrowing
/// ceiling), RESERVE shares' idle GPUs and the environment's cap let it take `need`.
struct Room {
    /// Free GPUs per schedulable node that no hold covers.
    free: Vec<u32>,
    unit: Unit,
}

impl Room {
    fn of(st: &State) -> Room {
        let unit = Unit::from("h100");
        let free = st
            .nodes
            .values()
            .filter(|n| n.schedulable())
            .map(|n| (n.free_gpus(&unit).count() as u32).saturating_sub(held_on(st, n.name())))
            .collect();
        Room { free, unit }
    }

    /// Whether `k` nodes each have `g` of these free GPUs.
    fn fits(&self, g: u32, k: u32) -> bool {
        self.free.iter().filter(|&&f| f >= g).count() >= k as usize
    }

    /// Whether the share's groups let job `j` of share `s` borrow `need` GPUs now: each
    /// group above it stays within its ceiling (its shares' use and holds).
    fn groups_allow(&self, st: &State, s: &QuotaShare, need: u32) -> bool {
        st.groups_above(&s.name).iter().all(|g| {
            let held: u32 = shares_below(st, g).iter().map(|t| held_for(st, t)).sum();
            g.ceiling_for(&self.unit)
                .is_none_or(|c| (st.group_used(g, &self.unit) + held + need) as u64 <= c)
        })
    }

    /// Whether the share's limits let job `j` start now with `other_held` GPUs held for
    /// the share's other jobs.
    fn share_allows(&self, st: &State, j: &Job, other_held: u32) -> bool {
        let Some(s) = st.shares.get(&j.spec.share) else {
            return false;
        };
        if s.state != ObjState::Enabled {
            return false;
        }
        let need = j.spec.request.total_gpus();
        let have = st.share_used(&s.name, &self.unit) + other_held;
        // Within max counting the room rule 2 keeps for the share's higher priorities;
        // without it the job borrows (which only groups' ceilings tell apart).
        let kept = room_kept_above(st, s, j, &self.unit);
        let limit = if have + kept + need <= s.max_for(&self.unit) {
            return self.reserve_allows(st, &s.name, need) && self.cap_allows(st, need);
        } else if s.borrows() {
            s.ceiling_for(&self.unit)
        } else {
            return false;
        };
        limit.is_none_or(|c| (have + need) as u64 <= c)
            && self.groups_allow(st, s, need)
            && self.reserve_allows(st, &s.name, need)
            && self.cap_allows(st, need)
    }

    /// The idle GPUs of RESERVE shares other than `own`, and of RESERVE groups that do
    /// not hold it (a group keeps its max less its shares' footprint, or what its
    /// RESERVE members keep where that is more).
    fn reserve_idle(&self, st: &State, own: &ShareName) -> u32 {
        let share_idle = |s: &QuotaShare| -> u32 {
            if &s.name != own
                && s.state == ObjState::Enabled
                && s.resource_sharing.strategy == Strategy::Reserve
            {
                s.max_for(&self.unit).saturating_sub(footprint(st, &s.name))
            } else {
                0
            }
        };
        fn kept(
            st: &State,
            g: &ShareGroup,
            own: &ShareName,
            unit: &Unit,
            share_idle: &dyn Fn(&QuotaShare) -> u32,
        ) -> u32 {
            let inner: u32 = g
                .shares
                .iter()
                .filter_map(|s| st.shares.get(s))
                .map(share_idle)
                .sum::<u32>()
                + g.groups
                    .iter()
                    .filter_map(|m| st.groups.get(m))
                    .map(|c| kept(st, c, own, unit, share_idle))
                    .sum::<u32>();
            let below = shares_below(st, g);
            if g.resource_sharing.strategy != Strategy::Reserve || below.contains(own) {
                return inner;
            }
            let using: u32 = below.iter().map(|t| footprint(st, t)).sum();
            g.max_for(unit)
                .map_or(inner, |m| m.saturating_sub(using).max(inner))
        }
        let top_shares: u32 = st
            .shares
            .values()
            .filter(|s| st.group_of(&s.name).is_none())
            .map(share_idle)
            .sum();
        let top_groups: u32 = st
            .groups
            .values()
            .filter(|g| st.group_of(&g.name).is_none())
            .map(|g| kept(st, g, own, &self.unit, &share_idle))
            .sum();
        top_shares + top_groups
    }

    /// Taking `need` free GPUs leaves the idle GPUs of RESERVE shares other than `own`,
    /// on the nodes and under the environment's cap alike.
    fn reserve_allows(&self, st: &State, own: &ShareName, need: u32) -> bool {
        let idle = self.reserve_idle(st, own);
        self.free.iter().sum::<u32>() >= need + idle && self.cap_allows(st, need + idle)
    }

    /// The environment's cap: GPUs in use, plus holds beyond the GPUs being stopped.
    fn cap_allows(&self, st: &State, need: u32) -> bool {
        self.cap_headroom(st).is_none_or(|r| need as i64 <= r)
    }

    /// What the environment's cap leaves (negative when over it), or `None` without a cap.
    fn cap_headroom(&self, st: &State) -> Option<i64> {
        let cap = st
            .environments
            .values()
            .next()
            .and_then(|e| e.capacity_limits.iter().find(|l| l.unit == self.unit))
            .map(|l| l.max)?;
        let used: u32 = st
            .shares
            .values()
            .map(|s| st.share_used(&s.name, &self.unit))
            .sum();
        let stopping: u32 = st
            .stopping_jobs()
            .map(|j| j.spec.request.total_gpus())
            .sum();
        let held: u32 = st.holding_jobs().map(|j| j.spec.request.total_gpus()).sum();
        Some(cap as i64 - (used + held.saturating_sub(stopping)) as i64)
    }
}

/// GPUs of the share's jobs being stopped (they count in its use until they exit).
fn stopping_in(st: &State, share: &ShareName) -> u32 {
    st.active_in(share)
        .filter(|x| x.stop.is_some())
        .map(|x| x.spec.request.total_gpus())
        .sum()
}

/// GPUs the share uses above its max, not counting those being given back.
fn excess_of(st: &State, share: &ShareName) -> i64 {
    let unit = Unit::from("h100");
    let Some(s) = st.shares.get(share) else {
        return 0;
    };
    st.share_used(share, &unit) as i64 - stopping_in(st, share) as i64 - s.max_for(&unit) as i64
}

/// Every share below group `g`, at any depth.
fn shares_below(st: &State, g: &ShareGroup) -> Vec<ShareName> {
    let mut out = g.shares.clone();
    for m in &g.groups {
        if let Some(c) = st.groups.get(m) {
            out.extend(shares_below(st, c));
        }
    }
    out
}

/// GPUs held on node `node` for preemptors.
fn held_on(st: &State, node: &NodeName) -> u32 {
    st.holding_jobs()
        .filter_map(|h| h.hold.as_ref())
        .flat_map(|h| h.nodes.iter())
        .filter(|(name, _)| name == node)
        .map(|(_, c)| c)
        .sum()
}

/// GPUs a share takes up: those it uses and holds, where a hold made by stopping the
/// share's own jobs (in-share) covers their GPUs rather than adding to them.
fn footprint(st: &State, share: &ShareName) -> u32 {
    let unit = Unit::from("h100");
    let own_stopping: u32 = st
        .active_in(share)
        .filter(|x| {
            matches!(
                x.stop.as_ref().map(|s| &s.kind),
                Some(StopKind::InShare { .. })
            )
        })
        .map(|x| x.spec.request.total_gpus())
        .sum();
    let held = held_for(st, share);
    st.share_used(share, &unit) + held - held.min(own_stopping)
}

/// The room rule 2 keeps in a share that may borrow for its waiting jobs of higher
/// priority than `j` (each within what the share's max could hold, without a hold).
/// Worked out from the jobs here, apart from the scheduler's bookkeeping and
/// `tranche_sched::estimate::room_kept_above`, as the other checks are.
fn room_kept_above(st: &State, s: &QuotaShare, j: &Job, unit: &Unit) -> u32 {
    if s.resource_sharing.strategy != Strategy::LendAndBorrow {
        return 0;
    }
    let max = s.max_for(unit);
    st.jobs
        .values()
        .filter(|w| {
            w.status == JobStatus::Runnable
                && w.hold.is_none()
                && w.spec.share == s.name
                && w.spec.priority > j.spec.priority
                && w.spec.request.total_gpus() <= max
        })
        .map(|w| w.spec.request.total_gpus())
        .sum()
}

/// GPUs held for the share's waiting preemptors.
fn held_for(st: &State, share: &ShareName) -> u32 {
    st.holding_jobs()
        .filter(|j| &j.spec.share == share)
        .map(|j| j.spec.request.total_gpus())
        .sum()
}

/// Work conservation: no job waits (with or without a hold) while free GPUs that no hold
/// covers would fit it, its share's limit, RESERVE shares and the cap allowing.
fn work_conservation(sim: &Sim) -> Result<(), String> {
    let st = &sim.state;
    let room = Room::of(st);
    for j in st.jobs.values().filter(|j| j.status == JobStatus::Runnable) {
        let r = &j.spec.request;
        let own = if j.hold.is_some() { r.total_gpus() } else { 0 };
        if room.fits(r.gpus_per_node, r.nodes)
            && room.share_allows(st, j, held_for(st, &j.spec.share) - own)
        {
            return Err(format!(
                "job {} of share {} ({} × {} GPUs) waits ({}) while free GPUs would fit it: {:?}",
                j.id,
                j.spec.share,
                r.nodes,
                r.gpus_per_node,
                reason_of(j, sim.now),
                room.free
            ));
        }
    }
    Ok(())
}

/// No job preempts anyone while free GPUs it may use would fit it now: checked for the
/// preemptors of this instant's preemptions.
fn no_needless_preemption(sim: &Sim, stopping_before: &BTreeSet<JobId>) -> Result<(), String> {
    let st = &sim.state;
    let room = Room::of(st);
    for v in st.active_jobs() {
        // Only this step's preemptions: one made earlier at the same instant may have
        // been right before a later event (a resume) freed GPUs.
        let Some(stop) = v
            .stop
            .as_ref()
            .filter(|s| s.signalled_at == sim.now && !stopping_before.contains(&v.id))
        else {
            continue;
        };
        let Some(p) = stop.kind.for_job().and_then(|p| st.jobs.get(&p)) else {
            continue;
        };
        if p.status != JobStatus::Runnable || p.hold.is_none() {
            continue;
        }
        let r = &p.spec.request;
        let own_held = p.spec.request.total_gpus();
        if room.fits(r.gpus_per_node, r.nodes)
            && room.share_allows(st, p, held_for(st, &p.spec.share) - own_held)
        {
            return Err(format!(
                "job {} preempted job {} while free GPUs would fit it: {:?}",
                p.id, v.id, room.free
            ));
        }
    }
    Ok(())
}

/// The quota guarantee for gangs: a gang with room in its share (its share's usage,
/// holds and the jobs ahead of it, plus its need, within max) does not wait without a
/// hold while `nodes` whole nodes hold nothing but over-max work that could be
/// reclaimed (unprotected, single-node jobs of shares over max, within their excess).
fn gangs_get_whole_nodes(sim: &Sim) -> Result<(), String> {
    let st = &sim.state;
    let now = sim.now;
    let unit = Unit::from("h100");
    for j in st
        .jobs
        .values()
        .filter(|j| j.status == JobStatus::Runnable && j.hold.is_none() && j.spec.request.nodes > 1)
    {
        let Some(s) = st
            .shares
            .get(&j.spec.share)
            .filter(|s| s.state == ObjState::Enabled)
        else {
            continue;
        };
        let (g, k) = (j.spec.request.gpus_per_node, j.spec.request.nodes);
        let ahead: u32 = st
            .runnable_in(&s.name)
            .take_while(|(key, _)| key.id != j.id)
            .map(|(_, w)| w.gpus_per_node * w.nodes)
            .sum();
        let have = st.share_used(&s.name, &unit) + held_for(st, &s.name) + ahead;
        if have + g * k > s.max_for(&unit) {
            continue;
        }
        // Clean nodes: every busy GPU belongs to a reclaimable job, which alone frees g.
        let mut clean: Vec<(u32, String, BTreeMap<ShareName, i64>)> = vec![];
        for n in st.nodes.values().filter(|n| n.schedulable()) {
            let holds_here = st
                .holding_jobs()
                .filter_map(|h| h.hold.as_ref())
                .any(|h| h.nodes.iter().any(|(name, _)| name == n.name()));
            if holds_here || n.inventory.gpus.len() < g as usize {
                continue;
            }
            let on_node: Vec<&Job> = st
                .active_jobs()
                .filter(|v| v.allocation().iter().any(|a| a.node == *n.name()))
                .collect();
            let ok = on_node.iter().all(|v| {
                let young = st.shares.get(&v.spec.share).is_none_or(|ts| {
                    v.started_at().unwrap_or(0) + ts.loan_min_runtime_s() * SECOND > now
                });
                v.stop.is_none()
                    && v.spec.request.nodes == 1
                    && v.spec.share != s.name
                    && excess_of(st, &v.spec.share) > 0
                    && !young
            });
            let freed: u32 = on_node.iter().map(|v| v.spec.request.total_gpus()).sum();
            if !ok || freed < g || on_node.is_empty() {
                continue;
            }
            let mut cost: BTreeMap<ShareName, i64> = BTreeMap::new();
            for v in &on_node {
                *cost.entry(v.spec.share.clone()).or_default() +=
                    v.spec.request.total_gpus() as i64;
            }
            clean.push((freed, n.name().to_string(), cost));
        }
        clean.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut spent: BTreeMap<ShareName, i64> = BTreeMap::new();
        let mut found = vec![];
        for (_, name, cost) in &clean {
            if cost
                .iter()
                .all(|(sh, c)| spent.get(sh).copied().unwrap_or(0) + c <= excess_of(st, sh))
            {
                for (sh, c) in cost {
                    *spent.entry(sh.clone()).or_default() += c;
                }
                found.push(name.clone());
            }
        }
        if found.len() >= k as usize {
            return Err(format!(
                "gang {} of share {} ({k} × {g} GPUs, room in its share) waits ({}) while nodes {found:?} hold only reclaimable over-max work",
                j.id,
                s.name,
                reason_of(j, now)
            ));
        }
    }
    Ok(())
}

/// A cluster of `node_count` nodes of 8 h100 (their names returned too), with these
/// shares and an environment cap of `cap`, under FIFO or (`fair`) FAIR_SHARE with a
/// half-life of an hour.
fn cluster(
    shares: &[ShareSpec],
    groups: Vec<GroupSpec>,
    node_count: u32,
    cap: Option<u32>,
    fair: bool,
) -> Result<(Sim, Vec<String>), TestCaseError> {
    let sc = Scenario {
        idle_resource_assignment: fair.then(|| "FAIR_SHARE".into()),
        usage_half_life_s: fair.then_some(3600),
        environment: cap.map(|max| EnvSpec {
            name: None,
            capacity_limits: Some(vec![LimitSpec {
                unit: "h100".into(),
                max,
            }]),
            selector: None,
        }),
        environments: vec![],
        queues: vec![],
        nodes: vec![NodeSpec {
            name: "n".into(),
            count: Some(node_count),
            unit: "h100".into(),
            gpus: 8,
            labels: None,
        }],
        shares: shares.to_vec(),
        groups,
        events: vec![],
        expect: vec![],
    };
    let names = expand_names(&sc.nodes[0]);
    let sim = Sim::new(&sc).map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok((sim, names))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn scheduling_invariants_hold_after_every_step(shares in shares(), evs in events(), node_count in 2u32..4, cap in prop_oneof![2 => Just(None), 1 => Just(Some(12u32)), 1 => Just(Some(20u32))], fair in proptest::bool::weighted(0.3), grouping in groups()) {
        let (mut sim, node_names) = cluster(&shares, group_specs(&shares, &grouping), node_count, cap, fair)?;
        let mut submitted = vec![];
        sim.settle().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut lost_at = None;
        let mut reprioritized_at = None;
        let mut cancelled_at = None;
        for (at, e) in &evs {
            if matches!(e, Ev::Down(_) | Ev::Drain(..)) {
                lost_at = Some(*at);
            }
            if matches!(e, Ev::Priority(..)) {
                reprioritized_at = Some(*at);
            }
            if matches!(e, Ev::Cancel(..)) {
                cancelled_at = Some(*at);
            }
            let Some(ev) = to_event(*at, e, &mut submitted, shares.len(), &node_names) else { continue };
            let before = stopping(&sim);
            sim.advance_to(at * SECOND).map_err(|e| TestCaseError::fail(e.to_string()))?;
            sim.event(&ev);
            sim.settle().map_err(|e| TestCaseError::fail(e.to_string()))?;
            check(&sim, lost_at == Some(*at), reprioritized_at == Some(*at), cancelled_at == Some(*at), &before).map_err(|m| TestCaseError::fail(format!("t={at}: {m}")))?;
        }
        // Let everything that can finish, finish; the invariants still hold.
        let end = evs.last().map_or(0, |e| e.0) + 400;
        let before = stopping(&sim);
        sim.advance_to(end * SECOND).map_err(|e| TestCaseError::fail(e.to_string()))?;
        sim.settle().map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(&sim, false, false, false, &before).map_err(|m| TestCaseError::fail(format!("end: {m}")))?;
    }
}

/// Events for the pass by classes: few job shapes, submitted in bursts of alike jobs,
/// so that classes hold many jobs and queues grow.
fn class_events() -> impl Gen<Value = Vec<(u64, usize, Ev)>> {
    let ev = prop_oneof![
        8 => (0usize..3, prop_oneof![Just(1u32), Just(2), Just(8)], prop_oneof![4 => Just(1u32), 1 => Just(2)],
              0u32..3, prop_oneof![Just(None), (5u64..200).prop_map(Some)],
              prop_oneof![Just("exit_after:0"), Just("exit_after:5"), Just("ignore")],
              prop_oneof![3 => Just(None), 1 => Just(Some(60u64))])
            .prop_map(|(share, gpus, nodes, prio, runtime, on_signal, every)| Ev::Submit { share, gpus, nodes, prio, runtime, on_signal, every }),
        1 => (0usize..60).prop_map(Ev::Checkpoint),
        1 => (0usize..60).prop_map(Ev::Cancel),
        1 => (0usize..60, 0u32..3).prop_map(|(j, p)| Ev::Priority(j, p)),
        1 => (0usize..3, proptest::bool::ANY).prop_map(|(n, now)| Ev::Drain(n, now)),
        1 => (0usize..3).prop_map(Ev::Resume),
        1 => (0usize..3).prop_map(Ev::Down),
        1 => (0usize..3).prop_map(Ev::Up),
    ];
    proptest::collection::vec((0u64..20, 1usize..10, ev), 1..30).prop_map(|v| {
        let mut t = 0;
        v.into_iter()
            .map(|(dt, n, e)| {
                t += dt;
                (t, n, e)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The pass by classes (and the scheduler's skip of a pass nothing changed) plans
    /// exactly what a pass that looks at every job on its own plans, at every pass of
    /// every random scenario.
    #[test]
    fn incremental_and_whole_passes_plan_alike(shares in shares(), evs in class_events(), node_count in 2u32..4, cap in prop_oneof![2 => Just(None), 1 => Just(Some(12u32)), 1 => Just(Some(20u32))], fair in proptest::bool::weighted(0.3), grouping in groups()) {
        let (mut sim, node_names) = cluster(&shares, group_specs(&shares, &grouping), node_count, cap, fair)?;
        sim.check_passes = true;
        let mut submitted = vec![];
        sim.settle().map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (at, n, e) in &evs {
            sim.advance_to(at * SECOND).map_err(|e| TestCaseError::fail(e.to_string()))?;
            // A submit comes `n` times over: a burst of alike jobs.
            let n = if matches!(e, Ev::Submit { .. }) { *n } else { 1 };
            for _ in 0..n {
                if let Some(ev) = to_event(*at, e, &mut submitted, shares.len(), &node_names) {
                    sim.event(&ev);
                }
            }
            sim.settle().map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let end = evs.last().map_or(0, |e| e.0) + 400;
        sim.advance_to(end * SECOND).map_err(|e| TestCaseError::fail(e.to_string()))?;
        sim.settle().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}
