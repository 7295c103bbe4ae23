//! What clients may ask to change: users, operators and admins through the CLI and the
//! APIs, agents for their own nodes. The controller authorizes a [`ClientCommand`]
//! against the caller's identity and then turns it into the replicated
//! [`tranche_state::Command`]. Commands only the leader issues (scheduling plans, node
//! liveness) have no client form at all, so no client can express them.

use serde::{Deserialize, Serialize};
use tranche_model::*;
use tranche_state::{Command, Progress};

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
    /// [`crate::Response::AccessKey`] with the secret; it becomes
    /// [`Command::PutAccessKey`] in the service, never through
    /// [`into_command`](ClientCommand::into_command).
    IssueAccessKey {
        user: UserName,
        role: KeyRole,
    },
    /// Admins any key, others their own.
    RevokeAccessKey {
        id: String,
    },
}

impl ClientCommand {
    /// The replicated command this becomes once authorized.
    ///
    /// `IssueAccessKey` needs the id and the time the controller gives it: the service
    /// turns it into [`Command::PutAccessKey`] itself. Here it becomes a key with an
    /// empty id, which the state machine refuses, so that nothing is issued by mistake.
    pub fn into_command(self) -> Command {
        use ClientCommand as C;
        match self {
            C::PutEnvironment(e) => Command::PutEnvironment(e),
            C::DeleteEnvironment(n) => Command::DeleteEnvironment(n),
            C::PutPolicy(p) => Command::PutPolicy(p),
            C::DeletePolicy(n) => Command::DeletePolicy(n),
            C::PutQueue(q) => Command::PutQueue(q),
            C::DeleteQueue(n) => Command::DeleteQueue(n),
            C::PutShare(s) => Command::PutShare(s),
            C::DeleteShare(n) => Command::DeleteShare(n),
            C::Submit(spec) => Command::Submit(spec),
            C::Cancel { job, reason } => Command::Cancel { job, reason },
            C::UpdatePriority { job, priority } => Command::UpdatePriority { job, priority },
            C::Hold { job } => Command::Hold { job },
            C::Release { job } => Command::Release { job },
            C::DrainNode { node, reason, now } => Command::DrainNode { node, reason, now },
            C::ResumeNode { node } => Command::ResumeNode { node },
            C::RegisterNode(inv) => Command::RegisterNode(inv),
            C::JobProgress {
                job,
                attempt,
                event,
            } => Command::JobProgress {
                job,
                attempt,
                event,
            },
            C::TagResource { resource, tags } => Command::TagResource { resource, tags },
            C::UntagResource { resource, keys } => Command::UntagResource { resource, keys },
            C::IssueAccessKey { user, role } => Command::PutAccessKey(AccessKey {
                id: String::new(),
                user,
                role,
                created_at: 0,
                revoked_at: None,
                issuer_serial: None,
                expires_at: None,
            }),
            C::RevokeAccessKey { id } => Command::RevokeAccessKey { id },
        }
    }
}
