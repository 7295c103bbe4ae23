//! How the CLI writes values for people: state codes, durations, table cells.

use tranche_model::JobStatus;

/// Slurm-like two-letter state codes.
pub fn state_code(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Submitted => "SU",
        JobStatus::Pending => "PD",
        JobStatus::Runnable => "PD",
        JobStatus::Scheduled => "CF",
        JobStatus::Starting => "CF",
        JobStatus::Running => "R",
        JobStatus::Succeeded => "CD",
        JobStatus::Failed => "F",
        JobStatus::Cancelled => "CA",
    }
}

/// A duration of `ms` milliseconds as squeue's TIME column writes it: `M:SS`,
/// `H:MM:SS` or `D-HH:MM:SS`.
pub fn clock_duration(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h) {
        (0, 0) => format!("{m}:{sec:02}"),
        (0, _) => format!("{h}:{m:02}:{sec:02}"),
        _ => format!("{d}-{h:02}:{m:02}:{sec:02}"),
    }
}

/// `s` cut to `width` characters, its last one `…` when cut, so that rows fit a
/// terminal (`tranche explain` has the whole text).
pub fn fit(s: String, width: usize) -> String {
    if s.chars().count() > width {
        s.chars().take(width.saturating_sub(1)).collect::<String>() + "…"
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_durations_grow_fields_as_needed() {
        assert_eq!(clock_duration(0), "0:00");
        assert_eq!(clock_duration(192_999), "3:12");
        assert_eq!(clock_duration(3_723_000), "1:02:03");
        assert_eq!(clock_duration(90_061_000), "1-01:01:01");
    }

    #[test]
    fn fit_cuts_with_an_ellipsis() {
        assert_eq!(fit("abc".into(), 3), "abc");
        assert_eq!(fit("abcd".into(), 3), "ab…");
        assert_eq!(fit("ééééé".into(), 4), "ééé…");
    }
}
