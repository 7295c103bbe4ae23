//! Tranche's wire protocol: versioned, size-capped frames and the client API's
//! messages. Every stream carries frames (see [`frame`]); the client API sends one
//! [`Request`] and receives one [`Response`] per bidirectional QUIC stream; controllers
//! exchange [`peer::PeerFrame`]s.

pub mod frame;
pub mod msg;
pub mod peer;
pub mod service;

pub use frame::{FrameError, MAX_CLIENT_FRAME, MAX_PEER_FRAME, PROTOCOL_VERSION};
pub use msg::*;
