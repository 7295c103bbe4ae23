//! Property tests over random clusters, policies and event streams. After every settled
//! step they check the scheduling invariants of `docs/design.md` §3.

use proptest::prelude::{
    prop_oneof, proptest, Just, ProptestConfig, Strategy as Gen, TestCaseError,
};
use std::collections::BTreeMap;
use tranche_model::*;
use tranche_sim::scenario::*;
use tranche_sim::Sim;

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
    );
    proptest::collection::vec(one, 2..5).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (strategy, max, bl, in_share, min_rt))| ShareSpec {
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
                state: None,
            })
            .collect()
    })
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
    },
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
              prop_oneof![Just("exit_after:0"), Just("exit_after:5"), Just("exit_after:60"), Just("ignore")])
            .prop_map(|(share, gpus, nodes, prio, runtime, on_signal)| Ev::Submit { share, gpus, nodes, prio, runtime, on_signal }),
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
    };
    match e {
        Ev::Submit {
            share,
            gpus,
            nodes: n,
            prio,
            runtime,
            on_signal,
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
            });
        }
        Ev::Cancel(_) | Ev::Priority(..) if submitted.is_empty() => return None,
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
fn check(sim: &Sim, capacity_lost_now: bool, reprioritized_now: bool) -> Result<(), String> {
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
    let held_by = |share: &ShareName| -> u32 {
        st.jobs
            .values()
            .filter(|j| {
                j.status == JobStatus::Runnable && &j.spec.share == share && j.hold.is_some()
            })
            .map(|j| j.spec.request.total_gpus())
            .sum()
    };
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
            reserve_idle += s.max_for(&unit).saturating_sub(used + held_by(&s.name));
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
    // placement was made.)
    if other_started_now && !capacity_lost_now && free_usable < reserve_idle {
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
                    let have = st.share_used(&ps.name, &unit) + held_by(&ps.name);
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
    // node (unless min_runtime_s protects them).
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
        if st.share_used(&s.name, &unit) + held_by(&s.name) + g > s.max_for(&unit) {
            continue;
        }
        for n in st.nodes.values().filter(|n| n.schedulable()) {
            let held_here: u32 = st
                .jobs
                .values()
                .filter_map(|h| h.hold.as_ref())
                .flat_map(|h| h.nodes.iter())
                .filter(|(name, _)| name == n.name())
                .map(|(_, c)| c)
                .sum();
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
                let ex = excess.entry(&v.spec.share).or_insert_with(|| {
                    let stopping: u32 = st
                        .active_in(&ts.name)
                        .filter(|x| x.stop.is_some())
                        .map(|x| x.spec.request.total_gpus())
                        .sum();
                    st.share_used(&ts.name, &unit) as i64
                        - stopping as i64
                        - ts.max_for(&unit) as i64
                });
                let young = v.started_at().unwrap_or(0) + ts.min_runtime_s * SECOND > now;
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
            if reclaimable >= g + held_here.saturating_sub(free) {
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
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn scheduling_invariants_hold_after_every_step(shares in shares(), evs in events(), node_count in 2u32..4) {
        let sc = Scenario {
            environment: None,
            queues: vec![],
            nodes: vec![NodeSpec { name: "n".into(), count: Some(node_count), unit: "h100".into(), gpus: 8, labels: None }],
            shares: shares.clone(),
            events: vec![],
            expect: vec![],
        };
        let node_names: Vec<String> = expand_names(&sc.nodes[0]);
        let mut sim = Sim::new(&sc).map_err(TestCaseError::fail)?;
        let mut submitted = vec![];
        sim.settle().map_err(TestCaseError::fail)?;
        let mut lost_at = None;
        let mut reprioritized_at = None;
        for (at, e) in &evs {
            if matches!(e, Ev::Down(_) | Ev::Drain(..)) {
                lost_at = Some(*at);
            }
            if matches!(e, Ev::Priority(..)) {
                reprioritized_at = Some(*at);
            }
            let Some(ev) = to_event(*at, e, &mut submitted, shares.len(), &node_names) else { continue };
            sim.advance_to(at * SECOND).map_err(TestCaseError::fail)?;
            sim.event(&ev);
            sim.settle().map_err(TestCaseError::fail)?;
            check(&sim, lost_at == Some(*at), reprioritized_at == Some(*at)).map_err(|m| TestCaseError::fail(format!("t={at}: {m}")))?;
        }
        // Let everything that can finish, finish; the invariants still hold.
        let end = evs.last().map_or(0, |e| e.0) + 400;
        sim.advance_to(end * SECOND).map_err(TestCaseError::fail)?;
        sim.settle().map_err(TestCaseError::fail)?;
        check(&sim, false, false).map_err(|m| TestCaseError::fail(format!("end: {m}")))?;
    }
}
