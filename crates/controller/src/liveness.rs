//! Agent liveness: the leader's soft state and its judgement.
//!
//! Heartbeats are never log entries. The leader notes each agent's latest heartbeat in
//! memory ([`Beats`]); [`judge`] turns those times into the few commands that change a
//! node's replicated liveness (UNREACHABLE, DOWN, back UP), and only those are
//! replicated. A controller that becomes leader starts every timer afresh at the moment
//! it became leader, so no node is judged before its agent has had `unreachable_after`
//! to reach the new leader.
//!
//! The timers run on the controller's monotonic clock, not its wall clock: a wall clock
//! set forward (by NTP, or an operator) must not make an agent seem silent for longer
//! than it was, or the leader would mark its node DOWN and requeue its jobs before the
//! agent's own fence (`fence_after_s`) had stopped them.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use tranche_model::{Millis, NodeName};
use tranche_state::{Command, State};

/// The leader's record of heartbeats (milliseconds of its monotonic clock, see
/// [`Beats::now_ms`]), shared by the service layer, which notes them, and the Raft node
/// task, which judges them.
pub struct Beats {
    leading: AtomicBool,
    /// Since when this controller leads, and each node's latest heartbeat since then.
    inner: Mutex<(Millis, HashMap<NodeName, Millis>)>,
    origin: Instant,
}

impl Default for Beats {
    fn default() -> Self {
        Beats {
            leading: AtomicBool::new(false),
            inner: Mutex::new((0, HashMap::new())),
            origin: Instant::now(),
        }
    }
}

impl Beats {
    /// Milliseconds of this controller's monotonic clock (since its `Beats` was made),
    /// which no change of the wall clock moves: the time heartbeats are noted and judged
    /// at.
    pub fn now_ms(&self) -> Millis {
        self.origin.elapsed().as_millis() as Millis
    }

    /// This controller became leader now: every timer starts afresh.
    pub fn lead(&self) {
        self.lead_at(self.now_ms());
    }

    /// Notes a heartbeat now; false when this controller does not lead.
    pub fn note(&self, node: &NodeName) -> bool {
        self.note_at(node, self.now_ms())
    }

    /// [`Beats::lead`] at `now` (of [`Beats::now_ms`]).
    pub fn lead_at(&self, now: Millis) {
        let mut g = self.inner.lock().unwrap();
        *g = (now, HashMap::new());
        self.leading.store(true, Ordering::Release);
    }

    /// This controller no longer leads: what it noted is forgotten.
    pub fn follow(&self) {
        self.leading.store(false, Ordering::Release);
        self.inner.lock().unwrap().1.clear();
    }

    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::Acquire)
    }

    /// [`Beats::note`] at `now` (of [`Beats::now_ms`]).
    pub fn note_at(&self, node: &NodeName, now: Millis) -> bool {
        if !self.leading() {
            return false;
        }
        let mut g = self.inner.lock().unwrap();
        match g.1.get_mut(node) {
            Some(t) => *t = (*t).max(now),
            None => {
                g.1.insert(node.clone(), now);
            }
        }
        true
    }

    /// Since when this controller leads and a copy of the heartbeats noted since.
    pub fn view(&self) -> (Millis, HashMap<NodeName, Millis>) {
        self.inner.lock().unwrap().clone()
    }
}

/// How long silence may last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub unreachable_ms: u64,
    pub down_ms: u64,
}

/// Why the leader declares a node DOWN. The leader's judgement is the only source of
/// DOWN, so heartbeats coming back always bring a DOWN node UP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DownReason {
    /// No heartbeat for this long (whole seconds).
    NoHeartbeat { silent_s: u64 },
}

impl fmt::Display for DownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownReason::NoHeartbeat { silent_s } => write!(f, "no heartbeat for {silent_s} s"),
        }
    }
}

/// What the judgement changes about one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Unreachable,
    Down(DownReason),
    Up,
}

impl Verdict {
    pub fn command(&self, node: &NodeName) -> Command {
        let node = node.clone();
        match self {
            Verdict::Unreachable => Command::NodeUnreachable { node },
            Verdict::Down(why) => Command::NodeDown {
                node,
                reason: why.to_string(),
            },
            Verdict::Up => Command::NodeUp { node },
        }
    }
}

/// Judges every node of `state` at `now` from the heartbeats noted since `since` (when
/// this controller became leader); a node with no heartbeat since then is timed from
/// `since`. Returns only changes, in node order.
pub fn judge(
    state: &State,
    since: Millis,
    beats: &HashMap<NodeName, Millis>,
    now: Millis,
    t: Thresholds,
) -> Vec<(NodeName, Verdict)> {
    let mut out = Vec::new();
    for (name, n) in &state.nodes {
        let beat = beats.get(name).copied();
        let silent = now.saturating_sub(beat.unwrap_or(since).max(since));
        let recent = beat.is_some() && silent <= t.unreachable_ms;
        let verdict = if recent && (n.down.is_some() || n.unreachable) {
            // Back: a heartbeat since this leader took over, and recent.
            Some(Verdict::Up)
        } else if n.down.is_none() && silent > t.down_ms {
            Some(Verdict::Down(DownReason::NoHeartbeat {
                silent_s: silent / 1000,
            }))
        } else if n.down.is_none() && !n.unreachable && silent > t.unreachable_ms {
            Some(Verdict::Unreachable)
        } else {
            None
        };
        if let Some(v) = verdict {
            out.push((name.clone(), v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        unreachable_ms: 10_000,
        down_ms: 120_000,
    };

    fn state(nodes: &[&str]) -> State {
        let mut st = State::new();
        for n in nodes {
            st.apply(
                &Command::RegisterNode(tranche_model::NodeInventory {
                    name: (*n).into(),
                    address: "127.0.0.1".into(),
                    labels: Default::default(),
                    gpus: vec![],
                    cpus: 1,
                    memory_mb: 1,
                }),
                0,
            )
            .unwrap();
        }
        st
    }

    fn beats(b: &[(&str, Millis)]) -> HashMap<NodeName, Millis> {
        b.iter().map(|(n, t)| ((*n).into(), *t)).collect()
    }

    fn apply(st: &mut State, v: &[(NodeName, Verdict)], now: Millis) {
        for (n, v) in v {
            st.apply(&v.command(n), now).unwrap();
        }
    }

    #[test]
    fn silence_makes_a_node_unreachable_then_down_and_heartbeats_bring_it_back() {
        let mut st = state(&["a", "b"]);
        let since = 1_000_000;
        // A new leader judges nobody before `unreachable_after` has passed since it
        // took over, heartbeat or not.
        assert_eq!(judge(&st, since, &beats(&[]), since + 10_000, T), vec![]);
        // `a` beats, `b` is silent: only `b` turns UNREACHABLE.
        let now = since + 10_001;
        let v = judge(&st, since, &beats(&[("a", now - 500)]), now, T);
        assert_eq!(v, vec![("b".into(), Verdict::Unreachable)]);
        apply(&mut st, &v, now);
        assert!(st.nodes[&NodeName::from("b")].unreachable);
        // Nothing new to say while it stays silent short of down_after.
        let later = now + 100_000;
        assert_eq!(judge(&st, since, &beats(&[("a", later)]), later, T), vec![]);
        // Past down_after: DOWN, with a reason in whole seconds.
        let now = since + 120_001;
        let v = judge(&st, since, &beats(&[("a", now)]), now, T);
        assert_eq!(
            v,
            vec![(
                "b".into(),
                Verdict::Down(DownReason::NoHeartbeat { silent_s: 120 })
            )]
        );
        apply(&mut st, &v, now);
        assert_eq!(
            st.nodes[&NodeName::from("b")].down.as_deref(),
            Some("no heartbeat for 120 s")
        );
        // A DOWN node is not judged again while silent.
        let later = now + 1_000_000;
        assert_eq!(judge(&st, since, &beats(&[("a", later)]), later, T), vec![]);
        // Its agent comes back: UP, reachable.
        let now = later + 5_000;
        let v = judge(&st, since, &beats(&[("a", now), ("b", now - 1)]), now, T);
        assert_eq!(v, vec![("b".into(), Verdict::Up)]);
        apply(&mut st, &v, now);
        let b = &st.nodes[&NodeName::from("b")];
        assert!(b.down.is_none() && !b.unreachable);
    }

    #[test]
    fn an_unreachable_node_that_beats_again_is_up_and_a_stale_beat_is_not_enough() {
        let mut st = state(&["a"]);
        st.apply(&Command::NodeUnreachable { node: "a".into() }, 0)
            .unwrap();
        let since = 0;
        // A heartbeat older than unreachable_after does not bring it back.
        assert_eq!(
            judge(&st, since, &beats(&[("a", 1_000)]), 20_000, T),
            vec![]
        );
        assert_eq!(
            judge(&st, since, &beats(&[("a", 19_000)]), 20_000, T),
            vec![("a".into(), Verdict::Up)]
        );
        // Unreachable and silent past down_after: DOWN.
        assert_eq!(
            judge(&st, since, &beats(&[]), 130_000, T),
            vec![(
                "a".into(),
                Verdict::Down(DownReason::NoHeartbeat { silent_s: 130 })
            )]
        );
    }

    #[test]
    fn the_soft_state_is_kept_only_while_leading_and_starts_afresh() {
        let b = Beats::default();
        assert!(!b.note_at(&"a".into(), 5), "a follower notes nothing");
        b.lead_at(100);
        assert!(b.note_at(&"a".into(), 150));
        assert!(
            b.note_at(&"a".into(), 120),
            "an older beat keeps the newer time"
        );
        assert_eq!(b.view(), (100, beats(&[("a", 150)])));
        b.follow();
        b.lead_at(900);
        assert_eq!(b.view(), (900, HashMap::new()));
    }

    #[test]
    fn the_timers_run_on_the_monotonic_clock() {
        let b = Beats::default();
        let t0 = b.now_ms();
        b.lead();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(b.note(&"a".into()));
        let (since, beats) = b.view();
        assert!(since >= t0 && beats[&NodeName::from("a")] >= since + 20);
        assert!(b.now_ms() >= beats[&NodeName::from("a")]);
    }
}
