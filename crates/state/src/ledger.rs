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
//! - **lost to preemption**: the run time of an attempt that ended reclaimed, preempted
//!   within its share, or stopped by a drain (`--now`), charged to the hour it ended in.
//! - **capacity**: the GPUs of registered nodes that are not DOWN, per unit.
//!
//! Figures are GPU-milliseconds. The ledger is part of the replicated state and of
//! every image; hours older than the leader's retention are dropped by a leader-only
//! command ([`crate::Command::PruneLedger`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::*;

use crate::state::State;

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

impl State {
    /// The GPU time from the ledger's last count to `now` at today's rates. Reads only.
    pub fn accrual(&self, now: Millis) -> Accrual {
        let from = self.ledger.counted_to;
        let mut out = Accrual {
            pieces: vec![],
            to: now.max(from),
        };
        if from == 0 || now <= from {
            return out;
        }
        let rates = self.rates();
        let mut t = from;
        while t < now {
            let hour = t / HOUR_MS;
            let end = ((hour + 1) * HOUR_MS).min(now);
            out.pieces.push((hour, rates.times(end - t)));
            t = end;
        }
        out
    }

    /// Adds an accrual (see [`State::accrual`]).
    pub(crate) fn book(&mut self, a: Accrual, now: Millis) {
        if self.ledger.since == 0 {
            self.ledger.since = now;
        }
        for (hour, b) in a.pieces {
            self.ledger.all_time.add(&b);
            self.ledger.hours.entry(hour).or_default().add(&b);
        }
        self.ledger.counted_to = self.ledger.counted_to.max(a.to).max(now);
    }

    /// The ledger's figures over `[from, to)`, with the time since the last entry
    /// counted up to `to` at today's rates (as the next entry would count it).
    pub fn ledger_between(&self, from: Millis, to: Millis) -> Bucket {
        let mut out = self.ledger.sum(from, to);
        for (hour, b) in self.accrual(to).pieces {
            if hour * HOUR_MS + HOUR_MS > from {
                out.add(&b);
            }
        }
        out
    }

    /// Everything since the ledger began, up to `now` (the time since the last entry
    /// counted at today's rates).
    pub fn ledger_all_time(&self, now: Millis) -> Bucket {
        let mut out = self.ledger.all_time.clone();
        for (_, b) in self.accrual(now).pieces {
            out.add(&b);
        }
        out
    }

    /// An attempt that ended stopped: its run time, if a preemption or a drain, is
    /// lost, charged to the hour it ended in.
    pub(crate) fn book_lost(&mut self, job: JobId, now: Millis) {
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        let Some(a) = j.attempts.last() else { return };
        let Some(AttemptEnd::Stopped { kind, .. }) = &a.end else {
            return;
        };
        let ran = now.saturating_sub(a.started_at.unwrap_or(a.scheduled_at));
        let gpus: u64 = a.allocation.iter().map(|n| n.gpus.len() as u64).sum();
        let ms = ran * gpus;
        let mut t = Totals::default();
        match kind {
            StopKind::Reclaim { .. } => t.lost_reclaim = ms,
            StopKind::InShare { .. } => t.lost_in_share = ms,
            StopKind::Drain => t.lost_drain = ms,
            StopKind::Cancel => return,
        }
        let unit = j.spec.request.unit.clone();
        let mut b = Bucket::default();
        b.shares.insert((j.spec.share.clone(), unit.clone()), t);
        b.users.insert((j.spec.user.clone(), unit), t);
        self.ledger.all_time.add(&b);
        self.ledger.hours.entry(now / HOUR_MS).or_default().add(&b);
    }

    /// GPUs held and idle right now, per kind: one millisecond's worth of every figure.
    fn rates(&self) -> Bucket {
        let mut b = Bucket::default();
        // Per unit: what shares borrow, and the idle max of the shares that lend.
        let mut borrowed: BTreeMap<&Unit, u64> = BTreeMap::new();
        let mut idle: BTreeMap<&Unit, Vec<(&ShareName, u64)>> = BTreeMap::new();
        for s in self.shares.values() {
            for l in &s.capacity_limits {
                let used = self.share_used(&s.name, &l.unit) as u64;
                let max = l.max as u64;
                let within = used.min(max);
                let t = Totals {
                    used: within,
                    borrowed: used - within,
                    reserved_idle: if s.resource_sharing.strategy == Strategy::Reserve {
                        max - within
                    } else {
                        0
                    },
                    ..Default::default()
                };
                *borrowed.entry(&l.unit).or_default() += t.borrowed;
                if s.resource_sharing.strategy != Strategy::Reserve && max > within {
                    idle.entry(&l.unit)
                        .or_default()
                        .push((&s.name, max - within));
                }
                if t != Totals::default() {
                    b.shares.insert((s.name.clone(), l.unit.clone()), t);
                }
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
        for ((user, unit, on_borrowed), &gpus) in &self.index.user_used {
            let t = b.users.entry((user.clone(), unit.clone())).or_default();
            if *on_borrowed {
                t.borrowed += gpus as u64;
            } else {
                t.used += gpus as u64;
            }
        }
        for (unit, &gpus) in &self.index.capacity {
            b.capacity.insert(unit.clone(), gpus as u64);
        }
        b
    }
}

impl Bucket {
    /// Every figure times `ms`.
    fn times(&self, ms: u64) -> Bucket {
        let m = |t: &Totals| Totals {
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
