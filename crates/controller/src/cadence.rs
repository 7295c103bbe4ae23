//! When the leader starts its next scheduling pass: a pure function of the previous
//! pass, the clock and what asked for a pass, so that the busy cap can be checked
//! without a running cluster.
//!
//! A pass is asked for by commits that change demand or capacity (`dirty`), by the
//! plan's `next_wakeup`, and by `interval_ms` passing since the previous pass started.
//! Whatever asks, a pass never starts before [`Cadence::earliest_after`] the previous
//! one: `100 / max_busy_percent` times its duration after its start, and at least
//! `min_gap_ms` after its end. So from one pass's start to the next one's, the pass
//! takes at most `max_busy_percent` of the time, and over any run of consecutive passes
//! the planner is busy at most that share of the time from the first one's start to
//! the start of the pass after the last. At 10%, a 40 ms pass is followed by 360 ms
//! without one and a 165 ms pass by 1,485 ms, even with `interval_ms = 1000`.

use std::time::{Duration, Instant};

use crate::config::SchedConfig;

/// The previous pass: the planner thread took the request at `start` and was busy with
/// it for `took` of its CPU time (the commands queued behind the request included). The request for
/// the next pass is sent no sooner than [`Cadence::earliest_after`], so the next
/// pass's `start` is no sooner either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastPass {
    pub start: Instant,
    pub took: Duration,
}

/// The cadence settings of `[sched]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    pub interval: Duration,
    pub min_gap: Duration,
    /// 1 to 100.
    pub max_busy_percent: u32,
}

impl Cadence {
    pub fn new(cfg: &SchedConfig) -> Cadence {
        Cadence {
            interval: Duration::from_millis(cfg.interval_ms),
            min_gap: Duration::from_millis(cfg.min_gap_ms),
            max_busy_percent: u32::from(cfg.max_busy_percent).clamp(1, 100),
        }
    }

    /// The earliest start of the pass after `last`, whatever asks for it.
    pub fn earliest_after(&self, last: LastPass) -> Instant {
        let busy = u128::from(self.max_busy_percent.clamp(1, 100));
        // Rounded up, so that the pass is never more than `busy`% of the period.
        let capped = (last.took.as_nanos() * 100).div_ceil(busy);
        let capped = Duration::from_nanos(u64::try_from(capped).unwrap_or(u64::MAX));
        let period = capped.max(last.took + self.min_gap);
        last.start + period
    }

    /// When the next pass is to start (`now` or later): as soon as allowed when
    /// `dirty`; else at `wakeup` or `interval` after the previous start, whichever
    /// comes first; never before [`earliest_after`](Cadence::earliest_after). With no
    /// previous pass (a controller that never scheduled), now.
    pub fn next_start(
        &self,
        now: Instant,
        last: Option<LastPass>,
        dirty: bool,
        wakeup: Option<Instant>,
    ) -> Instant {
        let Some(last) = last else { return now };
        let mut wanted = last.start + self.interval;
        if let Some(w) = wakeup {
            wanted = wanted.min(w);
        }
        if dirty {
            wanted = wanted.min(now);
        }
        wanted.max(self.earliest_after(last)).max(now)
    }

    /// Whether a pass starts at `now`.
    pub fn due(
        &self,
        now: Instant,
        last: Option<LastPass>,
        dirty: bool,
        wakeup: Option<Instant>,
    ) -> bool {
        self.next_start(now, last, dirty, wakeup) <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn cadence(interval: u64, min_gap: u64, busy: u32) -> Cadence {
        Cadence {
            interval: ms(interval),
            min_gap: ms(min_gap),
            max_busy_percent: busy,
        }
    }

    #[test]
    fn the_documented_examples() {
        let t0 = Instant::now();
        let c = Cadence::new(&SchedConfig::default());
        assert_eq!(c, cadence(1000, 10, 10));
        // A 40 ms pass: the next starts 400 ms after its start, 360 ms after its end.
        let last = LastPass {
            start: t0,
            took: ms(40),
        };
        assert_eq!(c.earliest_after(last), t0 + ms(400));
        assert!(!c.due(t0 + ms(399), Some(last), true, None));
        assert!(c.due(t0 + ms(400), Some(last), true, None));
        // A 165 ms pass: neither interval_ms (1 s) nor a wake-up brings the next one
        // before 1,650 ms after its start (a pass every 1,165 ms would be 14%).
        let last = LastPass {
            start: t0,
            took: ms(165),
        };
        let wake = Some(t0 + ms(200));
        for at in [1000, 1165, 1649] {
            assert!(!c.due(t0 + ms(at), Some(last), true, wake), "{at} ms");
        }
        assert!(c.due(t0 + ms(1650), Some(last), false, None));
        assert_eq!(
            c.next_start(t0 + ms(500), Some(last), false, wake),
            t0 + ms(1650)
        );
        // Short passes: dirty runs after min_gap_ms, idle after interval_ms.
        let last = LastPass {
            start: t0,
            took: ms(1),
        };
        assert_eq!(
            c.next_start(t0 + ms(2), Some(last), true, None),
            t0 + ms(11)
        );
        assert_eq!(
            c.next_start(t0 + ms(2), Some(last), false, None),
            t0 + ms(1000)
        );
        // Never scheduled: now.
        assert!(c.due(t0, None, false, None));
    }

    /// Every combination of settings, pass length, clock, dirtiness and wake-up:
    /// the next start is exactly the latest of now, the cap and the earliest request.
    #[test]
    fn next_start_over_a_grid_of_inputs() {
        let t0 = Instant::now();
        let mut checked = 0u64;
        for busy in [1, 5, 10, 33, 50, 99, 100] {
            for min_gap in [0, 10, 500] {
                for interval in [1, 100, 1000, 5000] {
                    let c = cadence(interval, min_gap, busy);
                    for took in [0, 1, 5, 40, 165, 1000, 3000] {
                        let last = LastPass {
                            start: t0,
                            took: ms(took),
                        };
                        let earliest = c.earliest_after(last);
                        // The cap: busy% of the period from start to next start.
                        let period = earliest - t0;
                        assert!(
                            ms(took) * 100 <= period * busy,
                            "busy {busy}%: {took} ms pass, period {period:?}"
                        );
                        assert!(period >= ms(took + min_gap));
                        for now_ms in [0, 1, 10, 100, 400, 999, 1000, 1650, 5000, 20_000, 400_000] {
                            let now = t0 + ms(now_ms);
                            for dirty in [false, true] {
                                for wake in [None, Some(0), Some(50), Some(1500), Some(10_000)] {
                                    let wakeup = wake.map(|w| t0 + ms(w));
                                    let next = c.next_start(now, Some(last), dirty, wakeup);
                                    let mut asked = t0 + ms(interval);
                                    if let Some(w) = wakeup {
                                        asked = asked.min(w);
                                    }
                                    if dirty {
                                        asked = asked.min(now);
                                    }
                                    assert_eq!(next, asked.max(earliest).max(now));
                                    assert!(next >= now && next >= earliest);
                                    assert_eq!(c.due(now, Some(last), dirty, wakeup), next == now);
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 7 * 3 * 4 * 7 * 11 * 2 * 5);
    }

    /// The Raft loop asks on every tick and message. Simulated over five minutes of
    /// passes of a fixed length, with every reason to schedule (always dirty, a
    /// wake-up in the past) or none but `interval_ms`, the planner is busy at most
    /// `max_busy_percent` between any two pass starts, and the passes are as close
    /// together as the cap, `min_gap_ms` and the interval allow.
    #[test]
    fn simulated_leader_stays_under_the_cap() {
        let t0 = Instant::now();
        let tick = ms(5);
        for busy in [1, 10, 25, 100] {
            for took in [1, 40, 165, 900] {
                for interval in [10, 1000] {
                    for eager in [true, false] {
                        let c = cadence(interval, 10, busy);
                        let (dirty, wakeup) = if eager {
                            (true, Some(t0))
                        } else {
                            (false, None)
                        };
                        let mut now = t0;
                        let mut last: Option<LastPass> = None;
                        let mut starts = Vec::new();
                        while now < t0 + Duration::from_secs(300) {
                            if c.due(now, last, dirty, wakeup) {
                                starts.push(now);
                                // The pass runs on its own thread; the loop hears
                                // back after `took`, then goes on ticking.
                                last = Some(LastPass {
                                    start: now,
                                    took: ms(took),
                                });
                                now += ms(took);
                            }
                            now += tick;
                        }
                        let what = format!("{busy}% {took} ms interval {interval} eager {eager}");
                        assert!(starts.len() >= 2, "{what}: {starts:?}");
                        // The shortest period the rules allow, and what tick
                        // granularity adds to it.
                        let mut period = (took * 100 / busy as u64).max(took + 10);
                        if !eager {
                            period = period.max(interval);
                        }
                        for w in starts.windows(2) {
                            let p = w[1] - w[0];
                            assert!(ms(took) * 100 <= p * busy, "{what}: a period of {p:?}");
                            assert!(p >= ms(period) && p < ms(period) + tick, "{what}: {p:?}");
                        }
                        let span = *starts.last().unwrap() - starts[0];
                        let passes = (starts.len() - 1) as u32;
                        assert!(
                            ms(took) * passes * 100 <= span * busy,
                            "{what}: busy {passes} x {took} ms in {span:?}"
                        );
                    }
                }
            }
        }
    }
}
