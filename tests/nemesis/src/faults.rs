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
    /// SIGSTOP an agent for `hold_ms`, longer than the controllers' `down_after_s`
    /// (on the bed: from 2 s to 3 s short of it).
    StopAgent { node: usize },
    /// On the bed: one controller alone, cut from every other host (a follower: a
    /// minority controller; the leader: the leader alone).
    Partition { target: Target },
    /// On the bed: two halves, each a controller and half the agents (the client with
    /// the second), and the third controller hears both.
    Bridge,
    /// On the bed: what one controller sends its peers is lost, not what it receives.
    OneWay { target: Target },
    /// On the bed: `percent` of the packets on every link of a controller are lost, at
    /// random, both ways.
    Lossy { target: Target, percent: u8 },
    /// On the bed with iptables: every packet a controller sends or receives is held
    /// for 20 ms to `max_ms`, drawn for each, so that packets arrive late and out of
    /// order.
    Delay { target: Target, max_ms: u16 },
    /// On the bed with libfaketime: a controller's wall clock `offset_s` off.
    SkewClock { target: Target, offset_s: i32 },
    /// On the bed: a controller's disk (its data dir's file system) full; the space
    /// comes back when it heals.
    DiskFull { target: Target },
    /// On the bed: an agent cut from every controller.
    CutAgent { node: usize },
    /// On the bed with libfaketime: an agent's wall clock `offset_s` off; with
    /// `restart`, the agent is killed and started again halfway (it adopts its jobs
    /// with its clock off).
    SkewAgentClock {
        node: usize,
        offset_s: i32,
        restart: bool,
    },
    /// On the bed: an agent's spool (its file system) full; the space comes back when
    /// it heals.
    AgentDiskFull { node: usize },
    /// On the bed: an agent that reaches one follower only (a minority).
    AgentMinority { node: usize },
}

impl Fault {
    pub fn name(&self) -> &'static str {
        match self {
            Fault::KillController { .. } => "kill_controller",
            Fault::PauseLeader => "pause_leader",
            Fault::Isolate { .. } => "isolate_controller",
            Fault::KillAgent { .. } => "kill_agent",
            Fault::StopAgent { .. } => "stop_agent",
            Fault::Partition {
                target: Target::Leader,
            } => "partition_leader",
            Fault::Partition {
                target: Target::Follower,
            } => "partition_minority",
            Fault::Bridge => "partition_bridge",
            Fault::OneWay { .. } => "drop_one_way",
            Fault::Lossy { .. } => "lossy_links",
            Fault::Delay { .. } => "delay",
            Fault::SkewClock { .. } => "skew_clock",
            Fault::DiskFull { .. } => "disk_full",
            Fault::CutAgent { .. } => "cut_agent",
            Fault::SkewAgentClock { .. } => "skew_agent_clock",
            Fault::AgentDiskFull { .. } => "agent_disk_full",
            Fault::AgentMinority { .. } => "agent_minority",
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
    /// The agents' `fence_after_s`, in ms.
    pub fence_after_ms: u64,
    /// Controllers' clocks can be skewed (the bed runs them under libfaketime).
    pub skew: bool,
    /// Controllers' disks can be filled (the bed gives each a file system).
    pub disk: bool,
    /// Agents' spools can be filled (the bed gives each a file system; on unless
    /// `--no-agent-disk-full`).
    pub agent_disk: bool,
    /// Packets can be delayed (the bed has iptables for its NFQUEUE rules).
    pub delay: bool,
}

/// The shortest delay a `delay` fault gives a packet, in ms.
pub const DELAY_MIN_MS: u64 = 20;

/// Steps drawn one after another (`draw` gives a fault and how long it lasts, then a
/// pause from `gaps` follows) until their planned time reaches `duration_ms`.
fn fill(
    rng: &mut StdRng,
    duration_ms: u64,
    gaps: std::ops::Range<u64>,
    mut draw: impl FnMut(&mut StdRng) -> (Fault, u64),
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut t = 0;
    while t < duration_ms {
        let (fault, hold_ms) = draw(rng);
        let gap_ms = rng.gen_range(gaps.clone());
        t += hold_ms + gap_ms;
        steps.push(Step {
            fault,
            hold_ms,
            gap_ms,
        });
    }
    steps
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
    let controllers = fill(&mut rng, shape.duration_ms, 200..700, |rng| {
        match rng.gen_range(0..10) {
            0..=3 => (
                Fault::KillController {
                    target: target(&mut *rng),
                },
                rng.gen_range(200..1_000),
            ),
            4..=6 => (Fault::PauseLeader, rng.gen_range(800..2_500)),
            _ => (
                Fault::Isolate {
                    target: target(&mut *rng),
                },
                rng.gen_range(800..2_500),
            ),
        }
    });
    let agents = match shape.agents {
        0 => Vec::new(),
        n => fill(&mut rng, shape.duration_ms, 300..1_000, |rng| {
            let node = rng.gen_range(0..n);
            if rng.gen_bool(0.3) {
                (
                    Fault::StopAgent { node },
                    shape.down_after_ms + rng.gen_range(1_000..2_500),
                )
            } else {
                (Fault::KillAgent { node }, rng.gen_range(200..1_200))
            }
        }),
    };
    Schedule {
        controllers,
        agents,
    }
}

/// Draws the schedule of a run on the bed for `seed`: the controllers' track adds
/// partitions (a minority controller, the leader alone, a bridge) and one-way drops to
/// kills and pauses; the agents' track adds an agent cut from every controller (held
/// past `fence_after`, a third of them past `down_after` too, so that its jobs are
/// fenced and then requeued) and an agent that reaches a minority only.
pub fn schedule_hosts(seed: u64, shape: Shape) -> Schedule {
    let mut rng = StdRng::seed_from_u64(seed);
    let target = |rng: &mut StdRng| {
        if rng.gen_bool(0.5) {
            Target::Leader
        } else {
            Target::Follower
        }
    };
    let offset = |rng: &mut StdRng| match rng.gen_bool(0.5) {
        true => rng.gen_range(60..300),
        false => -rng.gen_range(60..300),
    };
    let controllers = fill(&mut rng, shape.duration_ms, 200..700, |rng| {
        match rng.gen_range(0..22) {
            0..=4 => (
                Fault::KillController {
                    target: target(&mut *rng),
                },
                rng.gen_range(200..1_000),
            ),
            5..=7 => (Fault::PauseLeader, rng.gen_range(800..2_500)),
            8..=10 => (
                Fault::Partition {
                    target: Target::Follower,
                },
                rng.gen_range(1_000..4_000),
            ),
            11..=13 => (
                Fault::Partition {
                    target: Target::Leader,
                },
                rng.gen_range(1_000..4_000),
            ),
            14..=15 => (Fault::Bridge, rng.gen_range(1_000..4_000)),
            19 if shape.disk => (
                Fault::DiskFull {
                    target: target(&mut *rng),
                },
                rng.gen_range(2_000..5_000),
            ),
            18 if shape.skew => (
                Fault::SkewClock {
                    target: target(&mut *rng),
                    offset_s: offset(&mut *rng),
                },
                rng.gen_range(3_000..8_000),
            ),
            20..=21 if shape.delay => (
                Fault::Delay {
                    target: target(&mut *rng),
                    max_ms: rng.gen_range(100..=300),
                },
                rng.gen_range(2_000..5_000),
            ),
            16 => (
                Fault::Lossy {
                    target: target(&mut *rng),
                    percent: rng.gen_range(10..40),
                },
                rng.gen_range(2_000..5_000),
            ),
            _ => (
                Fault::OneWay {
                    target: target(&mut *rng),
                },
                rng.gen_range(1_000..3_000),
            ),
        }
    });
    let past_fence = shape.fence_after_ms + 1_000..shape.fence_after_ms + 6_000;
    let agents = match shape.agents {
        0 => Vec::new(),
        n => fill(&mut rng, shape.duration_ms, 300..1_000, |rng| {
            let node = rng.gen_range(0..n);
            match rng.gen_range(0..12) {
                0..=2 => (Fault::KillAgent { node }, rng.gen_range(200..1_200)),
                10 if shape.skew => (
                    Fault::SkewAgentClock {
                        node,
                        offset_s: offset(&mut *rng),
                        restart: rng.gen_bool(0.5),
                    },
                    rng.gen_range(4_000..10_000),
                ),
                11 if shape.agent_disk => {
                    (Fault::AgentDiskFull { node }, rng.gen_range(3_000..8_000))
                }
                // A frozen agent: half of them past down_after, when the controllers
                // requeue its jobs, which its shims have stopped once its lease ran
                // out (fence_after after its last contact).
                3 => (
                    Fault::StopAgent { node },
                    match rng.gen_bool(0.5) {
                        true => rng.gen_range(2_000..shape.down_after_ms - 3_000),
                        false => shape.down_after_ms + rng.gen_range(1_000..3_000),
                    },
                ),
                4..=5 => (Fault::CutAgent { node }, rng.gen_range(past_fence.clone())),
                6 => (
                    Fault::CutAgent { node },
                    shape.down_after_ms + rng.gen_range(1_000..3_000),
                ),
                _ => (
                    Fault::AgentMinority { node },
                    rng.gen_range(past_fence.clone()),
                ),
            }
        }),
    };
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
            fence_after_ms: 10_000,
            skew: false,
            disk: false,
            agent_disk: false,
            delay: false,
        }
    }

    #[test]
    fn a_minute_on_the_bed_holds_every_network_fault() {
        let shape = Shape {
            duration_ms: 60_000,
            agents: 4,
            down_after_ms: 15_000,
            fence_after_ms: 2_000,
            skew: true,
            disk: true,
            agent_disk: true,
            delay: true,
        };
        assert_eq!(schedule_hosts(3, shape), schedule_hosts(3, shape));
        let mut seen = std::collections::BTreeSet::new();
        let mut frozen_past_down = 0;
        for seed in 0..50 {
            let s = schedule_hosts(seed, shape);
            assert!(s.controllers.len() >= 15, "seed {seed}: {s:?}");
            for st in s.controllers.iter().chain(&s.agents) {
                seen.insert(st.fault.name());
                if matches!(st.fault, Fault::StopAgent { .. }) && st.hold_ms > shape.down_after_ms {
                    frozen_past_down += 1;
                }
                if let Fault::SkewClock { offset_s, .. } | Fault::SkewAgentClock { offset_s, .. } =
                    st.fault
                {
                    assert!((60..300).contains(&offset_s.abs()), "{offset_s}");
                }
                if let Fault::Delay { max_ms, .. } = st.fault {
                    assert!((100..=300).contains(&max_ms), "{max_ms}");
                }
                if let Fault::CutAgent { node } | Fault::AgentMinority { node } = st.fault {
                    assert!(node < 4);
                    assert!(st.hold_ms > 2_000, "a cut outlasts fence_after");
                }
            }
        }
        for name in [
            "partition_leader",
            "partition_minority",
            "partition_bridge",
            "drop_one_way",
            "lossy_links",
            "delay",
            "skew_clock",
            "skew_agent_clock",
            "disk_full",
            "agent_disk_full",
            "cut_agent",
            "agent_minority",
            "kill_controller",
            "kill_agent",
        ] {
            assert!(seen.contains(name), "no {name} in 50 seeds");
        }
        assert!(
            frozen_past_down > 0,
            "no agent frozen past down_after in 50 seeds"
        );
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
