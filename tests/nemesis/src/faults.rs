//! The fault schedule: two tracks drawn from one seed, one for the controllers and one
//! for the agents, each a sequence of faults with how long each lasts and the pause
//! before the next. The same seed and duration give the same schedule.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Which controller a fault hits: the leader at that moment, or another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Leader,
    Follower,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Fault {
    /// SIGKILL a controller; restart it from its data dir after `hold_ms`.
    KillController { target: Target },
    /// SIGSTOP the leader; SIGCONT after `hold_ms` (a long pause, as of a GC).
    PauseLeader,
    /// Drop all traffic between a controller and the others for `hold_ms`.
    Isolate { target: Target },
    /// SIGKILL an agent (its jobs go on under their shims); restart after `hold_ms`.
    KillAgent { node: usize },
    /// SIGSTOP an agent for `hold_ms`, longer than the controllers' `down_after_s`.
    StopAgent { node: usize },
}

impl Fault {
    pub fn name(&self) -> &'static str {
        match self {
            Fault::KillController { .. } => "kill_controller",
            Fault::PauseLeader => "pause_leader",
            Fault::Isolate { .. } => "isolate_controller",
            Fault::KillAgent { .. } => "kill_agent",
            Fault::StopAgent { .. } => "stop_agent",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Step {
    pub fault: Fault,
    /// How long the fault lasts before it is healed.
    pub hold_ms: u64,
    /// The pause after healing, before the next fault of the track.
    pub gap_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Schedule {
    pub controllers: Vec<Step>,
    pub agents: Vec<Step>,
}

/// Settings the schedule depends on.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub duration_ms: u64,
    pub agents: usize,
    /// The controllers' `down_after_s`, in ms: an agent is stopped for longer.
    pub down_after_ms: u64,
}

/// Draws the schedule for `seed`. Each track is filled until its planned time reaches
/// the duration; the leader is the target more often than not.
pub fn schedule(seed: u64, shape: Shape) -> Schedule {
    let mut rng = StdRng::seed_from_u64(seed);
    let target = |rng: &mut StdRng| {
        if rng.gen_bool(0.7) {
            Target::Leader
        } else {
            Target::Follower
        }
    };
    let mut controllers = Vec::new();
    let mut t = 0;
    while t < shape.duration_ms {
        let (fault, hold_ms) = match rng.gen_range(0..10) {
            0..=3 => (
                Fault::KillController {
                    target: target(&mut rng),
                },
                rng.gen_range(200..1_000),
            ),
            4..=6 => (Fault::PauseLeader, rng.gen_range(800..2_500)),
            _ => (
                Fault::Isolate {
                    target: target(&mut rng),
                },
                rng.gen_range(800..2_500),
            ),
        };
        let gap_ms = rng.gen_range(200..700);
        t += hold_ms + gap_ms;
        controllers.push(Step {
            fault,
            hold_ms,
            gap_ms,
        });
    }
    let mut agents = Vec::new();
    let mut t = 0;
    while t < shape.duration_ms && shape.agents > 0 {
        let node = rng.gen_range(0..shape.agents);
        let (fault, hold_ms) = if rng.gen_bool(0.3) {
            (
                Fault::StopAgent { node },
                shape.down_after_ms + rng.gen_range(1_000..2_500),
            )
        } else {
            (Fault::KillAgent { node }, rng.gen_range(200..1_200))
        };
        let gap_ms = rng.gen_range(300..1_000);
        t += hold_ms + gap_ms;
        agents.push(Step {
            fault,
            hold_ms,
            gap_ms,
        });
    }
    Schedule {
        controllers,
        agents,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            duration_ms: 60_000,
            agents: 3,
            down_after_ms: 3_000,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        assert_eq!(schedule(7, shape()), schedule(7, shape()));
        assert_ne!(schedule(7, shape()), schedule(8, shape()));
    }

    #[test]
    fn a_minute_holds_enough_faults_of_every_kind() {
        for seed in 0..50 {
            let s = schedule(seed, shape());
            let all: Vec<&Step> = s.controllers.iter().chain(&s.agents).collect();
            assert!(all.len() >= 45, "seed {seed}: {} faults", all.len());
            for name in [
                "kill_controller",
                "pause_leader",
                "isolate_controller",
                "kill_agent",
                "stop_agent",
            ] {
                assert!(
                    all.iter().any(|s| s.fault.name() == name),
                    "seed {seed}: no {name}"
                );
            }
            for st in &s.agents {
                if let Fault::StopAgent { node } = st.fault {
                    assert!(node < 3);
                    assert!(st.hold_ms > 3_000, "an agent stop outlasts down_after");
                }
            }
        }
    }
}
