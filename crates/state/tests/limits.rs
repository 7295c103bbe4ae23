//! What the replicated state holds: spec sizes and reasons refused on apply (so an
//! oversize entry already in the log never rebuilds memory on replay), one spec per
//! array in memory and in the image, each share's job limits, and how long ended jobs
//! stay (retention).

use std::collections::BTreeMap;
use std::sync::Arc;

use tranche_model::*;
use tranche_state::*;

fn ok(st: &mut State, cmd: Command, now: Millis) -> Outcome {
    st.apply(&cmd, now)
        .unwrap_or_else(|e| panic!("{cmd:?} refused: {e}"))
}

/// One 8-GPU node, queue `q`, share `s` open to everyone with `limits`.
fn cluster(limits: JobLimits) -> State {
    let mut st = State::new();
    ok(
        &mut st,
        Command::PutEnvironment(ServiceEnvironment {
            name: "gpu".into(),
            selector: BTreeMap::new(),
            capacity_limits: vec![CapacityLimit {
                unit: "h100".into(),
                max: 8,
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
        Command::PutShare(QuotaShare {
            weight: None,
            loans: Default::default(),
            name: "s".into(),
            queue: "q".into(),
            capacity_limits: vec![CapacityLimit {
                unit: "h100".into(),
                max: 8,
            }],
            resource_sharing: ResourceSharing {
                strategy: Strategy::Lend,
                borrow_limit: None,
            },
            in_share_preemption: false,
            state: ObjState::Enabled,
            members: vec![],
            default_grace_s: 30,
            max_grace_s: 600,
            min_runtime_s: 0,
            max_user_priority: DEFAULT_MAX_USER_PRIORITY,
            limits,
        }),
        0,
    );
    ok(
        &mut st,
        Command::RegisterNode(NodeInventory {
            name: "n1".into(),
            address: "127.0.0.1".into(),
            labels: BTreeMap::new(),
            gpus: (0..8)
                .map(|i| Gpu {
                    index: GpuIndex(i),
                    uuid: format!("GPU-{i}"),
                    unit: "h100".into(),
                    memory_mb: 80_000,
                    healthy: true,
                })
                .collect(),
            cpus: 64,
            memory_mb: 512_000,
        }),
        0,
    );
    st
}

fn spec(user: &str) -> JobSpec {
    let mut s = JobSpec::new("j", "q", "s", user, "h100", 1, 1);
    s.command = vec!["true".into()];
    s
}

fn submitted(o: Outcome) -> JobId {
    match o {
        Outcome::Submitted { job, .. } => job,
        o => panic!("{o:?}"),
    }
}

/// The refusal's text, which must name `field` and every one of `words`; the state
/// must be as it was.
fn refused(st: &mut State, cmd: Command, now: Millis, words: &[&str]) -> String {
    let before = st.clone();
    let e = st.apply(&cmd, now).expect_err("accepted").to_string();
    for w in words {
        assert!(e.contains(w), "{e:?} does not name {w:?}");
    }
    assert_eq!(*st, before, "a refused command changed the state");
    st.check_index().unwrap();
    e
}

#[test]
fn h2_an_oversize_submit_in_the_log_is_refused_on_apply() {
    let mut st = cluster(JobLimits::default());
    // A 1 MB env, as an older leader could have committed it: refused where it is
    // applied, on replay as on the first apply.
    let mut big = spec("alice");
    big.env.insert("X".into(), "a".repeat(1_000_000));
    let e = refused(
        &mut st,
        Command::Submit(big.clone()),
        1,
        &["env.X", "32768", "1000000"],
    );
    assert!(!e.contains("JobSpec"), "{e}");
    // Many values each under the per-value limit: refused by the total.
    let mut wide = spec("alice");
    for i in 0..40 {
        wide.env.insert(format!("V{i}"), "b".repeat(30_000));
    }
    refused(
        &mut st,
        Command::Submit(wide),
        1,
        &["env", "65536", "bytes in all"],
    );
    let mut long_cmd = spec("alice");
    long_cmd.command = vec!["c".repeat(40_000), "d".repeat(40_000)];
    refused(&mut st, Command::Submit(long_cmd), 1, &["command", "65536"]);
    let mut tag = spec("alice");
    tag.tags.insert("t".into(), "v".repeat(10_000));
    refused(&mut st, Command::Submit(tag), 1, &["tags.t", "256"]);
    let mut path = spec("alice");
    path.output = Some(format!("/{}", "p".repeat(5000)));
    refused(&mut st, Command::Submit(path), 1, &["output", "4096"]);
    // Just under every limit: accepted.
    let mut fits = spec("alice");
    fits.env.insert("X".into(), "a".repeat(32_000));
    fits.env.insert("Y".into(), "a".repeat(32_000));
    submitted(ok(&mut st, Command::Submit(fits), 2));
}

#[test]
fn h2_an_oversize_reason_is_refused_on_apply_for_every_command() {
    let mut st = cluster(JobLimits::default());
    let job = submitted(ok(&mut st, Command::Submit(spec("alice")), 1));
    let mut array = spec("alice");
    array.array = Some(ArraySpec::parse("0-9").unwrap());
    let arr = submitted(ok(&mut st, Command::Submit(array), 1));
    let long = "r".repeat(100_000);
    for job in [JobRef::job(job), JobRef::job(arr)] {
        refused(
            &mut st,
            Command::Cancel {
                job,
                reason: long.clone(),
            },
            2,
            &["reason", "1024", "100000"],
        );
    }
    refused(
        &mut st,
        Command::DrainNode {
            node: "n1".into(),
            reason: long.clone(),
            now: true,
        },
        2,
        &["reason", "1024"],
    );
    refused(
        &mut st,
        Command::NodeDown {
            node: "n1".into(),
            reason: long.clone(),
        },
        2,
        &["reason", "1024"],
    );
    ok(
        &mut st,
        Command::Cancel {
            job: JobRef::job(arr),
            reason: "r".repeat(1024),
        },
        3,
    );
    assert_eq!(st.jobs[&arr].status, JobStatus::Cancelled);
}

/// Bytes of the state image (what a snapshot sends and a restart reads).
fn image_bytes(st: &State) -> usize {
    st.snapshot().len()
}

#[test]
fn h2_an_array_holds_one_spec_in_memory_and_in_the_image() {
    let mut st = cluster(JobLimits::default());
    let base = image_bytes(&st);
    let mut big = spec("alice");
    for i in 0..2 {
        big.env.insert(format!("E{i}"), "x".repeat(30_000));
    }
    big.array = Some(ArraySpec::parse("0-1999").unwrap());
    let first = submitted(ok(&mut st, Command::Submit(big), 1));
    let tasks: Vec<&Job> = st.jobs.values().collect();
    assert_eq!(tasks.len(), 2000);
    assert!(
        tasks.iter().all(|j| Arc::ptr_eq(&j.spec, &tasks[0].spec)),
        "a task holds its own copy of the array's spec"
    );
    // 2,000 copies would be 120 MB; one is 60 KB, and each task's own record small.
    let grown = image_bytes(&st) - base;
    assert!(
        grown < 2_000_000,
        "the image grew by {grown} bytes for one 60 KB array spec"
    );
    // Read back (an install or a restart): the tasks share one spec again.
    let back = State::restore(&st.snapshot()).unwrap();
    assert_eq!(back, st);
    let specs: std::collections::BTreeSet<*const JobSpec> =
        back.jobs.values().map(|j| Arc::as_ptr(&j.spec)).collect();
    assert_eq!(specs.len(), 1);
    back.check_index().unwrap();
    // A task's priority changed: it gets a spec of its own, shared with any sibling
    // of that priority; the whole array changed: one spec again.
    let task = |i: u32| JobRef {
        job: first,
        task: Some(i),
    };
    for (i, p) in [(1, 5), (2, 5), (3, 7)] {
        ok(
            &mut st,
            Command::UpdatePriority {
                job: task(i),
                priority: p,
            },
            2,
        );
    }
    let distinct = |st: &State| {
        st.jobs
            .values()
            .map(|j| Arc::as_ptr(&j.spec))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert_eq!(distinct(&st), 3);
    assert_eq!(st.jobs[&JobId(first.0 + 2)].spec.priority, 5);
    ok(
        &mut st,
        Command::UpdatePriority {
            job: JobRef::job(first),
            priority: 9,
        },
        3,
    );
    assert_eq!(distinct(&st), 1);
    assert!(st.jobs.values().all(|j| j.spec.priority == 9));
    assert!(image_bytes(&st) - base < 2_000_000);
}

#[test]
fn h2_a_users_waiting_jobs_are_limited_per_share_and_freed_when_they_end() {
    let limits = JobLimits {
        max_pending_per_user: 3,
        max_jobs_per_user: 4,
        max_jobs_per_share: 6,
        ..JobLimits::default()
    };
    let mut st = cluster(limits);
    let mut alice = vec![];
    for _ in 0..3 {
        alice.push(submitted(ok(&mut st, Command::Submit(spec("alice")), 1)));
    }
    refused(
        &mut st,
        Command::Submit(spec("alice")),
        1,
        &["alice", "3 waiting jobs", "max_pending_per_user", "3"],
    );
    // An array counts each task.
    let mut arr = spec("bob");
    arr.array = Some(ArraySpec::parse("0-3").unwrap());
    refused(
        &mut st,
        Command::Submit(arr),
        1,
        &["bob", "max_pending_per_user", "adds 4"],
    );
    // Bob is not held to alice's jobs.
    let bob = submitted(ok(&mut st, Command::Submit(spec("bob")), 1));
    // A job that ends frees its place.
    ok(
        &mut st,
        Command::Cancel {
            job: JobRef::job(alice[0]),
            reason: String::new(),
        },
        2,
    );
    let again = submitted(ok(&mut st, Command::Submit(spec("alice")), 2));
    // The share's total: alice 3, bob 1, then bob 2 more = 6; the next is refused.
    for _ in 0..2 {
        submitted(ok(&mut st, Command::Submit(spec("bob")), 3));
    }
    refused(
        &mut st,
        Command::Submit(spec("carol")),
        3,
        &["share s has 6 jobs not ended", "max_jobs_per_share", "6"],
    );
    st.check_index().unwrap();
    assert_eq!(State::restore(&st.snapshot()).unwrap(), st);
    let _ = (bob, again);
}

#[test]
fn h2_submits_per_minute_arrays_and_array_size_are_limited_by_entry_time() {
    let limits = JobLimits {
        submits_per_user_per_minute: 2,
        max_arrays_per_user: 1,
        max_array_tasks: 5,
        ..JobLimits::default()
    };
    let mut st = cluster(limits);
    let minute = 60_000;
    submitted(ok(&mut st, Command::Submit(spec("alice")), 10 * minute));
    submitted(ok(&mut st, Command::Submit(spec("alice")), 10 * minute + 1));
    refused(
        &mut st,
        Command::Submit(spec("alice")),
        10 * minute + 30_000,
        &["2 submits", "submits_per_user_per_minute", "retry in 30 s"],
    );
    submitted(ok(
        &mut st,
        Command::Submit(spec("bob")),
        10 * minute + 30_000,
    ));
    // The next minute of entry time.
    let mut arr = spec("alice");
    arr.array = Some(ArraySpec::parse("0-5").unwrap());
    refused(
        &mut st,
        Command::Submit(arr.clone()),
        11 * minute,
        &["array", "at most 5 tasks", "max_array_tasks", "got 6"],
    );
    arr.array = Some(ArraySpec::parse("0-4").unwrap());
    submitted(ok(&mut st, Command::Submit(arr.clone()), 11 * minute));
    refused(
        &mut st,
        Command::Submit(arr),
        11 * minute + 1,
        &["1 arrays", "max_arrays_per_user"],
    );
    // Only the current minute's windows are kept.
    submitted(ok(&mut st, Command::Submit(spec("carol")), 20 * minute));
    assert_eq!(st.submit_rate.len(), 1);
    st.check_index().unwrap();
}

#[test]
fn a_node_report_with_an_oversize_reason_is_kept_cut() {
    let mut st = cluster(JobLimits::default());
    let job = submitted(ok(&mut st, Command::Submit(spec("alice")), 1));
    let plan = tranche_sched::plan(&st, 2);
    ok(&mut st, Command::ApplyPlan(plan), 2);
    assert!(st.jobs[&job].status.is_active());
    // The node's report is not lost (the job would never end), its reason is cut.
    ok(
        &mut st,
        Command::JobProgress {
            job,
            attempt: 1,
            event: Progress::Lost {
                reason: "é".repeat(1 << 19),
            },
        },
        3,
    );
    let j = &st.jobs[&job];
    assert!(!j.status.is_active());
    let kept = j.transitions.iter().map(|t| t.reason.len()).max().unwrap();
    assert!(kept < 1200, "a {kept}-byte reason was kept");
    assert_eq!(capped_reason(&"é".repeat(1000)).len(), 1024);
}

fn cancel(st: &mut State, job: JobRef, now: Millis) {
    ok(
        st,
        Command::Cancel {
            job,
            reason: "done with it".into(),
        },
        now,
    );
}

fn forget(st: &mut State, ended_before: Millis, keep_jobs: u64, now: Millis) -> Vec<JobId> {
    forget_by(
        st,
        Retention {
            ended_before,
            keep_jobs,
            keep_bytes: u64::MAX,
            limit: 1_000,
        },
        now,
    )
}

fn forget_by(st: &mut State, r: Retention, now: Millis) -> Vec<JobId> {
    let ids = st.forgettable(&r);
    ok(st, Command::ForgetEnded(r), now);
    for id in &ids {
        assert!(st.job(*id).is_none(), "job {id} is still held");
    }
    st.check_index().unwrap();
    ids
}

#[test]
fn ended_jobs_leave_after_their_hot_time_or_beyond_the_cap_oldest_first() {
    let mut st = cluster(JobLimits::default());
    let mut ids = vec![];
    for (i, t) in ["t1", "t2", "t3"].iter().enumerate() {
        let mut s = spec("alice");
        s.client_token = Some(t.to_string());
        let id = submitted(ok(&mut st, Command::Submit(s), 1));
        cancel(&mut st, JobRef::job(id), 10 * (i as u64 + 1));
        ids.push(id);
    }
    // A job that has not ended never leaves.
    let waiting = submitted(ok(&mut st, Command::Submit(spec("bob")), 1));
    assert_eq!(st.ended_count(), 3);
    assert_eq!(st.oldest_ended(), Some(10));
    // Ended before 15: the first only.
    assert_eq!(forget(&mut st, 15, 100, 40), vec![ids[0]]);
    // Its idempotency token went with it: the same token makes a new job.
    let mut again = spec("alice");
    again.client_token = Some("t1".into());
    match ok(&mut st, Command::Submit(again), 41) {
        Outcome::Submitted { job, existing } => assert!(job != ids[0] && !existing),
        o => panic!("{o:?}"),
    }
    // At most one ended job stays: the oldest of the other two leaves.
    assert_eq!(forget(&mut st, 0, 1, 42), vec![ids[1]]);
    assert_eq!(st.ended_count(), 1);
    assert!(st.job(ids[2]).is_some() && st.job(waiting).is_some());
    // Nothing due: an entry that changes nothing else.
    assert_eq!(forget(&mut st, 0, 1, 43), vec![]);
}

#[test]
fn an_array_leaves_whole_once_its_last_task_has_ended() {
    let mut st = cluster(JobLimits::default());
    let mut s = spec("alice");
    s.array = Some(ArraySpec {
        ranges: vec![IndexRange {
            start: 0,
            end: 2,
            step: 1,
        }],
        max_running: None,
    });
    let array = submitted(ok(&mut st, Command::Submit(s), 1));
    for t in [0, 1] {
        cancel(
            &mut st,
            JobRef {
                job: array,
                task: Some(t),
            },
            10,
        );
    }
    // Two of three tasks have ended, long ago: the array stays whole.
    assert_eq!(
        forget(&mut st, 1_000, 0, 20),
        vec![],
        "not even beyond the cap"
    );
    assert_eq!(st.ended_count(), 2);
    cancel(
        &mut st,
        JobRef {
            job: array,
            task: Some(2),
        },
        50,
    );
    // The array ended when its last task did.
    assert_eq!(forget(&mut st, 40, 100, 60), vec![]);
    let gone = forget(&mut st, 51, 100, 61);
    assert_eq!(gone.len(), 3);
    assert_eq!(st.ended_count(), 0);
    // A snapshot of what is left restores to the same state.
    let back = State::restore(&st.snapshot()).unwrap();
    assert_eq!(back, st);
    back.check_index().unwrap();
}

#[test]
fn beyond_the_byte_cap_the_oldest_ended_jobs_leave() {
    let mut st = cluster(JobLimits::default());
    let mut ids = vec![];
    for i in 0..3 {
        let mut s = spec("alice");
        s.env.insert("BLOB".into(), "x".repeat(10_000));
        let id = submitted(ok(&mut st, Command::Submit(s), 1));
        cancel(&mut st, JobRef::job(id), 10 + i);
        ids.push(id);
    }
    let each = st.ended_bytes() / 3;
    assert!(each > 10_000 + retention::ENTRY_JOB_BYTES, "{each}");
    // Room for two: the oldest leaves, however recent it is.
    let r = Retention {
        ended_before: 0,
        keep_jobs: u64::MAX,
        keep_bytes: 2 * each + 1,
        limit: 1_000,
    };
    assert_eq!(forget_by(&mut st, r, 20), vec![ids[0]]);
    assert_eq!(st.ended_bytes(), 2 * each);
    assert_eq!(forget_by(&mut st, r, 21), vec![]);
}
