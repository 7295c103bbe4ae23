//! A waiting job's standing: its position in its share and queue, and when it may
//! start (computed by `tranche_sched::estimate`).

use crate::Millis;
use serde::{Deserialize, Serialize};

/// A waiting job's place and its estimated start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// 1-based, among `share_waiting` RUNNABLE jobs of its share.
    pub in_share: u32,
    pub share_waiting: u32,
    /// 1-based, among `queue_waiting` RUNNABLE jobs of its queue.
    pub in_queue: u32,
    pub queue_waiting: u32,
    pub start: Estimate,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Estimate {
    /// Enough GPUs are free for it and the jobs ahead of it now.
    Now,
    /// At this time, when running jobs reach their time limits.
    At(Millis),
    /// A running job that would have to end first has no time limit.
    Unknown,
}
