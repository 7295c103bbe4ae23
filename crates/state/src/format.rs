//! The state's stored form in each format version this build reads, and the migration
//! from the older one. An image's envelope (see [`crate::codec`]) says which version its
//! state bytes are in.
//!
//! Format 1 kept each node's last heartbeat in the replicated state (heartbeats were
//! log entries); format 2 keeps liveness as the leader's soft state, so its nodes have
//! no such field. Format 3 adds a job's working directory (`JobSpec::cwd`), so its job
//! specs, jobs, commands and states differ from format 2's. Format 4 adds arrays,
//! dependencies, holds and output paths (`JobSpec::{array, dependency, hold, output,
//! error}`, `Job::{array, deps, held}`) and names jobs in commands as `42` or `42_7`
//! (`JobRef`). Format 5 adds the AWS Batch-compatible endpoint's part: a SageMaker
//! training job's part of a spec (`JobSpec::sagemaker`), the state's access keys and
//! tags (`State::aws`), and the commands that change them (`PutAccessKey`,
//! `RevokeAccessKey`, `TagResource`, `UntagResource`, appended). Format 6 adds a
//! quota share's `max_user_priority` and job limits, an access key's issuer serial
//! and expiry, each share's and user's submits of the current minute
//! (`State::submit_rate`), and keys client sessions by (identity, client id): a
//! request id carries the caller's identity. Format 7 appends the command that drops
//! ended jobs from the state (`ForgetEnded`); its states are stored as format 6's, and
//! a format-6 log entry reads as a format-7 one. Reading an older format goes through
//! each newer one in turn (1 → 2 → 3 → 4 → 5 → 6 = 7).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::*;

use crate::codec::{self, FormatError};
use crate::session::Session;
use crate::state::State;

/// The types of format 5 that differ from today's, frozen as that release wrote them.
pub mod v5 {
    use super::*;
    use crate::ledger::Ledger;
    use crate::{Plan, Progress};

    /// A format-5 quota share: no users' priority cap, no job limits.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct QuotaShare {
        pub name: ShareName,
        pub queue: QueueName,
        pub capacity_limits: Vec<CapacityLimit>,
        pub resource_sharing: ResourceSharing,
        pub in_share_preemption: bool,
        pub state: ObjState,
        pub members: Vec<UserName>,
        pub default_grace_s: u64,
        pub max_grace_s: u64,
        pub min_runtime_s: u64,
    }

    /// A format-5 access key: no issuer serial, no expiry.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct AccessKey {
        pub id: String,
        pub user: UserName,
        pub role: KeyRole,
        pub created_at: Millis,
        pub revoked_at: Option<Millis>,
    }

    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct AwsState {
        pub keys: BTreeMap<String, AccessKey>,
        pub tags: BTreeMap<String, BTreeMap<String, String>>,
    }

    /// A format-5 request id: no identity.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub struct RequestId {
        pub client: u64,
        pub seq: u64,
        pub first_incomplete: u64,
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
        pub ledger: Ledger,
        pub aws: AwsState,
    }

    /// Format 5's log command: its quota share and access key.
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
            job: JobRef,
            reason: String,
        },
        UpdatePriority {
            job: JobRef,
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
        Hold {
            job: JobRef,
        },
        Release {
            job: JobRef,
        },
        PruneLedger {
            before_hour: u64,
        },
        PutAccessKey(AccessKey),
        RevokeAccessKey {
            id: String,
        },
        TagResource {
            resource: String,
            tags: BTreeMap<String, String>,
        },
        UntagResource {
            resource: String,
            keys: Vec<String>,
        },
    }

    /// What a format-5 log entry carries (see `tranche_proto::peer::Proposal`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Proposal {
        pub origin: u64,
        pub id: u64,
        pub now: Millis,
        pub cmd: Command,
        pub request: Option<RequestId>,
    }

    impl From<QuotaShare> for tranche_model::QuotaShare {
        /// A format-5 share gets the default cap on users' priorities and the
        /// default job limits: jobs already submitted keep their priority, and a
        /// share already over a limit takes no new jobs until it is under it again.
        fn from(s: QuotaShare) -> Self {
            tranche_model::QuotaShare {
                name: s.name,
                queue: s.queue,
                capacity_limits: s.capacity_limits,
                resource_sharing: s.resource_sharing,
                in_share_preemption: s.in_share_preemption,
                state: s.state,
                members: s.members,
                default_grace_s: s.default_grace_s,
                max_grace_s: s.max_grace_s,
                min_runtime_s: s.min_runtime_s,
                max_user_priority: DEFAULT_MAX_USER_PRIORITY,
                limits: JobLimits::default(),
            }
        }
    }

    impl From<AccessKey> for tranche_model::AccessKey {
        /// A format-5 key's issuer is not known, and it does not expire.
        fn from(k: AccessKey) -> Self {
            tranche_model::AccessKey {
                id: k.id,
                user: k.user,
                role: k.role,
                created_at: k.created_at,
                revoked_at: k.revoked_at,
                issuer_serial: None,
                expires_at: None,
            }
        }
    }

    impl From<RequestId> for crate::RequestId {
        /// A format-5 request's sender is not known: its session is keyed by an empty
        /// identity, which no caller has (the controller always sets one).
        fn from(r: RequestId) -> Self {
            crate::RequestId {
                identity: String::new(),
                client: r.client,
                seq: r.seq,
                first_incomplete: r.first_incomplete,
            }
        }
    }

    impl From<State> for crate::State {
        /// Format 5's sessions are dropped (they cannot be told apart by identity; a
        /// client retrying across the upgrade is answered afresh), and no submits are
        /// counted yet in the current minute.
        fn from(s: State) -> Self {
            let mut st = crate::State {
                version: s.version,
                environments: s.environments,
                policies: s.policies,
                queues: s.queues,
                shares: s.shares.into_iter().map(|(k, v)| (k, v.into())).collect(),
                nodes: s.nodes,
                jobs: s.jobs,
                tokens: s.tokens,
                next_job_id: s.next_job_id,
                sessions: BTreeMap::new(),
                sessions_swept_at: s.sessions_swept_at,
                ledger: s.ledger,
                aws: crate::AwsState {
                    keys: s.aws.keys.into_iter().map(|(k, v)| (k, v.into())).collect(),
                    tags: s.aws.tags,
                },
                submit_rate: BTreeMap::new(),
                index: Default::default(),
            };
            st.share_array_specs();
            st.rebuild_index();
            st
        }
    }

    impl From<Command> for crate::Command {
        fn from(c: Command) -> Self {
            use crate::Command as C;
            match c {
                Command::PutEnvironment(e) => C::PutEnvironment(e),
                Command::DeleteEnvironment(n) => C::DeleteEnvironment(n),
                Command::PutPolicy(p) => C::PutPolicy(p),
                Command::DeletePolicy(n) => C::DeletePolicy(n),
                Command::PutQueue(q) => C::PutQueue(q),
                Command::DeleteQueue(n) => C::DeleteQueue(n),
                Command::PutShare(s) => C::PutShare(s.into()),
                Command::DeleteShare(n) => C::DeleteShare(n),
                Command::Submit(spec) => C::Submit(spec),
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
                Command::Hold { job } => C::Hold { job },
                Command::Release { job } => C::Release { job },
                Command::PruneLedger { before_hour } => C::PruneLedger { before_hour },
                Command::PutAccessKey(k) => C::PutAccessKey(k.into()),
                Command::RevokeAccessKey { id } => C::RevokeAccessKey { id },
                Command::TagResource { resource, tags } => C::TagResource { resource, tags },
                Command::UntagResource { resource, keys } => C::UntagResource { resource, keys },
            }
        }
    }
}

/// The types of format 4 that differ from format 5's, frozen as that release wrote them.
pub mod v4 {
    use super::v5::QuotaShare;
    use super::v5::RequestId;
    use super::*;
    use crate::ledger::Ledger;
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
        pub cwd: Option<String>,
        pub array: Option<ArraySpec>,
        pub dependency: Dependency,
        pub hold: bool,
        pub output: Option<String>,
        pub error: Option<String>,
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
        pub array: Option<ArrayTask>,
        pub deps: Vec<Dep>,
        pub held: bool,
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
        pub ledger: Ledger,
    }

    /// Format 4's log command: its job spec, and none of the AWS endpoint's commands
    /// (access keys, tags).
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
            job: JobRef,
            reason: String,
        },
        UpdatePriority {
            job: JobRef,
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
        Hold {
            job: JobRef,
        },
        Release {
            job: JobRef,
        },
        PruneLedger {
            before_hour: u64,
        },
    }

    /// What a format-4 log entry carries (see `tranche_proto::peer::Proposal`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Proposal {
        pub origin: u64,
        pub id: u64,
        pub now: Millis,
        pub cmd: Command,
        pub request: Option<RequestId>,
    }

    impl From<JobSpec> for tranche_model::JobSpec {
        /// A format-4 job is no SageMaker training job.
        fn from(s: JobSpec) -> Self {
            tranche_model::JobSpec {
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
                cwd: s.cwd,
                array: s.array,
                dependency: s.dependency,
                hold: s.hold,
                output: s.output,
                error: s.error,
                sagemaker: None,
            }
        }
    }

    impl From<Job> for tranche_model::Job {
        fn from(j: Job) -> Self {
            tranche_model::Job {
                id: j.id,
                spec: std::sync::Arc::new(j.spec.into()),
                status: j.status,
                submitted_at: j.submitted_at,
                attempts: j.attempts,
                transitions: j.transitions,
                stop: j.stop,
                hold: j.hold,
                pending_reason: j.pending_reason,
                preemptions: j.preemptions,
                failures: j.failures,
                array: j.array,
                deps: j.deps,
                held: j.held,
            }
        }
    }

    impl From<State> for super::v5::State {
        /// A format-4 state has no access keys and no tags.
        fn from(s: State) -> Self {
            super::v5::State {
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
                ledger: s.ledger,
                aws: Default::default(),
            }
        }
    }

    impl From<Proposal> for super::v5::Proposal {
        fn from(p: Proposal) -> Self {
            super::v5::Proposal {
                origin: p.origin,
                id: p.id,
                now: p.now,
                cmd: p.cmd.into(),
                request: p.request,
            }
        }
    }

    impl From<Command> for super::v5::Command {
        fn from(c: Command) -> Self {
            use super::v5::Command as C;
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
                Command::Hold { job } => C::Hold { job },
                Command::Release { job } => C::Release { job },
                Command::PruneLedger { before_hour } => C::PruneLedger { before_hour },
            }
        }
    }
}

/// The types of format 3 that differ from format 4's, frozen as that release wrote them.
pub mod v3 {
    use super::v5::QuotaShare;
    use super::v5::RequestId;
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
        pub cwd: Option<String>,
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

    /// Format 3's log command: its job spec, and jobs named by id alone.
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

    /// What a format-3 log entry carries (see `tranche_proto::peer::Proposal`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Proposal {
        pub origin: u64,
        pub id: u64,
        pub now: Millis,
        pub cmd: Command,
        pub request: Option<RequestId>,
    }

    impl From<JobSpec> for super::v4::JobSpec {
        /// A format-3 job is no array, depends on nothing and is not held; its output
        /// is kept in the agent's spool only.
        fn from(s: JobSpec) -> Self {
            super::v4::JobSpec {
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
                cwd: s.cwd,
                array: None,
                dependency: Default::default(),
                hold: false,
                output: None,
                error: None,
            }
        }
    }

    impl From<Job> for super::v4::Job {
        fn from(j: Job) -> Self {
            super::v4::Job {
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
                array: None,
                deps: vec![],
                held: false,
            }
        }
    }

    impl From<State> for super::v4::State {
        /// A format-3 state has no ledger: its accounting starts at the upgrade.
        fn from(s: State) -> Self {
            super::v4::State {
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
                ledger: Default::default(),
            }
        }
    }

    impl From<Command> for super::v4::Command {
        fn from(c: Command) -> Self {
            use super::v4::Command as C;
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
                Command::Cancel { job, reason } => C::Cancel {
                    job: JobRef::job(job),
                    reason,
                },
                Command::UpdatePriority { job, priority } => C::UpdatePriority {
                    job: JobRef::job(job),
                    priority,
                },
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

    impl From<Proposal> for super::v4::Proposal {
        fn from(p: Proposal) -> Self {
            super::v4::Proposal {
                origin: p.origin,
                id: p.id,
                now: p.now,
                cmd: p.cmd.into(),
                request: p.request,
            }
        }
    }
}

/// The types of format 2 that differ from format 3's, frozen as that release wrote them.
pub mod v2 {
    use super::v5::QuotaShare;
    use super::v5::RequestId;
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

    /// What a format-2 log entry carries (see `tranche_proto::peer::Proposal`).
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
}

/// The types of format 1 that differ from format 2's, frozen as that release wrote them.
pub mod v1 {
    use super::v5::QuotaShare;
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Node {
        pub inventory: NodeInventory,
        pub allocated: Vec<Option<JobId>>,
        pub drain: Option<String>,
        pub down: Option<String>,
        pub unreachable: bool,
        pub last_heartbeat: Millis,
        pub registered_at: Millis,
    }

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct State {
        pub version: u64,
        pub environments: BTreeMap<EnvName, ServiceEnvironment>,
        pub policies: BTreeMap<PolicyName, SchedulingPolicy>,
        pub queues: BTreeMap<QueueName, JobQueue>,
        pub shares: BTreeMap<ShareName, QuotaShare>,
        pub nodes: BTreeMap<NodeName, Node>,
        pub jobs: BTreeMap<JobId, super::v2::Job>,
        pub tokens: BTreeMap<(UserName, String), JobId>,
        pub next_job_id: u64,
        pub sessions: BTreeMap<u64, Session>,
        pub sessions_swept_at: Millis,
    }

    impl From<Node> for tranche_model::Node {
        /// The last heartbeat is dropped: the leader that reads this starts every
        /// node's timer afresh.
        fn from(n: Node) -> Self {
            tranche_model::Node {
                inventory: n.inventory,
                allocated: n.allocated,
                drain: n.drain,
                down: n.down,
                unreachable: n.unreachable,
                registered_at: n.registered_at,
            }
        }
    }

    impl From<State> for super::v2::State {
        fn from(s: State) -> Self {
            super::v2::State {
                version: s.version,
                environments: s.environments,
                policies: s.policies,
                queues: s.queues,
                shares: s.shares,
                nodes: s.nodes.into_iter().map(|(k, n)| (k, n.into())).collect(),
                jobs: s.jobs,
                tokens: s.tokens,
                next_job_id: s.next_job_id,
                sessions: s.sessions,
                sessions_swept_at: s.sessions_swept_at,
            }
        }
    }
}

/// Decodes state bytes written in format `version` and migrates them to today's
/// state (indexes rebuilt).
pub fn decode_state(version: u16, bytes: &[u8]) -> Result<State, FormatError> {
    fn read<T: serde::de::DeserializeOwned>(version: u16, bytes: &[u8]) -> Result<T, FormatError> {
        codec::decode(bytes).map_err(|reason| FormatError::Decode { version, reason })
    }
    let v5: v5::State = match version {
        1 => {
            let v2: v2::State = read::<v1::State>(version, bytes)?.into();
            let v3: v3::State = v2.into();
            let v4: v4::State = v3.into();
            v4.into()
        }
        2 => {
            let v3: v3::State = read::<v2::State>(version, bytes)?.into();
            let v4: v4::State = v3.into();
            v4.into()
        }
        3 => {
            let v4: v4::State = read::<v3::State>(version, bytes)?.into();
            v4.into()
        }
        4 => read::<v4::State>(version, bytes)?.into(),
        5 => read(version, bytes)?,
        // Format 7 stores the state as format 6 did.
        6 | codec::FORMAT => {
            return State::restore(bytes).map_err(|e| FormatError::Decode {
                version,
                reason: e.to_string(),
            });
        }
        found => return Err(FormatError::Unknown { found }),
    };
    Ok(v5.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Command;

    /// A RUNNABLE job as format 2 stored it.
    fn v2_job() -> v2::Job {
        v2::Job {
            id: JobId(1),
            spec: v2::JobSpec {
                name: "j".into(),
                queue: "q".into(),
                share: "s".into(),
                user: "alice".into(),
                priority: 0,
                request: Request {
                    unit: "h100".into(),
                    gpus_per_node: 1,
                    nodes: 1,
                },
                cpus_per_node: 0,
                memory_mb_per_node: 0,
                image: "host".into(),
                command: vec!["true".into()],
                env: BTreeMap::new(),
                time_limit_s: None,
                checkpoint: Checkpoint::default(),
                retry_attempts: 1,
                preemption_retries: None,
                client_token: None,
                tags: BTreeMap::new(),
            },
            status: JobStatus::Runnable,
            submitted_at: 5,
            attempts: vec![],
            transitions: vec![],
            stop: None,
            hold: None,
            pending_reason: None,
            preemptions: 0,
            failures: 0,
        }
    }

    #[test]
    fn a_format_2_submit_becomes_todays_with_no_working_directory() {
        let spec = v2_job().spec;
        let c: v3::Command = v2::Command::Submit(spec).into();
        let c: Command = v5::Command::from(v4::Command::from(c)).into();
        match c {
            Command::Submit(s) => assert_eq!((s.cwd, s.user.as_str()), (None, "alice")),
            other => panic!("{other:?}"),
        }
        let c: v3::Command = v2::Command::NodeDown {
            node: "n1".into(),
            reason: "no heartbeat for 9 s".into(),
        }
        .into();
        let c: Command = v5::Command::from(v4::Command::from(c)).into();
        assert_eq!(
            c,
            Command::NodeDown {
                node: "n1".into(),
                reason: "no heartbeat for 9 s".into()
            }
        );
    }

    #[test]
    fn a_format_3_command_names_its_job_as_a_plain_reference() {
        let c: v4::Command = v3::Command::Cancel {
            job: JobId(7),
            reason: "x".into(),
        }
        .into();
        let c: Command = v5::Command::from(c).into();
        assert_eq!(
            c,
            Command::Cancel {
                job: JobRef::job(JobId(7)),
                reason: "x".into()
            }
        );
        let v3: v3::Job = v2_job().into();
        let j: Job = v4::Job::from(v3).into();
        assert_eq!((j.array, j.deps.len(), j.held), (None, 0, false));
        assert!(j.spec.dependency.is_empty() && j.spec.output.is_none());
    }

    /// A job submitted held, since released, with an output path, as format 4 stored
    /// it (RUNNABLE).
    fn v4_job() -> v4::Job {
        let v3: v3::Job = v2_job().into();
        let mut j: v4::Job = v3.into();
        j.spec.hold = true;
        j.spec.output = Some("o-%j.out".into());
        j
    }

    #[test]
    fn a_format_4_submit_becomes_todays_with_no_sagemaker_part() {
        let c: Command = v5::Command::from(v4::Command::Submit(v4_job().spec)).into();
        match c {
            Command::Submit(s) => assert_eq!(
                (s.sagemaker, s.hold, s.output.as_deref(), s.user.as_str()),
                (None, true, Some("o-%j.out"), "alice")
            ),
            other => panic!("{other:?}"),
        }
        // Commands without a job spec are laid out alike in formats 4 and 5.
        for (old, today) in [
            (
                v4::Command::Hold {
                    job: JobRef::job(JobId(4)),
                },
                Command::Hold {
                    job: JobRef::job(JobId(4)),
                },
            ),
            (
                v4::Command::PruneLedger { before_hour: 3 },
                Command::PruneLedger { before_hour: 3 },
            ),
        ] {
            assert_eq!(codec::encode(&old), codec::encode(&today));
            assert_eq!(Command::from(v5::Command::from(old)), today);
        }
    }

    #[test]
    fn a_format_4_state_migrates_with_no_access_keys_or_tags() {
        let mut ledger = crate::ledger::Ledger {
            since: 5,
            counted_to: 7_200_000,
            ..Default::default()
        };
        ledger
            .all_time
            .capacity
            .insert("h100".into(), 4 * 7_200_000);
        ledger.hours.insert(1, ledger.all_time.clone());
        let old = v4::State {
            version: 9,
            environments: BTreeMap::new(),
            policies: BTreeMap::new(),
            queues: BTreeMap::new(),
            shares: BTreeMap::new(),
            nodes: BTreeMap::new(),
            jobs: [(JobId(1), v4_job())].into(),
            tokens: BTreeMap::new(),
            next_job_id: 2,
            sessions: BTreeMap::new(),
            sessions_swept_at: 0,
            ledger: ledger.clone(),
        };
        let got = decode_state(4, &codec::encode(&old)).unwrap();
        assert_eq!((got.version, got.next_job_id), (9, 2));
        assert_eq!(got.ledger, ledger);
        assert_eq!(got.aws, crate::AwsState::default());
        let j = &got.jobs[&JobId(1)];
        assert!(!j.held && j.spec.hold && j.spec.sagemaker.is_none());
        assert_eq!(j.spec.output.as_deref(), Some("o-%j.out"));
        assert!(
            got.runnable_in(&ShareName::from("s")).next().is_some(),
            "indexes rebuilt"
        );
        // Format 5's bytes are not format 4's: the state has its AWS part.
        assert!(decode_state(4, &got.snapshot()).is_err());
        assert_eq!(decode_state(codec::FORMAT, &got.snapshot()).unwrap(), got);
    }

    #[test]
    fn a_format_5_state_migrates_with_capped_priorities_default_limits_and_no_sessions() {
        let share = v5::QuotaShare {
            name: "s".into(),
            queue: "q".into(),
            capacity_limits: vec![CapacityLimit {
                unit: "h100".into(),
                max: 4,
            }],
            resource_sharing: ResourceSharing {
                strategy: Strategy::Lend,
                borrow_limit: None,
            },
            in_share_preemption: true,
            state: ObjState::Enabled,
            members: vec!["alice".into()],
            default_grace_s: 30,
            max_grace_s: 600,
            min_runtime_s: 7,
        };
        let key = v5::AccessKey {
            id: "TKAAAAAAAAAAAAAAAAAA".into(),
            user: "alice".into(),
            role: KeyRole::User,
            created_at: 3,
            revoked_at: None,
        };
        let v4: v4::State = v3::State::from(v2::State {
            version: 1,
            environments: BTreeMap::new(),
            policies: BTreeMap::new(),
            queues: BTreeMap::new(),
            shares: BTreeMap::new(),
            nodes: BTreeMap::new(),
            jobs: [(JobId(1), v2_job())].into(),
            tokens: BTreeMap::new(),
            next_job_id: 2,
            sessions: BTreeMap::new(),
            sessions_swept_at: 0,
        })
        .into();
        let mut old: v5::State = v4.into();
        old.shares.insert("s".into(), share);
        old.aws.keys.insert(key.id.clone(), key);
        old.sessions.insert(9, Session::default());
        old.version = 12;
        let got = decode_state(5, &codec::encode(&old)).unwrap();
        assert_eq!((got.version, got.next_job_id), (12, 2));
        let s = &got.shares[&ShareName::from("s")];
        assert_eq!(
            (s.min_runtime_s, s.max_user_priority, s.limits),
            (7, DEFAULT_MAX_USER_PRIORITY, JobLimits::default())
        );
        s.validate().unwrap();
        let k = &got.aws.keys["TKAAAAAAAAAAAAAAAAAA"];
        assert_eq!(
            (k.created_at, &k.issuer_serial, k.expires_at),
            (3, &None, None)
        );
        assert!(got.sessions.is_empty() && got.submit_rate.is_empty());
        assert_eq!(got.jobs[&JobId(1)].spec.user.as_str(), "alice");
        got.check_index().unwrap();
        // Format 6's bytes are not format 5's.
        assert!(decode_state(5, &got.snapshot()).is_err());
        assert_eq!(decode_state(codec::FORMAT, &got.snapshot()).unwrap(), got);
    }

    #[test]
    fn a_format_1_state_migrates_with_its_nodes_and_jobs() {
        let mut st = State::new();
        let inv = NodeInventory {
            name: "n1".into(),
            address: "127.0.0.1".into(),
            labels: BTreeMap::new(),
            gpus: vec![],
            cpus: 1,
            memory_mb: 1,
        };
        st.apply(&Command::RegisterNode(inv.clone()), 5).unwrap();
        let n = st.nodes[&NodeName::from("n1")].clone();
        let old = v1::State {
            version: st.version,
            environments: st.environments.clone(),
            policies: st.policies.clone(),
            queues: st.queues.clone(),
            shares: BTreeMap::new(),
            nodes: [(
                n.inventory.name.clone(),
                v1::Node {
                    inventory: n.inventory.clone(),
                    allocated: n.allocated.clone(),
                    drain: Some("repair".into()),
                    down: None,
                    unreachable: true,
                    last_heartbeat: 1234,
                    registered_at: n.registered_at,
                },
            )]
            .into(),
            jobs: BTreeMap::new(),
            tokens: st.tokens.clone(),
            next_job_id: st.next_job_id,
            sessions: BTreeMap::new(),
            sessions_swept_at: st.sessions_swept_at,
        };
        let got = decode_state(1, &codec::encode(&old)).unwrap();
        let m = &got.nodes[&NodeName::from("n1")];
        assert_eq!(m.drain.as_deref(), Some("repair"));
        assert!(m.unreachable);
        assert_eq!(m.inventory, inv);
        // Format 2: a job without a working directory gets none.
        let old2 = v2::State {
            version: 3,
            environments: BTreeMap::new(),
            policies: BTreeMap::new(),
            queues: BTreeMap::new(),
            shares: BTreeMap::new(),
            nodes: st.nodes.clone(),
            jobs: [(JobId(1), v2_job())].into(),
            tokens: BTreeMap::new(),
            next_job_id: 2,
            sessions: BTreeMap::new(),
            sessions_swept_at: 0,
        };
        let got = decode_state(2, &codec::encode(&old2)).unwrap();
        let j = &got.jobs[&JobId(1)];
        assert_eq!((j.spec.name.as_str(), j.spec.cwd.as_deref()), ("j", None));
        assert_eq!(j.spec.command, vec!["true".to_string()]);
        assert!(
            got.runnable_in(&ShareName::from("s")).next().is_some(),
            "indexes rebuilt"
        );
        // Today's bytes read as format 1 do not decode: the layouts differ.
        assert!(decode_state(1, &st.snapshot()).is_err());
        assert_eq!(decode_state(codec::FORMAT, &st.snapshot()).unwrap(), st);
        assert_eq!(
            decode_state(8, &st.snapshot()),
            Err(FormatError::Unknown { found: 8 })
        );
    }
}
