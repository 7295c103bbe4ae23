//! What both Tranche daemons (`tranched` and `tranche-agent`) share around their
//! work: log set-up ([`logs`]), signals that turn into a shutdown ([`signals`]),
//! readiness for systemd ([`systemd`]), sockets handed over by whoever started the
//! daemon ([`listen`]), the Prometheus `/metrics` server ([`metrics`]) and the loading of a TOML config file with its error shape
//! ([`config`]).
//!
//! It may depend on tokio, tracing, tiny_http, nix, toml and serde (and `tranche-tls` for
//! the one way addresses are read). It never knows the model, the state machine, the
//! protocol or either daemon's work: a daemon hands it text to serve and types to parse.

pub mod config;
pub mod listen;
pub mod logs;
pub mod metrics;
pub mod signals;
pub mod systemd;

pub use config::ConfigError;
