//! What the state machine's tests share: a small cluster, commands that must be
//! accepted, the scheduler run once, agents' reports, and random command streams.

#![allow(dead_code)]

use proptest::prelude::{any, prop_oneof, Just, Strategy as Gen};
use std::collections::BTreeMap;
use tranche_model::*;
use tranche_state::*;

pub fn ok(st: &mut State, cmd: Command, now: Millis) -> Outcome {
    st.apply(&cmd, now)
        .unwrap_or_else(|e| panic!("{cmd:?} refused: {e}"))
}

pub fn share(name: &str, strategy: Strategy, max: u32) -> QuotaShare {
    QuotaShare {
        weight: None,
        loans: Default::default(),
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

pub fn node(name: &str, gpus: u32) -> NodeInventory {
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
pub fn cluster() -> State {
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

pub fn submit(st: &mut State, share: &str, gpus: u32, nodes: u32, now: Millis) -> JobId {
    match ok(
        st,
        Command::Submit(JobSpec::new("j", "q", share, "alice", "h100", gpus, nodes)),
        now,
    ) {
        Outcome::Submitted { job, .. } => job,
        o => panic!("{o:?}"),
    }
}

/// Runs the scheduler once and applies its plan.
pub fn schedule(st: &mut State, now: Millis) {
    let plan = tranche_sched::plan(st, now);
    ok(st, Command::ApplyPlan(plan), now);
}

/// Schedules, then reports every placed job as running.
pub fn place_and_run(st: &mut State, now: Millis) {
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

pub fn exit(st: &mut State, job: JobId, code: Option<i32>, now: Millis) {
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

/// Random command streams against a small cluster.
pub fn command() -> impl Gen<Value = Command> {
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
pub fn at_entry(c: Command, now: Millis) -> Command {
    match c {
        Command::ForgetEnded(r) => Command::ForgetEnded(Retention {
            ended_before: now.saturating_sub(r.ended_before),
            ..r
        }),
        c => c,
    }
}

/// What each node's agent must run or stop: its active attempts, their status and
/// stop orders.
pub fn work(st: &State) -> BTreeMap<NodeName, Vec<(JobId, u32, JobStatus, Option<Stop>)>> {
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

pub fn lost(st: &mut State, job: JobId, reason: &str, now: Millis) {
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

pub fn submit_spec(st: &mut State, spec: JobSpec, now: Millis) -> JobId {
    match ok(st, Command::Submit(spec), now) {
        Outcome::Submitted { job, .. } => job,
        o => panic!("{o:?}"),
    }
}
