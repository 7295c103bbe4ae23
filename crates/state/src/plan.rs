//! The scheduler's output. A plan is computed against one state and applied, as a
//! command, to a possibly newer one; each action is re-verified there.

use serde::{Deserialize, Serialize};
use tranche_model::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// Pending reasons that changed since the state the plan was computed on.
    pub reasons: Vec<(JobId, PendingReason)>,
    /// The earliest time at which a time condition (a job reaching its share's
    /// `min_runtime_s`) may change what the scheduler would do; schedule again then.
    pub next_wakeup: Option<Millis>,
}

impl Plan {
    /// True when applying the plan would change nothing.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty() && self.reasons.is_empty()
    }

    /// Whether the two plans do the same: the same actions in the same order, the same
    /// wakeup, and the same reasons for the same jobs (a pass may give jobs their
    /// reasons in another order; a job given two keeps the later).
    pub fn same_as(&self, o: &Plan) -> bool {
        fn by_job(p: &Plan) -> Vec<&(JobId, PendingReason)> {
            let mut r: Vec<_> = p.reasons.iter().collect();
            r.sort_by_key(|(id, _)| *id);
            r
        }
        self.actions == o.actions && self.next_wakeup == o.next_wakeup && by_job(self) == by_job(o)
    }

    pub fn placements(&self) -> usize {
        self.actions
            .iter()
            .filter(|a| matches!(a, Action::Place { .. }))
            .count()
    }

    pub fn preemptions(&self) -> usize {
        self.actions
            .iter()
            .filter(|a| matches!(a, Action::Preempt { .. }))
            .count()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Start `job` on these GPUs (all nodes of a gang in one action: all or nothing).
    /// `borrowed` when the job takes its share above its max.
    Place {
        job: JobId,
        allocation: Vec<NodeAlloc>,
        borrowed: bool,
        reason: String,
    },
    /// Send `job` its checkpoint signal; it is killed when its grace ends.
    Preempt {
        job: JobId,
        kind: StopKind,
        reason: String,
    },
    /// Hold GPUs for `job` while its victims exit; `None` releases a hold.
    Hold { job: JobId, hold: Option<Hold> },
}
