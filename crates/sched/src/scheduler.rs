//! The scheduler between passes: a pass that nothing changed is skipped outright.
//!
//! A pass reads the state and the time, and the time only through the instants it
//! reports as `next_wakeup` (a victim's `min_runtime_s` ending). So a pass that changed
//! nothing (an empty plan) answers the same, empty, for the same state at any time
//! before that wakeup. [`Scheduler`] keeps the state's mark after such a pass and
//! answers the next pass from it while the mark holds: the controller's periodic pass
//! over a settled cluster then costs a comparison, however long its queues.

use tranche_model::Millis;
use tranche_state::{Plan, State};

/// What identifies a state between passes: the count of commands that changed it
/// (`State::version`), with its waiting and active jobs counted as a guard against a
/// state replaced wholesale (a restored snapshot).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Mark {
    version: u64,
    runnable: usize,
    active: usize,
}

impl Mark {
    fn of(st: &State) -> Mark {
        Mark {
            version: st.version,
            runnable: st.runnable_count(),
            active: st.active_count(),
        }
    }
}

/// Plans passes, skipping one that nothing changed since an empty one.
#[derive(Default, Debug)]
pub struct Scheduler {
    /// After an empty plan: the state's mark then, and the plan's wakeup.
    settled: Option<(Mark, Option<Millis>)>,
    /// Passes answered without running.
    skipped: u64,
    /// Fair-share usage of the hours before the current one (see [`crate::fair`]).
    past: Vec<crate::fair::Past>,
}

impl Scheduler {
    pub fn new() -> Scheduler {
        Scheduler::default()
    }

    /// The plan for `st` at `now`, as [`crate::plan`] computes it.
    pub fn plan(&mut self, st: &State, now: Millis) -> Plan {
        let mark = Mark::of(st);
        if let Some((m, wakeup)) = self.settled {
            if m == mark && wakeup.is_none_or(|w| now < w) {
                self.skipped += 1;
                return Plan {
                    next_wakeup: wakeup,
                    ..Plan::default()
                };
            }
        }
        let plan = crate::plan_with(st, now, &mut self.past);
        self.settled = plan.is_empty().then_some((mark, plan.next_wakeup));
        plan
    }

    /// Forgets the last pass, so that the next one runs whole.
    pub fn forget(&mut self) {
        self.settled = None;
    }

    /// Passes answered without running, since this scheduler was made.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}
