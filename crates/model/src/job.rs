//! Jobs: what a user submits (`JobSpec`), and what Tranche records about it (`Job`).

use crate::array::*;
use crate::error::{invalid, ValidationError};
use crate::ids::*;
use crate::objects::QuotaShare;
use crate::Millis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub const MAX_JOB_PRIORITY: u32 = 9999;
pub const MAX_RETRY_ATTEMPTS: u32 = 10;
pub const MAX_NODES_PER_JOB: u32 = 4096;
pub const MAX_GPUS_PER_NODE: u32 = crate::node::MAX_GPUS_PER_NODE_INVENTORY as u32;
pub const MAX_CLIENT_TOKEN_LEN: usize = 64;
pub const MAX_ENV_ENTRIES: usize = 256;
pub const MAX_COMMAND_ARGS: usize = 4096;
pub const MAX_TAGS: usize = 50;
/// Most bytes of a job's environment in all: each name and value, plus the `=` and the
/// NUL the kernel counts for each entry (64 KiB).
pub const MAX_ENV_BYTES: usize = 64 << 10;
/// Most bytes of one environment variable's name.
pub const MAX_ENV_NAME_BYTES: usize = 256;
/// Most bytes of one environment variable's value (32 KiB).
pub const MAX_ENV_VALUE_BYTES: usize = 32 << 10;
/// Most bytes of a job's command line in all, each argument with its NUL (64 KiB).
pub const MAX_COMMAND_BYTES: usize = 64 << 10;
/// Most bytes of a job tag's key and of its value.
pub const MAX_TAG_KEY_BYTES: usize = 128;
pub const MAX_TAG_VALUE_BYTES: usize = 256;
/// Most bytes of a path (working directory, output and error files, image).
pub const MAX_PATH_BYTES: usize = 4096;
/// Most bytes of a whole job spec's text (env, command, tags, paths, names and a
/// SageMaker request together): 256 KiB.
pub const MAX_SPEC_BYTES: usize = 256 << 10;
/// Most bytes of a reason given with a cancel, a drain or a node's state, and kept in
/// a job's or node's record.
pub const MAX_REASON_BYTES: usize = 1024;

/// Checks a reason's size: at most [`MAX_REASON_BYTES`].
pub fn validate_reason(reason: &str) -> Result<(), ValidationError> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(invalid(
            "reason",
            format!(
                "must be at most {MAX_REASON_BYTES} bytes, got {}",
                reason.len()
            ),
        ));
    }
    Ok(())
}

/// `reason` cut to at most [`MAX_REASON_BYTES`] (at a character boundary), for
/// reasons that must be kept whatever their size (a node's report of how a job ended).
pub fn capped_reason(reason: &str) -> &str {
    if reason.len() <= MAX_REASON_BYTES {
        return reason;
    }
    let mut end = MAX_REASON_BYTES;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// A key as an error names it: at most its first 64 bytes.
fn shown(k: &str) -> &str {
    let mut end = k.len().min(64);
    while !k.is_char_boundary(end) {
        end -= 1;
    }
    &k[..end]
}

/// `{unit, gpus_per_node, nodes}`. `nodes > 1` is a gang: all nodes or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub unit: Unit,
    pub gpus_per_node: u32,
    pub nodes: u32,
}

impl Request {
    pub fn total_gpus(&self) -> u32 {
        self.gpus_per_node * self.nodes
    }
}

/// The signal sent first when a job must stop, and how long it has before SIGKILL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Signal name such as `SIGTERM` or `SIGUSR1`.
    pub signal: String,
    /// Seconds between the signal and SIGKILL; `None` takes the share's default.
    pub grace_s: Option<u64>,
    /// `--checkpoint-every`: the job saves a checkpoint this often (seconds, counted from
    /// the start of each attempt) without reporting each one. A job that reports its
    /// checkpoints (`TRANCHE_CHECKPOINT_FILE`) is judged by its reports instead.
    pub every_s: Option<u64>,
}

impl Default for Checkpoint {
    fn default() -> Self {
        Checkpoint {
            signal: "SIGTERM".into(),
            grace_s: None,
            every_s: None,
        }
    }
}

/// Where work that started at `start` resumes if stopped at `now` (see
/// [`Attempt::resumes_from`]); never before `start`.
pub fn resume_point(
    start: Millis,
    reported: Option<Millis>,
    every_s: Option<u64>,
    now: Millis,
) -> Millis {
    match (reported, every_s) {
        (Some(at), _) => at.clamp(start, now.max(start)),
        (None, Some(e)) if e > 0 && now > start => {
            let every = e * crate::SECOND;
            start + (now - start) / every * every
        }
        _ => start,
    }
}

/// The shortest `--checkpoint-every` (one minute).
pub const MIN_CHECKPOINT_EVERY_S: u64 = 60;

/// Signals a job may ask for as its checkpoint signal.
pub const CHECKPOINT_SIGNALS: &[&str] = &[
    "SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT", "SIGCONT", "SIGWINCH", "SIGURG",
];

/// What a user submits [SubmitServiceJob].
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
    /// A rootfs directory, an OCI layout or archive, or `host`.
    pub image: String,
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub time_limit_s: Option<u64>,
    pub checkpoint: Checkpoint,
    /// Attempts allowed for failures (1–10); preemptions do not count.
    pub retry_attempts: u32,
    /// Requeues allowed after preemption; `None` is unlimited, `Some(0)` fails on the first.
    pub preemption_retries: Option<u32>,
    pub client_token: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// The working directory: the directory the job was submitted from (or `--chdir`),
    /// used on a node where it exists; else the user's home. Absolute.
    pub cwd: Option<String>,
    /// `--array`: one submit makes a job per task index. A task's own spec has none.
    pub array: Option<ArraySpec>,
    /// `--dependency`: the jobs this one waits for.
    pub dependency: Dependency,
    /// `--hold`: submitted PENDING until `tranche release`.
    pub hold: bool,
    /// `--output` / `--error`: files the node writes the job's stdout and stderr to, as
    /// Slurm does (`%j`, `%A`, `%a`, `%x`, `%u`, `%N`, `%n`, `%%`; relative to the working
    /// directory). `None`: kept in the agent's spool only.
    pub output: Option<String>,
    pub error: Option<String>,
    /// A SageMaker training job (submitted through the AWS Batch-compatible endpoint):
    /// the node gives it SageMaker's container contract.
    pub sagemaker: Option<Box<crate::sagemaker::SageMakerJob>>,
}

impl JobSpec {
    /// A minimal spec, for tests and the scenario runner.
    pub fn new(
        name: &str,
        queue: &str,
        share: &str,
        user: &str,
        unit: &str,
        gpus_per_node: u32,
        nodes: u32,
    ) -> Self {
        JobSpec {
            name: name.into(),
            queue: queue.into(),
            share: share.into(),
            user: user.into(),
            priority: 0,
            request: Request {
                unit: unit.into(),
                gpus_per_node,
                nodes,
            },
            cpus_per_node: 0,
            memory_mb_per_node: 0,
            image: "host".into(),
            command: vec![],
            env: BTreeMap::new(),
            time_limit_s: None,
            checkpoint: Checkpoint::default(),
            retry_attempts: 1,
            preemption_retries: None,
            client_token: None,
            tags: BTreeMap::new(),
            cwd: None,
            array: None,
            dependency: Dependency::default(),
            hold: false,
            output: None,
            error: None,
            sagemaker: None,
        }
    }

    /// Checks the spec on its own (every field's range and charset).
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.name.validate("name")?;
        self.queue.validate("queue")?;
        self.share.validate("share")?;
        self.user.validate("user")?;
        if self.priority > MAX_JOB_PRIORITY {
            return Err(invalid(
                "priority",
                format!("must be 0-{MAX_JOB_PRIORITY}, got {}", self.priority),
            ));
        }
        self.request.unit.validate("request.unit")?;
        if let Some(sm) = &self.sagemaker {
            sm.validate()?;
        }
        if self.request.gpus_per_node == 0 {
            return Err(invalid("request.gpus_per_node", "must be at least 1"));
        }
        if self.request.gpus_per_node > MAX_GPUS_PER_NODE {
            return Err(invalid(
                "request.gpus_per_node",
                format!(
                    "must be at most {MAX_GPUS_PER_NODE}, got {}",
                    self.request.gpus_per_node
                ),
            ));
        }
        if self.request.nodes == 0 {
            return Err(invalid("request.nodes", "must be at least 1"));
        }
        if self.request.nodes > MAX_NODES_PER_JOB {
            return Err(invalid(
                "request.nodes",
                format!(
                    "must be at most {MAX_NODES_PER_JOB}, got {}",
                    self.request.nodes
                ),
            ));
        }
        if self.image.is_empty() || self.image.len() > MAX_PATH_BYTES {
            return Err(invalid(
                "image",
                format!(
                    "must be 1-{MAX_PATH_BYTES} bytes (a rootfs path, an OCI layout or archive, or `host`), got {}",
                    self.image.len()
                ),
            ));
        }
        if let Some(d) = &self.cwd {
            if !d.starts_with('/') || d.len() > MAX_PATH_BYTES || d.contains('\0') {
                return Err(invalid(
                    "cwd",
                    format!(
                        "must be an absolute path of at most {MAX_PATH_BYTES} bytes without NUL, got {} bytes",
                        d.len()
                    ),
                ));
            }
        }
        if let Some(a) = &self.array {
            a.validate()?;
        }
        self.dependency.validate()?;
        for (field, p) in [("output", &self.output), ("error", &self.error)] {
            if let Some(p) = p {
                if p.is_empty() || p.len() > MAX_PATH_BYTES || p.contains('\0') {
                    return Err(invalid(
                        field,
                        format!(
                            "must be a path of 1-{MAX_PATH_BYTES} bytes without NUL, got {} bytes",
                            p.len()
                        ),
                    ));
                }
            }
        }
        if let Some(t) = self.time_limit_s {
            if t == 0 {
                return Err(invalid(
                    "time_limit_s",
                    "must be at least 1 second when set",
                ));
            }
        }
        if !CHECKPOINT_SIGNALS.contains(&self.checkpoint.signal.as_str()) {
            return Err(invalid(
                "checkpoint.signal",
                format!(
                    "must be one of {}, got {:?}",
                    CHECKPOINT_SIGNALS.join(", "),
                    self.checkpoint.signal
                ),
            ));
        }
        if let Some(e) = self.checkpoint.every_s {
            if !(MIN_CHECKPOINT_EVERY_S..=crate::MAX_DURATION_S).contains(&e) {
                return Err(invalid(
                    "checkpoint.every_s",
                    format!(
                        "must be {MIN_CHECKPOINT_EVERY_S}-{} s when set, got {e}",
                        crate::MAX_DURATION_S
                    ),
                ));
            }
        }
        if !(1..=MAX_RETRY_ATTEMPTS).contains(&self.retry_attempts) {
            return Err(invalid(
                "retry.attempts",
                format!(
                    "must be 1-{MAX_RETRY_ATTEMPTS}, got {}",
                    self.retry_attempts
                ),
            ));
        }
        if let Some(t) = &self.client_token {
            if t.is_empty()
                || t.len() > MAX_CLIENT_TOKEN_LEN
                || !t.chars().all(|c| c.is_ascii_graphic())
            {
                return Err(invalid(
                    "client_token",
                    format!("must be 1-{MAX_CLIENT_TOKEN_LEN} printable ASCII characters"),
                ));
            }
        }
        self.validate_sizes()
    }

    /// Checks what the spec's size grows with: the number and bytes of its env, command
    /// and tags, and its text in all ([`MAX_SPEC_BYTES`]). Part of [`JobSpec::validate`],
    /// and checked alone before a submit is proposed (its queue and unit may still be
    /// filled in from its share's).
    pub fn validate_sizes(&self) -> Result<(), ValidationError> {
        if self.command.len() > MAX_COMMAND_ARGS {
            return Err(invalid(
                "command",
                format!("must have at most {MAX_COMMAND_ARGS} arguments"),
            ));
        }
        if self.env.len() > MAX_ENV_ENTRIES {
            return Err(invalid(
                "env",
                format!("must have at most {MAX_ENV_ENTRIES} entries"),
            ));
        }
        let command_bytes: usize = self.command.iter().map(|a| a.len() + 1).sum();
        if command_bytes > MAX_COMMAND_BYTES {
            return Err(invalid(
                "command",
                format!(
                    "must be at most {MAX_COMMAND_BYTES} bytes in all (each argument with its NUL), got {command_bytes}"
                ),
            ));
        }
        let mut env_bytes = 0;
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(invalid(
                    format!("env.{}", shown(k)),
                    "names must be non-empty without '=' or NUL",
                ));
            }
            if k.len() > MAX_ENV_NAME_BYTES {
                return Err(invalid(
                    format!("env.{}", shown(k)),
                    format!(
                        "a name must be at most {MAX_ENV_NAME_BYTES} bytes, got {}",
                        k.len()
                    ),
                ));
            }
            if v.len() > MAX_ENV_VALUE_BYTES {
                return Err(invalid(
                    format!("env.{k}"),
                    format!(
                        "a value must be at most {MAX_ENV_VALUE_BYTES} bytes, got {}",
                        v.len()
                    ),
                ));
            }
            env_bytes += k.len() + v.len() + 2;
        }
        if env_bytes > MAX_ENV_BYTES {
            return Err(invalid(
                "env",
                format!(
                    "must be at most {MAX_ENV_BYTES} bytes in all (each NAME=value with its NUL), got {env_bytes}"
                ),
            ));
        }
        if self.tags.len() > MAX_TAGS {
            return Err(invalid(
                "tags",
                format!("must have at most {MAX_TAGS} entries"),
            ));
        }
        for (k, v) in &self.tags {
            if k.len() > MAX_TAG_KEY_BYTES || v.len() > MAX_TAG_VALUE_BYTES {
                return Err(invalid(
                    format!("tags.{}", shown(k)),
                    format!(
                        "a key must be at most {MAX_TAG_KEY_BYTES} bytes and a value at most {MAX_TAG_VALUE_BYTES}, got {} and {}",
                        k.len(),
                        v.len()
                    ),
                ));
            }
        }
        let total = self.text_bytes();
        if total > MAX_SPEC_BYTES {
            return Err(invalid(
                "spec",
                format!(
                    "must be at most {MAX_SPEC_BYTES} bytes of text in all (env, command, tags, paths, names and SageMaker request), got {total}"
                ),
            ));
        }
        Ok(())
    }

    /// The bytes of the spec's text: what its size in memory and in the log grows
    /// with.
    pub fn text_bytes(&self) -> usize {
        let strs = |m: &BTreeMap<String, String>| -> usize {
            m.iter().map(|(k, v)| k.len() + v.len() + 2).sum()
        };
        let opt = |o: &Option<String>| o.as_ref().map_or(0, |s| s.len());
        let sm = self.sagemaker.as_ref().map_or(0, |sm| {
            sm.training_job_name.len()
                + strs(&sm.hyperparameters)
                + strs(&sm.channels)
                + sm.payload.len()
                + sm.instance_type.len()
        });
        self.name.as_str().len()
            + self.queue.as_str().len()
            + self.share.as_str().len()
            + self.user.as_str().len()
            + self.request.unit.as_str().len()
            + self.image.len()
            + self.command.iter().map(|a| a.len() + 1).sum::<usize>()
            + strs(&self.env)
            + strs(&self.tags)
            + opt(&self.client_token)
            + opt(&self.cwd)
            + opt(&self.output)
            + opt(&self.error)
            + self.checkpoint.signal.len()
            + sm
    }

    /// Checks the parts that depend on the share: the grace period against its max.
    pub fn validate_for_share(&self, share: &QuotaShare) -> Result<(), ValidationError> {
        if let Some(g) = self.checkpoint.grace_s {
            if g > share.max_grace_s {
                return Err(invalid(
                    "checkpoint.grace_s",
                    format!(
                        "must not exceed share {}'s max_grace_s ({} s), got {g}",
                        share.name, share.max_grace_s
                    ),
                ));
            }
        }
        if !share
            .capacity_limits
            .iter()
            .any(|l| l.unit == self.request.unit)
        {
            let units: Vec<_> = share
                .capacity_limits
                .iter()
                .map(|l| l.unit.as_str())
                .collect();
            return Err(invalid(
                "request.unit",
                format!(
                    "unknown unit {:?}: share {} has limits for {}",
                    self.request.unit.0,
                    share.name,
                    units.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// The grace period that applies under `share`.
    pub fn grace_s(&self, share: Option<&QuotaShare>) -> u64 {
        self.checkpoint
            .grace_s
            .unwrap_or_else(|| share.map(|s| s.default_grace_s).unwrap_or(60))
    }
}

/// Job status (AWS's, plus CANCELLED kept apart from FAILED as Slurm does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobStatus {
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

impl JobStatus {
    pub const ALL: [JobStatus; 9] = [
        JobStatus::Submitted,
        JobStatus::Pending,
        JobStatus::Runnable,
        JobStatus::Scheduled,
        JobStatus::Starting,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];

    /// Holds GPUs: SCHEDULED, STARTING or RUNNING.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            JobStatus::Scheduled | JobStatus::Starting | JobStatus::Running
        )
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Submitted => "SUBMITTED",
            JobStatus::Pending => "PENDING",
            JobStatus::Runnable => "RUNNABLE",
            JobStatus::Scheduled => "SCHEDULED",
            JobStatus::Starting => "STARTING",
            JobStatus::Running => "RUNNING",
            JobStatus::Succeeded => "SUCCEEDED",
            JobStatus::Failed => "FAILED",
            JobStatus::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(s: &str) -> Option<JobStatus> {
        JobStatus::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The GPUs one job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAlloc {
    pub node: NodeName,
    pub gpus: Vec<GpuIndex>,
}

/// Why a running job is being stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopKind {
    /// Cross-share reclaim: its share is over max and `for_job`'s share is within max.
    Reclaim { for_job: JobId },
    /// In-share preemption by a strictly higher-priority job of the same share.
    InShare { for_job: JobId },
    /// The user or an admin cancelled it (or its share was deleted).
    Cancel,
    /// An operator drained its node with `--now`; the job is requeued.
    Drain,
}

impl StopKind {
    /// Reclaim and in-share preemption count against `preemption_retries`.
    pub fn is_preemption(&self) -> bool {
        matches!(self, StopKind::Reclaim { .. } | StopKind::InShare { .. })
    }

    pub fn for_job(&self) -> Option<JobId> {
        match self {
            StopKind::Reclaim { for_job } | StopKind::InShare { for_job } => Some(*for_job),
            _ => None,
        }
    }
}

/// A stop in progress: the checkpoint signal was sent at `signalled_at`; SIGKILL follows
/// at `deadline` unless the job has exited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    pub kind: StopKind,
    pub reason: String,
    pub signalled_at: Millis,
    pub deadline: Millis,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptEnd {
    /// The process exited by itself with this code.
    Exited { code: i32 },
    /// Stopped (preempted, cancelled, drained): exited within grace with `code`, or
    /// killed when the grace ended (`code = None`).
    Stopped { kind: StopKind, code: Option<i32> },
    /// Its node went DOWN; the attempt is lost.
    Lost,
}

/// The names a surface gives a request's size, for its errors: the CLI's `--gpus`,
/// `--gpus-per-node` and `--nodes`, the HTTP API's `gpus`, `gpus_per_node` and `nodes`.
pub struct GpuFields<'a> {
    pub total: &'a str,
    pub per_node: &'a str,
    pub nodes: &'a str,
}

/// Why a request's GPUs could not be read (see [`gpus_per_node`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuCount {
    /// Both the total and the per-node count were given.
    Both { total: u32, per_node: u32 },
    /// The total does not split evenly over the nodes.
    Uneven { total: u32, nodes: u32 },
    /// Neither was given.
    Neither,
}

impl GpuCount {
    /// The error in the surface's own words (`f` names its fields).
    pub fn text(&self, f: &GpuFields) -> String {
        match self {
            GpuCount::Both { total, per_node } => format!(
                "{} {total} and {} {per_node}: give one ({} is the job's total, split evenly \
                 over {}; {} is each node's)",
                f.total, f.per_node, f.total, f.nodes, f.per_node
            ),
            GpuCount::Uneven { total, nodes } => format!(
                "{} {total} does not split evenly over {} {nodes}: give a multiple of {nodes}, \
                 or {}",
                f.total, f.nodes, f.per_node
            ),
            GpuCount::Neither => format!("{} (in all) or {} is required", f.total, f.per_node),
        }
    }
}

/// GPUs on each node of a request given as Slurm gives it: `per_node`, or `total` (the
/// job's GPUs in all) split evenly over `nodes`. Every surface that takes a job's size
/// reads it here, so `gpus` means the same everywhere. No nodes is left for
/// [`JobSpec::validate`] to refuse, in its own words.
pub fn gpus_per_node(
    total: Option<u32>,
    per_node: Option<u32>,
    nodes: u32,
) -> Result<u32, GpuCount> {
    match (total, per_node) {
        (Some(total), Some(per_node)) => Err(GpuCount::Both { total, per_node }),
        (None, Some(n)) => Ok(n),
        (Some(g), None) if nodes == 0 => Ok(g),
        (Some(total), None) if total % nodes != 0 => Err(GpuCount::Uneven { total, nodes }),
        (Some(g), None) => Ok(g / nodes),
        (None, None) => Err(GpuCount::Neither),
    }
}

/// One run of a job on its allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub number: u32,
    pub allocation: Vec<NodeAlloc>,
    pub borrowed: bool,
    pub scheduled_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub end: Option<AttemptEnd>,
    /// The attempt's latest checkpoint its job reported (controller time).
    pub checkpointed_at: Option<Millis>,
}

impl Attempt {
    /// When the attempt's process started: the time its agent reported it running, or,
    /// for an attempt whose process ended with an exit code before that report arrived
    /// (a short job whose report was lost or overtaken), its scheduling time, the
    /// latest time known to be no later than its start. `None` for an attempt that
    /// never ran (refused by its node, lost, or killed before it started).
    pub fn ran_from(&self) -> Option<Millis> {
        let exited = matches!(
            &self.end,
            Some(AttemptEnd::Exited { code }) if *code >= 0
        ) || matches!(&self.end, Some(AttemptEnd::Stopped { code: Some(_), .. }));
        self.started_at
            .or_else(|| exited.then_some(self.scheduled_at))
    }

    /// Where the work of this attempt would resume from if it stopped at `now`: its
    /// latest reported checkpoint; else, for a job that declares `--checkpoint-every`,
    /// the latest whole interval since it started; else its start. The work since then
    /// is what a stop at `now` loses.
    pub fn resumes_from(&self, every_s: Option<u64>, now: Millis) -> Millis {
        let start = self.started_at.unwrap_or(self.scheduled_at);
        resume_point(start, self.checkpointed_at, every_s, now)
    }

    /// The work this attempt's checkpoints had saved if it stopped at `now`: the time
    /// from its start to [`Attempt::resumes_from`], which the next attempt need not do
    /// again.
    pub fn work_saved(&self, every_s: Option<u64>, now: Millis) -> Millis {
        self.resumes_from(every_s, now) - self.started_at.unwrap_or(self.scheduled_at)
    }

    pub fn was_preempted(&self) -> bool {
        matches!(&self.end, Some(AttemptEnd::Stopped { kind, .. }) if kind.is_preemption())
    }
}

/// One status change, with the time, the reason and the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub at: Millis,
    pub from: JobStatus,
    pub to: JobStatus,
    pub reason: String,
    pub nodes: Vec<NodeName>,
}

/// GPUs held for a preemptor while its victims exit, so that no one else takes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// GPUs held per node: the job's whole need on the nodes it will run on.
    pub nodes: Vec<(NodeName, u32)>,
    pub since: Millis,
}

/// Why a RUNNABLE job is not running, with numbers. Rendered with the current time.
/// Generic over its string type: stored reasons share their names ([`SharedStr`]), so
/// that a scheduling pass giving 100,000 jobs a reason copies no string, and a
/// reason's names are read where the pass's own copies already are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PendingReasonOf<S> {
    /// The job has not been looked at by the scheduler yet.
    NotYetScheduled,
    ShareDisabled {
        share: S,
    },
    QueueDisabled {
        queue: S,
    },
    EnvironmentDisabled {
        env: S,
    },
    /// The share is at its max and does not borrow.
    AtMaxNoBorrow {
        share: S,
        used: u32,
        max: u32,
        need: u32,
        unit: S,
        strategy: S,
    },
    /// A LEND_AND_BORROW share has reached `max × (1 + borrow_limit/100)`.
    BorrowLimit {
        used: u32,
        limit: u64,
        need: u32,
        unit: S,
    },
    /// Victims are exiting; the job holds their GPUs.
    WaitingForPreempted {
        jobs: u32,
        grace_ends_at: Millis,
    },
    /// The environment's cap for the unit is reached.
    EnvironmentCap {
        env: S,
        used: u32,
        cap: u32,
        need: u32,
        unit: S,
    },
    /// Free GPUs exist but a RESERVE share keeps them idle for itself.
    ReserveHeld {
        share: S,
        idle: u32,
        unit: S,
    },
    /// Not enough free GPUs on usable nodes.
    NoCapacity {
        need_per_node: u32,
        nodes: u32,
        unit: S,
        free: u32,
        fitting_nodes: u32,
    },
    /// No usable node of the environment has GPUs of this unit.
    NoNodes {
        unit: S,
        env: S,
    },
    /// Victims exist but are younger than their share's `min_runtime_s`.
    MinRuntime {
        until: Millis,
    },
    /// The job needs more than its share may ever hold (its max, or its borrowing
    /// ceiling): it waits until an admin changes the share's limits.
    AboveCeiling {
        share: S,
        need: u32,
        ceiling: u64,
        unit: S,
        strategy: S,
    },
    /// PENDING: held at submit (`--hold`) or by `tranche hold`, until released.
    Held,
    /// PENDING: a dependency names a job that has not ended as it needs.
    Dependency {
        job: S,
        status: S,
    },
    /// The array has `%limit` tasks holding GPUs already.
    ArrayLimit {
        array: S,
        running: u32,
        limit: u32,
    },
}

/// The stored form.
pub type PendingReason = PendingReasonOf<SharedStr>;

/// A name shared by the reasons that mention it: cloned by count, written as a string.
pub type SharedStr = std::sync::Arc<str>;

impl<S: AsRef<str>> PendingReasonOf<S> {
    /// Converts the string type of every name.
    pub fn map<'a, T>(&'a self, f: impl Fn(&'a str) -> T) -> PendingReasonOf<T> {
        use PendingReasonOf::*;
        match self {
            NotYetScheduled => NotYetScheduled,
            ShareDisabled { share } => ShareDisabled {
                share: f(share.as_ref()),
            },
            QueueDisabled { queue } => QueueDisabled {
                queue: f(queue.as_ref()),
            },
            EnvironmentDisabled { env } => EnvironmentDisabled {
                env: f(env.as_ref()),
            },
            AtMaxNoBorrow {
                share,
                used,
                max,
                need,
                unit,
                strategy,
            } => AtMaxNoBorrow {
                share: f(share.as_ref()),
                used: *used,
                max: *max,
                need: *need,
                unit: f(unit.as_ref()),
                strategy: f(strategy.as_ref()),
            },
            BorrowLimit {
                used,
                limit,
                need,
                unit,
            } => BorrowLimit {
                used: *used,
                limit: *limit,
                need: *need,
                unit: f(unit.as_ref()),
            },
            WaitingForPreempted {
                jobs,
                grace_ends_at,
            } => WaitingForPreempted {
                jobs: *jobs,
                grace_ends_at: *grace_ends_at,
            },
            EnvironmentCap {
                env,
                used,
                cap,
                need,
                unit,
            } => EnvironmentCap {
                env: f(env.as_ref()),
                used: *used,
                cap: *cap,
                need: *need,
                unit: f(unit.as_ref()),
            },
            ReserveHeld { share, idle, unit } => ReserveHeld {
                share: f(share.as_ref()),
                idle: *idle,
                unit: f(unit.as_ref()),
            },
            NoCapacity {
                need_per_node,
                nodes,
                unit,
                free,
                fitting_nodes,
            } => NoCapacity {
                need_per_node: *need_per_node,
                nodes: *nodes,
                unit: f(unit.as_ref()),
                free: *free,
                fitting_nodes: *fitting_nodes,
            },
            NoNodes { unit, env } => NoNodes {
                unit: f(unit.as_ref()),
                env: f(env.as_ref()),
            },
            MinRuntime { until } => MinRuntime { until: *until },
            AboveCeiling {
                share,
                need,
                ceiling,
                unit,
                strategy,
            } => AboveCeiling {
                share: f(share.as_ref()),
                need: *need,
                ceiling: *ceiling,
                unit: f(unit.as_ref()),
                strategy: f(strategy.as_ref()),
            },
            Held => Held,
            Dependency { job, status } => Dependency {
                job: f(job.as_ref()),
                status: f(status.as_ref()),
            },
            ArrayLimit {
                array,
                running,
                limit,
            } => ArrayLimit {
                array: f(array.as_ref()),
                running: *running,
                limit: *limit,
            },
        }
    }

    pub fn borrowed(&self) -> PendingReasonOf<&str> {
        self.map(|s| s)
    }

    /// The reason in words, with times relative to `now`.
    pub fn render(&self, now: Millis) -> String {
        // A reason about a group of shares names it `group NAME` (share names have no
        // spaces); any other name is a share's.
        fn owner(name: &str) -> String {
            match name.starts_with("group ") {
                true => name.to_string(),
                false => format!("share {name}"),
            }
        }
        use PendingReasonOf as P;
        let secs = |t: Millis| t.saturating_sub(now).div_ceil(1000);
        match self.borrowed() {
            P::NotYetScheduled => "not yet considered by the scheduler".into(),
            P::ShareDisabled { share } => format!("share {share} is DISABLED"),
            P::QueueDisabled { queue } => format!("queue {queue} is DISABLED"),
            P::EnvironmentDisabled { env } => format!("environment {env} is DISABLED"),
            P::AtMaxNoBorrow { share, used, max, need, unit, strategy } => format!(
                "{} at max {used}/{max} {unit} (needs {need} more), strategy {strategy} does not borrow",
                owner(share)
            ),
            P::BorrowLimit { used, limit, need, unit } => {
                format!("borrow limit reached: {used}/{limit} {unit} (needs {need} more)")
            }
            P::WaitingForPreempted { jobs, grace_ends_at } => format!(
                "waiting for {jobs} preempted job{} to exit, grace ends in {} s",
                if jobs == 1 { "" } else { "s" },
                secs(grace_ends_at)
            ),
            P::EnvironmentCap { env, used, cap, need, unit } => {
                format!("environment {env} at cap {used}/{cap} {unit} (needs {need} more)")
            }
            P::ReserveHeld { share, idle, unit } => {
                format!("RESERVE {} holds {idle} idle {unit}", owner(share))
            }
            P::NoCapacity { need_per_node, nodes, unit, free, fitting_nodes } => {
                if nodes == 1 {
                    format!("needs {need_per_node} {unit} on one node; {free} free, no node has {need_per_node} free")
                } else {
                    format!(
                        "needs {need_per_node} {unit} on each of {nodes} nodes; {fitting_nodes} node(s) have {need_per_node} free ({free} free in all)"
                    )
                }
            }
            P::NoNodes { unit, env } => format!("no usable node in environment {env} has {unit} GPUs"),
            P::MinRuntime { until } => format!(
                "over-max jobs that could be reclaimed are protected by their minimum runtime for {} s",
                secs(until)
            ),
            P::AboveCeiling { share, need, ceiling, unit, strategy } => {
                let limit = if strategy == "LEND_AND_BORROW" {
                    "may hold at most"
                } else {
                    "has a max of"
                };
                format!(
                    "needs {need} {unit} but share {share} ({strategy}) {limit} {ceiling} {unit}: it cannot start until the share's limits change"
                )
            }
            P::Held => "held: it waits until released (tranche release)".into(),
            P::Dependency { job, status } => format!("waiting for job {job} ({status})"),
            P::ArrayLimit { array, running, limit } => format!(
                "array {array} has {running} of its at most {limit} tasks running"
            ),
        }
    }
}

/// Everything Tranche records about a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    /// Shared between the tasks of an array (one spec in memory for all of them, and
    /// one in a state image: see `tranche_state`'s stored jobs); a task whose priority
    /// is changed gets its own, or shares a sibling's of that priority.
    pub spec: Arc<JobSpec>,
    pub status: JobStatus,
    /// Original submit time; kept across requeues so the job keeps its place.
    pub submitted_at: Millis,
    pub attempts: Vec<Attempt>,
    pub transitions: Vec<Transition>,
    /// Set while the job is being stopped (preempted, cancelled, drained).
    pub stop: Option<Stop>,
    /// GPUs held for this job while its victims exit.
    pub hold: Option<Hold>,
    pub pending_reason: Option<PendingReason>,
    /// Attempts ended by preemption.
    pub preemptions: u32,
    /// Attempts that failed by themselves (counted against `retry_attempts`).
    pub failures: u32,
    /// Set on each task of an array.
    pub array: Option<ArrayTask>,
    /// Dependencies not yet satisfied; the job is PENDING while any is left.
    pub deps: Vec<Dep>,
    /// Held (`--hold`, `tranche hold`): PENDING until released.
    pub held: bool,
}

impl Job {
    pub fn current_attempt(&self) -> Option<&Attempt> {
        self.attempts.last().filter(|a| a.end.is_none())
    }

    /// The allocation of the current attempt, if the job holds GPUs.
    pub fn allocation(&self) -> &[NodeAlloc] {
        match self.current_attempt() {
            Some(a) if self.status.is_active() => &a.allocation,
            _ => &[],
        }
    }

    /// When the current attempt started running (or was scheduled, if not yet started).
    pub fn started_at(&self) -> Option<Millis> {
        self.current_attempt()
            .map(|a| a.started_at.unwrap_or(a.scheduled_at))
    }

    /// The job as users name it: `42`, or `42_7` for task 7 of array 42.
    pub fn job_ref(&self) -> JobRef {
        JobRef::of(self.id, self.array.as_ref())
    }

    pub fn preempting(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.kind.is_preemption())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec::new("train", "q", "vision", "alice", "h100", 8, 1)
    }

    #[test]
    fn an_attempt_that_exited_ran_even_without_its_running_report() {
        let at = |started_at, end| Attempt {
            checkpointed_at: None,
            number: 1,
            allocation: vec![],
            borrowed: false,
            scheduled_at: 1_000,
            started_at,
            ended_at: Some(9_000),
            end,
        };
        let exited = |code| Some(AttemptEnd::Exited { code });
        assert_eq!(at(Some(2_000), exited(0)).ran_from(), Some(2_000));
        assert_eq!(at(None, exited(0)).ran_from(), Some(1_000));
        assert_eq!(at(None, exited(4)).ran_from(), Some(1_000));
        let stopped = Some(AttemptEnd::Stopped {
            kind: StopKind::Cancel,
            code: Some(143),
        });
        assert_eq!(at(None, stopped).ran_from(), Some(1_000));
        // Refused or failed to start (-1), killed before a report, lost: never ran.
        assert_eq!(at(None, exited(-1)).ran_from(), None);
        let killed = Some(AttemptEnd::Stopped {
            kind: StopKind::Cancel,
            code: None,
        });
        assert_eq!(at(None, killed).ran_from(), None);
        assert_eq!(at(None, Some(AttemptEnd::Lost)).ran_from(), None);
        assert_eq!(at(None, None).ran_from(), None);
    }

    #[test]
    fn gpus_are_the_total_split_over_the_nodes_or_each_nodes() {
        assert_eq!(gpus_per_node(Some(16), None, 2), Ok(8));
        assert_eq!(gpus_per_node(None, Some(16), 2), Ok(16));
        assert_eq!(
            gpus_per_node(Some(10), None, 4),
            Err(GpuCount::Uneven {
                total: 10,
                nodes: 4
            })
        );
        assert_eq!(
            gpus_per_node(Some(8), Some(4), 2),
            Err(GpuCount::Both {
                total: 8,
                per_node: 4
            })
        );
        assert_eq!(gpus_per_node(None, None, 1), Err(GpuCount::Neither));
        let f = GpuFields {
            total: "gpus",
            per_node: "gpus_per_node",
            nodes: "nodes",
        };
        assert_eq!(
            GpuCount::Uneven {
                total: 10,
                nodes: 4
            }
            .text(&f),
            "gpus 10 does not split evenly over nodes 4: give a multiple of 4, or gpus_per_node"
        );
    }

    #[test]
    fn valid_spec_passes() {
        spec().validate().unwrap();
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(fn(&mut JobSpec), &str, &str)> = vec![
            (|s| s.priority = 10_000, "priority", "0-9999"),
            (
                |s| s.request.gpus_per_node = 0,
                "request.gpus_per_node",
                "at least 1",
            ),
            (|s| s.request.nodes = 0, "request.nodes", "at least 1"),
            (|s| s.retry_attempts = 0, "retry.attempts", "1-10"),
            (|s| s.retry_attempts = 11, "retry.attempts", "1-10"),
            (
                |s| s.checkpoint.signal = "SIGKILL".into(),
                "checkpoint.signal",
                "must be one of",
            ),
            (
                |s| s.client_token = Some("x".repeat(65)),
                "client_token",
                "1-64",
            ),
            (
                |s| s.name = JobName::from("bad name"),
                "name",
                "[A-Za-z0-9_-.",
            ),
            (|s| s.request.unit = Unit::from(""), "request.unit", "empty"),
            (|s| s.time_limit_s = Some(0), "time_limit_s", "at least 1"),
        ];
        for (mutate, field, rule) in cases {
            let mut s = spec();
            mutate(&mut s);
            let e = s.validate().unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.rule.contains(rule), "{e} should mention {rule}");
        }
    }

    #[test]
    fn pending_reasons_render_with_numbers() {
        let r = PendingReason::WaitingForPreempted {
            jobs: 2,
            grace_ends_at: 50_000,
        };
        assert_eq!(
            r.render(9_000),
            "waiting for 2 preempted jobs to exit, grace ends in 41 s"
        );
        let r = PendingReason::BorrowLimit {
            used: 24,
            limit: 24,
            need: 8,
            unit: "h100".into(),
        };
        assert_eq!(
            r.render(0),
            "borrow limit reached: 24/24 h100 (needs 8 more)"
        );
    }
}
