//! The state machine's contract: deterministic, total, rejected commands change nothing,
//! idempotent submits, re-verified plans, exact snapshots.

use proptest::prelude::{
    any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig, Strategy as Gen,
    TestCaseError,
};
use std::collections::BTreeMap;
use tranche_model::*;
use tranche_state::ledger;
use tranche_state::*;

fn ok(st: &mut State, cmd: Command, now: Millis) -> Outcome {
    st.apply(&cmd, now)
        .unwrap_or_else(|e| panic!("{cmd:?} refused: {e}"))
}

fn share(name: &str, strategy: Strategy, max: u32) -> QuotaShare {
    QuotaShare {
        name: name.into(),
        queue: "q".into(),
        capacity_limits: vec![CapacityLimit {
            unit: "h100".into(),
            max,
        }],
        resource_sharing: ResourceSharing {
            strategy,
            borrow_limit: None,
        },
        in_share_preemption: false,
        state: ObjState::Enabled,
        members: vec![],
        default_grace_s: 30,
        max_grace_s: 600,
        min_runtime_s: 0,
        max_user_priority: DEFAULT_MAX_USER_PRIORITY,
        limits: JobLimits::default(),
    }
}

fn node(name: &str, gpus: u32) -> NodeInventory {
    NodeInventory {
        name: name.into(),
        address: "127.0.0.1".into(),
        labels: BTreeMap::new(),
        gpus: (0..gpus)
            .map(|i| Gpu {
                index: GpuIndex(i),
                uuid: format!("GPU-{name}-{i}"),
                unit: "h100".into(),
                memory_mb: 80_000,
                healthy: true,
            })
            .collect(),
        cpus: 64,
        memory_mb: 512_000,
    }
}

/// Two 8-GPU nodes, one queue, shares `a` (LEND_AND_BORROW, max 8) and `b` (LEND, max 8).
fn cluster() -> State {
    let mut st = State::new();
    ok(
        &mut st,
        Command::PutEnvironment(ServiceEnvironment {
            name: "gpu".into(),
            selector: BTreeMap::new(),
            capacity_limits: vec![CapacityLimit {
                unit: "h100".into(),
                max: 16,
            }],
            state: ObjState::Enabled,
        }),
        0,
    );
    ok(
        &mut st,
        Command::PutPolicy(SchedulingPolicy {
            name: "fifo".into(),
            idle_resource_assignment: IdleAssignment::Fifo,
        }),
        0,
    );
    ok(
        &mut st,
        Command::PutQueue(JobQueue {
            name: "q".into(),
            priority: 1,
            state: ObjState::Enabled,
            environment: "gpu".into(),
            policy: "fifo".into(),
        }),
        0,
    );
    ok(
        &mut st,
        Command::PutShare(share("a", Strategy::LendAndBorrow, 8)),
        0,
    );
    ok(&mut st, Command::PutShare(share("b", Strategy::Lend, 8)), 0);
    ok(&mut st, Command::RegisterNode(node("n1", 8)), 0);
    ok(&mut st, Command::RegisterNode(node("n2", 8)), 0);
    st
}

fn submit(st: &mut State, share: &str, gpus: u32, nodes: u32, now: Millis) -> JobId {
    match ok(
        st,
        Command::Submit(JobSpec::new("j", "q", share, "alice", "h100", gpus, nodes)),
        now,
    ) {
        Outcome::Submitted { job, .. } => job,
        o => panic!("{o:?}"),
    }
}

#[test]
fn rejected_commands_change_nothing_and_name_the_rule() {
    let mut st = cluster();
    let before = st.snapshot();
    let mut bad = share("c", Strategy::Lend, 8);
    bad.resource_sharing.borrow_limit = Some(10);
    let cases: Vec<(Command, &str)> = vec![
        (
            Command::PutShare(bad),
            "only allowed with strategy LEND_AND_BORROW",
        ),
        (
            Command::DeleteShare("a".into()),
            "must be DISABLED before it is deleted",
        ),
        (
            Command::Submit(JobSpec::new("j", "q", "nope", "alice", "h100", 1, 1)),
            "quota share nope does not exist",
        ),
        (
            Command::Submit(JobSpec::new("j", "q", "a", "alice", "a100", 1, 1)),
            "unknown unit",
        ),
        (
            Command::Submit(JobSpec {
                priority: 10_000,
                ..JobSpec::new("j", "q", "a", "alice", "h100", 1, 1)
            }),
            "0-9999",
        ),
        (
            Command::Cancel {
                job: JobRef::job(JobId(99)),
                reason: String::new(),
            },
            "job 99 does not exist",
        ),
        (
            Command::DrainNode {
                node: "n1".into(),
                reason: " ".into(),
                now: false,
            },
            "needs a reason",
        ),
        (Command::DeleteEnvironment("gpu".into()), "used by queue q"),
    ];
    for (cmd, rule) in cases {
        let e = st.apply(&cmd, 5).expect_err("must be refused");
        assert!(e.to_string().contains(rule), "{e} should say {rule}");
        assert_eq!(st.snapshot(), before, "{cmd:?} changed the state");
    }
}

#[test]
fn a_queue_takes_at_most_twenty_shares() {
    let mut st = cluster();
    for i in 0..18 {
        ok(
            &mut st,
            Command::PutShare(share(&format!("s{i}"), Strategy::Lend, 1)),
            0,
        );
    }
    let e = st
        .apply(
            &Command::PutShare(share("one-too-many", Strategy::Lend, 1)),
            0,
        )
        .unwrap_err();
    assert!(e.to_string().contains("at most 20"), "{e}");
    // Updating an existing share is not adding one.
    ok(
        &mut st,
        Command::PutShare(share("s0", Strategy::Reserve, 2)),
        0,
    );
}

#[test]
fn grace_above_the_share_max_is_refused() {
    let mut st = cluster();
    let mut spec = JobSpec::new("j", "q", "a", "alice", "h100", 1, 1);
    spec.checkpoint.grace_s = Some(601);
    let e = st.apply(&Command::Submit(spec), 0).unwrap_err();
    assert!(
        e.to_string().contains("checkpoint.grace_s") && e.to_string().contains("600"),
        "{e}"
    );
}

#[test]
fn the_same_client_token_returns_the_first_job() {
    let mut st = cluster();
    let mut spec = JobSpec::new("j", "q", "a", "alice", "h100", 1, 1);
    spec.client_token = Some("tok-1".into());
    let first = ok(&mut st, Command::Submit(spec.clone()), 1);
    let again = ok(&mut st, Command::Submit(spec.clone()), 2);
    let Outcome::Submitted {
        job,
        existing: false,
    } = first
    else {
        panic!("{first:?}")
    };
    assert_eq!(
        again,
        Outcome::Submitted {
            job,
            existing: true
        }
    );
    assert_eq!(st.jobs.len(), 1);
    // Another user's identical token is a different job.
    spec.user = "bob".into();
    let Outcome::Submitted {
        job: other,
        existing: false,
    } = ok(&mut st, Command::Submit(spec), 3)
    else {
        panic!()
    };
    assert_ne!(other, job);
}

#[test]
fn a_stale_plan_is_rejected_per_action_and_a_gang_as_a_whole() {
    let mut st = cluster();
    let single = submit(&mut st, "a", 4, 1, 1);
    let gang = submit(&mut st, "b", 4, 2, 2);
    let plan = tranche_sched::plan(&st, 3);
    assert_eq!(plan.placements(), 2, "{plan:?}");
    // Between planning and applying, n2 is drained: the gang (which needs n2) must not
    // start on n1 alone; the single job placed on n1 still may.
    ok(
        &mut st,
        Command::DrainNode {
            node: "n2".into(),
            reason: "xid 79".into(),
            now: false,
        },
        4,
    );
    let Outcome::Plan(out) = ok(&mut st, Command::ApplyPlan(plan), 5) else {
        panic!()
    };
    assert_eq!(out.rejected.len(), 1, "{out:?}");
    assert!(
        matches!(&out.rejected[0].1, ApplyError::Stale(m) if m.contains("n2")),
        "{out:?}"
    );
    let placed: Vec<_> = st.active_jobs().map(|j| j.id).collect();
    assert_eq!(placed, vec![single]);
    assert_eq!(st.jobs[&gang].status, JobStatus::Runnable);
    assert!(st
        .nodes
        .values()
        .flat_map(|n| &n.allocated)
        .flatten()
        .all(|id| *id == single));
    st.check_index().unwrap();
}

#[test]
fn a_plan_that_would_exceed_a_share_ceiling_is_rejected() {
    let mut st = cluster();
    let j1 = submit(&mut st, "b", 8, 1, 1);
    let plan = tranche_sched::plan(&st, 2);
    // Meanwhile the admin lowers b's max to 4: the placement no longer fits.
    ok(&mut st, Command::PutShare(share("b", Strategy::Lend, 4)), 2);
    let Outcome::Plan(out) = ok(&mut st, Command::ApplyPlan(plan), 3) else {
        panic!()
    };
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(st.jobs[&j1].status, JobStatus::Runnable);
}

/// Runs the scheduler once and applies its plan.
fn schedule(st: &mut State, now: Millis) {
    let plan = tranche_sched::plan(st, now);
    ok(st, Command::ApplyPlan(plan), now);
}

/// Schedules, then reports every placed job as running.
fn place_and_run(st: &mut State, now: Millis) {
    schedule(st, now);
    let started: Vec<(JobId, u32)> = st
        .active_jobs()
        .filter(|j| j.status != JobStatus::Running)
        .map(|j| (j.id, j.attempts.len() as u32))
        .collect();
    for (job, attempt) in started {
        ok(
            st,
            Command::JobProgress {
                job,
                attempt,
                event: Progress::Running,
            },
            now,
        );
    }
}

fn exit(st: &mut State, job: JobId, code: Option<i32>, now: Millis) {
    let attempt = st.jobs[&job].attempts.len() as u32;
    ok(
        st,
        Command::JobProgress {
            job,
            attempt,
            event: Progress::Exited { code, reason: None },
        },
        now,
    );
}

#[test]
fn preemption_requeues_until_preemption_retries_are_used_up() {
    let mut st = cluster();
    let own = submit(&mut st, "a", 8, 1, 1);
    let mut spec = JobSpec::new("borrower", "q", "a", "alice", "h100", 8, 1);
    spec.preemption_retries = Some(1);
    let Outcome::Submitted { job: borrower, .. } = ok(&mut st, Command::Submit(spec), 2) else {
        panic!()
    };
    for round in 1..=2u32 {
        place_and_run(&mut st, 10 * round as u64);
        assert!(st.jobs[&borrower].current_attempt().unwrap().borrowed);
        // The lender's job arrives: the borrower is reclaimed, never the own-capacity job.
        let lender = submit(&mut st, "b", 8, 1, 10 * round as u64 + 1);
        place_and_run(&mut st, 10 * round as u64 + 2);
        assert!(st.jobs[&borrower].preempting());
        assert!(st.jobs[&own].stop.is_none());
        assert!(
            st.jobs[&lender].hold.is_some(),
            "the freed GPUs are held for the lender"
        );
        exit(&mut st, borrower, Some(0), 10 * round as u64 + 3);
        let j = &st.jobs[&borrower];
        assert_eq!(j.preemptions, round);
        assert_eq!(j.submitted_at, 2, "a requeued job keeps its submit time");
        if round == 1 {
            assert_eq!(
                j.status,
                JobStatus::Runnable,
                "preemption_retries = 1 allows one requeue"
            );
            place_and_run(&mut st, 14);
            assert_eq!(st.jobs[&lender].status, JobStatus::Running);
            exit(&mut st, lender, Some(0), 15);
        } else {
            assert_eq!(
                j.status,
                JobStatus::Failed,
                "the second preemption fails it"
            );
            assert!(j
                .transitions
                .last()
                .unwrap()
                .reason
                .contains("preemption_retries = 1"));
        }
        st.check_index().unwrap();
    }
}

#[test]
fn drain_now_requeues_without_counting_a_preemption() {
    let mut st = cluster();
    let job = submit(&mut st, "a", 8, 1, 1);
    place_and_run(&mut st, 2);
    ok(
        &mut st,
        Command::DrainNode {
            node: "n1".into(),
            reason: "maintenance".into(),
            now: true,
        },
        3,
    );
    assert!(matches!(
        st.jobs[&job].stop,
        Some(Stop {
            kind: StopKind::Drain,
            ..
        })
    ));
    assert_eq!(st.nodes[&NodeName::from("n1")].state(), NodeState::Draining);
    exit(&mut st, job, None, 4);
    let j = &st.jobs[&job];
    assert_eq!(
        (j.status, j.preemptions, j.failures),
        (JobStatus::Runnable, 0, 0)
    );
    assert_eq!(st.nodes[&NodeName::from("n1")].state(), NodeState::Drained);
    place_and_run(&mut st, 5);
    assert_eq!(
        st.jobs[&job].allocation()[0].node.as_str(),
        "n2",
        "never placed on a drained node"
    );
}

#[test]
fn node_down_requeues_its_jobs_and_frees_every_gpu_of_a_gang() {
    let mut st = cluster();
    let gang = submit(&mut st, "a", 8, 2, 1);
    schedule(&mut st, 2);
    assert_eq!(st.jobs[&gang].status, JobStatus::Scheduled);
    ok(
        &mut st,
        Command::NodeDown {
            node: "n1".into(),
            reason: "no heartbeat".into(),
        },
        3,
    );
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Runnable);
    assert_eq!(j.attempts[0].end, Some(AttemptEnd::Lost));
    assert!(st
        .nodes
        .values()
        .all(|n| n.allocated.iter().all(|a| a.is_none())));
    assert_eq!(st.share_used(&"a".into(), &"h100".into()), 0);
    st.check_index().unwrap();
}

#[test]
fn cancelling_a_running_job_waits_for_its_exit() {
    let mut st = cluster();
    let job = submit(&mut st, "a", 2, 1, 1);
    place_and_run(&mut st, 3);
    ok(
        &mut st,
        Command::Cancel {
            job: JobRef::job(job),
            reason: "user".into(),
        },
        4,
    );
    assert_eq!(st.jobs[&job].status, JobStatus::Running);
    assert_eq!(
        st.jobs[&job].stop.as_ref().unwrap().deadline,
        4 + 30 * SECOND
    );
    exit(&mut st, job, None, 5);
    assert_eq!(st.jobs[&job].status, JobStatus::Cancelled);
    let e = st
        .apply(
            &Command::Cancel {
                job: JobRef::job(job),
                reason: String::new(),
            },
            6,
        )
        .unwrap_err();
    assert!(e.to_string().contains("already ended"));
}

/// An attempt its agent lost (no exit status) requeues the job: it is not the job's
/// failure. One lost while being cancelled ends CANCELLED.
#[test]
fn a_lost_attempt_requeues_and_a_cancel_still_ends_it() {
    let mut st = cluster();
    let job = submit(&mut st, "a", 2, 1, 1);
    place_and_run(&mut st, 3);
    let lost = |st: &mut State, now| {
        let attempt = st.jobs[&job].attempts.len() as u32;
        ok(
            st,
            Command::JobProgress {
                job,
                attempt,
                event: Progress::Lost {
                    reason: "the agent on n1 has no record of this attempt".into(),
                },
            },
            now,
        );
    };
    lost(&mut st, 4);
    let j = &st.jobs[&job];
    assert_eq!(
        (j.status, j.failures, j.preemptions),
        (JobStatus::Runnable, 0, 0)
    );
    assert_eq!(j.attempts[0].end, Some(AttemptEnd::Lost));
    assert!(j
        .transitions
        .last()
        .unwrap()
        .reason
        .contains("no record of this attempt; attempt lost, requeued"));
    assert_eq!(st.share_used(&"a".into(), &"h100".into()), 0);
    st.check_index().unwrap();
    place_and_run(&mut st, 5);
    assert_eq!(st.jobs[&job].attempts.len(), 2);
    ok(
        &mut st,
        Command::Cancel {
            job: JobRef::job(job),
            reason: "user".into(),
        },
        6,
    );
    lost(&mut st, 7);
    assert_eq!(st.jobs[&job].status, JobStatus::Cancelled);
}

/// Random command streams against a small cluster.
fn command() -> impl Gen<Value = Command> {
    let share_name = prop_oneof![Just("a"), Just("b"), Just("c")];
    let node_name = prop_oneof![Just("n1"), Just("n2"), Just("n3")];
    prop_oneof![
        4 => (share_name.clone(), 1u32..9, 1u32..3, 0u32..20, proptest::option::of(0u32..4)).prop_map(|(s, g, n, p, tok)| {
            let mut spec = JobSpec::new("j", "q", s, "alice", "h100", g, n);
            spec.priority = p;
            spec.client_token = tok.map(|t| format!("t{t}"));
            Command::Submit(spec)
        }),
        4 => Just(Command::ApplyPlan(Plan::default())), // replaced by a real plan below
        2 => (1u64..30, any::<bool>()).prop_map(|(j, killed)| Command::JobProgress {
            job: JobId(j),
            attempt: 1,
            event: Progress::Exited { code: if killed { None } else { Some(0) }, reason: None }
        }),
        1 => (1u64..30).prop_map(|j| Command::JobProgress { job: JobId(j), attempt: 1, event: Progress::Running }),
        1 => (1u64..30).prop_map(|j| Command::JobProgress { job: JobId(j), attempt: 1, event: Progress::Lost { reason: "lost".into() } }),
        1 => (1u64..30).prop_map(|j| Command::Cancel { job: JobRef::job(JobId(j)), reason: "x".into() }),
        1 => (1u64..30, 0u32..4).prop_map(|(j, t)| Command::Cancel { job: JobRef { job: JobId(j), task: Some(t) }, reason: "x".into() }),
        2 => (1u32..3, 1u32..5, proptest::option::of(1u32..3), proptest::option::of((0u8..3, 1u64..30)), any::<bool>()).prop_map(|(g, n, lim, dep, hold)| {
            let mut spec = JobSpec::new("arr", "q", "a", "alice", "h100", g, 1);
            spec.array = Some(ArraySpec { ranges: vec![IndexRange { start: 0, end: n - 1, step: 1 }], max_running: lim });
            if let Some((k, j)) = dep {
                let kind = [DepKind::AfterOk, DepKind::AfterAny, DepKind::AfterNotOk][k as usize];
                spec.dependency.after.push((kind, vec![JobRef::job(JobId(j))]));
            }
            spec.dependency.singleton = g == 2;
            spec.hold = hold;
            Command::Submit(spec)
        }),
        1 => (1u64..30).prop_map(|j| Command::Hold { job: JobRef::job(JobId(j)) }),
        1 => (1u64..30).prop_map(|j| Command::Release { job: JobRef::job(JobId(j)) }),
        1 => (1u64..30, 0u32..10_001).prop_map(|(j, p)| Command::UpdatePriority { job: JobRef::job(JobId(j)), priority: p }),
        1 => (node_name.clone(), any::<bool>()).prop_map(|(n, now)| Command::DrainNode { node: n.into(), reason: "r".into(), now }),
        1 => node_name.clone().prop_map(|n| Command::ResumeNode { node: n.into() }),
        1 => node_name.clone().prop_map(|n| Command::NodeDown { node: n.into(), reason: "lost".into() }),
        1 => node_name.prop_map(|n| Command::NodeUp { node: n.into() }),
        1 => (share_name, 0u32..12, prop_oneof![Just(Strategy::Reserve), Just(Strategy::Lend), Just(Strategy::LendAndBorrow)])
            .prop_map(|(s, m, st)| Command::PutShare(share(s, st, m))),
        // Times are offsets back from the entry's time, filled in by the runner.
        2 => (0u64..20_000, 0u64..6, 0u64..4_000, 1u32..8).prop_map(|(back, keep_jobs, keep_bytes, limit)| Command::ForgetEnded(Retention { ended_before: back, keep_jobs, keep_bytes, limit })),
    ]
}

/// A generated `ForgetEnded`'s cut-off, `back` ms before `now`.
fn at_entry(c: Command, now: Millis) -> Command {
    match c {
        Command::ForgetEnded(r) => Command::ForgetEnded(Retention {
            ended_before: now.saturating_sub(r.ended_before),
            ..r
        }),
        c => c,
    }
}

/// What retention must never break: no job left names a job that is gone as a
/// dependency, an array is whole or gone, and no job holds GPUs unknown to it.
fn references_hold(st: &State) -> Result<(), String> {
    for j in st.jobs.values() {
        for d in &j.deps {
            if !st.jobs.contains_key(&d.job) {
                return Err(format!("job {} depends on {}, which is gone", j.id, d.job));
            }
        }
        if let Some(a) = &j.array {
            let n = st.tasks_of(a.array, a.count).count();
            if n != a.count as usize {
                return Err(format!(
                    "array {} holds {n} of its {} tasks",
                    a.array, a.count
                ));
            }
        }
    }
    Ok(())
}

/// What each node's agent must run or stop: its active attempts, their status and
/// stop orders.
fn work(st: &State) -> BTreeMap<NodeName, Vec<(JobId, u32, JobStatus, Option<Stop>)>> {
    let mut out: BTreeMap<NodeName, Vec<_>> = BTreeMap::new();
    for j in st.jobs.values().filter(|j| j.status.is_active()) {
        let a = j.current_attempt().expect("an active job has an attempt");
        for n in &a.allocation {
            out.entry(n.node.clone())
                .or_default()
                .push((j.id, a.number, j.status, j.stop.clone()));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// After any stream of commands: indexes agree with the data, a snapshot restores
    /// to an equal state, replaying the stream gives the same state, and every rejected
    /// command left the state untouched.
    #[test]
    fn snapshots_round_trip_and_apply_is_deterministic(cmds in proptest::collection::vec(command(), 1..60)) {
        let mut st = cluster();
        ok(&mut st, Command::RegisterNode(node("n3", 4)), 0);
        ok(&mut st, Command::PutShare(share("c", Strategy::Reserve, 4)), 0);
        let mut replay = st.clone();
        let mut applied = vec![];
        for (i, c) in cmds.into_iter().enumerate() {
            let now = 1000 * (i as u64 + 1);
            let c = match c {
                Command::ApplyPlan(_) => Command::ApplyPlan(tranche_sched::plan(&st, now)),
                c => at_entry(c, now),
            };
            let forgettable = match &c {
                Command::ForgetEnded(r) => st.forgettable(r),
                _ => vec![],
            };
            for id in &forgettable {
                prop_assert!(st.jobs[id].status.is_terminal(), "job {} has not ended", id);
            }
            let before = st.snapshot();
            let touched = st.touched_by(&c);
            let work_before = work(&st);
            match st.apply(&c, now) {
                Ok(_) => {}
                Err(_) => prop_assert_eq!(&st.snapshot(), &before, "a rejected command changed the state"),
            }
            // Every node whose work changed was named beforehand.
            if let Touched::Nodes(named) = &touched {
                let after = work(&st);
                for n in work_before.keys().chain(after.keys()) {
                    if work_before.get(n) != after.get(n) {
                        prop_assert!(named.contains(n), "{:?} changed node {} unnamed", c, n);
                    }
                }
            }
            st.check_index().map_err(TestCaseError::fail)?;
            references_hold(&st).map_err(TestCaseError::fail)?;
            for id in &forgettable {
                prop_assert!(!st.jobs.contains_key(id), "job {} was to be forgotten", id);
            }
            applied.push((c, now));
        }
        let restored = State::restore(&st.snapshot()).unwrap();
        prop_assert_eq!(&restored, &st);
        restored.check_index().map_err(TestCaseError::fail)?;
        for (c, now) in &applied {
            let _ = replay.apply(c, *now);
        }
        prop_assert_eq!(&replay, &st);
    }
}

#[test]
fn a_truncated_snapshot_is_an_error_not_a_panic() {
    let st = cluster();
    let bytes = st.snapshot();
    assert!(State::restore(&bytes[..bytes.len() / 2]).is_err());
    let mut extra = bytes.clone();
    extra.push(0);
    assert!(State::restore(&extra).is_err());
}

/// A write retried after a controller did not answer in time can commit twice, the
/// late copy after the client's next write. With request ids each is applied once, and
/// every copy gets the first answer.
#[test]
fn a_request_applies_once_however_often_it_is_retried() {
    let mut st = cluster();
    let job = submit(&mut st, "a", 1, 1, 1);
    let req = |seq, first_incomplete| RequestId {
        identity: "user:alice".into(),
        client: 7,
        seq,
        first_incomplete,
    };
    let prio = |p| Command::UpdatePriority {
        job: JobRef::job(job),
        priority: p,
    };
    // Request 1 (priority 68) commits; a retry of it commits too; request 2 (97) commits;
    // then another late copy of request 1.
    let a = st.apply_request(Some(&req(1, 1)), &prio(68), 2);
    assert!(a.fresh && a.result.is_ok());
    let again = st.apply_request(Some(&req(1, 1)), &prio(68), 3);
    assert_eq!((again.fresh, again.result), (false, a.result.clone()));
    let b = st.apply_request(Some(&req(2, 2)), &prio(97), 4);
    assert!(b.fresh && b.result.is_ok());
    let late = st.apply_request(Some(&req(1, 1)), &prio(68), 5);
    assert!(!late.fresh);
    assert_eq!(
        st.jobs[&job].spec.priority, 97,
        "a late copy undid an acknowledged write"
    );
    // A refusal is remembered as such: its copies are refused alike, and change nothing.
    let bad = st.apply_request(Some(&req(3, 3)), &prio(99_999), 6);
    assert!(bad.fresh && bad.result.is_err());
    let bad_again = st.apply_request(Some(&req(3, 3)), &prio(99_999), 7);
    assert_eq!((bad_again.fresh, bad_again.result), (false, bad.result));
    // Answers the client has (below first_incomplete) are forgotten, and a copy of such a
    // request is ignored, not applied.
    let c = st.apply_request(Some(&req(4, 4)), &prio(10), 8);
    assert!(c.fresh);
    assert_eq!(
        st.sessions[&("user:alice".to_string(), 7)]
            .answers
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![4]
    );
    let ghost = st.apply_request(Some(&req(2, 2)), &prio(97), 9);
    assert!(!ghost.fresh && ghost.result.is_err());
    assert_eq!(st.jobs[&job].spec.priority, 10);
    // Sessions are replicated state: in the snapshot, and gone when long idle.
    let back = State::restore(&st.snapshot()).unwrap();
    assert_eq!(back, st);
    assert!(back.sessions.contains_key(&("user:alice".to_string(), 7)));
    let other = RequestId {
        identity: "user:alice".into(),
        client: 8,
        seq: 1,
        first_incomplete: 1,
    };
    st.apply_request(Some(&other), &prio(11), 9 + SESSION_IDLE_MS + 60_000);
    assert!(
        !st.sessions.contains_key(&("user:alice".to_string(), 7)),
        "an idle session is forgotten"
    );
    assert!(st.sessions.contains_key(&("user:alice".to_string(), 8)));
}

/// A session is (identity, client id): another identity that learnt or guessed a
/// client id neither reads that client's cached answers nor moves its
/// `first_incomplete` (so the client's own retries still apply once).
#[test]
fn l5_a_client_id_used_by_another_identity_reaches_nothing_of_its_session() {
    let mut st = cluster();
    let job = submit(&mut st, "a", 1, 1, 1);
    let req = |who: &str, seq, first_incomplete| RequestId {
        identity: who.into(),
        client: 7,
        seq,
        first_incomplete,
    };
    let prio = |p| Command::UpdatePriority {
        job: JobRef::job(job),
        priority: p,
    };
    let a = st.apply_request(Some(&req("user:alice", 1, 1)), &prio(5), 2);
    assert!(a.fresh && a.result.is_ok());
    // The same client id and number from bob is bob's own request: applied, not
    // answered from alice's session.
    let b = st.apply_request(Some(&req("user:bob", 1, 1)), &prio(6), 3);
    assert!(b.fresh, "bob was answered from alice's session");
    assert_eq!(st.jobs[&job].spec.priority, 6);
    // Bob claims everything below 1000 was answered: alice's session is untouched.
    st.apply_request(Some(&req("user:bob", 1000, 1000)), &prio(7), 4);
    let again = st.apply_request(Some(&req("user:alice", 1, 1)), &prio(5), 5);
    assert_eq!((again.fresh, again.result), (false, a.result));
    assert_eq!(
        st.jobs[&job].spec.priority, 7,
        "alice's retry applied twice"
    );
    assert_eq!(st.sessions.len(), 2);
}

fn lost(st: &mut State, job: JobId, reason: &str, now: Millis) {
    let attempt = st.jobs[&job].attempts.len() as u32;
    ok(
        st,
        Command::JobProgress {
            job,
            attempt,
            event: Progress::Lost {
                reason: reason.into(),
            },
        },
        now,
    );
}

/// A 2-node gang of `retry_attempts`, placed and running on n1 and n2.
fn running_gang(st: &mut State, retry_attempts: u32) -> JobId {
    let mut spec = JobSpec::new("g", "q", "a", "alice", "h100", 8, 2);
    spec.retry_attempts = retry_attempts;
    let gang = match ok(st, Command::Submit(spec), 1) {
        Outcome::Submitted { job, .. } => job,
        o => panic!("{o:?}"),
    };
    place_and_run(st, 2);
    assert_eq!(st.jobs[&gang].status, JobStatus::Running);
    assert_eq!(st.jobs[&gang].allocation().len(), 2);
    gang
}

/// The first member of a gang to fail stops the others with the checkpoint signal and
/// grace (the stop reaches both nodes' work); the attempt ends once, when the last
/// member is gone, FAILED as that first member ended, and counted as one failure.
#[test]
fn a_gang_member_that_fails_stops_the_others_and_the_job_fails_once() {
    let mut st = cluster();
    let gang = running_gang(&mut st, 1);
    exit(&mut st, gang, Some(1), 10);
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Running, "one member still runs");
    let stop = j.stop.as_ref().expect("the whole attempt is being stopped");
    assert!(is_gang_stop(stop));
    assert_eq!(stop.reason, "a member of the gang exited with code 1");
    assert_eq!(stop.deadline, 10 + 30 * SECOND);
    assert_eq!(j.failures, 0);
    for (node, items) in work(&st) {
        let (_, _, _, s) = items.iter().find(|i| i.0 == gang).expect("still placed");
        assert_eq!(s.as_ref(), Some(stop), "stop order on {node}");
    }
    assert_eq!(st.share_used(&"a".into(), &"h100".into()), 16);
    // The other member exits on its signal.
    exit(&mut st, gang, Some(143), 11);
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.failures, 1);
    assert_eq!(j.attempts.len(), 1);
    assert_eq!(j.attempts[0].end, Some(AttemptEnd::Exited { code: 1 }));
    assert_eq!(j.attempts[0].ended_at, Some(11));
    let last = j.transitions.last().unwrap();
    assert_eq!(
        last.reason,
        "exited with code 1 (the first member of the gang to fail; the others were stopped)"
    );
    assert!(st
        .nodes
        .values()
        .all(|n| n.allocated.iter().all(|a| a.is_none())));
    st.check_index().unwrap();
    // A late report about the ended attempt changes nothing.
    let attempt = 1;
    let e = st
        .apply(
            &Command::JobProgress {
                job: gang,
                attempt,
                event: Progress::Exited {
                    code: None,
                    reason: None,
                },
            },
            12,
        )
        .unwrap_err();
    assert!(e.to_string().contains("no attempt in progress"), "{e}");
}

/// With retries left, a gang whose member failed is requeued once, as one attempt.
#[test]
fn a_failed_gang_with_retries_left_is_requeued_once() {
    let mut st = cluster();
    let gang = running_gang(&mut st, 3);
    exit(&mut st, gang, None, 10);
    assert_eq!(
        st.jobs[&gang].stop.as_ref().unwrap().reason,
        "a member of the gang was killed"
    );
    exit(&mut st, gang, None, 40 * SECOND);
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Runnable);
    assert_eq!(j.failures, 1);
    assert_eq!(j.preemptions, 0);
    assert!(j
        .transitions
        .last()
        .unwrap()
        .reason
        .contains("retry 2 of 3"));
    // The next attempt counts its members afresh.
    place_and_run(&mut st, 41 * SECOND);
    exit(&mut st, gang, Some(0), 42 * SECOND);
    assert_eq!(st.jobs[&gang].status, JobStatus::Running);
    assert!(st.jobs[&gang].stop.is_none());
    exit(&mut st, gang, Some(0), 43 * SECOND);
    assert_eq!(st.jobs[&gang].status, JobStatus::Succeeded);
    st.check_index().unwrap();
}

/// A member that exits 0 stops no one: the gang succeeds when its last member does.
#[test]
fn a_gang_succeeds_when_its_last_member_exits_zero() {
    let mut st = cluster();
    let gang = running_gang(&mut st, 1);
    exit(&mut st, gang, Some(0), 10);
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Running);
    assert!(j.stop.is_none());
    assert_eq!(st.share_used(&"a".into(), &"h100".into()), 16);
    exit(&mut st, gang, Some(0), 20);
    assert_eq!(st.jobs[&gang].status, JobStatus::Succeeded);
    // ... and fails when its last member fails, though the first succeeded.
    let gang = running_gang(&mut st, 1);
    exit(&mut st, gang, Some(0), 30);
    exit(&mut st, gang, Some(2), 31);
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Failed);
    assert_eq!(j.attempts[0].end, Some(AttemptEnd::Exited { code: 2 }));
    st.check_index().unwrap();
}

/// A member its agent lost stops the others; the gang is then requeued as a lost
/// attempt (neither a failure nor a preemption). A cancel during that stop wins.
#[test]
fn a_lost_gang_member_requeues_the_gang_and_a_cancel_still_ends_it() {
    let mut st = cluster();
    let gang = running_gang(&mut st, 1);
    lost(&mut st, gang, "the shim vanished", 10);
    assert_eq!(
        st.jobs[&gang].stop.as_ref().unwrap().reason,
        "a member of the gang was lost (the shim vanished)"
    );
    exit(&mut st, gang, None, 11);
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Runnable);
    assert_eq!(j.attempts[0].end, Some(AttemptEnd::Lost));
    assert_eq!((j.failures, j.preemptions), (0, 0));
    st.check_index().unwrap();

    let mut st = cluster();
    let gang = running_gang(&mut st, 1);
    exit(&mut st, gang, Some(1), 10);
    ok(
        &mut st,
        Command::Cancel {
            job: JobRef::job(gang),
            reason: "user".into(),
        },
        11,
    );
    exit(&mut st, gang, None, 12);
    assert_eq!(st.jobs[&gang].status, JobStatus::Cancelled);
    st.check_index().unwrap();
}

/// A member that fails while the gang is already being preempted changes nothing: the
/// attempt is a preempted one, requeued once.
#[test]
fn a_gang_member_failing_during_a_preemption_is_still_a_preemption() {
    let mut st = cluster();
    let gang = running_gang(&mut st, 1);
    ok(
        &mut st,
        Command::DrainNode {
            node: "n2".into(),
            reason: "maintenance".into(),
            now: true,
        },
        10,
    );
    let reason = st.jobs[&gang].stop.as_ref().unwrap().reason.clone();
    exit(&mut st, gang, Some(1), 11);
    assert_eq!(st.jobs[&gang].stop.as_ref().unwrap().reason, reason);
    exit(&mut st, gang, None, 12);
    let j = &st.jobs[&gang];
    assert_eq!(j.status, JobStatus::Runnable);
    assert_eq!(j.failures, 0);
    st.check_index().unwrap();
}

// ---- arrays, dependencies, holds ------------------------------------------------------

fn submit_spec(st: &mut State, spec: JobSpec, now: Millis) -> JobId {
    match ok(st, Command::Submit(spec), now) {
        Outcome::Submitted { job, .. } => job,
        o => panic!("{o:?}"),
    }
}

fn array_spec(text: &str) -> JobSpec {
    let mut spec = JobSpec::new("sweep", "q", "a", "alice", "h100", 1, 1);
    spec.array = Some(ArraySpec::parse(text).unwrap());
    spec
}

#[test]
fn an_array_submit_is_one_command_and_makes_a_job_per_task() {
    let mut st = cluster();
    let v = st.version;
    let a = submit_spec(&mut st, array_spec("0-9:3,20"), 0);
    assert_eq!(st.version, v + 1, "one command, one state change");
    let tasks: Vec<(JobId, u32)> = st
        .tasks_of(a, 5)
        .map(|j| (j.id, j.array.as_ref().unwrap().index))
        .collect();
    assert_eq!(
        tasks,
        vec![
            (a, 0),
            (JobId(a.0 + 1), 3),
            (JobId(a.0 + 2), 6),
            (JobId(a.0 + 3), 9),
            (JobId(a.0 + 4), 20)
        ]
    );
    for (id, _) in &tasks {
        let j = &st.jobs[id];
        assert_eq!(j.status, JobStatus::Runnable);
        assert_eq!(j.array.as_ref().unwrap().count, 5);
        assert!(j.spec.array.is_none(), "a task's own spec has no array");
    }
    assert_eq!(
        st.jobs[&JobId(a.0 + 3)].job_ref().to_string(),
        format!("{a}_9")
    );
    // Task ids name one task; the array's id names them all.
    let t9 = JobRef {
        job: a,
        task: Some(9),
    };
    assert_eq!(st.resolve(&t9).unwrap(), vec![JobId(a.0 + 3)]);
    assert_eq!(st.resolve(&JobRef::job(a)).unwrap().len(), 5);
    let e = st
        .resolve(&JobRef {
            job: a,
            task: Some(4),
        })
        .unwrap_err();
    assert!(e.to_string().contains(&format!("{a}_4")), "{e}");
    // Cancel one task, then the rest at once.
    ok(
        &mut st,
        Command::Cancel {
            job: t9,
            reason: "".into(),
        },
        1,
    );
    assert_eq!(st.jobs[&JobId(a.0 + 3)].status, JobStatus::Cancelled);
    ok(
        &mut st,
        Command::Cancel {
            job: JobRef::job(a),
            reason: "".into(),
        },
        2,
    );
    assert!(st.tasks_of(a, 5).all(|j| j.status == JobStatus::Cancelled));
    let e = st
        .apply(
            &Command::Cancel {
                job: JobRef::job(a),
                reason: "".into(),
            },
            3,
        )
        .unwrap_err();
    assert!(e.to_string().contains("every task of array"), "{e}");
    st.check_index().unwrap();
}

#[test]
fn the_array_limit_caps_running_tasks_and_the_reason_says_so() {
    let mut st = cluster();
    let a = submit_spec(&mut st, array_spec("0-9%3"), 0);
    for round in 0..4u64 {
        place_and_run(&mut st, 10 + round * 10);
        let running: Vec<JobId> = st
            .tasks_of(a, 10)
            .filter(|j| j.status.is_active())
            .map(|j| j.id)
            .collect();
        assert!(
            running.len() <= 3,
            "round {round}: {} running",
            running.len()
        );
        if round < 3 {
            assert_eq!(
                running.len(),
                3,
                "round {round}: free GPUs go to the next tasks"
            );
        }
        let waiting = st.tasks_of(a, 10).find(|j| j.status == JobStatus::Runnable);
        if let Some(w) = waiting {
            let why = w.pending_reason.as_ref().unwrap().render(0);
            assert_eq!(
                why,
                format!("array {a} has 3 of its at most 3 tasks running")
            );
        }
        for id in running {
            exit(&mut st, id, Some(0), 15 + round * 10);
        }
    }
    assert_eq!(
        st.tasks_of(a, 10)
            .filter(|j| j.status == JobStatus::Succeeded)
            .count(),
        10
    );
}

#[test]
fn afterok_chains_run_in_order_and_a_failure_cancels_the_rest() {
    let mut st = cluster();
    let pre = submit(&mut st, "a", 1, 1, 0);
    let mut train = JobSpec::new("train", "q", "a", "alice", "h100", 1, 1);
    train.dependency = Dependency::parse(&format!("afterok:{pre}")).unwrap();
    let train = submit_spec(&mut st, train, 0);
    let mut eval = JobSpec::new("eval", "q", "a", "alice", "h100", 1, 1);
    eval.dependency = Dependency::parse(&format!("afterok:{train}")).unwrap();
    let eval = submit_spec(&mut st, eval, 0);
    let mut cleanup = JobSpec::new("cleanup", "q", "a", "alice", "h100", 1, 1);
    cleanup.dependency = Dependency::parse(&format!("afterany:{eval}")).unwrap();
    let cleanup = submit_spec(&mut st, cleanup, 0);
    let mut alarm = JobSpec::new("alarm", "q", "a", "alice", "h100", 1, 1);
    alarm.dependency = Dependency::parse(&format!("afternotok:{train}")).unwrap();
    let alarm = submit_spec(&mut st, alarm, 0);
    assert_eq!(st.jobs[&train].status, JobStatus::Pending);
    let why = |st: &State, id: JobId| st.jobs[&id].pending_reason.as_ref().unwrap().render(0);
    assert_eq!(why(&st, train), format!("waiting for job {pre} (RUNNABLE)"));
    place_and_run(&mut st, 1);
    assert_eq!(st.jobs[&pre].status, JobStatus::Running);
    assert_eq!(
        st.jobs[&train].status,
        JobStatus::Pending,
        "the scheduler leaves it alone"
    );
    assert_eq!(why(&st, train), format!("waiting for job {pre} (RUNNING)"));
    exit(&mut st, pre, Some(0), 2);
    assert_eq!(st.jobs[&train].status, JobStatus::Runnable);
    place_and_run(&mut st, 3);
    exit(&mut st, train, Some(1), 4);
    assert_eq!(st.jobs[&train].status, JobStatus::Failed);
    // eval can never run; cleanup (afterany on eval) then may; alarm (afternotok) may.
    let e = &st.jobs[&eval];
    assert_eq!(e.status, JobStatus::Cancelled);
    assert_eq!(
        e.transitions.last().unwrap().reason,
        format!("dependency job {train} FAILED")
    );
    assert_eq!(st.jobs[&cleanup].status, JobStatus::Runnable);
    assert_eq!(st.jobs[&alarm].status, JobStatus::Runnable);
    st.check_index().unwrap();
}

#[test]
fn dependencies_on_arrays_unknown_jobs_and_ended_jobs() {
    let mut st = cluster();
    let a = submit_spec(&mut st, array_spec("0-2"), 0);
    let mut whole = JobSpec::new("after-all", "q", "a", "alice", "h100", 1, 1);
    whole.dependency = Dependency::parse(&format!("afterok:{a}")).unwrap();
    let whole = submit_spec(&mut st, whole, 0);
    let mut one = JobSpec::new("after-one", "q", "a", "alice", "h100", 1, 1);
    one.dependency = Dependency::parse(&format!("afterok:{a}_1")).unwrap();
    let one = submit_spec(&mut st, one, 0);
    assert_eq!(st.jobs[&whole].deps.len(), 3);
    assert_eq!(st.jobs[&one].deps.len(), 1);
    // Unknown jobs and tasks are refused, and nothing changes.
    let before = st.snapshot();
    for bad in ["afterok:999", &format!("afterany:{a}_7")] {
        let mut s = JobSpec::new("x", "q", "a", "alice", "h100", 1, 1);
        s.dependency = Dependency::parse(bad).unwrap();
        let e = st.apply(&Command::Submit(s), 1).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{bad}: {e}");
    }
    assert_eq!(st.snapshot(), before);
    place_and_run(&mut st, 2);
    exit(&mut st, JobId(a.0 + 1), Some(0), 3);
    assert_eq!(st.jobs[&one].status, JobStatus::Runnable);
    assert_eq!(st.jobs[&whole].status, JobStatus::Pending);
    exit(&mut st, a, Some(0), 4);
    exit(&mut st, JobId(a.0 + 2), Some(0), 5);
    assert_eq!(st.jobs[&whole].status, JobStatus::Runnable);
    // On a job that has already failed: cancelled at once, with the reason.
    let f = submit(&mut st, "a", 1, 1, 6);
    ok(
        &mut st,
        Command::Cancel {
            job: f.into(),
            reason: "".into(),
        },
        6,
    );
    let mut late = JobSpec::new("late", "q", "a", "alice", "h100", 1, 1);
    late.dependency = Dependency::parse(&format!("afterok:{f}")).unwrap();
    let late = submit_spec(&mut st, late, 7);
    assert_eq!(st.jobs[&late].status, JobStatus::Cancelled);
    assert_eq!(
        st.jobs[&late].transitions.last().unwrap().reason,
        format!("dependency job {f} CANCELLED")
    );
    st.check_index().unwrap();
}

#[test]
fn singleton_waits_for_earlier_jobs_of_the_same_user_and_name() {
    let mut st = cluster();
    let first = submit(&mut st, "a", 1, 1, 0);
    let mut s = JobSpec::new("j", "q", "a", "alice", "h100", 1, 1);
    s.dependency.singleton = true;
    let second = submit_spec(&mut st, s, 1);
    let mut other = JobSpec::new("j", "q", "a", "bob", "h100", 1, 1);
    other.dependency.singleton = true;
    let bobs = submit_spec(&mut st, other, 1);
    assert_eq!(st.jobs[&second].status, JobStatus::Pending);
    assert_eq!(
        st.jobs[&bobs].status,
        JobStatus::Runnable,
        "another user's job of that name"
    );
    place_and_run(&mut st, 2);
    exit(&mut st, first, Some(3), 3);
    assert_eq!(
        st.jobs[&second].status,
        JobStatus::Runnable,
        "afterany: any end will do"
    );
}

#[test]
fn a_held_job_waits_until_released_and_hold_refuses_running_jobs() {
    let mut st = cluster();
    let mut s = JobSpec::new("j", "q", "a", "alice", "h100", 1, 1);
    s.hold = true;
    let held = submit_spec(&mut st, s, 0);
    let run = submit(&mut st, "a", 1, 1, 0);
    assert_eq!(st.jobs[&held].status, JobStatus::Pending);
    assert_eq!(st.jobs[&held].pending_reason, Some(PendingReason::Held));
    place_and_run(&mut st, 1);
    assert_eq!(st.jobs[&held].status, JobStatus::Pending);
    let e = st.apply(&Command::Hold { job: run.into() }, 2).unwrap_err();
    assert!(
        e.to_string().contains("only a waiting job can be held"),
        "{e}"
    );
    let e = st
        .apply(&Command::Release { job: run.into() }, 2)
        .unwrap_err();
    assert!(e.to_string().contains("is not held"), "{e}");
    ok(&mut st, Command::Release { job: held.into() }, 3);
    assert_eq!(st.jobs[&held].status, JobStatus::Runnable);
    // A RUNNABLE job can be held again; a held job with a dependency left stays PENDING
    // when released.
    ok(&mut st, Command::Hold { job: held.into() }, 4);
    assert_eq!(st.jobs[&held].status, JobStatus::Pending);
    let mut dep = JobSpec::new("d", "q", "a", "alice", "h100", 1, 1);
    dep.hold = true;
    dep.dependency = Dependency::parse(&format!("afterok:{run}")).unwrap();
    let dep = submit_spec(&mut st, dep, 5);
    ok(&mut st, Command::Release { job: dep.into() }, 6);
    assert_eq!(st.jobs[&dep].status, JobStatus::Pending);
    assert_eq!(
        st.jobs[&dep].pending_reason.as_ref().unwrap().render(6),
        format!("waiting for job {run} (RUNNING)")
    );
    exit(&mut st, run, Some(0), 7);
    assert_eq!(st.jobs[&dep].status, JobStatus::Runnable);
    st.check_index().unwrap();
}

// ---- the accounting ledger --------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// For any run, with entries minutes to an hour apart (so that hours are crossed):
    /// each share's used plus borrowed GPU time is the time its jobs' attempts held
    /// GPUs, each user's likewise, and what was lent (to shares or from no share's max)
    /// is what was borrowed.
    #[test]
    fn the_ledger_counts_what_jobs_held_and_lent_equals_borrowed(
        cmds in proptest::collection::vec((command(), 1u64..2_400), 1..60)
    ) {
        let mut st = cluster();
        ok(&mut st, Command::RegisterNode(node("n3", 4)), 0);
        ok(&mut st, Command::PutShare(share("c", Strategy::Reserve, 4)), 0);
        let start = 1_000;
        ok(&mut st, Command::ResumeNode { node: "n1".into() }, start);
        let mut now = start;
        // Jobs dropped by retention still count: the ledger keeps their hours.
        let mut forgotten = vec![];
        for (c, gap_s) in cmds {
            now += gap_s * 1000;
            let c = match c {
                Command::ApplyPlan(_) => Command::ApplyPlan(tranche_sched::plan(&st, now)),
                c => at_entry(c, now),
            };
            if let Command::ForgetEnded(r) = &c {
                forgotten.extend(st.forgettable(r).into_iter().map(|id| st.jobs[&id].clone()));
            }
            let _ = st.apply(&c, now);
        }
        let end = now + 5_000;
        let got = st.ledger_between(0, end);
        let mut held: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut by_user: BTreeMap<(String, String), u64> = BTreeMap::new();
        for j in st.jobs.values().chain(&forgotten) {
            for a in &j.attempts {
                let gpus: u64 = a.allocation.iter().map(|n| n.gpus.len() as u64).sum();
                let ms = (a.ended_at.unwrap_or(end) - a.scheduled_at) * gpus;
                let unit = j.spec.request.unit.to_string();
                *held.entry((j.spec.share.to_string(), unit.clone())).or_default() += ms;
                *by_user.entry((j.spec.user.to_string(), unit)).or_default() += ms;
            }
        }
        let counted = |m: &BTreeMap<(String, String), ledger::Totals>| -> BTreeMap<(String, String), u64> {
            m.iter()
                .map(|(k, t)| (k.clone(), t.used + t.borrowed))
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        held.retain(|_, v| *v > 0);
        by_user.retain(|_, v| *v > 0);
        let shares: BTreeMap<(String, String), ledger::Totals> =
            got.shares.iter().map(|((s, u), t)| ((s.to_string(), u.to_string()), *t)).collect();
        let users: BTreeMap<(String, String), ledger::Totals> =
            got.users.iter().map(|((s, u), t)| ((s.to_string(), u.to_string()), *t)).collect();
        prop_assert_eq!(counted(&shares), held);
        prop_assert_eq!(counted(&users), by_user);
        let borrowed: u64 = got.shares.values().map(|t| t.borrowed).sum();
        let lent: u64 = got.shares.values().map(|t| t.lent).sum::<u64>()
            + got.unassigned_lent.values().sum::<u64>();
        prop_assert_eq!(lent, borrowed);
        let user_borrowed: u64 = got.users.values().map(|t| t.borrowed).sum();
        let user_used: u64 = got.users.values().map(|t| t.used).sum();
        let share_used: u64 = got.shares.values().map(|t| t.used).sum();
        prop_assert_eq!(user_used + user_borrowed, share_used + borrowed);
        // The hours kept add up to the whole, wherever the range is cut.
        let cut = (start + (end - start) / 2) / HOUR * HOUR;
        let mut halves = st.ledger_between(0, cut);
        halves.add(&st.ledger_between(cut, end));
        prop_assert_eq!(halves, got);
    }
}

const HOUR: u64 = ledger::HOUR_MS;

#[test]
fn a_hand_counted_hour_of_lending_borrowing_reserve_and_preemption() {
    // Shares a (LEND_AND_BORROW, max 8) and b (LEND, max 8) on 16 GPUs, and c (RESERVE,
    // max 4), which uses none.
    let mut st = cluster();
    ok(
        &mut st,
        Command::PutShare(share("c", Strategy::Reserve, 4)),
        0,
    );
    ok(&mut st, Command::ResumeNode { node: "n1".into() }, HOUR);
    // a takes 12 GPUs, 4 of them borrowed, for half an hour.
    let j1 = submit(&mut st, "a", 8, 1, HOUR);
    let j2 = submit(&mut st, "a", 4, 1, HOUR);
    place_and_run(&mut st, HOUR);
    // Then b wants its 8: a job of a is reclaimed at 1.5 h and exits at once.
    let j3 = submit(&mut st, "b", 8, 1, HOUR + HOUR / 2);
    schedule(&mut st, HOUR + HOUR / 2);
    let reclaimed = [j1, j2]
        .into_iter()
        .find(|j| st.jobs[j].stop.is_some())
        .expect("a job of a is reclaimed");
    exit(&mut st, reclaimed, None, HOUR + HOUR / 2);
    place_and_run(&mut st, HOUR + HOUR / 2);
    assert!(
        st.jobs[&j3].status.is_active(),
        "{:?}",
        st.jobs[&j3].pending_reason
    );
    let got = st.ledger_between(HOUR, 2 * HOUR);
    let t = |s: &str| {
        got.shares
            .get(&(s.into(), "h100".into()))
            .copied()
            .unwrap_or_default()
    };
    let (a, b, c) = (t("a"), t("b"), t("c"));
    let gpu_h = |x: u64| x as f64 / HOUR as f64;
    let r = st.jobs[&reclaimed].spec.request.total_gpus() as f64;
    // a: 12 GPUs (4 above its max) for the first half hour, then 12 - r for the second.
    assert_eq!(gpu_h(a.used + a.borrowed), 12.0 * 0.5 + (12.0 - r) * 0.5);
    assert_eq!(gpu_h(a.borrowed), 4.0 * 0.5);
    // b lent those 4 for the first half hour (from its idle 8), then used its 8.
    assert_eq!(gpu_h(b.lent), 4.0 * 0.5);
    assert_eq!(gpu_h(b.used), 8.0 * 0.5);
    // c kept its 4 idle the whole hour.
    assert_eq!(gpu_h(c.reserved_idle), 4.0);
    assert_eq!(c.used + c.borrowed + c.lent, 0);
    // The reclaimed attempt had run half an hour: lost to reclaim.
    assert_eq!(gpu_h(a.lost_reclaim), r * 0.5);
    assert_eq!(a.lost_in_share + a.lost_drain, 0);
    // 16 GPUs for the hour.
    assert_eq!(gpu_h(got.capacity[&Unit::from("h100")]), 16.0);
    // A range that ends before it starts holds nothing (and does not panic).
    assert_eq!(st.ledger.sum(2 * HOUR, HOUR), ledger::Bucket::default());
}

// The AWS Batch-compatible endpoint's part of the state: access keys and tags.

fn key(id: &str, user: &str) -> AccessKey {
    AccessKey {
        id: id.into(),
        user: user.into(),
        role: KeyRole::User,
        created_at: 0,
        revoked_at: None,
        issuer_serial: None,
        expires_at: None,
    }
}

fn tag(resource: &str, tags: &[(&str, &str)]) -> Command {
    Command::TagResource {
        resource: resource.into(),
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn tags_of<'a>(st: &'a State, resource: &str) -> Vec<(&'a str, &'a str)> {
    st.aws
        .tags
        .get(resource)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[test]
fn a_key_put_twice_is_a_conflict_and_changes_nothing() {
    let mut st = State::new();
    let mut k = key("TKAAAA", "alice");
    k.created_at = 99;
    k.revoked_at = Some(1);
    ok(&mut st, Command::PutAccessKey(k), 10);
    let got = &st.aws.keys["TKAAAA"];
    assert_eq!(
        (got.created_at, got.revoked_at),
        (10, None),
        "stamped at entry time"
    );
    let before = st.clone();
    let e = st
        .apply(&Command::PutAccessKey(key("TKAAAA", "bob")), 20)
        .unwrap_err();
    assert!(
        matches!(e, ApplyError::Conflict(ref m) if m.contains("TKAAAA")),
        "{e:?}"
    );
    assert_eq!(st, before);
    assert_eq!(st.aws.keys["TKAAAA"].user.as_str(), "alice");
    // An id that is not letters and digits is refused as invalid.
    let e = st
        .apply(&Command::PutAccessKey(key("TK-1", "bob")), 20)
        .unwrap_err();
    assert!(matches!(e, ApplyError::Invalid(_)), "{e:?}");
    assert_eq!(st, before);
}

#[test]
fn revoke_sets_revoked_at_once() {
    let mut st = State::new();
    ok(&mut st, Command::PutAccessKey(key("TKAAAA", "alice")), 10);
    let revoke = Command::RevokeAccessKey {
        id: "TKAAAA".into(),
    };
    ok(&mut st, revoke.clone(), 20);
    assert_eq!(st.aws.keys["TKAAAA"].revoked_at, Some(20));
    ok(&mut st, revoke, 30);
    assert_eq!(
        st.aws.keys["TKAAAA"].revoked_at,
        Some(20),
        "kept from the first"
    );
    let e = st
        .apply(
            &Command::RevokeAccessKey {
                id: "TKNONE".into(),
            },
            40,
        )
        .unwrap_err();
    assert!(matches!(e, ApplyError::NotFound { .. }), "{e:?}");
}

#[test]
fn tags_merge_validate_and_untag_removes() {
    let mut st = cluster();
    let r = "quota-share/a";
    ok(&mut st, tag(r, &[("team", "a"), ("cost", "1")]), 1);
    ok(&mut st, tag(r, &[("team", "b"), ("env", "prod")]), 2);
    assert_eq!(
        tags_of(&st, r),
        vec![("cost", "1"), ("env", "prod"), ("team", "b")],
        "merged, existing keys overwritten"
    );
    // 51 tags in all are refused, and so is a key in the `aws:` namespace; neither
    // changes anything.
    let before = st.clone();
    let many: Vec<(String, String)> = (0..48).map(|i| (format!("k{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let e = st.apply(&tag(r, &many), 3).unwrap_err();
    assert!(e.to_string().contains("at most 50 tags, got 51"), "{e}");
    let e = st.apply(&tag(r, &[("aws:owner", "x")]), 3).unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
    assert_eq!(st, before);
    // 47 more make 50: taken.
    ok(&mut st, tag(r, &many[..47]), 4);
    assert_eq!(st.aws.tags[r].len(), 50);
    // Untag removes the keys named (an unknown key is no error); no tags left, no
    // entry left.
    let keys: Vec<String> = st.aws.tags[r].keys().cloned().collect();
    let untag = |keys: Vec<String>| Command::UntagResource {
        resource: r.into(),
        keys,
    };
    ok(&mut st, untag(vec!["team".into(), "nope".into()]), 5);
    assert_eq!(st.aws.tags[r].len(), 49);
    assert!(!st.aws.tags[r].contains_key("team"));
    ok(&mut st, untag(keys), 6);
    assert!(!st.aws.tags.contains_key(r));
}

#[test]
fn tagging_a_missing_object_is_not_found() {
    let mut st = cluster();
    let before = st.clone();
    for r in [
        "quota-share/nope",
        "job-queue/nope",
        "service-environment/nope",
        "scheduling-policy/nope",
        "compute-environment/gpu",
        "a",
    ] {
        let e = st.apply(&tag(r, &[("a", "b")]), 1).unwrap_err();
        assert!(
            matches!(e, ApplyError::NotFound { ref name, .. } if name == r),
            "{r}: {e:?}"
        );
        let e = st
            .apply(
                &Command::UntagResource {
                    resource: r.into(),
                    keys: vec!["a".into()],
                },
                1,
            )
            .unwrap_err();
        assert!(matches!(e, ApplyError::NotFound { .. }), "{r}: {e:?}");
    }
    assert_eq!(st, before);
    for r in [
        "quota-share/a",
        "job-queue/q",
        "service-environment/gpu",
        "scheduling-policy/fifo",
    ] {
        assert!(TAGGED_KINDS.iter().any(|k| r.starts_with(k)));
        ok(&mut st, tag(r, &[("a", "b")]), 1);
    }
}

#[test]
fn deleting_a_share_forgets_its_tags() {
    let mut st = cluster();
    ok(&mut st, tag("quota-share/a", &[("team", "a")]), 1);
    ok(&mut st, tag("job-queue/q", &[("team", "a")]), 1);
    let mut s = st.shares[&ShareName::from("a")].clone();
    s.state = ObjState::Disabled;
    ok(&mut st, Command::PutShare(s.clone()), 2);
    assert_eq!(
        tags_of(&st, "quota-share/a"),
        vec![("team", "a")],
        "kept while it exists"
    );
    ok(&mut st, Command::DeleteShare("a".into()), 3);
    assert!(!st.aws.tags.contains_key("quota-share/a"));
    assert_eq!(
        tags_of(&st, "job-queue/q"),
        vec![("team", "a")],
        "others kept"
    );
    // A share made again under the same name starts with no tags.
    s.state = ObjState::Enabled;
    ok(&mut st, Command::PutShare(s), 4);
    assert!(tags_of(&st, "quota-share/a").is_empty());
}
