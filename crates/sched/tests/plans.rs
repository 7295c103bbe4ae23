//! Plan tests: hand-built states and the exact plan one pass makes, one group per rule
//! of `docs/design.md` §3, then work conservation and the quota guarantee.

mod harness;

use harness::{share, H};
use tranche_model::Strategy::{Lend, LendAndBorrow, Reserve};
use tranche_model::*;
use tranche_sched::estimate::room_kept_above;
use tranche_state::Command;

fn nodes(n: u32, gpus: u32) -> Vec<(String, &'static str, u32)> {
    (1..=n).map(|i| (format!("n{i}"), "g", gpus)).collect()
}

fn cluster(n: u32, gpus: u32) -> H {
    let v = nodes(n, gpus);
    let refs: Vec<(&str, &str, u32)> = v.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
    H::new(&refs)
}

fn in_share(mut s: QuotaShare) -> QuotaShare {
    s.in_share_preemption = true;
    s
}

// ---- rule 1: order inside a share ------------------------------------------------------

#[test]
fn rule1_higher_priority_first_then_older() {
    let mut h = cluster(1, 2);
    h.share(share("a", Lend, 2));
    h.waiting("old", "a", 1, 1, 1);
    h.waiting("young", "a", 1, 1, 1);
    h.waiting("urgent", "a", 1, 1, 7);
    assert_eq!(h.plan(), ["place urgent n1[0]", "place old n1[1]"]);
    assert_eq!(
        h.reasons()["young"],
        "share a at max 2/2 g (needs 1 more), strategy LEND does not borrow"
    );
}

// ---- rule 2: the own-capacity pass -----------------------------------------------------

#[test]
fn rule2_a_big_job_that_does_not_fit_does_not_block_a_small_one() {
    let mut h = cluster(2, 4);
    h.share(share("a", Lend, 8));
    h.running("r", "a", 0, &[("n1", &[0, 1])]);
    h.waiting("big", "a", 4, 2, 5);
    h.waiting("small", "a", 2, 1, 1);
    assert_eq!(h.plan(), ["place small n1[2,3]"]);
}

#[test]
fn rule2_shares_take_turns_by_head_priority() {
    let mut h = cluster(1, 1);
    h.share(share("a", Lend, 1));
    h.share(share("b", Lend, 1));
    h.waiting("a1", "a", 1, 1, 1);
    h.waiting("b1", "b", 1, 1, 9);
    assert_eq!(h.plan(), ["place b1 n1[0]"]);
}

#[test]
fn rule2_a_reserve_shares_idle_gpus_are_kept_for_it() {
    let mut h = cluster(2, 1);
    h.share(share("infra", Reserve, 1));
    h.share(share("a", LendAndBorrow, 1));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.waiting("a2", "a", 1, 1, 0);
    assert!(h.plan().is_empty());
    assert_eq!(h.reasons()["a2"], "RESERVE share infra holds 1 idle g");
    h.waiting("i1", "infra", 1, 1, 0);
    assert_eq!(h.plan(), ["place i1 n2[0]"]);
}

#[test]
fn rule2_lower_priority_jobs_do_not_take_the_room_a_higher_priority_one_waits_for() {
    let mut h = cluster(2, 4);
    h.share(share("a", LendAndBorrow, 4));
    h.share(share("b", LendAndBorrow, 4));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.running("b1", "b", 0, &[("n1", &[1, 2, 3])]);
    h.running("b2", "b", 0, &[("n2", &[0, 1, 2, 3])]);
    let big = h.waiting("big", "a", 4, 1, 5);
    let small = h.waiting("small", "a", 1, 1, 0);
    // a uses 1 of its 4: big is above max and can only borrow, and nothing is idle.
    // small would be within max, but the room left is big's: small may borrow, not
    // reclaim, so that a's usage falls to what big needs.
    assert!(h.plan().is_empty());
    assert_eq!(
        h.reasons()["small"],
        "needs 1 g on one node; 0 free, no node has 1 free"
    );
    // `tranche explain` says why small does not reclaim; nothing keeps big's room.
    let kept = |h: &H, id| room_kept_above(&h.st, &h.st.jobs[&id]);
    assert_eq!((kept(&h, small), kept(&h, big)), (Some((4, 1)), None));
    // Once a1 ends, big is within max and reclaims a node; small borrows the GPU a1
    // left.
    h.exit("a1");
    assert_eq!(
        h.plan(),
        [
            "preempt b2 reclaim for big",
            "hold big n2:4",
            "place small n1[0] borrowed"
        ]
    );
}

#[test]
fn rule2_a_job_that_can_only_borrow_keeps_no_room_from_lower_priorities() {
    let mut h = cluster(2, 4);
    h.share(share("a", LendAndBorrow, 2));
    h.share(share("b", LendAndBorrow, 2));
    h.running("b1", "b", 0, &[("n1", &[0, 1, 2, 3])]);
    h.running("b2", "b", 0, &[("n2", &[0, 1, 2, 3])]);
    h.waiting("huge", "a", 4, 1, 5);
    h.waiting("small", "a", 1, 1, 0);
    // huge (4) is more than a's max (2) could ever hold: small reclaims a's room.
    assert_eq!(
        h.plan(),
        ["preempt b2 reclaim for small", "hold small n2:1"]
    );
}

// ---- rule 3: reclaim -------------------------------------------------------------------

#[test]
fn rule3_a_gang_reclaims_where_free_gpus_are_kept_idle_for_a_reserve() {
    let mut h = cluster(2, 4);
    h.share(share("infra", Reserve, 3));
    h.share(share("b", LendAndBorrow, 0));
    h.share(share("a", Lend, 4));
    h.running("b1", "b", 0, &[("n1", &[0, 1])]);
    h.running("b2", "b", 0, &[("n2", &[0, 1])]);
    h.waiting("gang", "a", 2, 2, 0);
    // Four GPUs are free, but infra keeps three of them idle: the gang, within its
    // share's max, takes its members' GPUs back from the borrower on each node.
    let plan = h.plan();
    assert_eq!(plan.len(), 3, "{plan:?}");
    assert!(plan.contains(&"preempt b1 reclaim for gang".to_string()));
    assert!(plan.contains(&"preempt b2 reclaim for gang".to_string()));
    assert_eq!(plan[2], "hold gang n1:2 n2:2");
}

#[test]
fn rule3_reclaim_takes_the_lowest_priority_then_newest_over_max_job_and_holds_its_gpus() {
    let mut h = cluster(3, 1);
    h.share(share("a", LendAndBorrow, 1));
    h.share(share("b", Lend, 2));
    h.running("a1", "a", 1, &[("n1", &[0])]);
    h.running("a2", "a", 1, &[("n2", &[0])]);
    h.running("a3", "a", 2, &[("n3", &[0])]);
    h.waiting("b1", "b", 1, 1, 0);
    assert_eq!(h.plan(), ["preempt a2 reclaim for b1", "hold b1 n2:1"]);
    assert_eq!(
        h.reasons()["b1"],
        "waiting for 1 preempted job to exit, grace ends in 10 s"
    );
    h.commit();
    // While a2 stops, a is at 3 - 1 = 2 > 1 still, but b1 needs only one GPU.
    assert!(h.plan().is_empty());
    h.exit("a2");
    assert_eq!(h.plan(), ["place b1 n2[0]"]);
}

/// One GPU, lent by `a` (max 0, `min_runtime_s` 60) to its job a1 started at t=0; b1
/// of `b` (max 1) waits to reclaim it.
fn young_borrower() -> H {
    let mut h = cluster(1, 1);
    let mut a = share("a", LendAndBorrow, 0);
    a.min_runtime_s = 60;
    h.share(a);
    h.share(share("b", Lend, 1));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.waiting("b1", "b", 1, 1, 0);
    h
}

#[test]
fn rule3_young_jobs_are_protected_by_min_runtime() {
    let mut h = young_borrower();
    assert!(h.plan().is_empty());
    assert!(
        h.reasons()["b1"].contains("minimum runtime"),
        "{:?}",
        h.reasons()
    );
    h.tick(60);
    assert_eq!(h.plan(), ["preempt a1 reclaim for b1", "hold b1 n1:1"]);
}

#[test]
fn rule3_a_loan_minimum_protects_from_reclaim_only() {
    // a's loan minimum (60 s) holds a1 against b1's reclaim though its min_runtime_s is 0.
    let mut h = cluster(1, 1);
    let mut a = in_share(share("a", LendAndBorrow, 0));
    a.loans.min_runtime_s = Some(60);
    h.share(a);
    h.share(share("b", Lend, 1));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.waiting("b1", "b", 1, 1, 0);
    assert!(h.plan().is_empty());
    assert!(
        h.reasons()["b1"].contains("minimum runtime for 58 s"),
        "{:?}",
        h.reasons()
    );
    // In-share preemption reads min_runtime_s alone: a2 (priority 5) takes a1 at once.
    h.waiting("a2", "a", 1, 1, 5);
    let mut b = share("b", Lend, 0);
    b.state = ObjState::Disabled;
    h.share(b);
    assert_eq!(h.plan(), ["preempt a1 in-share for a2", "hold a2 n1:1"]);
    // A loan minimum shorter than min_runtime_s lets a reclaim come sooner.
    let mut h = young_borrower();
    let mut a = h.st.shares[&ShareName("a".into())].clone();
    a.loans.min_runtime_s = Some(5);
    h.share(a);
    h.tick(5);
    assert_eq!(h.plan(), ["preempt a1 reclaim for b1", "hold b1 n1:1"]);
}

#[test]
fn rule3_a_recall_notice_comes_before_the_grace() {
    let mut h = cluster(1, 1);
    let mut a = share("a", LendAndBorrow, 0);
    a.loans.recall_notice_s = 30;
    h.share(a);
    h.share(share("b", Lend, 1));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.waiting("b1", "b", 1, 1, 0);
    assert_eq!(h.plan(), ["preempt a1 reclaim for b1", "hold b1 n1:1"]);
    // Notice 30 s, then the share's grace of 10 s.
    assert_eq!(
        h.reasons()["b1"],
        "waiting for 1 preempted job to exit, grace ends in 40 s"
    );
    h.commit();
    let stop = h.st.jobs[&h.id("a1")].stop.clone().expect("stopping");
    assert_eq!(stop.deadline - stop.signalled_at, 40 * SECOND);
}

#[test]
fn rule3_and_4_victims_that_lose_the_least_work_go_first() {
    // Three borrowers of one priority: a3 declares a checkpoint every 60 s and started
    // first, a1 next, a2 last, which reported a checkpoint at t=58. At t=70 a3 would
    // lose 10 s (its last whole interval ended at 60 s), a2 12 s and a1 69 s; by start
    // times alone a2 would go first and a3 last.
    let mut h = cluster(3, 1);
    h.share(share("a", LendAndBorrow, 0));
    h.share(share("b", Lend, 3));
    h.running_every("a3", "a", 60, &[("n3", &[0])]);
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.running("a2", "a", 0, &[("n2", &[0])]);
    h.tick(55);
    h.checkpoint("a2");
    h.tick(12);
    assert_eq!(h.now, 70 * SECOND);
    h.waiting("b1", "b", 1, 1, 0);
    assert_eq!(h.plan(), ["preempt a3 reclaim for b1", "hold b1 n3:1"]);
    h.commit();
    h.waiting("b2", "b", 1, 1, 0);
    assert_eq!(h.plan(), ["preempt a2 reclaim for b2", "hold b2 n2:1"]);
    // In-share preemption picks alike: a1 checkpointed a moment ago, a2 never did.
    let mut h = cluster(2, 1);
    h.share(in_share(share("a", LendAndBorrow, 2)));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.running("a2", "a", 0, &[("n2", &[0])]);
    h.tick(30);
    h.checkpoint("a1");
    h.waiting("a3", "a", 1, 1, 5);
    assert_eq!(h.plan(), ["preempt a1 in-share for a3", "hold a3 n1:1"]);
    // Without checkpoints the order is AWS's: the most recently started first.
    let mut h = cluster(2, 1);
    h.share(share("a", LendAndBorrow, 0));
    h.share(share("b", Lend, 2));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.running("a2", "a", 0, &[("n2", &[0])]);
    h.waiting("b1", "b", 1, 1, 0);
    assert_eq!(h.plan(), ["preempt a2 reclaim for b1", "hold b1 n2:1"]);
}

/// Two nodes of one GPU; borrowers a and b (max 0), lender c (max 2); the queue's
/// policy FAIR_SHARE with a half-life of an hour where `fair`, else FIFO.
fn two_borrowers(fair: bool) -> H {
    let mut h = cluster(2, 1);
    if fair {
        h.apply(Command::PutPolicy(SchedulingPolicy {
            name: "fifo".into(),
            idle_resource_assignment: IdleAssignment::FairShare {
                usage_half_life_s: 3600,
            },
        }));
    }
    h.share(share("a", LendAndBorrow, 0));
    h.share(share("b", LendAndBorrow, 0));
    h.share(share("c", Lend, 2));
    h.tick(1);
    h
}

#[test]
fn rule3_under_fair_share_reclaim_takes_first_from_the_share_most_above_its_fair_share() {
    // a borrowed for two hours, b for ten seconds; c's job needs one GPU back. Under
    // FIFO the victim is b1 (it loses less work); under FAIR_SHARE it is a1.
    let build = |fair: bool| {
        let mut h = two_borrowers(fair);
        h.running("a1", "a", 0, &[("n1", &[0])]);
        h.tick(7200);
        h.running("b1", "b", 0, &[("n2", &[0])]);
        h.tick(10);
        h.waiting("c1", "c", 1, 1, 0);
        h
    };
    assert_eq!(
        build(false).plan(),
        ["preempt b1 reclaim for c1", "hold c1 n2:1"]
    );
    assert_eq!(
        build(true).plan(),
        ["preempt a1 reclaim for c1", "hold c1 n1:1"]
    );
}

#[test]
fn rule5_under_fair_share_idle_gpus_go_first_to_the_share_that_used_least() {
    // a used one GPU for two hours; b none. One GPU is idle: a's job asked first, but
    // b's borrows it under FAIR_SHARE.
    let build = |fair: bool| {
        let mut h = two_borrowers(fair);
        h.running("c1", "c", 0, &[("n1", &[0])]);
        h.running("a1", "a", 0, &[("n2", &[0])]);
        h.tick(7200);
        h.exit("a1");
        h.running("c2", "c", 0, &[("n2", &[0])]);
        h.waiting("a2", "a", 1, 1, 0);
        h.waiting("b2", "b", 1, 1, 0);
        h.exit("c2");
        h
    };
    assert_eq!(build(false).plan(), ["place a2 n2[0] borrowed"]);
    assert_eq!(build(true).plan(), ["place b2 n2[0] borrowed"]);
}

#[test]
fn a_pass_nothing_changed_is_skipped_until_a_change_or_its_wakeup() {
    let mut h = young_borrower();
    let mut sched = tranche_sched::Scheduler::new();
    // Settle: the first pass gives b1 its reason; once applied, a pass has nothing to do.
    let settle = |sched: &mut tranche_sched::Scheduler, h: &mut H| {
        let first = sched.plan(&h.st, h.now);
        assert!(!first.is_empty());
        h.apply(Command::ApplyPlan(first));
        let settled = sched.plan(&h.st, h.now);
        assert!(settled.is_empty());
        settled
    };
    let settled = settle(&mut sched, &mut h);
    assert_eq!(sched.skipped(), 0);
    // Nothing changed: answered without a pass, with the same wakeup.
    h.tick(20);
    let again = sched.plan(&h.st, h.now);
    assert!(again.is_empty());
    assert_eq!(again.next_wakeup, settled.next_wakeup);
    assert_eq!(sched.skipped(), 1);
    // A change: the pass runs and gives the new job its reason.
    h.waiting("b2", "b", 1, 1, 0);
    let changed = sched.plan(&h.st, h.now);
    assert_eq!(sched.skipped(), 1);
    assert_eq!(h.name(changed.reasons[0].0), "b2");
    h.apply(Command::ApplyPlan(changed));
    assert!(sched.plan(&h.st, h.now).is_empty());
    // At the wakeup (a1's min_runtime_s ends) the pass runs and reclaims.
    h.tick(40);
    let due = sched.plan(&h.st, h.now);
    assert_eq!(sched.skipped(), 1);
    assert_eq!(due.preemptions(), 1);
}

#[test]
fn rule3_no_reclaim_from_a_share_within_its_max() {
    let mut h = cluster(2, 1);
    h.share(share("a", LendAndBorrow, 2));
    h.share(share("b", Lend, 1));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.running("a2", "a", 0, &[("n2", &[0])]);
    h.waiting("b1", "b", 1, 1, 0);
    // a uses its own max; the cluster is simply full.
    assert!(h.plan().is_empty());
}

// ---- rule 4: in-share preemption -------------------------------------------------------

#[test]
fn rule4_only_strictly_lower_priority_jobs_of_the_same_share() {
    let mut h = cluster(2, 1);
    h.share(in_share(share("a", Lend, 2)));
    h.running("low", "a", 1, &[("n1", &[0])]);
    h.running("same", "a", 5, &[("n2", &[0])]);
    h.waiting("w", "a", 1, 1, 5);
    // The share is at max: w may only preempt `low`.
    assert_eq!(h.plan(), ["preempt low in-share for w", "hold w n1:1"]);
}

#[test]
fn rule4_a_reserve_shares_hold_over_its_own_victim_keeps_the_victims_room_idle() {
    let mut h = cluster(2, 2);
    h.share(in_share(share("infra", Reserve, 3)));
    h.share(share("a", Lend, 4));
    h.running("low", "infra", 0, &[("n1", &[0])]);
    h.running("a1", "a", 0, &[("n2", &[0])]);
    h.waiting("w", "infra", 2, 1, 5);
    h.waiting("a2", "a", 1, 1, 0);
    // w's hold covers low's GPU: infra takes up 2 of its 3, so n2's free GPU stays
    // idle for low, which comes back once it has been stopped.
    assert_eq!(h.plan(), ["preempt low in-share for w", "hold w n1:2"]);
    assert_eq!(h.reasons()["a2"], "RESERVE share infra holds 1 idle g");
}

#[test]
fn rule4_a_holder_waits_for_its_shares_drained_job_rather_than_give_its_victims_room_back() {
    let mut h = cluster(2, 4);
    h.share(in_share(share("a", Lend, 3)));
    h.running("d", "a", 5, &[("n1", &[0])]);
    h.running("low", "a", 0, &[("n2", &[0])]);
    h.apply(Command::DrainNode {
        node: NodeName("n1".into()),
        reason: "repair".into(),
        now: true,
    });
    h.waiting("w", "a", 3, 1, 3);
    // d is on its way out: taking low is enough to get w under the share's max.
    assert_eq!(h.plan(), ["preempt low in-share for w", "hold w n2:3"]);
    h.commit();
    h.exit("low");
    // low has exited; d still counts until it has too. w keeps its hold (low, back in
    // the queue, must not take the room it was preempted for) and waits for d.
    assert!(h.plan().is_empty());
    assert_eq!(
        h.reasons()["w"],
        "waiting for 1 preempted job to exit, grace ends in 9 s"
    );
    h.exit("d");
    assert_eq!(h.plan(), ["place w n2[0,1,2]"]);
}

#[test]
fn rule4_disabled_in_share_preemption_preempts_nobody() {
    let mut h = cluster(1, 1);
    h.share(share("a", Lend, 1));
    h.running("low", "a", 1, &[("n1", &[0])]);
    h.waiting("w", "a", 1, 1, 9);
    assert!(h.plan().is_empty());
    assert!(h.reasons()["w"].starts_with("share a at max 1/1 g"));
}

// ---- rule 5: the borrow pass -----------------------------------------------------------

#[test]
fn rule5_borrowers_go_fifo_across_shares_up_to_their_ceiling() {
    let mut h = cluster(1, 3);
    h.share(share("idle", Lend, 3));
    let mut a = share("a", LendAndBorrow, 0);
    a.capacity_limits[0].max = 1;
    a.resource_sharing.borrow_limit = Some(100);
    h.share(a);
    h.share(share("b", LendAndBorrow, 0));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.waiting("b1", "b", 1, 1, 0);
    h.waiting("a2", "a", 1, 1, 0);
    h.waiting("a3", "a", 1, 1, 9);
    // b1 is older than a2; a's ceiling is 2, so only one of a's jobs borrows, and the
    // higher priority one goes first inside a.
    assert_eq!(
        h.plan(),
        ["place b1 n1[1] borrowed", "place a3 n1[2] borrowed"]
    );
    assert_eq!(
        h.reasons()["a2"],
        "borrow limit reached: 2/2 g (needs 1 more)"
    );
}

#[test]
fn rule5_lend_never_borrows() {
    let mut h = cluster(1, 2);
    h.share(share("a", Lend, 1));
    h.running("a1", "a", 0, &[("n1", &[0])]);
    h.waiting("a2", "a", 1, 1, 0);
    assert!(h.plan().is_empty());
    assert_eq!(
        h.reasons()["a2"],
        "share a at max 1/1 g (needs 1 more), strategy LEND does not borrow"
    );
}

// ---- rule 6: lowered limits ------------------------------------------------------------

#[test]
fn rule6_a_reserve_share_whose_max_was_lowered_is_reclaimable() {
    let mut h = cluster(2, 1);
    h.share(share("r", Reserve, 2));
    h.share(share("b", Lend, 0));
    h.running("r1", "r", 0, &[("n1", &[0])]);
    h.running("r2", "r", 0, &[("n2", &[0])]);
    h.share(share("r", Reserve, 1));
    h.share(share("b", Lend, 1));
    h.waiting("b1", "b", 1, 1, 0);
    assert_eq!(h.plan(), ["preempt r2 reclaim for b1", "hold b1 n2:1"]);
}

// ---- rule 7: the environment's cap -----------------------------------------------------

#[test]
fn rule7_the_environment_cap_is_never_exceeded() {
    let mut h = cluster(2, 2);
    h.cap("g", 3);
    h.share(share("a", Lend, 4));
    h.running("a1", "a", 0, &[("n1", &[0, 1])]);
    h.waiting("a2", "a", 2, 1, 0);
    h.waiting("a3", "a", 1, 1, 0);
    assert_eq!(h.plan(), ["place a3 n2[0]"]);
    assert_eq!(
        h.reasons()["a2"],
        "environment env at cap 2/3 g (needs 2 more)"
    );
}

#[test]
fn rule7_under_the_cap_a_reserve_shares_idle_room_is_not_borrowed() {
    // AWS's getting-started story: a queue capped at 3 over nodes with more GPUs;
    // QS1 (LEND_AND_BORROW, max 1) may borrow QS2's idle GPU but not QS3's (RESERVE).
    let mut h = cluster(2, 4);
    h.cap("g", 3);
    let mut qs1 = share("qs1", LendAndBorrow, 1);
    qs1.resource_sharing.borrow_limit = Some(200);
    h.share(qs1);
    h.share(share("qs2", Lend, 1));
    h.share(share("qs3", Reserve, 1));
    h.running("high", "qs1", 3, &[("n1", &[0])]);
    h.running("med", "qs1", 2, &[("n1", &[1])]);
    h.waiting("low", "qs1", 1, 1, 1);
    assert!(h.plan().is_empty());
    assert_eq!(h.reasons()["low"], "RESERVE share qs3 holds 1 idle g");
    // QS2's own job reclaims the GPU QS1 borrowed from it: the free GPUs on the nodes
    // do not help, as the cap's last room is QS3's.
    h.waiting("q2", "qs2", 1, 1, 1);
    assert_eq!(h.plan(), ["preempt med reclaim for q2", "hold q2 n1:1"]);
    h.commit();
    h.exit("med");
    assert_eq!(h.plan(), ["place q2 n1[1]"]);
    h.commit();
    // The reserve's own job takes its room.
    h.waiting("r1", "qs3", 1, 1, 0);
    assert_eq!(h.plan(), ["place r1 n1[2]"]);
}

// ---- rule 8: placement -----------------------------------------------------------------

#[test]
fn rule8_best_fit_and_never_on_a_draining_node() {
    let mut h = cluster(3, 4);
    h.share(share("a", Lend, 12));
    h.running("r", "a", 0, &[("n2", &[0, 1])]);
    h.apply(Command::DrainNode {
        node: NodeName("n3".into()),
        reason: "repair".into(),
        now: false,
    });
    h.waiting("small", "a", 2, 1, 0);
    // n2 is left with 0 free, n1 would be left with 2: n2 wins; n3 is draining.
    assert_eq!(h.plan(), ["place small n2[2,3]"]);
}

#[test]
fn rule8_a_gang_is_placed_whole_or_not_at_all() {
    let mut h = cluster(2, 2);
    h.share(share("a", Lend, 4));
    h.running("r", "a", 0, &[("n1", &[0])]);
    h.waiting("gang", "a", 2, 2, 5);
    h.waiting("one", "a", 1, 1, 0);
    assert_eq!(h.plan(), ["place one n1[1]"]);
    h.exit("r");
    h.commit();
    h.exit("one");
    assert_eq!(h.plan(), ["place gang n1[0,1] n2[0,1]"]);
}

// ---- work conservation -----------------------------------------------------------------

/// DESIGN's first case: a preemptor's hold must not keep a free GPU from a within-max
/// job, and that job must not preempt anyone while the free GPU would fit it.
#[test]
fn a_hold_keeps_no_free_gpu_idle_and_nobody_preempts_needlessly() {
    let mut h = cluster(3, 1);
    h.share(in_share(share("a", Lend, 1)));
    h.share(in_share(share("b", Lend, 2)));
    h.running("a1", "a", 1, &[("n1", &[0])]);
    h.running("b1", "b", 1, &[("n2", &[0])]);
    h.waiting("a2", "a", 1, 1, 5);
    assert_eq!(h.plan(), ["preempt a1 in-share for a2", "hold a2 n1:1"]);
    h.commit();
    h.waiting("b2", "b", 1, 1, 5);
    assert_eq!(h.plan(), ["place b2 n3[0]"]);
}

#[test]
fn no_preemption_while_free_gpus_would_fit_the_job() {
    let mut h = cluster(2, 2);
    h.share(in_share(share("a", Lend, 4)));
    h.running("low", "a", 0, &[("n1", &[0, 1])]);
    h.waiting("w", "a", 2, 1, 9);
    assert_eq!(h.plan(), ["place w n2[0,1]"]);
}

// ---- the quota guarantee: gangs --------------------------------------------------------

/// Reclaim frees whole nodes for a gang: over-max work is spread over four nodes, two
/// of which hold nothing else; the gang's victims are those two nodes' jobs.
#[test]
fn reclaim_frees_whole_nodes_for_a_gang() {
    let mut h = cluster(4, 2);
    h.share(share("own", Lend, 4));
    h.share(share("over", LendAndBorrow, 2));
    h.share(share("kept", Lend, 2));
    // n1, n2: one GPU of `kept` (within its max) and one borrowed GPU of `over` each.
    h.running("k1", "kept", 0, &[("n1", &[0])]);
    h.running("k2", "kept", 0, &[("n2", &[0])]);
    h.running("o1", "over", 0, &[("n1", &[1])]);
    h.running("o2", "over", 0, &[("n2", &[1])]);
    // n3, n4: only `over`'s jobs.
    h.running("o3", "over", 5, &[("n3", &[0, 1])]);
    h.running("o4", "over", 5, &[("n4", &[0, 1])]);
    // over uses 6 of max 2: 4 GPUs are reclaimable, exactly n3 and n4.
    h.waiting("gang", "own", 2, 2, 0);
    assert_eq!(
        h.plan(),
        [
            "preempt o4 reclaim for gang",
            "preempt o3 reclaim for gang",
            "hold gang n3:2 n4:2"
        ]
    );
}

// ---- requests that can never fit ------------------------------------------------------

#[test]
fn a_request_no_node_or_cap_could_ever_hold_is_refused_at_submit() {
    let mut h = cluster(2, 4);
    h.share(share("a", LendAndBorrow, 8));
    let wide = h.spec("wide", "a", 8, 1, 0);
    assert_eq!(
        h.refuse(Command::Submit(wide)),
        "invalid `request.gpus_per_node`: needs 8 g on one node, but the largest g node in environment env has 4"
    );
    h.cap("g", 6);
    let big = h.spec("big", "a", 4, 2, 0);
    assert_eq!(
        h.refuse(Command::Submit(big)),
        "invalid `request`: needs 8 g in all (2 node(s) × 4), more than environment env's cap of 6 g"
    );
    // Nothing was created.
    assert!(h.st.jobs.is_empty());
}

#[test]
fn a_job_above_its_shares_ceiling_waits_with_a_reason_that_says_so() {
    let mut h = cluster(2, 4);
    h.share(in_share(share("a", Lend, 2)));
    h.running("low", "a", 0, &[("n1", &[0])]);
    h.waiting("four", "a", 4, 1, 9);
    // Nothing is preempted for a job that could never start in its share.
    assert!(h.plan().is_empty());
    assert_eq!(
        h.reasons()["four"],
        "needs 4 g but share a (LEND) has a max of 2 g: it cannot start until the share's limits change"
    );
}

// ---- nested shares (design.md §3, "Nested shares") ----------------------------------------

/// A LEND_AND_BORROW share with no cap on borrowing.
fn borrower(name: &str, max: u32) -> QuotaShare {
    let mut s = share(name, LendAndBorrow, max);
    s.resource_sharing.borrow_limit = Some(-1);
    s
}

#[test]
fn nested_n2_a_lend_groups_shares_borrow_only_inside_it() {
    let mut h = cluster(4, 1);
    h.share(borrower("x", 1));
    h.share(share("y", Lend, 1));
    h.share(share("z", Lend, 2));
    h.group("team", &["x", "y"], &[], Lend, 2);
    h.running("x1", "x", 0, &[("n1", &[0])]);
    h.waiting("x2", "x", 1, 1, 0);
    h.waiting("x3", "x", 1, 1, 0);
    // x2 borrows y's idle GPU inside team; x3 would take team above its max.
    assert_eq!(h.plan(), ["place x2 n2[0] borrowed"]);
    assert_eq!(
        h.reasons()["x3"],
        "group team at max 2/2 g (needs 1 more), strategy LEND does not borrow"
    );
}

#[test]
fn nested_n3_a_reserve_group_keeps_its_idle_gpus_from_other_shares() {
    let mut h = cluster(4, 1);
    h.share(share("p", Lend, 1));
    h.share(share("q", Lend, 1));
    h.share(borrower("o", 0));
    h.group("lab", &["p", "q"], &[], Reserve, 2);
    for j in ["o1", "o2", "o3"] {
        h.waiting(j, "o", 1, 1, 0);
    }
    // Four GPUs are free; lab keeps two idle for p and q.
    let plan = h.plan();
    assert_eq!(plan.len(), 2, "{plan:?}");
    assert_eq!(h.reasons()["o3"], "RESERVE group lab holds 2 idle g");
    // Its members still lend to each other: p borrows q's idle GPU.
    let mut h = cluster(2, 1);
    h.share(borrower("p", 1));
    h.share(share("q", Lend, 1));
    h.group("lab", &["p", "q"], &[], Reserve, 2);
    h.waiting("p1", "p", 1, 1, 0);
    h.waiting("p2", "p", 1, 1, 0);
    assert_eq!(h.plan().len(), 2);
}

#[test]
fn nested_n4_borrowers_inside_a_group_borrow_first() {
    let mut h = cluster(3, 1);
    h.share(borrower("ops", 1));
    h.share(borrower("nlp", 1));
    h.share(share("vision", Lend, 1));
    h.group("research", &["nlp", "vision"], &[], LendAndBorrow, 2);
    h.running("o1", "ops", 0, &[("n1", &[0])]);
    h.running("n1", "nlp", 0, &[("n2", &[0])]);
    // ops asked first, but nlp's borrower fits inside research.
    h.waiting("o2", "ops", 1, 1, 0);
    h.waiting("n2", "nlp", 1, 1, 0);
    assert_eq!(h.plan(), ["place n2 n3[0] borrowed"]);
    // Without the group, FIFO: ops's borrower.
    h.apply(Command::DeleteGroup("research".into()));
    assert_eq!(h.plan(), ["place o2 n3[0] borrowed"]);
}

#[test]
fn nested_n5_reclaim_takes_from_the_farthest_borrower_first() {
    let mut h = cluster(3, 1);
    h.share(borrower("ops", 0));
    h.share(borrower("nlp", 1));
    h.share(borrower("vision", 1));
    h.group("research", &["nlp", "vision"], &[], LendAndBorrow, 2);
    h.running("o1", "ops", 0, &[("n1", &[0])]);
    h.running("v1", "vision", 0, &[("n2", &[0])]);
    h.tick(5);
    h.running("v2", "vision", 0, &[("n3", &[0])]);
    h.waiting("nl1", "nlp", 1, 1, 0);
    // v2 started last, but ops is farther from nlp.
    assert_eq!(h.plan(), ["preempt o1 reclaim for nl1", "hold nl1 n1:1"]);
    h.apply(Command::DeleteGroup("research".into()));
    assert_eq!(h.plan(), ["preempt v2 reclaim for nl1", "hold nl1 n3:1"]);
}
