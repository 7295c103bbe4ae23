//! What the ledger counts, read from the state: the rates of the moment (what each share
//! and user holds, and the capacity), counted at each entry's time, and the run time an
//! attempt lost when it ended stopped. The ledger itself ([`crate::ledger`]) only
//! integrates the figures it is given.

use crate::ledger::{self, Accrual, Bucket, Holder, ShareHolding, UserHolding};
use crate::state::*;
use tranche_model::*;

impl State {
    /// The GPU time from the ledger's last count to `now` at today's rates. Reads only.
    pub fn accrual(&self, now: Millis) -> Accrual {
        self.ledger.accrual(now, || self.rates())
    }

    /// Adds an accrual (see [`State::accrual`]).
    pub(crate) fn book(&mut self, a: Accrual, now: Millis) {
        self.ledger.book(a, now);
    }

    /// The ledger's figures over `[from, to)`, with the time since the last entry
    /// counted up to `to` at today's rates (as the next entry would count it).
    pub fn ledger_between(&self, from: Millis, to: Millis) -> Bucket {
        self.ledger.between(from, to, || self.rates())
    }

    /// Everything since the ledger began, up to `now` (the time since the last entry
    /// counted at today's rates).
    pub fn ledger_all_time(&self, now: Millis) -> Bucket {
        self.ledger.all_time_to(now, || self.rates())
    }

    /// An attempt that ended stopped: its run time, if a preemption or a drain, is
    /// lost, charged to the hour it ended in, and of it the work since its last
    /// checkpoint.
    pub(crate) fn book_lost(&mut self, job: JobId, now: Millis) {
        let Some(j) = self.jobs.get(&job) else {
            return;
        };
        let Some(a) = j.attempts.last() else { return };
        let Some(AttemptEnd::Stopped { kind, .. }) = &a.end else {
            return;
        };
        let ran = now.saturating_sub(a.started_at.unwrap_or(a.scheduled_at));
        let since = now.saturating_sub(a.resumes_from(j.spec.checkpoint.every_s, now));
        let gpus: u64 = a.allocation.iter().map(|n| n.gpus.len() as u64).sum();
        let holder = Holder {
            share: &j.spec.share,
            user: &j.spec.user,
            unit: &j.spec.request.unit,
        };
        self.ledger
            .book_lost(kind, (ran * gpus, since.min(ran) * gpus), holder, now);
    }

    /// GPUs held and idle right now, per kind: one millisecond's worth of every figure.
    fn rates(&self) -> Bucket {
        let shares = self.shares.values().flat_map(|s| {
            s.capacity_limits.iter().map(move |l| ShareHolding {
                share: &s.name,
                unit: &l.unit,
                used: self.share_used(&s.name, &l.unit) as u64,
                max: l.max as u64,
                strategy: s.resource_sharing.strategy,
            })
        });
        let users = self
            .index
            .user_used
            .iter()
            .map(|((user, unit, on_borrowed), &gpus)| UserHolding {
                user,
                unit,
                on_borrowed: *on_borrowed,
                gpus: gpus as u64,
            });
        let capacity = self.index.capacity.iter().map(|(u, &g)| (u, g as u64));
        ledger::rates(shares, users, capacity)
    }
}
