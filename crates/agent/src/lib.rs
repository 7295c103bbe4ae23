//! `tranche-agent`, the Tranche node agent: the daemon on each node that registers the
//! node with the controllers, learns its work from them, starts, stops and re-adopts the
//! attempts of jobs (each under a shim of its own, with the process and OCI executors),
//! reports their progress, fences the node when it loses the controllers, and serves
//! the jobs' output and its metrics; with the node's GPU inventory (NVML, or a fake for
//! machines without GPUs) and the mapping of jobs' users to the node's accounts.
//!
//! It may depend on the model, the wire protocol and the client (the controllers are
//! reached only through them), `tranche-tls`, `tranche-daemon-kit` (what both daemons
//! share), tokio and QUIC, and the node's kernel interfaces (cgroups, pidfds, mounts;
//! runc or crun for containers). It never links the state machine.
//!
//! It must never link the controller or its Raft node, never decide placement (it does
//! what the controllers' work list says, and only stops on its own what it may not
//! keep running: an attempt past its time limit, every attempt once fenced), and never
//! tie a job's life to its own: jobs run under their shims and outlive the agent.
//!
//! `daemon` is the agent's loop, with its reconcile decision a pure function
//! (`daemon/reconcile.rs`); `exec` runs attempts; `work_item` turns a work item into
//! the launch spec `exec` runs; `inventory`, `users`, `config` and `cli` are the rest.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod exec;
pub mod inventory;
pub mod users;
pub mod work_item;
