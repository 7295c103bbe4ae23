//! The accounting ledger (design §9): GPU time per share and unit and per user and
//! unit, integrated at each entry's time so that every controller has the same figures,
//! kept per hour of entry time.
//!
//! Between two entries nothing that the ledger counts changes, so the time from the
//! previous entry to this one is charged at the rates the state had before this entry
//! was applied:
//!
//! - **used**: GPUs a share holds up to its max; **borrowed**: beyond its max. For a
//!   user, GPUs of attempts placed within their share's max are used, those placed on
//!   borrowed GPUs are borrowed (the attempt's `borrowed` flag), so a user's used and
//!   borrowed add up to everything the user's jobs held.
//! - **lent**: per unit, what shares borrow comes out of the idle max of the shares that
//!   lend (LEND and LEND_AND_BORROW), in proportion to each one's idle max (the integer
//!   remainder to the first shares by name); what is borrowed beyond all of that came
//!   from GPUs that no share's max covers, and is kept as the unit's `unassigned_lent`.
//!   So, in every hour, lent plus `unassigned_lent` equals borrowed.
//! - **reserved idle**: a RESERVE share's max that it does not use.
//! - **lost to preemption** (GPU time preempted): the run time of an attempt that ended
//!   reclaimed, preempted within its share, or stopped by a drain (`--now`), charged to
//!   the hour it ended in; of it, **work lost**: the run time since the attempt's last
//!   checkpoint (all of it for a job that neither reports nor declares checkpoints).
//! - **capacity**: the GPUs of registered nodes that are not DOWN, per unit.
//!
//! Figures are GPU-milliseconds. The ledger is part of the replicated state and of
//! every image; hours older than the leader's retention are dropped by a leader-only
//! command ([`crate::Command::PruneLedger`]).
//!
//! The ledger knows nothing of the state it counts: applying an entry hands it the rates
//! of the moment ([`rates`], from what each share and user holds), the time, and the
//! run time an attempt lost, and it integrates them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::*;

/// Milliseconds in an hour: the ledger's bucket.
pub const HOUR_MS: Millis = 3_600_000;

/// GPU-milliseconds of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub used: u64,
    pub borrowed: u64,
    pub lent: u64,
    pub reserved_idle: u64,
    pub lost_reclaim: u64,
    pub lost_in_share: u64,
    pub lost_drain: u64,
    /// Of the GPU time of preempted and drained attempts (the three `lost_` figures),
    /// the work since each one's last checkpoint: what a restart must do again.
    pub work_lost: u64,
}

impl Totals {
    pub fn add(&mut self, o: &Totals) {
        self.used += o.used;
        self.borrowed += o.borrowed;
        self.lent += o.lent;
        self.reserved_idle += o.reserved_idle;
        self.lost_reclaim += o.lost_reclaim;
        self.lost_in_share += o.lost_in_share;
        self.lost_drain += o.lost_drain;
        self.work_lost += o.work_lost;
    }

    /// GPU time lost to preemption of every kind.
    pub fn lost(&self) -> u64 {
        self.lost_reclaim + self.lost_in_share + self.lost_drain
    }
}

/// One hour of entry time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub shares: BTreeMap<(ShareName, Unit), Totals>,
    pub users: BTreeMap<(UserName, Unit), Totals>,
    /// GPU-milliseconds of capacity per unit.
    pub capacity: BTreeMap<Unit, u64>,
    /// Borrowed GPU time per unit that no share's idle max covered.
    pub unassigned_lent: BTreeMap<Unit, u64>,
}

impl Bucket {
    /// Per unit: the shares' figures summed, with the borrowed time that no share's
    /// idle max covered counted as lent, so that lent equals borrowed.
    pub fn by_unit(&self) -> BTreeMap<Unit, Totals> {
        let mut m: BTreeMap<Unit, Totals> = BTreeMap::new();
        for ((_, u), t) in &self.shares {
            m.entry(u.clone()).or_default().add(t);
        }
        for (u, v) in &self.unassigned_lent {
            m.entry(u.clone()).or_default().lent += v;
        }
        m
    }

    pub fn add(&mut self, o: &Bucket) {
        for (k, t) in &o.shares {
            self.shares.entry(k.clone()).or_default().add(t);
        }
        for (k, t) in &o.users {
            self.users.entry(k.clone()).or_default().add(t);
        }
        for (u, v) in &o.capacity {
            *self.capacity.entry(u.clone()).or_default() += v;
        }
        for (u, v) in &o.unassigned_lent {
            *self.unassigned_lent.entry(u.clone()).or_default() += v;
        }
    }
}

/// The ledger: hourly buckets by hour number (entry time / [`HOUR_MS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// The time of the first entry it counted (0: none yet).
    pub since: Millis,
    /// Counted up to this entry time.
    pub counted_to: Millis,
    pub hours: BTreeMap<u64, Bucket>,
    /// Everything since the ledger began, kept when hours are dropped (the metrics'
    /// counters).
    pub all_time: Bucket,
}

impl Ledger {
    /// Every bucket whose hour overlaps `[from, to)`, summed.
    pub fn sum(&self, from: Millis, to: Millis) -> Bucket {
        let mut out = Bucket::default();
        let (a, b) = (from / HOUR_MS, to.div_ceil(HOUR_MS));
        if a >= b {
            return out;
        }
        for (_, bucket) in self.hours.range(a..b) {
            out.add(bucket);
        }
        out
    }
}

/// What the time since the last entry adds, per hour; applied once the entry is
/// accepted (a refused entry changes nothing, the ledger included).
#[derive(Debug, Default)]
pub struct Accrual {
    pieces: Vec<(u64, Bucket)>,
    to: Millis,
}

impl Ledger {
    /// The GPU time from the last count to `now` at the current `rates` (asked for only
    /// when there is time to count). Reads only.
    pub fn accrual(&self, now: Millis, rates: impl FnOnce() -> Bucket) -> Accrual {
        let from = self.counted_to;
        let mut out = Accrual {
            pieces: vec![],
            to: now.max(from),
        };
        if from == 0 || now <= from {
            return out;
        }
        let rates = rates();
        let mut t = from;
        while t < now {
            let hour = t / HOUR_MS;
            let end = ((hour + 1) * HOUR_MS).min(now);
            out.pieces.push((hour, rates.times(end - t)));
            t = end;
        }
        out
    }

    /// Adds an accrual (see [`Ledger::accrual`]) for an entry at `now`.
    pub fn book(&mut self, a: Accrual, now: Millis) {
        if self.since == 0 {
            self.since = now;
        }
        for (hour, b) in a.pieces {
            self.all_time.add(&b);
            self.hours.entry(hour).or_default().add(&b);
        }
        self.counted_to = self.counted_to.max(a.to).max(now);
    }

    /// The figures over `[from, to)`, with the time since the last count counted up to
    /// `to` at the current `rates` (as the next entry would count it).
    pub fn between(&self, from: Millis, to: Millis, rates: impl FnOnce() -> Bucket) -> Bucket {
        let mut out = self.sum(from, to);
        for (hour, b) in self.accrual(to, rates).pieces {
            if hour * HOUR_MS + HOUR_MS > from {
                out.add(&b);
            }
        }
        out
    }

    /// Everything since the ledger began, up to `now` (the time since the last count
    /// at the current `rates`).
    pub fn all_time_to(&self, now: Millis, rates: impl FnOnce() -> Bucket) -> Bucket {
        let mut out = self.all_time.clone();
        for (_, b) in self.accrual(now, rates).pieces {
            out.add(&b);
        }
        out
    }

    /// An attempt of `share`'s `user` that held GPUs of `unit` for `gpu_ms`
    /// GPU-milliseconds ended stopped by `kind`: a preemption's or a drain's run time is
    /// lost, charged to the hour of `now`; a cancel's is not.
    /// Books an attempt that ended stopped: `gpu_ms` of GPU time preempted, of which
    /// `work_ms` was work since its last checkpoint.
    pub fn book_lost(
        &mut self,
        kind: &StopKind,
        (gpu_ms, work_ms): (u64, u64),
        holder: Holder<'_>,
        now: Millis,
    ) {
        let mut t = Totals {
            work_lost: work_ms,
            ..Totals::default()
        };
        match kind {
            StopKind::Reclaim { .. } => t.lost_reclaim = gpu_ms,
            StopKind::InShare { .. } => t.lost_in_share = gpu_ms,
            StopKind::Drain => t.lost_drain = gpu_ms,
            StopKind::Cancel => return,
        }
        let mut b = Bucket::default();
        b.shares
            .insert((holder.share.clone(), holder.unit.clone()), t);
        b.users
            .insert((holder.user.clone(), holder.unit.clone()), t);
        self.all_time.add(&b);
        self.hours.entry(now / HOUR_MS).or_default().add(&b);
    }

    /// Drops the hours before `hour` ([`crate::Command::PruneLedger`]).
    pub fn drop_hours_before(&mut self, hour: u64) {
        self.hours = self.hours.split_off(&hour);
    }
}

/// Whose GPU time a figure is: a share's user, on one unit.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub share: &'a ShareName,
    pub user: &'a UserName,
    pub unit: &'a Unit,
}

/// What one share holds of one unit right now.
#[derive(Debug, Clone, Copy)]
pub struct ShareHolding<'a> {
    pub share: &'a ShareName,
    pub unit: &'a Unit,
    /// GPUs its active jobs hold.
    pub used: u64,
    /// Its max for the unit.
    pub max: u64,
    pub strategy: Strategy,
}

/// What one user's jobs hold of one unit right now, on the GPUs of their shares' max
/// or on borrowed ones.
#[derive(Debug, Clone, Copy)]
pub struct UserHolding<'a> {
    pub user: &'a UserName,
    pub unit: &'a Unit,
    pub on_borrowed: bool,
    pub gpus: u64,
}

/// GPUs held and idle right now, per kind: one millisecond's worth of every figure.
/// `shares` come by share name (the integer remainder of what is lent goes to the first
/// lenders); `capacity` is the GPUs per unit of the nodes that count.
pub fn rates<'a>(
    shares: impl IntoIterator<Item = ShareHolding<'a>>,
    users: impl IntoIterator<Item = UserHolding<'a>>,
    capacity: impl IntoIterator<Item = (&'a Unit, u64)>,
) -> Bucket {
    let mut b = Bucket::default();
    // Per unit: what shares borrow, and the idle max of the shares that lend.
    let mut borrowed: BTreeMap<&Unit, u64> = BTreeMap::new();
    let mut idle: BTreeMap<&Unit, Vec<(&ShareName, u64)>> = BTreeMap::new();
    for s in shares {
        let (used, max) = (s.used, s.max);
        let within = used.min(max);
        let t = Totals {
            used: within,
            borrowed: used - within,
            reserved_idle: if s.strategy == Strategy::Reserve {
                max - within
            } else {
                0
            },
            ..Default::default()
        };
        *borrowed.entry(s.unit).or_default() += t.borrowed;
        if s.strategy != Strategy::Reserve && max > within {
            idle.entry(s.unit)
                .or_default()
                .push((s.share, max - within));
        }
        if t != Totals::default() {
            b.shares.insert((s.share.clone(), s.unit.clone()), t);
        }
    }
    for (unit, &want) in &borrowed {
        if want == 0 {
            continue;
        }
        let lenders = idle.get(unit).map(Vec::as_slice).unwrap_or(&[]);
        let pool: u64 = lenders.iter().map(|(_, i)| i).sum();
        let lent = want.min(pool);
        let mut parts: Vec<u64> = lenders
            .iter()
            .map(|(_, i)| lent * i / pool.max(1))
            .collect();
        let mut given: u64 = parts.iter().sum();
        for p in parts.iter_mut() {
            if given == lent {
                break;
            }
            *p += 1;
            given += 1;
        }
        for ((name, _), p) in lenders.iter().zip(parts) {
            if p > 0 {
                b.shares
                    .entry(((*name).clone(), (*unit).clone()))
                    .or_default()
                    .lent += p;
            }
        }
        if want > lent {
            b.unassigned_lent.insert((*unit).clone(), want - lent);
        }
    }
    for u in users {
        let t = b.users.entry((u.user.clone(), u.unit.clone())).or_default();
        if u.on_borrowed {
            t.borrowed += u.gpus;
        } else {
            t.used += u.gpus;
        }
    }
    for (unit, gpus) in capacity {
        b.capacity.insert(unit.clone(), gpus);
    }
    b
}

impl Bucket {
    /// Every figure times `ms`.
    fn times(&self, ms: u64) -> Bucket {
        let m = |t: &Totals| Totals {
            work_lost: 0,
            used: t.used * ms,
            borrowed: t.borrowed * ms,
            lent: t.lent * ms,
            reserved_idle: t.reserved_idle * ms,
            lost_reclaim: t.lost_reclaim * ms,
            lost_in_share: t.lost_in_share * ms,
            lost_drain: t.lost_drain * ms,
        };
        Bucket {
            shares: self.shares.iter().map(|(k, t)| (k.clone(), m(t))).collect(),
            users: self.users.iter().map(|(k, t)| (k.clone(), m(t))).collect(),
            capacity: self
                .capacity
                .iter()
                .map(|(k, v)| (k.clone(), v * ms))
                .collect(),
            unassigned_lent: self
                .unassigned_lent
                .iter()
                .map(|(k, v)| (k.clone(), v * ms))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding<'a>(
        share: &'a ShareName,
        unit: &'a Unit,
        used: u64,
        max: u64,
        strategy: Strategy,
    ) -> ShareHolding<'a> {
        ShareHolding {
            share,
            unit,
            used,
            max,
            strategy,
        }
    }

    /// Borrowed time comes out of the lenders' idle max in proportion (the remainder
    /// to the first by name), what no idle max covers is unassigned, a RESERVE share's
    /// idle max is reserved and never lent.
    #[test]
    fn borrowed_gpus_are_lent_in_proportion_and_the_rest_is_unassigned() {
        let (a, b, c, r) = ("a".into(), "b".into(), "c".into(), "r".into());
        let h100: Unit = "h100".into();
        let alice: UserName = "alice".into();
        let rates = rates(
            [
                holding(&a, &h100, 6, 2, Strategy::LendAndBorrow),
                holding(&b, &h100, 1, 4, Strategy::Lend),
                holding(&c, &h100, 0, 2, Strategy::Lend),
                holding(&r, &h100, 0, 2, Strategy::Reserve),
            ],
            [UserHolding {
                user: &alice,
                unit: &h100,
                on_borrowed: true,
                gpus: 4,
            }],
            [(&h100, 16)],
        );
        let s = |n: &ShareName| rates.shares[&(n.clone(), h100.clone())];
        assert_eq!((s(&a).used, s(&a).borrowed), (2, 4));
        // 4 borrowed out of an idle 3 + 2: 4·3/5 = 2 and 4·2/5 = 1, and the one left
        // over goes to b, the first by name.
        assert_eq!((s(&b).used, s(&b).lent), (1, 3));
        assert_eq!(s(&c).lent, 1);
        assert_eq!((s(&r).reserved_idle, s(&r).lent), (2, 0));
        assert_eq!(rates.unassigned_lent.get(&h100), None);
        assert_eq!(rates.users[&(alice, h100.clone())].borrowed, 4);
        assert_eq!(rates.capacity[&h100], 16);

        // More borrowed than any idle max: the rest came from GPUs no share's max covers.
        let over = super::rates(
            [
                holding(&a, &h100, 9, 2, Strategy::LendAndBorrow),
                holding(&b, &h100, 3, 4, Strategy::Lend),
            ],
            [],
            [],
        );
        let by_unit = over.by_unit();
        assert_eq!(over.shares[&(b.clone(), h100.clone())].lent, 1);
        assert_eq!(over.unassigned_lent[&h100], 6);
        assert_eq!(by_unit[&h100].lent, by_unit[&h100].borrowed);
    }

    /// Time is counted from the previous entry to this one at the rates given, split
    /// at hour boundaries; nothing is counted before the first entry, and a read counts
    /// the time since the last entry without booking it.
    #[test]
    fn time_is_counted_per_hour_from_the_last_entry() {
        let (s, u): (ShareName, Unit) = ("s".into(), "h100".into());
        let two_used = || {
            let mut b = Bucket::default();
            b.shares.insert(
                (s.clone(), u.clone()),
                Totals {
                    used: 2,
                    ..Default::default()
                },
            );
            b
        };
        let mut l = Ledger::default();
        let first = l.accrual(1_000, || panic!("nothing to count before the first entry"));
        l.book(first, 1_000);
        assert_eq!((l.since, l.counted_to), (1_000, 1_000));
        let now = 2 * HOUR_MS + 500;
        let a = l.accrual(now, two_used);
        l.book(a, now);
        let used = |b: &Bucket| b.shares[&(s.clone(), u.clone())].used;
        assert_eq!(used(&l.hours[&0]), 2 * (HOUR_MS - 1_000));
        assert_eq!(used(&l.hours[&1]), 2 * HOUR_MS);
        assert_eq!(used(&l.hours[&2]), 2 * 500);
        assert_eq!(used(&l.all_time), 2 * (now - 1_000));
        // A read up to later counts the rest of hour 2 but books nothing.
        let to = 3 * HOUR_MS;
        assert_eq!(used(&l.between(2 * HOUR_MS, to, two_used)), 2 * HOUR_MS);
        assert_eq!(used(&l.all_time_to(to, two_used)), 2 * (to - 1_000));
        assert_eq!(l.counted_to, now);
        l.drop_hours_before(1);
        assert_eq!(l.hours.keys().copied().collect::<Vec<_>>(), [1, 2]);
        assert_eq!(used(&l.all_time), 2 * (now - 1_000));
    }

    /// A preemption's or a drain's run time is lost, in the hour it ended in, for the
    /// share and the user alike; a cancel's is not.
    #[test]
    fn lost_time_is_booked_by_kind_and_a_cancel_loses_nothing() {
        let (s, user, u): (ShareName, UserName, Unit) = ("s".into(), "bob".into(), "h100".into());
        let holder = Holder {
            share: &s,
            user: &user,
            unit: &u,
        };
        let mut l = Ledger::default();
        l.book_lost(&StopKind::Cancel, (5_000, 5_000), holder, HOUR_MS + 1);
        assert_eq!(l, Ledger::default());
        l.book_lost(&StopKind::Drain, (5_000, 2_000), holder, HOUR_MS + 1);
        let hour = &l.hours[&1];
        assert_eq!(hour.shares[&(s.clone(), u.clone())].lost_drain, 5_000);
        assert_eq!(hour.shares[&(s.clone(), u.clone())].work_lost, 2_000);
        assert_eq!(hour.users[&(user, u.clone())].lost(), 5_000);
        assert_eq!(l.all_time.by_unit()[&u].lost(), 5_000);
    }
}
