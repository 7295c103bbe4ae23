//! Text that both sides of the protocol write the same way: the controller's views and
//! the CLI say a duration or why a job was stopped in the same words. Pure functions of
//! model values; no I/O.

use tranche_model::{Millis, StopKind};

/// A span of `ms` milliseconds in its two largest units, as people write it: `45s`,
/// `3m 12s`, `2h 5m`, `1d 3h` (a zero second, minute or hour is left out), in whole
/// seconds rounded down, as clocks count. The controller's views and the CLI write
/// durations with this.
pub fn duration_text(ms: Millis) -> String {
    let s = ms / 1000;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    let two = |a: u64, au: &str, b: u64, bu: &str| match b {
        0 => format!("{a}{au}"),
        _ => format!("{a}{au} {b}{bu}"),
    };
    match (d, h, m) {
        (0, 0, 0) => format!("{sec}s"),
        (0, 0, _) => two(m, "m", sec, "s"),
        (0, _, _) => two(h, "h", m, "m"),
        _ => two(d, "d", h, "h"),
    }
}

/// Why a job is being stopped, in words: `reclaimed for job 12`, `preempted by job 12
/// in its share`, `cancelled`, `stopped by a drain`. The CLI writes attempt ends
/// with this too.
pub fn stop_kind_text(kind: &StopKind) -> String {
    match kind {
        StopKind::Reclaim { for_job } => format!("reclaimed for job {for_job}"),
        StopKind::InShare { for_job } => format!("preempted by job {for_job} in its share"),
        StopKind::Cancel => "cancelled".into(),
        StopKind::Drain => "stopped by a drain".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::{duration_text, stop_kind_text};
    use tranche_model::{JobId, StopKind};

    #[test]
    fn durations_in_their_two_largest_units() {
        assert_eq!(duration_text(0), "0s");
        assert_eq!(duration_text(999), "0s");
        assert_eq!(duration_text(3_999), "3s");
        assert_eq!(duration_text(45_000), "45s");
        assert_eq!(duration_text(192_000), "3m 12s");
        assert_eq!(duration_text(120_000), "2m");
        assert_eq!(duration_text(7_500_000), "2h 5m");
        assert_eq!(duration_text(3_600_000), "1h");
        assert_eq!(duration_text(97_200_000), "1d 3h");
    }

    #[test]
    fn stop_kinds_in_words() {
        assert_eq!(
            stop_kind_text(&StopKind::Reclaim { for_job: JobId(12) }),
            "reclaimed for job 12"
        );
        assert_eq!(
            stop_kind_text(&StopKind::InShare { for_job: JobId(3) }),
            "preempted by job 3 in its share"
        );
        assert_eq!(stop_kind_text(&StopKind::Drain), "stopped by a drain");
    }
}
