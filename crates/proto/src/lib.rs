//! Tranche's wire protocol: versioned, size-capped frames and the messages of the
//! client API and of the agents' log port. Every stream carries frames (see [`frame`]);
//! the client API sends one [`ClientRequest`] and receives one [`Response`] per
//! bidirectional QUIC stream. What a client may ask to change is a [`ClientCommand`];
//! what it is answered is the protocol's own ([`Outcome`], [`Refusal`],
//! [`LedgerTotals`]), which the controller maps from the state machine's answers with
//! the same encoding. The controllers' own frames between each other are theirs
//! (`tranche_controller::peer`).
//!
//! It may depend on `tranche-model` alone among Tranche's crates, and on serde,
//! bincode, thiserror, tokio (reading a frame from a stream, within a deadline) and
//! tracing. The agent and every client link it, so it must never link the state
//! machine, the scheduler, the controller or anything of TLS or QUIC: it describes
//! bytes and reads and writes frames on streams it is handed, and never opens a
//! connection, reads a file or holds state.

pub mod answer;
pub mod command;
pub mod frame;
pub mod msg;
pub mod policy;
pub mod text;

pub use answer::{GpuTimes, LedgerTotals, Outcome, PlanOutcome, Refusal};
pub use command::ClientCommand;
pub use frame::{FrameError, MAX_CLIENT_FRAME, MAX_LOG_REQUEST, MAX_PEER_FRAME, PROTOCOL_VERSION};
pub use msg::*;
