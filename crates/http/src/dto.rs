//! The API's own types: what clients send and receive as JSON. They are kept apart
//! from the state machine's types so that the API stays stable while those change,
//! and so that the OpenAPI document describes exactly what goes over the wire.
//!
//! A new job field is added in three places: [`SubmitJob`] (with its default), the
//! mapping in [`SubmitJob::into_spec`], and [`JobSpecView`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::{
    Attempt, AttemptEnd, Checkpoint, Job, JobSpec, JobStatus, Millis, Node, StopKind,
};
use tranche_proto::{ClusterStatus, Explanation, JobSummary, QueueSnapshot, ShareUsage};
use utoipa::ToSchema;

use super::error::HttpError;

/// A job status, as AWS Batch and Tranche name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Submitted,
    Pending,
    Runnable,
    Scheduled,
    Starting,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl From<JobStatus> for Status {
    fn from(s: JobStatus) -> Status {
        match s {
            JobStatus::Submitted => Status::Submitted,
            JobStatus::Pending => Status::Pending,
            JobStatus::Runnable => Status::Runnable,
            JobStatus::Scheduled => Status::Scheduled,
            JobStatus::Starting => Status::Starting,
            JobStatus::Running => Status::Running,
            JobStatus::Succeeded => Status::Succeeded,
            JobStatus::Failed => Status::Failed,
            JobStatus::Cancelled => Status::Cancelled,
        }
    }
}

fn one() -> u32 {
    1
}
fn host() -> String {
    "host".into()
}
fn job_name() -> String {
    "job".into()
}

/// The checkpoint signal sent when a job must stop, and its grace before SIGKILL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// A signal name such as `SIGTERM` or `SIGUSR1`.
    pub signal: String,
    /// Seconds between the signal and SIGKILL; absent: the share's default.
    #[serde(default)]
    pub grace_s: Option<u64>,
    /// The job saves a checkpoint every this many seconds from the start of each
    /// attempt (60 s to a week); a preemption loses only the work since the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_s: Option<u64>,
}

/// A job to submit. Only `share`, `gpus` (or `gpus_per_node`) and `command` are
/// required; unknown fields are refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitJob {
    /// The quota share to run in.
    pub share: String,
    /// The job's GPUs in all, as Slurm's `--gpus`: split evenly over `nodes` (refused
    /// when it does not split). Give this or `gpus_per_node`.
    #[serde(default)]
    pub gpus: Option<u32>,
    /// GPUs on each node, as Slurm's `--gpus-per-node`. Give this or `gpus`.
    #[serde(default)]
    pub gpus_per_node: Option<u32>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The job's name.
    #[serde(default = "job_name")]
    #[schema(default = "job")]
    pub name: String,
    /// Nodes; more than one is a gang (all nodes or none).
    #[serde(default = "one")]
    #[schema(default = 1)]
    pub nodes: u32,
    /// The GPU unit; absent: the share's first.
    #[serde(default)]
    pub unit: Option<String>,
    /// The queue; absent: the share's.
    #[serde(default)]
    pub queue: Option<String>,
    /// Who the job runs as; absent: the caller. Only an admin may name another user.
    #[serde(default)]
    pub user: Option<String>,
    /// 0 to 9999; higher runs first within the share.
    #[serde(default)]
    pub priority: u32,
    /// `host` for a plain process, else a rootfs directory or OCI image layout.
    #[serde(default = "host")]
    #[schema(default = "host")]
    pub image: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The time limit in seconds; absent: none.
    #[serde(default)]
    pub time_limit_s: Option<u64>,
    /// The checkpoint signal and grace; absent: SIGTERM and the share's default grace.
    #[serde(default)]
    pub checkpoint: Option<CheckpointSpec>,
    /// Attempts allowed for failures (1 to 10); preemptions do not count.
    #[serde(default = "one")]
    #[schema(default = 1)]
    pub retry_attempts: u32,
    /// Requeues allowed after preemption; absent: unlimited; 0: fail on the first.
    #[serde(default)]
    pub preemption_retries: Option<u32>,
    /// Idempotency: a retried submit with the same token returns the same job.
    #[serde(default)]
    pub client_token: Option<String>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// The working directory on the node (absolute), used where it exists.
    #[serde(default)]
    pub cwd: Option<String>,
    /// CPUs per node; 0: no reservation.
    #[serde(default)]
    pub cpus_per_node: u32,
    /// Memory per node in MiB; 0: no reservation.
    #[serde(default)]
    pub memory_mb_per_node: u64,
    /// An array of tasks in Slurm's syntax (`0-999%50`, `1,3,5-7`, `0-15:4`): one job
    /// per task, named `ID_TASK`; the answer's `id` is the array's.
    #[serde(default)]
    pub array: Option<String>,
    /// Start only after other jobs: `afterok:41:42_3,afterany:40,singleton`.
    #[serde(default)]
    pub dependency: Option<String>,
    /// Submit PENDING, until released.
    #[serde(default)]
    pub hold: bool,
    /// A file on the node for stdout (Slurm's `%j %A %a %x %u %N %n %%` patterns,
    /// relative to the working directory); with no `error`, stderr too.
    #[serde(default)]
    pub output: Option<String>,
    /// A file on the node for stderr (the same patterns).
    #[serde(default)]
    pub error: Option<String>,
}

impl SubmitJob {
    /// The spec this stands for, submitted by `caller` into `share` (`None`: it does
    /// not exist, which is refused); the queue and unit default from the share (its
    /// queue and first unit). The spec is validated here,
    /// so a bad field is refused before anything is proposed.
    pub fn into_spec(
        self,
        caller: &str,
        share: Option<&tranche_model::QuotaShare>,
    ) -> Result<JobSpec, HttpError> {
        if self.command.is_empty() {
            return Err(HttpError::invalid("command", "must name a program to run"));
        }
        let Some(share) = share else {
            return Err(
                HttpError::not_found(format!("share {} does not exist", self.share))
                    .with_field("share"),
            );
        };
        let queue = self.queue.unwrap_or_else(|| share.queue.to_string());
        let unit = match self.unit {
            Some(u) => u,
            None => match share.capacity_limits.first() {
                Some(l) => l.unit.to_string(),
                None => {
                    return Err(HttpError::invalid(
                        "unit",
                        "the share names no unit; give one",
                    ))
                }
            },
        };
        const FIELDS: tranche_model::GpuFields = tranche_model::GpuFields {
            total: "gpus",
            per_node: "gpus_per_node",
            nodes: "nodes",
        };
        let gpus = tranche_model::gpus_per_node(self.gpus, self.gpus_per_node, self.nodes)
            .map_err(|e| {
                let field = match e {
                    tranche_model::GpuCount::Both { .. } => "gpus_per_node",
                    _ => "gpus",
                };
                HttpError::invalid(field, e.text(&FIELDS))
            })?;
        let user = self.user.unwrap_or_else(|| caller.to_string());
        let mut spec = JobSpec::new(
            &self.name,
            &queue,
            &self.share,
            &user,
            &unit,
            gpus,
            self.nodes,
        );
        spec.priority = self.priority;
        spec.image = self.image;
        spec.command = self.command;
        spec.env = self.env;
        spec.time_limit_s = self.time_limit_s;
        if let Some(c) = self.checkpoint {
            spec.checkpoint = Checkpoint {
                signal: c.signal,
                grace_s: c.grace_s,
                every_s: c.every_s,
            };
        }
        spec.retry_attempts = self.retry_attempts;
        spec.preemption_retries = self.preemption_retries;
        spec.client_token = self.client_token;
        spec.tags = self.tags;
        spec.cwd = self.cwd;
        spec.cpus_per_node = self.cpus_per_node;
        spec.memory_mb_per_node = self.memory_mb_per_node;
        if let Some(a) = &self.array {
            spec.array = Some(
                tranche_model::ArraySpec::parse(a)
                    .map_err(|v| HttpError::invalid(v.field, v.rule))?,
            );
        }
        if let Some(d) = &self.dependency {
            spec.dependency = tranche_model::Dependency::parse(d)
                .map_err(|v| HttpError::invalid(v.field, v.rule))?;
        }
        spec.hold = self.hold;
        spec.output = self.output;
        spec.error = self.error;
        spec.validate()
            .map_err(|v| HttpError::invalid(v.field, v.rule))?;
        Ok(spec)
    }
}

/// The answer to a submit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Submitted {
    /// The job's id.
    pub id: u64,
    /// The client token had been seen: this is the job the first submit created.
    pub existing: bool,
}

/// A change of a job's priority.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobUpdate {
    /// 0 to 9999.
    pub priority: u32,
}

/// A cancel, with an optional reason recorded in the job's transitions.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelJob {
    #[serde(default)]
    pub reason: Option<String>,
}

/// A drain: nothing new is placed on the node; with `now`, its jobs are stopped too.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrainNode {
    /// Why (mandatory; shown with the node).
    pub reason: String,
    #[serde(default)]
    pub now: bool,
}

/// A policy file (environments, policies, queues, shares) in Tranche's TOML format.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPolicy {
    /// The file's text, as `tranche apply -f` reads it.
    pub toml: String,
    /// Report what would change without changing anything.
    #[serde(default)]
    pub dry_run: bool,
}

/// What applying a policy file did, or would do.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PolicyChange {
    /// `environment`, `policy`, `queue` or `share`.
    pub kind: String,
    pub name: String,
    /// `create`, `update` or `unchanged`.
    pub action: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PolicyResult {
    pub dry_run: bool,
    pub changes: Vec<PolicyChange>,
}

/// A job as lists show it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobSummaryView {
    pub id: u64,
    pub name: String,
    pub queue: String,
    pub share: String,
    pub user: String,
    pub status: Status,
    pub priority: u32,
    pub unit: String,
    /// GPUs in all (per node times nodes).
    pub gpus: u32,
    /// The nodes it holds now.
    pub nodes: Vec<String>,
    /// Milliseconds since the epoch.
    pub submitted_at: u64,
    pub started_at: Option<u64>,
    /// Why it waits, with numbers, while it waits.
    pub reason: Option<String>,
    pub preemptions: u32,
    pub client_token: Option<String>,
    /// For a task of an array.
    pub array: Option<ArrayTaskView>,
}

impl From<&JobSummary> for JobSummaryView {
    fn from(j: &JobSummary) -> Self {
        JobSummaryView {
            id: j.id.0,
            name: j.name.clone(),
            queue: j.queue.to_string(),
            share: j.share.to_string(),
            user: j.user.to_string(),
            status: j.status.into(),
            priority: j.priority,
            unit: j.unit.to_string(),
            gpus: j.gpus,
            nodes: j.nodes.iter().map(|n| n.to_string()).collect(),
            submitted_at: j.submitted_at,
            started_at: j.started_at,
            reason: j.reason.clone(),
            preemptions: j.preemptions,
            client_token: j.client_token.clone(),
            array: j.array.as_ref().map(|a| ArrayTaskView {
                array: a.array.0,
                index: a.index,
                count: a.count,
                max_running: a.max_running,
            }),
        }
    }
}

/// A page of jobs, lowest ids first.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobSummaryView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_after: Option<u64>,
}

/// What was submitted.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobSpecView {
    pub name: String,
    pub queue: String,
    pub share: String,
    pub user: String,
    pub priority: u32,
    pub unit: String,
    pub gpus_per_node: u32,
    pub nodes: u32,
    pub cpus_per_node: u32,
    pub memory_mb_per_node: u64,
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub time_limit_s: Option<u64>,
    pub checkpoint: CheckpointSpec,
    pub retry_attempts: u32,
    pub preemption_retries: Option<u32>,
    pub client_token: Option<String>,
    pub tags: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// The dependency as submitted (empty: none).
    pub dependency: String,
    pub output: Option<String>,
    pub error: Option<String>,
}

impl From<&JobSpec> for JobSpecView {
    fn from(s: &JobSpec) -> Self {
        JobSpecView {
            name: s.name.to_string(),
            queue: s.queue.to_string(),
            share: s.share.to_string(),
            user: s.user.to_string(),
            priority: s.priority,
            unit: s.request.unit.to_string(),
            gpus_per_node: s.request.gpus_per_node,
            nodes: s.request.nodes,
            cpus_per_node: s.cpus_per_node,
            memory_mb_per_node: s.memory_mb_per_node,
            image: s.image.clone(),
            command: s.command.clone(),
            env: s.env.clone(),
            time_limit_s: s.time_limit_s,
            checkpoint: CheckpointSpec {
                signal: s.checkpoint.signal.clone(),
                grace_s: s.checkpoint.grace_s,
                every_s: s.checkpoint.every_s,
            },
            retry_attempts: s.retry_attempts,
            preemption_retries: s.preemption_retries,
            client_token: s.client_token.clone(),
            tags: s.tags.clone(),
            cwd: s.cwd.clone(),
            dependency: s.dependency.to_string(),
            output: s.output.clone(),
            error: s.error.clone(),
        }
    }
}

/// Where a task stands in its array.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArrayTaskView {
    /// The array's id (its first task's job id).
    pub array: u64,
    /// This task's index (`TRANCHE_ARRAY_TASK_ID`).
    pub index: u32,
    /// Tasks in the array.
    pub count: u32,
    /// At most this many of its tasks hold GPUs at once.
    pub max_running: Option<u32>,
}

/// The GPUs an attempt holds on one node.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeAllocView {
    pub node: String,
    pub gpus: Vec<u32>,
}

/// How an attempt ended.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptEndView {
    /// `exited` (by itself), `stopped` (preempted, cancelled, drained) or `lost` (its
    /// node went down).
    pub kind: String,
    /// The exit code; absent when it was killed by a signal or lost.
    pub code: Option<i32>,
    /// For a stop: `reclaim`, `in_share`, `cancel` or `drain`.
    pub stopped_by: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptView {
    pub number: u32,
    pub allocation: Vec<NodeAllocView>,
    /// It took its share above its max: it runs on loan, and a reclaim may take it.
    pub borrowed: bool,
    pub scheduled_at: u64,
    pub started_at: Option<u64>,
    pub ended_at: Option<u64>,
    pub end: Option<AttemptEndView>,
    /// The latest checkpoint the job reported in this attempt (ms since the epoch).
    pub checkpointed_at: Option<u64>,
}

fn stop_kind(k: &StopKind) -> &'static str {
    match k {
        StopKind::Reclaim { .. } => "reclaim",
        StopKind::InShare { .. } => "in_share",
        StopKind::Cancel => "cancel",
        StopKind::Drain => "drain",
    }
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        AttemptView {
            number: a.number,
            allocation: a
                .allocation
                .iter()
                .map(|n| NodeAllocView {
                    node: n.node.to_string(),
                    gpus: n.gpus.iter().map(|g| g.0).collect(),
                })
                .collect(),
            borrowed: a.borrowed,
            scheduled_at: a.scheduled_at,
            started_at: a.ran_from(),
            ended_at: a.ended_at,
            checkpointed_at: a.checkpointed_at,
            end: a.end.as_ref().map(|e| match e {
                AttemptEnd::Exited { code } => AttemptEndView {
                    kind: "exited".into(),
                    code: Some(*code),
                    stopped_by: None,
                },
                AttemptEnd::Stopped { kind, code } => AttemptEndView {
                    kind: "stopped".into(),
                    code: *code,
                    stopped_by: Some(stop_kind(kind).into()),
                },
                AttemptEnd::Lost => AttemptEndView {
                    kind: "lost".into(),
                    code: None,
                    stopped_by: None,
                },
            }),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TransitionView {
    pub at: u64,
    pub from: Status,
    pub to: Status,
    pub reason: String,
    pub nodes: Vec<String>,
}

/// A stop in progress: the checkpoint signal went out; SIGKILL follows at the deadline.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StopView {
    /// `reclaim`, `in_share`, `cancel` or `drain`.
    pub kind: String,
    pub reason: String,
    pub signalled_at: u64,
    pub deadline: u64,
}

/// Everything about one job.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobView {
    pub id: u64,
    /// The job as users name it: `42`, or `42_7` for task 7 of array 42.
    pub job: String,
    /// For a task of an array.
    pub array: Option<ArrayTaskView>,
    /// Held until released.
    pub held: bool,
    /// Jobs it still waits for, as `afterok:41` and the like.
    pub waiting_for: Vec<String>,
    pub status: Status,
    pub spec: JobSpecView,
    pub submitted_at: u64,
    pub attempts: Vec<AttemptView>,
    pub transitions: Vec<TransitionView>,
    /// Set while the job is being stopped.
    pub stopping: Option<StopView>,
    /// Why it waits, with numbers, while it waits.
    pub reason: Option<String>,
    pub preemptions: u32,
    pub failures: u32,
    /// The exit code of the latest attempt, once it has exited.
    pub exit_code: Option<i32>,
    /// The parts of `spec` left out because the caller sees only the summary of
    /// another user's job (`image`, `command`, `env`, ...); empty when it sees all.
    pub hidden: Vec<String>,
    /// The job has ended and left the controllers' replicated state: it is read from
    /// the history store of the controller that answered.
    pub archived: bool,
}

impl JobView {
    pub fn of(j: &Job, now: Millis) -> JobView {
        let exit_code = j.attempts.last().and_then(|a| match &a.end {
            Some(AttemptEnd::Exited { code }) => Some(*code),
            Some(AttemptEnd::Stopped { code, .. }) => *code,
            _ => None,
        });
        JobView {
            id: j.id.0,
            job: j.job_ref().to_string(),
            array: j.array.as_ref().map(|a| ArrayTaskView {
                array: a.array.0,
                index: a.index,
                count: a.count,
                max_running: a.max_running,
            }),
            held: j.held,
            waiting_for: j
                .deps
                .iter()
                .map(|d| format!("{}:{}", d.kind.as_str(), d.job))
                .collect(),
            status: j.status.into(),
            spec: (&*j.spec).into(),
            submitted_at: j.submitted_at,
            attempts: j.attempts.iter().map(AttemptView::from).collect(),
            transitions: j
                .transitions
                .iter()
                .map(|t| TransitionView {
                    at: t.at,
                    from: t.from.into(),
                    to: t.to.into(),
                    reason: t.reason.clone(),
                    nodes: t.nodes.iter().map(|n| n.to_string()).collect(),
                })
                .collect(),
            stopping: j.stop.as_ref().map(|s| StopView {
                kind: stop_kind(&s.kind).into(),
                reason: s.reason.clone(),
                signalled_at: s.signalled_at,
                deadline: s.deadline,
            }),
            reason: j
                .pending_reason
                .as_ref()
                .filter(|_| !j.status.is_active() && !j.status.is_terminal())
                .map(|r| r.render(now)),
            preemptions: j.preemptions,
            failures: j.failures,
            exit_code,
            hidden: if j.spec.is_redacted() {
                tranche_model::REDACTED_FIELDS
                    .iter()
                    .map(|f| f.to_string())
                    .collect()
            } else {
                vec![]
            },
            archived: false,
        }
    }
}

/// Why a job is where it is.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExplanationView {
    pub job: JobSummaryView,
    /// One line per fact, numbers included.
    pub lines: Vec<String>,
}

impl From<&Explanation> for ExplanationView {
    fn from(e: &Explanation) -> Self {
        ExplanationView {
            job: (&e.job).into(),
            lines: e.lines.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UnitUsageView {
    pub unit: String,
    pub max: u32,
    pub used: u32,
    /// Of its own idle capacity, how much others use now.
    pub lent: u32,
    /// Beyond its own capacity, how much it uses now.
    pub borrowed: u32,
}

/// A quota share's use of its capacity.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShareView {
    pub name: String,
    /// `RESERVE`, `LEND` or `LEND_AND_BORROW`.
    pub strategy: String,
    pub units: Vec<UnitUsageView>,
    pub running: u32,
    pub waiting: u32,
    /// Under a FAIR_SHARE policy: its standing; absent under FIFO.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair: Option<FairView>,
}

/// A group of quota shares (nested quotas) of one queue.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GroupView {
    pub name: String,
    pub queue: String,
    /// Its quota shares.
    pub shares: Vec<String>,
    /// The groups nested in it.
    pub groups: Vec<String>,
    /// `RESERVE`, `LEND` or `LEND_AND_BORROW`, toward the rest of the queue.
    pub strategy: String,
    /// Per unit: its max and ceiling (absent: no cap on borrowing).
    pub units: Vec<GroupUnitView>,
}

/// A group's limit for one unit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GroupUnitView {
    pub unit: String,
    pub max: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<u64>,
}

impl From<&tranche_model::ShareGroup> for GroupView {
    fn from(g: &tranche_model::ShareGroup) -> Self {
        GroupView {
            name: g.name.to_string(),
            queue: g.queue.to_string(),
            shares: g.shares.iter().map(|s| s.to_string()).collect(),
            groups: g.groups.iter().map(|s| s.to_string()).collect(),
            strategy: g.resource_sharing.strategy.to_string(),
            units: g
                .capacity_limits
                .iter()
                .map(|l| GroupUnitView {
                    unit: l.unit.to_string(),
                    max: l.max,
                    ceiling: g.ceiling_for(&l.unit),
                })
                .collect(),
        }
    }
}

/// A share's standing under FAIR_SHARE.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FairView {
    /// Its usage history in GPU-hours, each hour's weighing half every half-life.
    pub decayed_gpu_hours: f64,
    pub weight: u64,
    /// Its place in the borrow order of its queue (1 borrows first; a reclaim takes
    /// first from the last), of `of` shares.
    pub borrow_order: u32,
    pub of: u32,
    pub half_life_s: u64,
}

impl From<&ShareUsage> for ShareView {
    fn from(s: &ShareUsage) -> Self {
        ShareView {
            name: s.name.to_string(),
            strategy: serde_json::to_value(s.strategy)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            units: s
                .units
                .iter()
                .map(|u| UnitUsageView {
                    unit: u.unit.to_string(),
                    max: u.max,
                    used: u.used,
                    lent: u.lent,
                    borrowed: u.borrowed,
                })
                .collect(),
            running: s.running,
            waiting: s.waiting,
            fair: s.fair.as_ref().map(|f| FairView {
                decayed_gpu_hours: f.decayed_milli_gpu_hours as f64 / 1000.0,
                weight: f.weight,
                borrow_order: f.borrow_order,
                of: f.of,
                half_life_s: f.half_life_s,
            }),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShareFront {
    pub share: String,
    pub jobs: Vec<JobSummaryView>,
}

/// The front of the queue: waiting jobs in the order the scheduler considers them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueView {
    pub front: Vec<JobSummaryView>,
    pub shares: Vec<ShareFront>,
}

impl From<&QueueSnapshot> for QueueView {
    fn from(q: &QueueSnapshot) -> Self {
        QueueView {
            front: q.front.iter().map(JobSummaryView::from).collect(),
            shares: q
                .shares
                .iter()
                .map(|(s, jobs)| ShareFront {
                    share: s.to_string(),
                    jobs: jobs.iter().map(JobSummaryView::from).collect(),
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuView {
    pub index: u32,
    pub uuid: String,
    pub unit: String,
    pub memory_mb: u64,
    pub healthy: bool,
    /// The job that holds it.
    pub job: Option<u64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeView {
    pub name: String,
    pub address: String,
    /// `IDLE`, `MIXED`, `ALLOCATED`, `DRAINING`, `DRAINED`, `UNREACHABLE` or `DOWN`.
    pub state: String,
    /// Why it is drained or down.
    pub reason: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub gpus: Vec<GpuView>,
    pub cpus: u32,
    pub memory_mb: u64,
}

impl From<&Node> for NodeView {
    fn from(n: &Node) -> Self {
        NodeView {
            name: n.inventory.name.to_string(),
            address: n.inventory.address.clone(),
            state: n.state().to_string(),
            reason: n.reason().map(str::to_string),
            labels: n.inventory.labels.clone(),
            gpus: n
                .inventory
                .gpus
                .iter()
                .zip(&n.allocated)
                .map(|(g, a)| GpuView {
                    index: g.index.0,
                    uuid: g.uuid.clone(),
                    unit: g.unit.to_string(),
                    memory_mb: g.memory_mb,
                    healthy: g.healthy,
                    job: a.map(|j| j.0),
                })
                .collect(),
            cpus: n.inventory.cpus,
            memory_mb: n.inventory.memory_mb,
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MemberView {
    pub id: u64,
    pub name: String,
    pub peer_addr: String,
    pub client_addr: String,
    pub voter: bool,
    /// The highest log index known to be on that member (the leader's view only).
    pub matched: Option<u64>,
    /// How many committed entries it lacks (the leader's view only).
    pub lag: Option<u64>,
}

/// One controller's view of the cluster.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ControllersView {
    /// The answering controller's id.
    pub id: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub commit: u64,
    pub applied: u64,
    pub members: Vec<MemberView>,
}

impl From<&ClusterStatus> for ControllersView {
    fn from(c: &ClusterStatus) -> Self {
        ControllersView {
            id: c.id,
            leader: c.leader,
            term: c.term,
            commit: c.commit,
            applied: c.applied,
            members: c
                .members
                .iter()
                .map(|m| MemberView {
                    id: m.member.id,
                    name: m.member.name.clone(),
                    peer_addr: m.member.peer_addr.clone(),
                    client_addr: m.member.client_addr.clone(),
                    voter: m.voter,
                    matched: m.matched,
                    lag: m.lag,
                })
                .collect(),
        }
    }
}

/// Whether this controller serves, and what it knows of the leader.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, or `no_leader` while an election runs.
    pub status: String,
    pub id: u64,
    pub leader: Option<u64>,
    pub applied: u64,
}

/// Who the caller is, as the API sees it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WhoAmI {
    /// `user`, `operator`, `admin`, `agent` or `controller`.
    pub role: String,
    pub name: String,
    /// `certificate` or `token`.
    pub via: String,
    /// For a token, when it expires (seconds since the epoch).
    pub expires: Option<u64>,
}

/// An event of the stream (`data` of a `job` event).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobEventView {
    /// The log index of the entry that caused it (also the event's id).
    pub index: u64,
    pub job: u64,
    pub share: String,
    pub user: String,
    /// Absent for a job's first event.
    pub from: Option<Status>,
    pub to: Status,
    pub at: u64,
    pub reason: String,
    pub nodes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UnitUseView {
    pub unit: String,
    pub max: u32,
    pub used: u32,
}

/// `data` of a `share` event: a share's use after its jobs' GPUs changed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShareEventView {
    pub index: u64,
    pub share: String,
    pub units: Vec<UnitUseView>,
}
