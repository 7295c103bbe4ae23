//! Arrays, dependencies and holds.

mod common;

use common::*;
use tranche_model::*;
use tranche_state::*;

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
