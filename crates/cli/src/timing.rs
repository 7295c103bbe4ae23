//! Where one CLI command's time goes, when `TRANCHE_TIMING` is set: each phase's end
//! goes to stderr as `timing <phase> <ms>`.
//!
//! The milliseconds count from the process's start when `TRANCHE_TIMING` holds the
//! wall-clock time (nanoseconds since the Unix epoch) at which the parent started it,
//! as `tranche bench throughput --timing` sets it (the first phase, `main`, is then the
//! process's start: fork, exec, loading, and Rust's start-up); else (for instance
//! `TRANCHE_TIMING=1`) from the start of `main`. The format is
//! [`tranche_bench::timing`]'s, which reads the marks back.

use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tranche_bench::timing::{ENV, PREFIX};

/// The origin of the marks, when timing is on.
static ORIGIN: OnceLock<Option<Instant>> = OnceLock::new();

/// A spawn time longer ago than this is taken for no spawn time.
const MAX_START: Duration = Duration::from_secs(10);

fn origin() -> Option<Instant> {
    *ORIGIN.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let now = Instant::now();
        let spawned = v.trim().parse::<u128>().ok().and_then(|ns| {
            let wall = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
            let since = wall.checked_sub(Duration::from_nanos(ns.try_into().ok()?))?;
            // Anything else (`1`, a stamp from another run) is not a spawn time.
            (since < MAX_START)
                .then(|| now.checked_sub(since))
                .flatten()
        });
        Some(spawned.unwrap_or(now))
    })
}

/// Whether timing is on.
pub fn on() -> bool {
    origin().is_some()
}

/// Marks the end of `phase` (with timing off, does nothing).
pub fn mark(phase: &str) {
    if let Some(o) = origin() {
        eprintln!("{PREFIX}{phase} {:.3}", o.elapsed().as_secs_f64() * 1000.0);
    }
}
