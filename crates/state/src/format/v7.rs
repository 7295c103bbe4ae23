//! The types of format 7 (and 6, whose states it shares) that differ from format 8's,
//! frozen as that release wrote them: a checkpoint with no interval, an attempt with
//! no reported checkpoint, a quota share with no loan terms, and a ledger that does not
//! count the work lost since a preempted attempt's last checkpoint.

use std::sync::Arc;

use super::*;
use crate::retention::Retention;
use crate::{Plan, Progress, RequestId, SubmitWindow};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub signal: String,
    pub grace_s: Option<u64>,
}

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
    pub sagemaker: Option<Box<SageMakerJob>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub number: u32,
    pub allocation: Vec<NodeAlloc>,
    pub borrowed: bool,
    pub scheduled_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub end: Option<AttemptEnd>,
}

/// A job as formats up to 7 stored it one by one (format 5's state, and every
/// controller's history records).
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
    pub max_user_priority: u32,
    pub limits: JobLimits,
}

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

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub shares: BTreeMap<(ShareName, Unit), Totals>,
    pub users: BTreeMap<(UserName, Unit), Totals>,
    pub capacity: BTreeMap<Unit, u64>,
    pub unassigned_lent: BTreeMap<Unit, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub since: Millis,
    pub counted_to: Millis,
    pub hours: BTreeMap<u64, Bucket>,
    pub all_time: Bucket,
}

/// A job of a format-6 or -7 state: its spec by number in the state's list of specs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredJob {
    pub id: JobId,
    pub spec: u32,
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
pub struct StoredJobs {
    pub specs: Vec<JobSpec>,
    pub jobs: Vec<StoredJob>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub version: u64,
    pub environments: BTreeMap<EnvName, ServiceEnvironment>,
    pub policies: BTreeMap<PolicyName, SchedulingPolicy>,
    pub queues: BTreeMap<QueueName, JobQueue>,
    pub shares: BTreeMap<ShareName, QuotaShare>,
    pub nodes: BTreeMap<NodeName, tranche_model::Node>,
    pub jobs: StoredJobs,
    pub tokens: BTreeMap<(UserName, String), JobId>,
    pub next_job_id: u64,
    pub sessions: BTreeMap<(String, u64), Session>,
    pub sessions_swept_at: Millis,
    pub ledger: Ledger,
    pub keys: BTreeMap<String, AccessKey>,
    pub tags: BTreeMap<String, BTreeMap<String, String>>,
    pub submit_rate: BTreeMap<(ShareName, UserName), SubmitWindow>,
}

/// Format 7's log command: its quota share and job spec.
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
    ForgetEnded(Retention),
}

/// What a format-6 or -7 log entry carries (see `tranche_controller::peer::Proposal`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub origin: u64,
    pub id: u64,
    pub now: Millis,
    pub cmd: Command,
    pub request: Option<RequestId>,
}

impl From<Checkpoint> for tranche_model::Checkpoint {
    /// A format-7 job declares no checkpoint interval.
    fn from(c: Checkpoint) -> Self {
        tranche_model::Checkpoint {
            signal: c.signal,
            grace_s: c.grace_s,
            every_s: None,
        }
    }
}

impl From<JobSpec> for tranche_model::JobSpec {
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
            checkpoint: s.checkpoint.into(),
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
            sagemaker: s.sagemaker,
        }
    }
}

impl From<Attempt> for tranche_model::Attempt {
    /// A format-7 attempt reported no checkpoint.
    fn from(a: Attempt) -> Self {
        tranche_model::Attempt {
            number: a.number,
            allocation: a.allocation,
            borrowed: a.borrowed,
            scheduled_at: a.scheduled_at,
            started_at: a.started_at,
            ended_at: a.ended_at,
            end: a.end,
            checkpointed_at: None,
        }
    }
}

impl From<Job> for tranche_model::Job {
    fn from(j: Job) -> Self {
        StoredJob {
            id: j.id,
            spec: 0,
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
        .with_spec(Arc::new(j.spec.into()))
    }
}

impl StoredJob {
    fn with_spec(self, spec: Arc<tranche_model::JobSpec>) -> tranche_model::Job {
        tranche_model::Job {
            id: self.id,
            spec,
            status: self.status,
            submitted_at: self.submitted_at,
            attempts: self.attempts.into_iter().map(Into::into).collect(),
            transitions: self.transitions,
            stop: self.stop,
            hold: self.hold,
            pending_reason: self.pending_reason,
            preemptions: self.preemptions,
            failures: self.failures,
            array: self.array,
            deps: self.deps,
            held: self.held,
        }
    }
}

impl From<QuotaShare> for tranche_model::QuotaShare {
    /// A format-7 share lends on AWS's terms: no recall notice, and its
    /// `min_runtime_s` for reclaim as for in-share preemption.
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
            max_user_priority: s.max_user_priority,
            limits: s.limits,
            loans: LoanTerms::default(),
        }
    }
}

impl From<Totals> for crate::ledger::Totals {
    /// Format 7 did not know checkpoints: a preempted attempt lost all its work, as
    /// its whole run time was counted lost.
    fn from(t: Totals) -> Self {
        crate::ledger::Totals {
            used: t.used,
            borrowed: t.borrowed,
            lent: t.lent,
            reserved_idle: t.reserved_idle,
            lost_reclaim: t.lost_reclaim,
            lost_in_share: t.lost_in_share,
            lost_drain: t.lost_drain,
            work_lost: t.lost_reclaim + t.lost_in_share + t.lost_drain,
        }
    }
}

impl From<Bucket> for crate::ledger::Bucket {
    fn from(b: Bucket) -> Self {
        fn totals<K: Ord>(m: BTreeMap<K, Totals>) -> BTreeMap<K, crate::ledger::Totals> {
            m.into_iter().map(|(k, t)| (k, t.into())).collect()
        }
        crate::ledger::Bucket {
            shares: totals(b.shares),
            users: totals(b.users),
            capacity: b.capacity,
            unassigned_lent: b.unassigned_lent,
        }
    }
}

impl From<Ledger> for crate::ledger::Ledger {
    fn from(l: Ledger) -> Self {
        crate::ledger::Ledger {
            since: l.since,
            counted_to: l.counted_to,
            hours: l.hours.into_iter().map(|(h, b)| (h, b.into())).collect(),
            all_time: l.all_time.into(),
        }
    }
}

impl From<State> for crate::State {
    fn from(s: State) -> Self {
        let specs: Vec<Arc<tranche_model::JobSpec>> = s
            .jobs
            .specs
            .into_iter()
            .map(|sp| Arc::new(sp.into()))
            .collect();
        let mut st = crate::State {
            version: s.version,
            environments: s.environments,
            policies: s.policies,
            queues: s.queues,
            shares: s.shares.into_iter().map(|(k, v)| (k, v.into())).collect(),
            nodes: s.nodes,
            jobs: s
                .jobs
                .jobs
                .into_iter()
                .filter_map(|j| {
                    let spec = specs.get(j.spec as usize)?.clone();
                    Some((j.id, j.with_spec(spec)))
                })
                .collect(),
            tokens: s.tokens,
            next_job_id: s.next_job_id,
            sessions: s.sessions,
            sessions_swept_at: s.sessions_swept_at,
            ledger: s.ledger.into(),
            keys: s.keys,
            tags: s.tags,
            submit_rate: s.submit_rate,
            groups: Default::default(),
            index: Default::default(),
        };
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
            Command::PutAccessKey(k) => C::PutAccessKey(k),
            Command::RevokeAccessKey { id } => C::RevokeAccessKey { id },
            Command::TagResource { resource, tags } => C::TagResource { resource, tags },
            Command::UntagResource { resource, keys } => C::UntagResource { resource, keys },
            Command::ForgetEnded(r) => C::ForgetEnded(r),
        }
    }
}
