//! The Tranche controller as a replicated service: a Raft-replicated state machine
//! (raft-rs, redb on disk, [`node`]) with its peer transport ([`peer`]), the service
//! layer every client request goes through ([`service`]: authorization, the write path
//! to the leader, reads, [`events`]; [`wire`] turns a client's command into the
//! replicated one and the state machine's answers into the protocol's), the client
//! API's QUIC port ([`quic`]), and the leader's loops ([`planner`], [`cadence`],
//! [`liveness`]). Only the leader schedules.
//! [`server::open`] builds one from its [`Config`] and [`server::Controller::run`] runs
//! it; the `tranched` binary adds the HTTPS API and the AWS endpoint on top, as other
//! adapters over the [`service::Service`].
//!
//! It may depend on the core (`tranche-model`, `tranche-state`, `tranche-sched`),
//! `tranche-proto`, `tranche-tls`, `tranche-raftlog`, `tranche-daemon-kit`, tokio,
//! quinn and raft. It never serves HTTP (no axum, hyper or utoipa) and knows nothing of
//! AWS's API: those adapters live in `tranche-http` and `tranche-aws` and depend on it.
//! The config file's `[http]` and `[aws]` sections are parsed here, as data, since one
//! file configures the whole daemon.
//!
//! The `testing` feature adds the module `testing`: the service over an
//! in-memory state with a stand-in node, for the adapters' tests.

pub mod cadence;
pub mod config;
pub mod events;
pub mod history;
pub mod history_reads;
pub mod liveness;
pub mod mailbox;
pub mod metrics;
pub mod node;
pub mod peer;
pub mod planner;
pub mod quic;
pub mod server;
pub mod service;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod views;
pub mod wire;

pub use config::Config;
