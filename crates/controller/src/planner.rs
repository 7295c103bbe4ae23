//! The leader's scheduler runs on its own thread, on its own replica of the state, so
//! that a long pass never holds up the Raft loop (heartbeats, appends, answers).
//!
//! The replica starts as a copy of the applied state when this controller becomes
//! leader; after that the Raft loop hands it every applied command with its time, and
//! `State::apply` being deterministic keeps the replica equal to the applied state at
//! the same index. A pass reads the replica as of everything handed over so far.

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
                while let Ok(first) = rx.recv() {
                    // A pass's work starts when its request is taken: then the replica
                    // takes the commands queued behind it, and the pass runs.
                    let mut run: Option<(Millis, Instant)> = None;
                    let mut handle = |m: PlannerMsg, run: &mut Option<(Millis, Instant)>| match m {
                        PlannerMsg::Reset(st) => replica = Some(*st),
                        PlannerMsg::Drop => replica = None,
                        PlannerMsg::Apply(cmd, now) => {
                            if let Some(st) = replica.as_mut() {
                                let _ = st.apply(&cmd, now);
                            }
                        }
                        PlannerMsg::Run(now) => {
                            let started = run.map_or_else(Instant::now, |(_, s)| s);
                            *run = Some((now, started));
                        }
                    };
                    handle(first, &mut run);
                    while let Ok(m) = rx.try_recv() {
                        handle(m, &mut run);
                    }
                    let Some((now, started)) = run else { continue };
                    let (plan, took) = match replica.as_ref() {
                        Some(st) => {
                            let t = Instant::now();
                            let plan = tranche_sched::plan(st, now);
                            (Some(plan), t.elapsed())
                        }
                        None => (None, Duration::ZERO),
                    };
                    let answer = NodeMsg::Plan {
                        plan,
                        took,
                        started,
                        busy: started.elapsed(),
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
