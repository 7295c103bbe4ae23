//! What clients may ask to change: users, operators and admins through the CLI and the
//! APIs, agents for their own nodes. The controller authorizes a [`ClientCommand`]
//! against the caller's identity and then turns it into the replicated command, which
//! this one mirrors. Commands only the leader issues (scheduling plans, node liveness)
//! have no client form at all, so no client can express them.

use serde::{Deserialize, Serialize};
use tranche_model::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientCommand {
    // Admins: the quota objects.
    PutEnvironment(ServiceEnvironment),
    DeleteEnvironment(EnvName),
    PutPolicy(SchedulingPolicy),
    DeletePolicy(PolicyName),
    PutQueue(JobQueue),
    DeleteQueue(QueueName),
    PutShare(QuotaShare),
    DeleteShare(ShareName),
    // Users (their own jobs), operators and admins.
    Submit(JobSpec),
    /// `42` (a job, or every task of array 42) or `42_7` (one task).
    Cancel {
        job: JobRef,
        reason: String,
    },
    UpdatePriority {
        job: JobRef,
        priority: u32,
    },
    Hold {
        job: JobRef,
    },
    Release {
        job: JobRef,
    },
    // Operators and admins; an agent may drain its own node (an unhealthy GPU).
    DrainNode {
        node: NodeName,
        reason: String,
        now: bool,
    },
    ResumeNode {
        node: NodeName,
    },
    // Agents, each for its own node.
    RegisterNode(NodeInventory),
    JobProgress {
        job: JobId,
        attempt: u32,
        event: Progress,
    },
    // Admins: tags on the quota objects (the AWS Batch-compatible endpoint).
    TagResource {
        resource: String,
        tags: std::collections::BTreeMap<String, String>,
    },
    UntagResource {
        resource: String,
        keys: Vec<String>,
    },
    // Access keys for the AWS Batch-compatible endpoint: admins for anyone with any
    // role, users and operators for themselves (an operator as operator or user).
    /// A new key acting as `user` with `role`. The controller picks its id and answers
    /// [`crate::Response::AccessKey`] with the secret: the replicated command that
    /// records the key is the controller's own, never this one's plain counterpart.
    IssueAccessKey {
        user: UserName,
        role: KeyRole,
    },
    /// Admins any key, others their own.
    RevokeAccessKey {
        id: String,
    },
    // Admins: groups of quota shares (nested quotas).
    PutGroup(ShareGroup),
    DeleteGroup(ShareName),
}
