//! Tranche's wire protocol: versioned, size-capped frames and the client API's
//! messages. Every stream carries frames (see [`frame`]); the client API sends one
//! [`ClientRequest`] and receives one [`Response`] per bidirectional QUIC stream.

pub mod answer;
pub mod command;
pub mod frame;
pub mod msg;
pub mod text;

pub use answer::{GpuTimes, LedgerTotals, Outcome, PlanOutcome, Refusal};
pub use command::ClientCommand;
pub use frame::{FrameError, MAX_CLIENT_FRAME, MAX_LOG_REQUEST, MAX_PEER_FRAME, PROTOCOL_VERSION};
pub use msg::*;
