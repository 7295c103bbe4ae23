//! The controller-to-controller protocol. Everything queued for one peer travels as one
//! [`PeerFrame`] (a frame of at most [`MAX_PEER_FRAME`](crate::MAX_PEER_FRAME) bytes) on
//! one unidirectional stream. Raft messages inside it are protobuf, as raft-rs defines
//! them; the log entries they carry hold a bincode [`Proposal`] (or, for a membership
//! change, a [`Member`] and the proposer's `(origin, id)`), and a Raft snapshot holds an
//! [`ImageData`]. All of these are sealed in the stored-format envelope and decode
//! through [`tranche_state::codec`], which bounds what a decoder may allocate and reads
//! the previous format too (see [`tranche_state::format`]).

use serde::{Deserialize, Serialize};
use tranche_model::Millis;
use tranche_state::codec::{self, FormatError};
use tranche_state::{Command, RequestId, State};

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

/// A state image as read back: the state (migrated to today's format), the membership,
/// the latest entry time, and the format it was stored in.
pub struct OpenedImage {
    pub state: State,
    pub members: Vec<Member>,
    pub last_now: Millis,
    pub format: u16,
}

impl ImageData {
    /// The image of `state`, in this build's format.
    pub fn seal(state: &State, members: Vec<Member>, last_now: Millis) -> Vec<u8> {
        codec::seal(&ImageData {
            state: state.snapshot(),
            members,
            last_now,
        })
    }

    /// Reads an image of any format this build reads.
    pub fn open(bytes: &[u8]) -> Result<OpenedImage, FormatError> {
        let (format, body) = codec::open(bytes)?;
        let img: ImageData = codec::decode(body).map_err(|reason| FormatError::Decode {
            version: format,
            reason,
        })?;
        Ok(OpenedImage {
            state: tranche_state::format::decode_state(format, &img.state)?,
            members: img.members,
            last_now: img.last_now,
            format,
        })
    }
}
