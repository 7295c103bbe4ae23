//! The controller-to-controller protocol. Everything queued for one peer travels as one
//! [`PeerFrame`] (a frame of at most [`MAX_PEER_FRAME`](crate::MAX_PEER_FRAME) bytes) on
//! one unidirectional stream. Raft messages inside it are protobuf, as raft-rs defines
//! them; the log entries they carry hold a bincode [`Proposal`] (or, for a membership
//! change, a [`Member`] and the proposer's `(origin, id)`), and a Raft snapshot holds an
//! [`ImageData`]. All of these decode through [`tranche_state::codec`], which bounds
//! what a decoder may allocate.

use serde::{Deserialize, Serialize};
use tranche_model::Millis;
use tranche_state::{Command, RequestId};

use crate::Member;

/// One item between controllers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerItem {
    /// A raft message, protobuf-encoded as raft-rs defines it.
    Raft(Vec<u8>),
    /// A client's write received by a follower, for the leader to propose.
    Forward {
        id: u64,
        cmd: Command,
        request: Option<RequestId>,
    },
}

/// What travels on one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerFrame {
    pub from: u64,
    /// The sender's peer address, so that a member that joined and does not yet know
    /// the membership can answer.
    pub from_addr: String,
    /// Random per process start. A new value means the sender restarted, so any
    /// connection to its previous process is dead even if QUIC has not noticed yet.
    pub incarnation: u64,
    pub items: Vec<PeerItem>,
}

/// What every normal entry of the log carries: who proposed it (for the answer), the
/// time chosen by the leader, and the command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub origin: u64,
    pub id: u64,
    pub now: Millis,
    pub cmd: Command,
    /// The client's request id, which makes retries of the write apply once.
    pub request: Option<RequestId>,
}

/// The state-machine image stored in a Raft snapshot: the state's own snapshot
/// ([`tranche_state::State::snapshot`]), the membership, and the latest entry time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageData {
    pub state: Vec<u8>,
    pub members: Vec<Member>,
    pub last_now: Millis,
}
