//! The types of format 5 that differ from today's, frozen as that release wrote them.

use super::v7::{Job, JobSpec, Ledger};
use super::*;
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

/// What a format-5 log entry carries (see `tranche_controller::peer::Proposal`).
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
            weight: None,
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
            loans: LoanTerms::default(),
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
            jobs: s.jobs.into_iter().map(|(k, j)| (k, j.into())).collect(),
            tokens: s.tokens,
            next_job_id: s.next_job_id,
            sessions: BTreeMap::new(),
            sessions_swept_at: s.sessions_swept_at,
            ledger: s.ledger.into(),
            keys: s.aws.keys.into_iter().map(|(k, v)| (k, v.into())).collect(),
            tags: s.aws.tags,
            groups: BTreeMap::new(),
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
            Command::PutAccessKey(k) => C::PutAccessKey(k.into()),
            Command::RevokeAccessKey { id } => C::RevokeAccessKey { id },
            Command::TagResource { resource, tags } => C::TagResource { resource, tags },
            Command::UntagResource { resource, keys } => C::UntagResource { resource, keys },
        }
    }
}
