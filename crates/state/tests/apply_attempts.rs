//! How attempts end: preemption, drains, nodes going DOWN, cancels, lost attempts,
//! and gangs whose members end one by one.

mod common;

use common::*;
use tranche_model::*;
use tranche_state::*;

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
