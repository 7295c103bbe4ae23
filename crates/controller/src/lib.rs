//! `tranched`, the Tranche controller: a Raft-replicated state machine (raft-rs, redb
//! on disk) serving the client API over QUIC with mutual TLS. Only the leader
//! schedules.

pub mod alloc;
pub mod aws;
pub mod cadence;
pub mod cli;
pub mod config;
pub mod events;
pub mod history;
pub mod history_reads;
pub mod http;
pub mod liveness;
pub mod mailbox;
pub mod metrics;
pub mod node;
pub mod peer;
pub mod planner;
pub mod quic;
pub mod server;
pub mod service;
pub mod views;

pub use config::Config;
