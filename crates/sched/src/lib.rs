//! Tranche's quota-share scheduler: `plan(&state, now) -> Plan`, the rules of
//! `docs/design.md` §3 as one pure function.
//!
//! A pass visits queues by priority. Inside a queue it runs the own-capacity pass
//! (with reclaim and in-share preemption for jobs that cannot start), then the FIFO
//! borrow pass. It reads the state, never changes it, and returns actions (placements,
//! preemptions, holds) plus the pending reasons that changed. The state machine
//! re-verifies every action when the plan is applied.
//!
//! This crate depends on `tranche-model` and `tranche-state` only. It must never use
//! tokio, do I/O or read the wall clock: the same code runs in `tranched`, in the
//! scenario runner and in the benchmark, and must give the same plan for the same input.

pub mod estimate;
pub mod fair;
mod pass;
mod scheduler;

pub use pass::{
    plan, plan_by_class, plan_each, plan_with, CLASS_WALK_MIN_JOBS, INSHARE_LOOK_LIMIT,
};
pub use scheduler::Scheduler;
