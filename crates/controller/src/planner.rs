//! The leader's scheduler runs on its own thread, on its own replica of the state, so
//! that a long pass never holds up the Raft loop (heartbeats, appends, answers).
//!
//! The replica starts as a copy of the applied state when this controller becomes
//! leader; after that the Raft loop hands it every applied command with its time, and
//! `State::apply` being deterministic keeps the replica equal to the applied state at
//! the same index. A pass reads the replica as of everything handed over so far.
//!
//! The busy cap counts the planner thread's CPU time, not the wall time: on a node
//! whose cores are busy with other work (its agents, its jobs), a pass that waits for a
//! core is not work the cap has to keep short, and counting the wait would space the
//! passes ever further apart exactly when the node is loaded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tranche_model::Millis;
use tranche_state::{Command, State};

use crate::mailbox::NodeMsg;

pub enum PlannerMsg {
    /// Start over from this state (a new leadership, or a snapshot was installed).
    Reset(Box<State>),
    /// Forget the replica (leadership lost).
    Drop,
    /// A command applied by the Raft loop, at this time.
    Apply(Arc<Command>, Millis),
    /// Run a pass at this time, on the replica once it has taken everything queued.
    Run(Millis),
}

pub struct Planner {
    tx: std::sync::mpsc::Sender<PlannerMsg>,
    pub active: bool,
}

impl Planner {
    pub fn spawn(node: mpsc::Sender<NodeMsg>) -> Planner {
        let (tx, rx) = std::sync::mpsc::channel::<PlannerMsg>();
        std::thread::Builder::new()
            .name("tranche-planner".into())
            .spawn(move || {
                let mut replica: Option<State> = None;
                // Skips a pass over a replica that nothing changed since an empty plan.
                let mut scheduler = tranche_sched::Scheduler::new();
                while let Ok(first) = rx.recv() {
                    // A pass's work starts when its request is taken: then the replica
                    // takes the commands queued behind it, and the pass runs.
                    let mut run: Option<(Millis, Instant, Duration)> = None;
                    let mut handle =
                        |m: PlannerMsg, run: &mut Option<(Millis, Instant, Duration)>| match m {
                            PlannerMsg::Reset(st) => {
                                replica = Some(*st);
                                scheduler.forget();
                            }
                            PlannerMsg::Drop => {
                                replica = None;
                                scheduler.forget();
                            }
                            PlannerMsg::Apply(cmd, now) => {
                                if let Some(st) = replica.as_mut() {
                                    let _ = st.apply(&cmd, now);
                                }
                            }
                            PlannerMsg::Run(now) => {
                                let (at, cpu) = run
                                    .map_or_else(|| (Instant::now(), thread_cpu()), |r| (r.1, r.2));
                                *run = Some((now, at, cpu));
                            }
                        };
                    handle(first, &mut run);
                    while let Ok(m) = rx.try_recv() {
                        handle(m, &mut run);
                    }
                    let Some((now, started, cpu_at_start)) = run else {
                        continue;
                    };
                    let (plan, took) = match replica.as_ref() {
                        Some(st) => {
                            let t = Instant::now();
                            let plan = scheduler.plan(st, now);
                            (Some(plan), t.elapsed())
                        }
                        None => (None, Duration::ZERO),
                    };
                    let answer = NodeMsg::Plan {
                        plan,
                        took,
                        started,
                        busy: thread_cpu().saturating_sub(cpu_at_start),
                    };
                    if node.blocking_send(answer).is_err() {
                        return;
                    }
                }
            })
            .expect("spawning the planner thread");
        Planner { tx, active: false }
    }

    pub fn send(&self, m: PlannerMsg) {
        let _ = self.tx.send(m);
    }
}

/// The CPU time this thread has used.
fn thread_cpu() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::thread_cpu;
    use std::time::{Duration, Instant};

    /// The busy cap's clock: waiting (here, sleeping) costs the thread nothing; working
    /// counts.
    #[test]
    fn the_busy_clock_counts_work_not_waiting() {
        let t = thread_cpu();
        std::thread::sleep(Duration::from_millis(100));
        let slept = thread_cpu() - t;
        assert!(slept < Duration::from_millis(20), "{slept:?} while asleep");
        let t = thread_cpu();
        let end = Instant::now() + Duration::from_millis(100);
        let mut x = 0u64;
        while Instant::now() < end {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let worked = thread_cpu() - t;
        assert!(
            worked >= Duration::from_millis(30),
            "{worked:?} while working"
        );
    }
}
