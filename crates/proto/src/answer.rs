//! What a committed write answers and why one is refused, and the ledger's figures of a
//! report, as clients read them.
//!
//! These mirror the state machine's answer types field for field and variant for
//! variant, so their bincode encoding is the same: the client protocol's bytes do not
//! depend on the state machine's types, and a change to those is caught by the
//! controller's tests of the mapping rather than by a client that can no longer read
//! an answer. Variants are only appended.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::{JobId, ShareName, Unit, UserName, ValidationError};

/// What an accepted write did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Done,
    /// A submit: the job's id; `existing` when the client token had been seen before.
    Submitted {
        job: JobId,
        existing: bool,
    },
    /// A plan: how many actions took effect and which were rejected as stale.
    Plan(PlanOutcome),
}

/// What a scheduling plan did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PlanOutcome {
    pub applied: u32,
    /// (index of the action in the plan, why it no longer fits)
    pub rejected: Vec<(u32, Refusal)>,
}

/// Why a write was refused. A refused write changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum Refusal {
    #[error("{0}")]
    Invalid(ValidationError),
    #[error("{kind} {name} does not exist")]
    NotFound { kind: String, name: String },
    #[error("{0}")]
    Conflict(String),
    #[error("stale plan: {0}")]
    Stale(String),
}

impl From<ValidationError> for Refusal {
    fn from(e: ValidationError) -> Self {
        Refusal::Invalid(e)
    }
}

/// GPU-milliseconds of each kind (see the ledger in design §9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuTimes {
    pub used: u64,
    pub borrowed: u64,
    pub lent: u64,
    pub reserved_idle: u64,
    pub lost_reclaim: u64,
    pub lost_in_share: u64,
    pub lost_drain: u64,
    /// Of the three `lost_` figures (GPU time preempted), the work since each attempt's
    /// last checkpoint.
    pub work_lost: u64,
}

impl GpuTimes {
    pub fn add(&mut self, o: &GpuTimes) {
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

/// The ledger's figures over a range of hours.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerTotals {
    pub shares: BTreeMap<(ShareName, Unit), GpuTimes>,
    pub users: BTreeMap<(UserName, Unit), GpuTimes>,
    /// GPU-milliseconds of capacity per unit.
    pub capacity: BTreeMap<Unit, u64>,
    /// Borrowed GPU time per unit that no share's idle max covered.
    pub unassigned_lent: BTreeMap<Unit, u64>,
}

impl LedgerTotals {
    /// Per unit: the shares' figures summed, with the borrowed time that no share's
    /// idle max covered counted as lent, so that lent equals borrowed.
    pub fn by_unit(&self) -> BTreeMap<Unit, GpuTimes> {
        let mut m: BTreeMap<Unit, GpuTimes> = BTreeMap::new();
        for ((_, u), t) in &self.shares {
            m.entry(u.clone()).or_default().add(t);
        }
        for (u, v) in &self.unassigned_lent {
            m.entry(u.clone()).or_default().lent += v;
        }
        m
    }
}
