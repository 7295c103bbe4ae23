//! The accounting ledger, counted over random runs and by hand.

mod common;

use common::*;
use proptest::prelude::{prop_assert_eq, proptest, ProptestConfig};
use std::collections::BTreeMap;
use tranche_model::*;
use tranche_state::ledger;
use tranche_state::*;

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
