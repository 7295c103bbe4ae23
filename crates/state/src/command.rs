//! The commands that change state, what applying one returns, and how it can fail.

use crate::plan::Plan;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tranche_model::*;

/// What an agent reports about an attempt (part of the object model, as the client
/// protocol carries it too).
pub use tranche_model::Progress;

/// Every change to the replicated state. New variants are only ever appended, so that
/// a log written by an older controller still decodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    PutEnvironment(ServiceEnvironment),
    DeleteEnvironment(EnvName),
    PutPolicy(SchedulingPolicy),
    DeletePolicy(PolicyName),
    PutQueue(JobQueue),
    DeleteQueue(QueueName),
    PutShare(QuotaShare),
    DeleteShare(ShareName),
    Submit(JobSpec),
    /// Cancels a job, an array task (`42_7`), or every task of an array (`42`).
    Cancel {
        job: JobRef,
        reason: String,
    },
    UpdatePriority {
        job: JobRef,
        priority: u32,
    },
    RegisterNode(NodeInventory),
    /// Format 1 only: heartbeats were log entries. No controller proposes it now; it
    /// stays so that a format-1 log still decodes and replays.
    Heartbeat {
        node: NodeName,
    },
    DrainNode {
        node: NodeName,
        reason: String,
        now: bool,
    },
    ResumeNode {
        node: NodeName,
    },
    NodeUnreachable {
        node: NodeName,
    },
    NodeDown {
        node: NodeName,
        reason: String,
    },
    NodeUp {
        node: NodeName,
    },
    /// An agent's report about an attempt of a job on its node.
    JobProgress {
        job: JobId,
        attempt: u32,
        event: Progress,
    },
    /// The scheduler's plan, re-verified action by action.
    ApplyPlan(Plan),
    /// Keeps waiting jobs PENDING until released (`tranche hold`).
    Hold {
        job: JobRef,
    },
    /// Lets held jobs be scheduled (`tranche release`).
    Release {
        job: JobRef,
    },
    /// Leader only: drops the ledger's hours before this one (its retention).
    PruneLedger {
        before_hour: u64,
    },
    /// Records an access key (`tranche keys issue`); its id must be new.
    PutAccessKey(AccessKey),
    /// Revokes an access key (`tranche keys revoke`): it signs nothing from now on.
    RevokeAccessKey {
        id: String,
    },
    /// Sets tags on an object (`resource`: see [`crate::State::tags`]); existing
    /// keys are overwritten.
    TagResource {
        resource: String,
        tags: BTreeMap<String, String>,
    },
    /// Removes tags from an object.
    UntagResource {
        resource: String,
        keys: Vec<String>,
    },
    /// Leader only: ended jobs leave the state (see [`crate::retention`]). Every
    /// controller computes the same jobs ([`crate::State::forgettable`]).
    ForgetEnded(crate::retention::Retention),
    /// Creates or replaces a group of quota shares (format 9).
    PutGroup(ShareGroup),
    /// Deletes a group that no other group lists; its members are then in no group
    /// (format 9).
    DeleteGroup(ShareName),
}

/// What an accepted command did.
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

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PlanOutcome {
    pub applied: u32,
    /// (index of the action in the plan, why it no longer fits)
    pub rejected: Vec<(u32, ApplyError)>,
}

/// Why a command was refused. A refused command changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ApplyError {
    #[error("{0}")]
    Invalid(ValidationError),
    #[error("{kind} {name} does not exist")]
    NotFound { kind: String, name: String },
    #[error("{0}")]
    Conflict(String),
    #[error("stale plan: {0}")]
    Stale(String),
}

impl From<ValidationError> for ApplyError {
    fn from(e: ValidationError) -> Self {
        ApplyError::Invalid(e)
    }
}

pub(crate) fn not_found(kind: &str, name: impl std::fmt::Display) -> ApplyError {
    ApplyError::NotFound {
        kind: kind.into(),
        name: name.to_string(),
    }
}

pub(crate) fn conflict(msg: impl Into<String>) -> ApplyError {
    ApplyError::Conflict(msg.into())
}
