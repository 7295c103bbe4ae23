//! The plan verifier: stale actions are rejected one by one and a gang as a whole, and
//! a plan never takes a share past its ceiling.

mod common;

use common::*;
use tranche_model::*;
use tranche_state::*;

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
