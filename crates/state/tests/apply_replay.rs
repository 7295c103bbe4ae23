//! Determinism and exact snapshots: any command stream replays alike and restores
//! from its snapshot, and retried requests apply once per session.

mod common;

use common::*;
use proptest::prelude::{prop_assert, prop_assert_eq, proptest, ProptestConfig, TestCaseError};
use tranche_model::*;
use tranche_state::*;

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
