//! How the CLI writes values for people: state codes, times, durations, attempt ends,
//! command lines, table cells. Never Rust's `Debug` form.

use tranche_model::{Attempt, AttemptEnd, Job, JobStatus, Millis};
use tranche_proto::text::stop_kind_text;

pub use tranche_proto::text::duration_text as duration;

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

/// This machine's wall clock, in ms since the epoch.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// `ms` since the epoch in the local time zone (`$TZ`, else the system's):
/// `2026-12-01 14:03:07`.
pub fn local_time(ms: Millis) -> String {
    let t = (ms / 1000) as libc::time_t;
    // SAFETY: a zeroed `tm` is a valid value of the plain C struct; `localtime_r` only
    // reads `t` and writes `tm`, both alive for the call (it is the thread-safe form).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("{} s after 1970-01-01 00:00:00 UTC", ms / 1000);
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// How an attempt of `job` ended: `exited 0`, `killed by a signal`, `reclaimed for job
/// 7, exited 0`, `lost: <why>`; `None` while it runs.
pub fn attempt_end(job: &Job, a: &Attempt) -> Option<String> {
    let how = |code: Option<i32>| match code {
        // A process that no signal stopped has an exit code; the state machine records
        // -1 for one that a signal killed.
        Some(c) if c >= 0 => format!("exited {c}"),
        _ => "killed by a signal".to_string(),
    };
    Some(match a.end.as_ref()? {
        AttemptEnd::Exited { code } => how(Some(*code)),
        AttemptEnd::Stopped { kind, code } => format!("{}, {}", stop_kind_text(kind), how(*code)),
        AttemptEnd::Lost => {
            // The requeue's transition, at the attempt's end, says why it was lost.
            let why = job
                .transitions
                .iter()
                .find(|t| Some(t.at) == a.ended_at && t.reason.contains("attempt lost"))
                .and_then(|t| t.reason.split("; attempt lost").next())
                .unwrap_or("its node went down");
            format!("lost: {why}")
        }
    })
}

/// A command and its arguments as a shell would take them: words with spaces or
/// quotes in single quotes.
pub fn command_line(words: &[String]) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    words
        .iter()
        .map(|w| {
            if !w.is_empty() && w.chars().all(plain) {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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

    #[test]
    fn local_times_are_dates_and_clock_times() {
        let t = local_time(1_796_131_900_041);
        let shape: String = t
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        assert_eq!(shape, "9999-99-99 99:99:99", "{t}");
        assert!(t.starts_with("2026-12-"), "{t}");
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(command_line(&words(&["sleep", "3"])), "sleep 3");
        assert_eq!(
            command_line(&words(&["sh", "-c", "trap 'exit 0' TERM; sleep 1"])),
            r"sh -c 'trap '\''exit 0'\'' TERM; sleep 1'"
        );
        assert_eq!(command_line(&words(&["echo", ""])), "echo ''");
    }
}
