//! What the parts of a controller share: the messages the Raft node task takes, the
//! applied state readers see, and the errors that stop a controller. Every other
//! module depends on this one, and it on none of them but the peer frames it carries
//! ([`crate::peer::frames`], plain data).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::peer::frames::PeerItem;
use tokio::sync::{oneshot, watch};
use tranche_model::{Millis, NodeName};
use tranche_proto::{ApiError, ClusterStatus, Member, MembershipChange};
use tranche_state::codec::FormatError;
use tranche_state::{ApplyError, Command, Outcome, RequestId, State};

/// The result of a write: committed and applied (the state machine's answer), or not
/// known to be.
pub type WriteResult = Result<Result<Outcome, ApplyError>, ApiError>;

/// What the rest of the controller asks of the Raft node task.
pub enum NodeMsg {
    /// Items from another controller.
    Peer { from: u64, items: Vec<PeerItem> },
    /// A write, already authorized by the service layer, to propose (or forward to the
    /// leader).
    Write {
        cmd: Command,
        request: Option<RequestId>,
        reply: oneshot::Sender<WriteResult>,
    },
    /// A linearizable read barrier: answered once this controller has applied at least
    /// the leader's commit index as of the request.
    ReadBarrier {
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    Membership {
        change: MembershipChange,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    /// A scheduling pass finished on the planner thread (`None`: it had no replica).
    /// `took` is the pass itself (wall time); `busy` the planner thread's CPU time for
    /// the whole of its work for it from taking the request at `started` (the commands
    /// queued behind it included), which the busy cap counts.
    Plan {
        plan: Option<tranche_state::Plan>,
        took: Duration,
        started: Instant,
        busy: Duration,
    },
}

/// The applied state, shared with the service layer (readers take the read lock).
pub struct Shared {
    pub state: State,
    pub applied: u64,
    /// The latest entry time applied; entry times never go backwards.
    pub last_now: Millis,
    pub members: BTreeMap<u64, Member>,
    pub status: ClusterStatus,
    /// Scheduling passes run on this controller, the latest one's duration and their
    /// durations summed, each as the busy cap counts it (the planner thread's CPU time
    /// for the pass, from taking the request to answering it).
    pub passes: u64,
    pub last_pass: Duration,
    pub pass_busy: Duration,
    /// Job transitions and share usage by applied index, for the event stream.
    pub events: crate::events::EventLog,
    /// This controller's history store of ended jobs that left the state (`None` in
    /// tests that run without a data dir).
    pub history: Option<Arc<crate::history::History>>,
    /// Bytes of the latest state image this controller wrote or installed (0: none
    /// yet).
    pub image_bytes: u64,
}

impl Shared {
    /// Nothing applied yet, for controller `id`.
    pub fn new(id: u64) -> Shared {
        Shared {
            state: State::new(),
            applied: 0,
            last_now: 0,
            members: BTreeMap::new(),
            status: ClusterStatus {
                id,
                leader: None,
                term: 0,
                commit: 0,
                applied: 0,
                image_index: 0,
                first_index: 0,
                members: vec![],
            },
            passes: 0,
            last_pass: Duration::ZERO,
            pass_busy: Duration::ZERO,
            events: crate::events::EventLog::default(),
            history: None,
            image_bytes: 0,
        }
    }
}

pub type SharedRef = Arc<RwLock<Shared>>;

/// The wall clock in milliseconds since the epoch: the time a leader gives its entries
/// and its liveness judgements.
pub fn wall_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// An error that stops the controller, or keeps it from starting: a port it cannot
/// listen on, its TLS files, its key secret, a data dir it cannot use or read, or a log
/// it can no longer write safely.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("raft log: {0}")]
    Log(#[from] tranche_raftlog::LogError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// A listening address of the config is not an IP address and port.
    #[error("{setting}: `{addr}` is not an IP address and port")]
    Address { setting: &'static str, addr: String },
    /// A port cannot be listened on.
    #[error("cannot listen on {setting} {addr}: {source}")]
    Listen {
        setting: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A bound port's address cannot be read back.
    #[error("{setting}: {source}")]
    LocalAddr {
        setting: &'static str,
        source: std::io::Error,
    },
    /// The certificate, key, CA or revocation list, or the TLS setup made of them.
    #[error(transparent)]
    Tls(#[from] tranche_tls::TlsError),
    /// The AWS endpoint's key secret file is missing or unsafe.
    #[error("{0}")]
    KeySecret(String),
    /// The metrics port.
    #[error("{0}")]
    Metrics(String),
    /// The data dir cannot be created.
    #[error("cannot create data_dir {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The data dir is readable by others and cannot be made private.
    #[error("data_dir {} has mode {mode:o} and cannot be made 0700: {source}", path.display())]
    DataDirMode {
        path: PathBuf,
        mode: u32,
        source: std::io::Error,
    },
    /// The data dir holds data in a format this build cannot read.
    #[error("data dir {}: {source}; this controller does not start on data it cannot read", path.display())]
    Unreadable { path: PathBuf, source: FormatError },
    /// The history store cannot be opened.
    #[error("{0}")]
    History(String),
    /// The history store cannot be written: ended jobs are not dropped unkept.
    #[error("{0}; the controller stops rather than drop ended jobs it could not keep")]
    Archive(String),
    /// A snapshot from the leader cannot be read.
    #[error("the leader's snapshot cannot be read: {0}")]
    Snapshot(FormatError),
    /// A log entry of a newer release.
    #[error("log entry {index} cannot be read: {source}; upgrade this controller")]
    NewerEntry { index: u64, source: FormatError },
    /// A membership change in the log does not decode.
    #[error("conf change at {index}: {detail}")]
    ConfChange { index: u64, detail: String },
}

/// Per node, the applied index at which its work (what its agent must run or stop)
/// last changed. An agent's long poll waits on its own node's value, so applying a
/// placement wakes only the agents it concerns, however many wait.
#[derive(Default)]
pub struct WorkWatch {
    nodes: Mutex<HashMap<NodeName, watch::Sender<u64>>>,
}

impl WorkWatch {
    /// The value for `node`, to wait on.
    pub fn subscribe(&self, node: &NodeName) -> watch::Receiver<u64> {
        let mut m = self.nodes.lock().unwrap();
        match m.get(node) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(0);
                m.insert(node.clone(), tx);
                rx
            }
        }
    }

    /// The work of these nodes changed as of `applied`.
    pub fn changed<'a>(&self, nodes: impl IntoIterator<Item = &'a NodeName>, applied: u64) {
        let mut m = self.nodes.lock().unwrap();
        for n in nodes {
            match m.get(n) {
                Some(tx) => {
                    tx.send_replace(applied);
                }
                None => {
                    m.insert(n.clone(), watch::channel(applied).0);
                }
            }
        }
    }

    /// Any node's work may have changed as of `applied`.
    pub fn all_changed(&self, applied: u64) {
        for tx in self.nodes.lock().unwrap().values() {
            tx.send_replace(applied);
        }
    }
}
