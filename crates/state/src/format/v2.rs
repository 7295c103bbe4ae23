//! The types of format 2 that differ from format 3's, frozen as that release wrote them.

use super::v5::QuotaShare;
use super::v5::RequestId;
use super::v7::{Attempt, Checkpoint};
use super::*;
use crate::{Plan, Progress};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: JobName,
    pub queue: QueueName,
    pub share: ShareName,
    pub user: UserName,
    pub priority: u32,
    pub request: Request,
    pub cpus_per_node: u32,
    pub memory_mb_per_node: u64,
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub time_limit_s: Option<u64>,
    pub checkpoint: Checkpoint,
    pub retry_attempts: u32,
    pub preemption_retries: Option<u32>,
    pub client_token: Option<String>,
    pub tags: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub status: JobStatus,
    pub submitted_at: Millis,
    pub attempts: Vec<Attempt>,
    pub transitions: Vec<Transition>,
    pub stop: Option<Stop>,
    pub hold: Option<Hold>,
    pub pending_reason: Option<PendingReason>,
    pub preemptions: u32,
    pub failures: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub version: u64,
    pub environments: BTreeMap<EnvName, ServiceEnvironment>,
    pub policies: BTreeMap<PolicyName, SchedulingPolicy>,
    pub queues: BTreeMap<QueueName, JobQueue>,
    pub shares: BTreeMap<ShareName, QuotaShare>,
    pub nodes: BTreeMap<NodeName, tranche_model::Node>,
    pub jobs: BTreeMap<JobId, Job>,
    pub tokens: BTreeMap<(UserName, String), JobId>,
    pub next_job_id: u64,
    pub sessions: BTreeMap<u64, Session>,
    pub sessions_swept_at: Millis,
}

/// Format 2's log command: today's but for its job spec.
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
    Cancel {
        job: JobId,
        reason: String,
    },
    UpdatePriority {
        job: JobId,
        priority: u32,
    },
    RegisterNode(NodeInventory),
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
    JobProgress {
        job: JobId,
        attempt: u32,
        event: Progress,
    },
    ApplyPlan(Plan),
}

/// What a format-2 log entry carries (see `tranche_controller::peer::Proposal`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub origin: u64,
    pub id: u64,
    pub now: Millis,
    pub cmd: Command,
    pub request: Option<RequestId>,
}

impl From<JobSpec> for super::v3::JobSpec {
    /// A format-2 job has no working directory of its own: it runs in the home.
    fn from(s: JobSpec) -> Self {
        super::v3::JobSpec {
            name: s.name,
            queue: s.queue,
            share: s.share,
            user: s.user,
            priority: s.priority,
            request: s.request,
            cpus_per_node: s.cpus_per_node,
            memory_mb_per_node: s.memory_mb_per_node,
            image: s.image,
            command: s.command,
            env: s.env,
            time_limit_s: s.time_limit_s,
            checkpoint: s.checkpoint,
            retry_attempts: s.retry_attempts,
            preemption_retries: s.preemption_retries,
            client_token: s.client_token,
            tags: s.tags,
            cwd: None,
        }
    }
}

impl From<Job> for super::v3::Job {
    fn from(j: Job) -> Self {
        super::v3::Job {
            id: j.id,
            spec: j.spec.into(),
            status: j.status,
            submitted_at: j.submitted_at,
            attempts: j.attempts,
            transitions: j.transitions,
            stop: j.stop,
            hold: j.hold,
            pending_reason: j.pending_reason,
            preemptions: j.preemptions,
            failures: j.failures,
        }
    }
}

impl From<State> for super::v3::State {
    fn from(s: State) -> Self {
        super::v3::State {
            version: s.version,
            environments: s.environments,
            policies: s.policies,
            queues: s.queues,
            shares: s.shares,
            nodes: s.nodes,
            jobs: s.jobs.into_iter().map(|(k, j)| (k, j.into())).collect(),
            tokens: s.tokens,
            next_job_id: s.next_job_id,
            sessions: s.sessions,
            sessions_swept_at: s.sessions_swept_at,
        }
    }
}

impl From<Command> for super::v3::Command {
    fn from(c: Command) -> Self {
        use super::v3::Command as C;
        match c {
            Command::PutEnvironment(e) => C::PutEnvironment(e),
            Command::DeleteEnvironment(n) => C::DeleteEnvironment(n),
            Command::PutPolicy(p) => C::PutPolicy(p),
            Command::DeletePolicy(n) => C::DeletePolicy(n),
            Command::PutQueue(q) => C::PutQueue(q),
            Command::DeleteQueue(n) => C::DeleteQueue(n),
            Command::PutShare(s) => C::PutShare(s),
            Command::DeleteShare(n) => C::DeleteShare(n),
            Command::Submit(spec) => C::Submit(spec.into()),
            Command::Cancel { job, reason } => C::Cancel { job, reason },
            Command::UpdatePriority { job, priority } => C::UpdatePriority { job, priority },
            Command::RegisterNode(inv) => C::RegisterNode(inv),
            Command::Heartbeat { node } => C::Heartbeat { node },
            Command::DrainNode { node, reason, now } => C::DrainNode { node, reason, now },
            Command::ResumeNode { node } => C::ResumeNode { node },
            Command::NodeUnreachable { node } => C::NodeUnreachable { node },
            Command::NodeDown { node, reason } => C::NodeDown { node, reason },
            Command::NodeUp { node } => C::NodeUp { node },
            Command::JobProgress {
                job,
                attempt,
                event,
            } => C::JobProgress {
                job,
                attempt,
                event,
            },
            Command::ApplyPlan(p) => C::ApplyPlan(p),
        }
    }
}

impl From<Proposal> for super::v3::Proposal {
    fn from(p: Proposal) -> Self {
        super::v3::Proposal {
            origin: p.origin,
            id: p.id,
            now: p.now,
            cmd: p.cmd.into(),
            request: p.request,
        }
    }
}
