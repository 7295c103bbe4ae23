//! The reconcile decision: given what the controllers place on this node (its
//! [`NodeWork`]) and what runs here (a [`Here`]), the [`Action`]s that bring the node
//! to its work, in the order they are to be carried out.
//!
//! The decision is a pure function, like the core's: no tokio, no I/O and no clock
//! (the time is the controllers' `now` in the work). The agent gathers its view of the
//! node, calls [`decide`] and carries the actions out (`Agent::reconcile`); the tests
//! beside this file state each case on the actions alone.
//!
//! The rules, in the order `decide` applies them:
//! 1. attempts here that the controllers no longer place (cancelled, or requeued while
//!    this node was DOWN) are stopped first, so that their GPUs may be placed anew, and
//!    the end here of an attempt they no longer place is forgotten;
//! 2. an attempt the controllers place here that is not here:
//!    * is left alone while it is being started, or when this node's part of it has
//!      ended and the controllers have that (a gang whose other members still run);
//!    * is reported lost when it was started here but no trace of it is left;
//!    * is reported ended when it was stopped before it started;
//!    * is not started while the node is fenced, nor while an earlier attempt here
//!      holds any of its GPUs (a GPU is never held by two running jobs);
//!    * is started otherwise;
//! 3. an attempt that is here is stopped when the controllers say so (once, with the
//!    job's signal and its whole grace, counted from the signal on this node); else it
//!    takes the job's signal, an adopted one its time limit, and
//!    an attempt whose RUNNING report is neither sent nor on its way is reported
//!    running.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::time::Duration;

use tranche_model::Progress;
use tranche_model::{GpuIndex, JobId, JobStatus};
use tranche_proto::{NodeWork, WorkItem};

use super::ORPHAN_GRACE;
use crate::exec::AttemptNo;

/// An attempt on this node: its job and attempt number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptKey {
    pub job: JobId,
    pub attempt: AttemptNo,
}

impl AttemptKey {
    /// The attempt a work item names.
    pub fn of(item: &WorkItem) -> AttemptKey {
        AttemptKey {
            job: item.job,
            attempt: AttemptNo(item.attempt),
        }
    }
}

impl fmt::Display for AttemptKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job {} attempt {}", self.job, self.attempt)
    }
}

/// Where the report that an attempt runs stands: sent once, by whoever starts the
/// attempt or, for one adopted after a restart or whose report was not delivered, by
/// the next reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningReport {
    Unsent,
    /// On its way (the attempt's start, or a reconcile, sends it).
    Sending,
    Sent,
}

/// What the reconcile sees of one attempt the agent holds (started here, or adopted
/// from the spool after a restart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptView {
    /// The GPUs it was started on.
    pub gpus: Vec<GpuIndex>,
    /// The signal it is stopped with (the job's, once a work item has named it).
    pub signal: String,
    /// A stop has been asked (its signal sent).
    pub stopping: bool,
    /// Its end is known (no process of it is left).
    pub ended: bool,
    pub running: RunningReport,
    /// Its time limit is counted (from its start here, or from the recorded start).
    pub time_limit_set: bool,
}

/// What runs on this node, as the reconcile sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Here {
    /// This node's name, for the reports' reasons.
    pub node: String,
    /// The attempts the agent holds.
    pub attempts: BTreeMap<AttemptKey, AttemptView>,
    /// Attempts being started, with the GPUs each will hold.
    pub starting: BTreeMap<AttemptKey, Vec<GpuIndex>>,
    /// Attempts whose end on this node the controllers have.
    pub ended_here: BTreeSet<AttemptKey>,
    /// The agent has fenced its node (lost the controllers for `fence_after`).
    pub fenced: bool,
}

/// One step towards the node's work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Stop an attempt the controllers no longer place here.
    StopUnplaced {
        key: AttemptKey,
        signal: String,
        grace: Duration,
    },
    /// Stop an attempt as the controllers' stop order says.
    Stop {
        key: AttemptKey,
        signal: String,
        grace: Duration,
    },
    /// Forget that this node's part of an attempt ended: the controllers no longer
    /// place it here.
    ForgetEnded(AttemptKey),
    /// Report an event of an attempt that is not here; the next action waits for it.
    Report { key: AttemptKey, event: Progress },
    /// Not started yet: these attempts here still hold some of its GPUs.
    WaitForGpus {
        key: AttemptKey,
        holders: Vec<AttemptKey>,
    },
    /// Start the item's attempt (it counts as holding its GPUs from now on).
    Start(Box<WorkItem>),
    /// The signal the attempt is stopped with from now on.
    SetSignal { key: AttemptKey, signal: String },
    /// The attempt (adopted after a restart) has a time limit of `limit`; by the
    /// controllers' clock, `left` of it is left.
    SetTimeLimit {
        key: AttemptKey,
        limit: Duration,
        left: Duration,
    },
    /// Report that the attempt runs.
    ReportRunning(AttemptKey),
}

/// The actions that bring this node to `work`, given what is `here`.
pub fn decide(work: &NodeWork, here: &Here) -> Vec<Action> {
    let listed: HashSet<AttemptKey> = work.items.iter().map(AttemptKey::of).collect();
    let mut out = Vec::new();
    for (key, a) in &here.attempts {
        if !listed.contains(key) && !a.stopping && !a.ended {
            out.push(Action::StopUnplaced {
                key: *key,
                signal: a.signal.clone(),
                grace: ORPHAN_GRACE,
            });
        }
    }
    out.extend(
        here.ended_here
            .iter()
            .filter(|k| !listed.contains(k))
            .map(|k| Action::ForgetEnded(*k)),
    );
    let mut starting = here.starting.clone();
    for item in &work.items {
        let key = AttemptKey::of(item);
        let Some(a) = here.attempts.get(&key) else {
            if starting.contains_key(&key) || here.ended_here.contains(&key) {
                continue;
            }
            if item.status != JobStatus::Scheduled {
                // Started by this node, but no trace of it is left here (the spool was
                // lost): it cannot be running any more.
                let reason = format!("the agent on {} has no record of this attempt", here.node);
                out.push(Action::Report {
                    key,
                    event: Progress::Lost { reason },
                });
                continue;
            }
            if item.stop.is_some() {
                // Stopped before it ever started here: nothing to signal.
                out.push(Action::Report {
                    key,
                    event: Progress::Exited {
                        code: None,
                        reason: Some("stopped before it started".into()),
                    },
                });
                continue;
            }
            if here.fenced {
                continue;
            }
            // An attempt placed on GPUs that an earlier attempt here still holds (one
            // the controllers gave up while this node was DOWN) starts once that one
            // has exited.
            let holders = holders_of(here, &starting, item);
            if !holders.is_empty() {
                out.push(Action::WaitForGpus { key, holders });
                continue;
            }
            starting.insert(key, item.gpus.iter().map(|g| g.index).collect());
            out.push(Action::Start(Box::new(item.clone())));
            continue;
        };
        if let Some(stop) = &item.stop {
            if !a.stopping {
                out.push(Action::Stop {
                    key,
                    signal: item.signal.clone(),
                    // The whole grace, from the signal this node sends: what is left of
                    // it by the controllers' clocks would be cut short by one of them
                    // minutes ahead (their time never goes back). The controllers wait
                    // for the exit in any case; their deadline only estimates it.
                    grace: Duration::from_millis(stop.grace_ms),
                });
            }
            continue;
        }
        if a.signal != item.signal {
            out.push(Action::SetSignal {
                key,
                signal: item.signal.clone(),
            });
        }
        // An attempt adopted after a restart: its time limit counts from the start the
        // controllers recorded.
        if !a.time_limit_set {
            if let (Some(limit), Some(started)) = (item.time_limit_s, item.started_at) {
                let end_ms = started + limit * 1000;
                let left = Duration::from_millis(end_ms.saturating_sub(work.now));
                out.push(Action::SetTimeLimit {
                    key,
                    limit: Duration::from_secs(limit),
                    left,
                });
            }
        }
        if a.running == RunningReport::Unsent && !a.ended {
            out.push(Action::ReportRunning(key));
        }
    }
    out
}

/// Attempts here, not yet ended, that hold any of the item's GPUs. Attempts being
/// started count: they will hold their GPUs.
fn holders_of(
    here: &Here,
    starting: &BTreeMap<AttemptKey, Vec<GpuIndex>>,
    item: &WorkItem,
) -> Vec<AttemptKey> {
    let mine = |g: &GpuIndex| item.gpus.iter().any(|b| b.index == *g);
    let key = AttemptKey::of(item);
    let running = here
        .attempts
        .iter()
        .filter(|(_, a)| !a.ended && a.gpus.iter().any(mine))
        .map(|(k, _)| *k);
    let starting = starting
        .iter()
        .filter(|(k, gpus)| **k != key && gpus.iter().any(mine))
        .map(|(k, _)| *k);
    running.chain(starting).collect()
}

#[cfg(test)]
mod tests;
