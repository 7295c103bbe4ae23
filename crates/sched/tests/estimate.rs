//! Positions and estimated starts of waiting jobs, on hand-built states.

mod harness;

use harness::{share, H};
use tranche_model::Strategy::{Lend, LendAndBorrow};
use tranche_model::*;
use tranche_sched::estimate::standings;

/// A running job of `gpus` GPUs on node `node` from GPU `first`, with a time limit.
fn running(
    h: &mut H,
    name: &str,
    share: &str,
    node: &str,
    first: u32,
    gpus: u32,
    limit: Option<u64>,
) -> JobId {
    let mut spec = h.spec(name, share, gpus, 1, 0);
    spec.time_limit_s = limit;
    let id = h.submit(spec);
    let on: Vec<u32> = (first..first + gpus).collect();
    let s = h.st.shares[&ShareName(share.into())].clone();
    let used = h.st.share_used(&s.name, &Unit("g".into()));
    h.place(
        id,
        &[(node, &on)],
        used + gpus > s.max_for(&Unit("g".into())),
    );
    id
}

#[test]
fn the_estimate_follows_the_time_limits_of_the_running_jobs_ahead() {
    let mut h = H::new(&[("n1", "g", 8)]);
    h.share(share("a", LendAndBorrow, 8));
    h.share(share("b", Lend, 8));
    let t0 = h.now;
    running(&mut h, "short", "a", "n1", 0, 4, Some(100));
    running(&mut h, "forever", "a", "n1", 4, 4, None);
    h.tick(10);
    let first = h.waiting("first", "b", 4, 1, 5);
    let second = h.waiting("second", "b", 4, 1, 1);
    let other = h.waiting("other", "a", 2, 1, 9);
    let s = standings(&h.st, h.now);
    // In share b, first (priority 5) is ahead of second.
    assert_eq!((s[&first].in_share, s[&first].share_waiting), (1, 2));
    assert_eq!((s[&second].in_share, s[&second].share_waiting), (2, 2));
    // In the queue, by priority: other (9), first (5), second (1).
    assert_eq!(
        (s[&other].in_queue, s[&first].in_queue, s[&second].in_queue),
        (1, 2, 3)
    );
    assert_eq!(s[&first].queue_waiting, 3);
    // first: the 4 GPUs of `short` come free at its limit, 100 s after it started.
    let short_start =
        h.st.jobs
            .values()
            .find(|j| j.spec.name.as_str() == "short")
            .unwrap()
            .started_at()
            .unwrap();
    assert_eq!(s[&first].start, Estimate::At(short_start + 100 * SECOND));
    assert!(short_start >= t0);
    // second needs `forever`'s GPUs too, and it has no time limit.
    assert_eq!(s[&second].start, Estimate::Unknown);
}

#[test]
fn free_gpus_start_now_and_a_share_at_max_waits_for_its_own_jobs() {
    let mut h = H::new(&[("n1", "g", 8)]);
    h.share(share("a", Lend, 4));
    h.share(share("b", Lend, 4));
    running(&mut h, "mine", "a", "n1", 0, 4, Some(60));
    h.tick(1);
    // b has 4 free GPUs under its max: now.
    let b = h.waiting("b1", "b", 4, 1, 0);
    // a is at its max and does not borrow: it waits for `mine`, though GPUs are free.
    let a = h.waiting("a1", "a", 2, 1, 0);
    let s = standings(&h.st, h.now);
    assert_eq!(s[&b].start, Estimate::Now);
    let mine =
        h.st.jobs
            .values()
            .find(|j| j.spec.name.as_str() == "mine")
            .unwrap();
    assert_eq!(
        s[&a].start,
        Estimate::At(mine.started_at().unwrap() + 60 * SECOND)
    );
    // Past that time (the job overran its estimate's basis), the estimate is now.
    let later = standings(&h.st, h.now + 3_600 * SECOND);
    assert_eq!(later[&a].start, Estimate::Now);
}
