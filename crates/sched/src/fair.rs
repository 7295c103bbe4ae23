//! Fair share (design §3, *Fair share*): each share's usage history, decayed, from the
//! accounting ledger, which every controller holds alike.
//!
//! The ledger keeps GPU time per share by hour of entry time. At time `now`, in hour
//! `H`, hour `h`'s GPU-hours (used and borrowed) count `2^-((H - h) · 3600 / half-life)`:
//! an hour's usage weighs alike until the hour ends, then decays in whole hours, so a
//! share's standing changes only with the ledger and at each hour's turn. Hours older
//! than [`HORIZON_HALF_LIVES`] half-lives weigh less than a millionth and are left out.
//!
//! [`Usage::past`] sums the hours before `H` (newest first), which no later entry
//! changes once an entry of hour `H` has been booked; [`crate::Scheduler`] keeps that
//! sum for the hour, so a pass adds only the current hour's bucket.

use std::collections::BTreeMap;

use tranche_model::{Millis, QuotaShare, ShareName};
use tranche_state::ledger::HOUR_MS;
use tranche_state::State;

/// How many half-lives back the history reaches.
pub const HORIZON_HALF_LIVES: u64 = 20;

/// Decayed GPU-hours per share for one half-life.
pub type ShareUsage = BTreeMap<ShareName, f64>;

/// A share's standing under FAIR_SHARE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub half_life_s: u64,
    /// Decayed GPU-hours.
    pub used: f64,
    /// Those per weight: what the borrow and reclaim orders compare.
    pub per_weight: f64,
}

/// The decayed usage of the hours before the current one, for one half-life.
#[derive(Debug, Clone, PartialEq)]
pub struct Past {
    pub half_life_s: u64,
    /// The current hour `H` the sum was taken at.
    pub hour: u64,
    pub usage: ShareUsage,
}

/// Each FAIR_SHARE half-life's decayed usage per share at a time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub by_half_life: Vec<(u64, ShareUsage)>,
}

impl Usage {
    /// The usage of every FAIR_SHARE policy's half-life at `now`, the hours before the
    /// current one taken from `past` where it holds them.
    pub fn at(st: &State, now: Millis, past: &mut Vec<Past>) -> Usage {
        let mut lives: Vec<u64> = st
            .policies
            .values()
            .filter_map(|p| p.half_life_s())
            .collect();
        lives.sort_unstable();
        lives.dedup();
        let hour = now / HOUR_MS;
        // Hours before `hour` are final once the ledger has counted into `hour`.
        let settled = st.ledger.counted_to >= hour * HOUR_MS;
        past.retain(|p| settled && p.hour == hour && lives.contains(&p.half_life_s));
        let mut by_half_life = Vec::with_capacity(lives.len());
        for h in lives {
            let before = match past.iter().find(|p| p.half_life_s == h) {
                Some(p) => p.usage.clone(),
                None => {
                    let usage = Self::past(st, h, hour);
                    if settled {
                        past.push(Past {
                            half_life_s: h,
                            hour,
                            usage: usage.clone(),
                        });
                    }
                    usage
                }
            };
            let mut usage = before;
            if let Some(b) = st.ledger.hours.get(&hour) {
                for ((share, _), t) in &b.shares {
                    *usage.entry(share.clone()).or_default() +=
                        (t.used + t.borrowed) as f64 / HOUR_MS as f64;
                }
            }
            by_half_life.push((h, usage));
        }
        Usage { by_half_life }
    }

    /// The decayed GPU-hours of the hours before `hour`, newest first.
    pub fn past(st: &State, half_life_s: u64, hour: u64) -> ShareUsage {
        let mut usage = ShareUsage::new();
        let horizon = (HORIZON_HALF_LIVES * half_life_s).div_ceil(3600);
        let from = hour.saturating_sub(horizon);
        for (&h, b) in st.ledger.hours.range(from..hour).rev() {
            let factor = 0.5f64.powf((hour - h) as f64 * 3600.0 / half_life_s as f64);
            for ((share, _), t) in &b.shares {
                *usage.entry(share.clone()).or_default() +=
                    factor * (t.used + t.borrowed) as f64 / HOUR_MS as f64;
            }
        }
        usage
    }

    /// Under a FAIR_SHARE policy (the one of `share`'s queue): the share's standing;
    /// `None` under FIFO.
    pub fn standing(&self, st: &State, share: &QuotaShare) -> Option<Standing> {
        let half_life_s = st
            .queues
            .get(&share.queue)
            .and_then(|q| st.policies.get(&q.policy))
            .and_then(|p| p.half_life_s())?;
        let used = self.of(half_life_s, &share.name);
        Some(Standing {
            half_life_s,
            used,
            per_weight: used / share.fair_weight() as f64,
        })
    }

    /// The share's decayed GPU-hours under the half-life `h` (0 when it used none).
    pub fn of(&self, h: u64, share: &ShareName) -> f64 {
        self.by_half_life
            .iter()
            .find(|(x, _)| *x == h)
            .and_then(|(_, u)| u.get(share))
            .copied()
            .unwrap_or(0.0)
    }
}
