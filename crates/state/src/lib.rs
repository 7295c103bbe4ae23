//! Tranche's replicated state machine.
//!
//! Every change to the cluster's state is a [`Command`]; [`State::apply`] applies one
//! command at a given time and returns an [`Outcome`] or a typed [`ApplyError`].
//! `apply` is deterministic and total: the same commands at the same times give the same
//! state on every controller, and a rejected command changes nothing. The scheduler's
//! output is a [`Plan`], which is itself a command and is re-verified here when applied
//! (optimistic concurrency, as Nomad's plan applier does).
//!
//! This crate depends on `tranche-model`, serde and bincode only. It must never do I/O,
//! read the wall clock, or reach into leader-only machinery: time comes in as an
//! argument and effects go out as outcomes.

mod apply;
pub mod codec;
mod command;
mod depend;
pub mod format;
pub mod ledger;
mod plan;
pub mod retention;
mod session;
mod state;
mod touch;
mod waiting;

pub use apply::{is_gang_stop, TAGGED_KINDS};
pub use command::*;
pub use plan::*;
pub use retention::Retention;
pub use session::*;
pub use state::*;
pub use touch::*;
pub use waiting::*;
