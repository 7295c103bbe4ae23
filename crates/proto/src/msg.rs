//! The client API: one request frame and one response frame per QUIC stream.

use crate::{ClientCommand, LedgerTotals, Outcome, Refusal};
use serde::{Deserialize, Serialize};
use tranche_model::{
    AccessKey, ArrayTask, Job, JobId, JobRef, JobStatus, Millis, Node, NodeName, QueueName,
    ShareName, Standing, Strategy, Unit, UserName,
};

/// A controller of the cluster, as the membership records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Raft id: a positive integer unique in the cluster, never reused.
    pub id: u64,
    /// The controller's name (its certificate's name).
    pub name: String,
    /// Address of the controller-to-controller port.
    pub peer_addr: String,
    /// Address of the client port.
    pub client_addr: String,
}

/// What a client asks (protocol version 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// A write, authorized, then replicated through Raft and applied by every
    /// controller. With the client's request id, however often it is retried and
    /// whichever copy commits first, it is applied once and every copy gets the first
    /// answer (see [`tranche_model::RequestId`]).
    Write {
        request: Option<tranche_model::RequestId>,
        command: ClientCommand,
    },
    /// A read. Linearizable (read index) unless `stale`, which answers from the
    /// local controller's applied state at once.
    Read { query: Query, stale: bool },
    /// Add or remove a controller (admin only; answered by the leader).
    Membership(MembershipChange),
    /// Test switch: drop all controller-to-controller traffic to and from these
    /// controllers (admin only, and only where the controller's config enables
    /// `fault_injection`). An empty list heals.
    Isolate { from: Vec<u64> },
    /// An agent's heartbeat for its node. Only the leader answers (others answer
    /// `NotLeader`), from memory: heartbeats are never log entries.
    Heartbeat { node: NodeName },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipChange {
    Add(Member),
    Remove { id: u64 },
}

/// The longest a node-work long poll may wait.
pub const MAX_NODE_WORK_WAIT_MS: u32 = 30_000;

/// The reads of the client API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    Jobs(JobFilter),
    /// One job or array task (`42`, `42_7`); for an array's id, its first task.
    Job(JobRef),
    Explain(JobRef),
    Shares,
    /// The front of the queue and of each share, at most `limit` jobs each.
    Queue {
        limit: u32,
    },
    Nodes,
    Controllers,
    /// A digest of the whole replicated state, to compare controllers.
    Digest,
    /// The state machine's objects: environments, policies, queues, shares.
    Objects,
    /// What should run on this node now (the agent's view). With `after`, the answer
    /// waits until this node's work changes after that applied index, or for
    /// `wait_ms` (at most [`MAX_NODE_WORK_WAIT_MS`]), so an agent learns of a placement
    /// or a stop as soon as it is committed.
    NodeWork {
        node: NodeName,
        after: Option<u64>,
        wait_ms: u32,
    },
    /// The accounting ledger over `[from, to)` (ms since the epoch; `to` absent: now),
    /// whole hours: the hours that overlap the range.
    Report {
        from: Millis,
        to: Option<Millis>,
    },
    /// Access keys (revoked ones included), oldest first: an admin's of everyone (or
    /// of `user`), anyone else's only its own.
    AccessKeys {
        user: Option<UserName>,
    },
    /// Ended jobs, newest end first: those still in the replicated state and those
    /// this controller's history store holds (see [`HistoryFilter`]).
    History(HistoryFilter),
    /// The groups of quota shares (nested quotas), by name.
    Groups,
}

/// The most jobs one page of [`Query::History`] holds.
pub const MAX_HISTORY_PAGE: u32 = 1000;

/// Which ended jobs [`Query::History`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryFilter {
    /// Jobs that ended at or after this time (ms since the epoch); `None`: all.
    pub since: Option<Millis>,
    pub user: Option<UserName>,
    pub share: Option<ShareName>,
    /// Empty: every ended status.
    pub status: Vec<JobStatus>,
    /// At most this many jobs (at most [`MAX_HISTORY_PAGE`]; 0: the default, 100).
    pub limit: u32,
    /// The page after this one: `HistoryPage::next` of the previous page.
    pub before: Option<HistoryCursor>,
}

/// Where a history page ends: the end time and id of its last job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HistoryCursor {
    pub ended_at: Millis,
    pub id: JobId,
}

impl HistoryCursor {
    /// The cursor as text, `<ended_at>.<id>`: the HTTP API's `next` and `before`, the
    /// CLI's `--before` and the AWS endpoint's `nextToken` for ended jobs.
    pub fn text(&self) -> String {
        format!("{}.{}", self.ended_at, self.id.0)
    }

    /// Reads a cursor that [`HistoryCursor::text`] wrote.
    pub fn parse(text: &str) -> Result<HistoryCursor, String> {
        let bad = || {
            format!(
                "`{text}` is not a history cursor: it is <ended_at>.<id> (two whole numbers, \
                 as the previous page's `next` gives it)"
            )
        };
        let (at, id) = text.trim().split_once('.').ok_or_else(bad)?;
        Ok(HistoryCursor {
            ended_at: at.parse().map_err(|_| bad())?,
            id: JobId(id.parse().map_err(|_| bad())?),
        })
    }
}

/// The ended statuses a history filter may name, from comma-separated text.
pub fn parse_ended_states(text: &str) -> Result<Vec<JobStatus>, String> {
    let ended = [
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Cancelled,
    ];
    let names = || ended.map(|s| s.as_str()).join(", ");
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match JobStatus::parse(&s.to_ascii_uppercase()) {
            Some(st) if st.is_terminal() => Ok(st),
            Some(st) => Err(format!(
                "{} has not ended; the history lists {}",
                st.as_str(),
                names()
            )),
            None => Err(format!("`{s}` is not a job state; use {}", names())),
        })
        .collect()
}

/// An ended job as the history lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndedJob {
    pub job: JobSummary,
    pub ended_at: Millis,
    /// The last attempt's exit code, when its process exited with one.
    pub exit_code: Option<i32>,
    /// Why it ended (its last transition's reason).
    pub reason: String,
    /// Whether it has left the replicated state (it is read from the history store).
    pub archived: bool,
}

/// One page of [`Query::History`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryPage {
    pub jobs: Vec<EndedJob>,
    /// Where the next page starts; `None`: this is the last.
    pub next: Option<HistoryCursor>,
}

/// The ledger's figures over a range (design §9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerReport {
    /// The range asked for, `to` resolved to the controller's time.
    pub from: Millis,
    pub to: Millis,
    /// Since when the ledger counts (0: nothing counted yet).
    pub counting_since: Millis,
    pub totals: LedgerTotals,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFilter {
    pub share: Option<ShareName>,
    pub user: Option<UserName>,
    /// Empty: every status.
    pub status: Vec<JobStatus>,
    /// At most this many jobs, lowest ids first; `None`: all.
    pub limit: Option<u32>,
    /// Only the tasks of this array.
    pub array: Option<JobId>,
    /// With each waiting job's position and estimated start (`tranche jobs --long`).
    pub standing: bool,
}

/// A job as a queue listing shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    pub id: JobId,
    pub name: String,
    pub queue: QueueName,
    pub share: ShareName,
    pub user: UserName,
    pub status: JobStatus,
    pub priority: u32,
    pub unit: Unit,
    pub gpus: u32,
    pub nodes: Vec<NodeName>,
    pub submitted_at: Millis,
    pub started_at: Option<Millis>,
    /// Why it waits, rendered, when it waits.
    pub reason: Option<String>,
    pub preemptions: u32,
    /// The submitter's idempotency token.
    pub client_token: Option<String>,
    /// Set for a task of an array.
    pub array: Option<ArrayTask>,
    /// A RUNNABLE job's position and estimated start, when asked for.
    pub standing: Option<Standing>,
}

impl JobSummary {
    /// The job as users name it: `42`, or `42_7` for task 7 of array 42.
    pub fn job_ref(&self) -> JobRef {
        JobRef::of(self.id, self.array.as_ref())
    }
}

/// Why a job is where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    pub job: JobSummary,
    /// Its position and estimated start, while it is RUNNABLE.
    pub standing: Option<Standing>,
    /// One line per fact, numbers included.
    pub lines: Vec<String>,
}

/// A share's use of one capacity unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitUsage {
    pub unit: Unit,
    pub max: u32,
    pub used: u32,
    /// Of its own idle capacity, how much others use now.
    pub lent: u32,
    /// Beyond its own capacity, how much it uses now.
    pub borrowed: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareUsage {
    pub name: ShareName,
    pub strategy: Strategy,
    pub units: Vec<UnitUsage>,
    pub running: u32,
    pub waiting: u32,
    /// Its standing under a FAIR_SHARE policy; `None` under FIFO.
    pub fair: Option<FairStanding>,
}

/// A share's standing under FAIR_SHARE (design §3, *Fair share*).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FairStanding {
    /// The policy's half-life of usage, in seconds.
    pub half_life_s: u64,
    /// Its decayed usage, in thousandths of a GPU-hour.
    pub decayed_milli_gpu_hours: u64,
    pub weight: u64,
    /// Its place in the borrow order among its queue's shares: 1 borrows first (least
    /// decayed usage per weight); a reclaim takes first from the highest.
    pub borrow_order: u32,
    /// How many of its queue's shares are ranked.
    pub of: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSnapshot {
    /// The waiting jobs in the order the scheduler considers them, across shares.
    pub front: Vec<JobSummary>,
    /// The same per share.
    pub shares: Vec<(ShareName, Vec<JobSummary>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub member: Member,
    pub voter: bool,
    /// The highest log index known to be on that member (leader's view only).
    pub matched: Option<u64>,
    /// How many committed entries it lacks (leader's view only).
    pub lag: Option<u64>,
}

/// One controller's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub id: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub commit: u64,
    pub applied: u64,
    /// Index of the latest state-machine image, and first index still in the log.
    pub image_index: u64,
    pub first_index: u64,
    pub members: Vec<MemberStatus>,
}

/// A digest of the replicated state (FNV-1a over its encoding) and where it was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDigest {
    pub applied: u64,
    pub digest: u64,
    pub jobs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objects {
    pub environments: Vec<tranche_model::ServiceEnvironment>,
    pub policies: Vec<tranche_model::SchedulingPolicy>,
    pub queues: Vec<tranche_model::JobQueue>,
    pub shares: Vec<tranche_model::QuotaShare>,
}

/// One attempt placed on a node, as its agent must run (or stop) it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkItem {
    pub job: JobId,
    pub attempt: u32,
    pub status: JobStatus,
    pub share: ShareName,
    /// Earlier attempts of the job (its restart count).
    pub restarts: u32,
    pub image: String,
    pub command: Vec<String>,
    pub env: std::collections::BTreeMap<String, String>,
    pub cpus: u32,
    pub memory_mb: u64,
    /// This node's GPUs of the allocation.
    pub gpus: Vec<GpuBinding>,
    pub time_limit_s: Option<u64>,
    /// When the attempt was placed (the placing entry's time, ms since the epoch).
    pub scheduled_at: Millis,
    /// When the attempt started running (controller time, ms since the epoch).
    pub started_at: Option<Millis>,
    /// The job's checkpoint signal, e.g. `SIGTERM`.
    pub signal: String,
    /// Set when the attempt must stop: the signal goes out now, SIGKILL at the deadline.
    pub stop: Option<StopOrder>,
    /// The job's user, whose account on the node the job runs as.
    pub user: UserName,
    /// The directory the job was submitted from (or `--chdir`): its working directory on
    /// a node where it exists, else the user's home.
    pub cwd: Option<String>,
    /// Where this node stands in the attempt's gang (a single-node job is a gang of one).
    pub rendezvous: Rendezvous,
    pub name: String,
    /// Set for a task of an array (`TRANCHE_ARRAY_*`).
    pub array: Option<ArrayTask>,
    /// Files for stdout and stderr (Slurm's `--output`/`--error` patterns), relative to
    /// the working directory; `None`: the spool only.
    pub output: Option<String>,
    pub error: Option<String>,
    /// A SageMaker training job's part of the spec: the node gives the job SageMaker's
    /// container contract (`/opt/ml`, the `SM_*` variables).
    pub sagemaker: Option<Box<tranche_model::SageMakerJob>>,
}

/// What every member of an attempt needs to find the others without talking to them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendezvous {
    /// The attempt's nodes in rank order (the allocation's order).
    pub nodes: Vec<tranche_model::NodeName>,
    /// This node's place in `nodes`, from 0.
    pub rank: u32,
    pub gpus_per_node: u32,
    /// Rank 0's address as its agent advertises it (the inventory's `address`).
    pub master_addr: String,
    /// One port per attempt, the same for every member: see [`master_port`].
    pub master_port: u16,
}

/// The label in which an agent publishes its `rendezvous_ports` range (`20000-29999`).
pub const RENDEZVOUS_PORTS_LABEL: &str = "tranche.rendezvous_ports";

/// The range of `MASTER_PORT` when rank 0's node publishes none.
pub const DEFAULT_RENDEZVOUS_PORTS: (u16, u16) = (20000, 29999);

/// Parses a port range `LO-HI` (inclusive, `0 < LO <= HI`).
pub fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let (lo, hi) = text.trim().split_once('-')?;
    let (lo, hi): (u16, u16) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
    (lo > 0 && lo <= hi).then_some((lo, hi))
}

/// The rendezvous port of attempt `attempt` of `job` within `range`: a hash of the two,
/// so every member computes the same port without talking, and the next attempt of a
/// job (after a port that was taken) gets another one.
pub fn master_port(job: tranche_model::JobId, attempt: u32, range: (u16, u16)) -> u16 {
    let mut key = job.0.to_be_bytes().to_vec();
    key.extend_from_slice(&attempt.to_be_bytes());
    let span = u64::from(range.1 - range.0) + 1;
    range.0 + (crate::fnv1a(&key) % span) as u16
}

/// One GPU of an attempt on its node: the index the agent binds and its UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuBinding {
    pub index: tranche_model::GpuIndex,
    pub uuid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopOrder {
    /// Why: preempted (reclaim, in-share), cancelled, drained.
    pub why: String,
    /// Controller time (ms since the epoch) when the grace period ends.
    pub deadline_ms: Millis,
    /// The grace period, in milliseconds.
    pub grace_ms: u64,
}

/// Everything an agent must run or stop, as of an applied index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeWork {
    pub applied: u64,
    /// The controller's time of the answer (ms since the epoch).
    pub now: Millis,
    /// Whether the node is known to the controllers (registered).
    pub registered: bool,
    pub items: Vec<WorkItem>,
}

/// What a controller answers. Variants are only appended: a client of the previous
/// protocol version still reads `Error`, which is how it learns to upgrade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// A write was committed, durable on a majority, and applied.
    Applied(Outcome),
    Jobs(Vec<JobSummary>),
    Job(Box<Job>),
    Explain(Explanation),
    Shares(Vec<ShareUsage>),
    Queue(QueueSnapshot),
    Nodes(Vec<Node>),
    Controllers(ClusterStatus),
    Digest(StateDigest),
    Objects(Objects),
    NodeWork(NodeWork),
    /// A membership change or a test switch took effect.
    Done,
    Error(ApiError),
    /// The leader noted a heartbeat. `registered`: whether it knows the node (an agent
    /// whose node is unknown registers).
    Heartbeat {
        registered: bool,
    },
    Report(Box<LedgerReport>),
    /// A key was issued: its record and its secret, which is shown only this once.
    AccessKey {
        key: AccessKey,
        secret: String,
    },
    AccessKeys(Vec<AccessKey>),
    History(HistoryPage),
    Groups(Vec<tranche_model::ShareGroup>),
}

impl Response {
    /// What kind of answer this is, for a message about an answer that does not fit
    /// the question.
    pub fn kind(&self) -> &'static str {
        match self {
            Response::Applied(_) => "a committed write",
            Response::Jobs(_) => "a job list",
            Response::Job(_) => "a job",
            Response::Explain(_) => "a job's explanation",
            Response::Shares(_) => "share usage",
            Response::Queue(_) => "a queue snapshot",
            Response::Nodes(_) => "a node list",
            Response::Controllers(_) => "the controllers' status",
            Response::Digest(_) => "a state digest",
            Response::Objects(_) => "the policy objects",
            Response::NodeWork(_) => "a node's work",
            Response::Done => "done",
            Response::Error(_) => "an error",
            Response::Heartbeat { .. } => "a heartbeat answer",
            Response::Report(_) => "an accounting report",
            Response::AccessKey { .. } => "an issued access key",
            Response::AccessKeys(_) => "an access key list",
            Response::History(_) => "a page of ended jobs",
            Response::Groups(_) => "the groups of shares",
        }
    }
}

/// Why a request was not carried out. Every error but `Unavailable` and `NotLeader`
/// means nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ApiError {
    /// The state machine refused the command; nothing changed.
    #[error("refused: {0}")]
    Rejected(Refusal),
    /// The certificate's role or name does not allow this request.
    #[error("not allowed: {0}")]
    Unauthorized(String),
    /// Only the leader answers this; retry there.
    #[error("this controller is not the leader{}", .leader.as_ref().map(|m| format!("; the leader is {} at {}", m.name, m.client_addr)).unwrap_or_default())]
    NotLeader { leader: Option<Member> },
    /// No leader, or no commit in time. The outcome of a write is unknown: retry it
    /// (submits with a client token are safe to retry).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The request frame was malformed, truncated, too large or of another version.
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("not found: {0}")]
    NotFound(String),
}

impl ApiError {
    /// Whether the same request may succeed when sent again (to this or another
    /// controller).
    pub fn retryable(&self) -> bool {
        matches!(self, ApiError::NotLeader { .. } | ApiError::Unavailable(_))
    }
}

/// FNV-1a, 64 bits: a stable digest for comparing state across controllers.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// A request to an agent's log port (QUIC with mutual TLS; the agent's certificate is
/// verified under `<node>.agent.tranche`): the output of one attempt of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRequest {
    pub job: JobId,
    /// `None`: the latest attempt on that node.
    pub attempt: Option<u32>,
    /// stderr instead of stdout.
    pub stderr: bool,
    /// Keep streaming until the attempt ends.
    pub follow: bool,
    /// Start at this byte.
    pub offset: u64,
}

/// What an agent streams back: chunks, then one `End` (or an `Error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogFrame {
    Chunk(Vec<u8>),
    End { attempt: u32, running: bool },
    Error(ApiError),
}

/// The node label under which an agent publishes its log port.
pub const LOGS_LABEL: &str = "tranche.logs";

#[cfg(test)]
mod history_tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_bad_ones_say_the_form() {
        let c = HistoryCursor {
            ended_at: 1_796_131_900_041,
            id: JobId(42),
        };
        assert_eq!(c.text(), "1796131900041.42");
        assert_eq!(HistoryCursor::parse(&c.text()), Ok(c));
        for bad in ["", "42", "a.b", "1.2.3", "-1.2"] {
            let e = HistoryCursor::parse(bad).unwrap_err();
            assert!(e.contains("<ended_at>.<id>"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_ended_states_are_history_states() {
        assert_eq!(
            parse_ended_states("succeeded, FAILED,"),
            Ok(vec![JobStatus::Succeeded, JobStatus::Failed])
        );
        let e = parse_ended_states("RUNNING").unwrap_err();
        assert!(e.contains("RUNNING has not ended"), "{e}");
        let e = parse_ended_states("DONE").unwrap_err();
        assert!(
            e.contains("`DONE` is not a job state") && e.contains("CANCELLED"),
            "{e}"
        );
    }
}
