//! The marks `tranche` writes to stderr when `TRANCHE_TIMING` is set (`timing <phase>
//! <ms>`, one a phase of a command), read back by `tranche bench throughput --timing`.
//! The CLI writes them with these names; this module owns the format.

/// The environment variable that turns the marks on. Set to the wall-clock time
/// (nanoseconds since the Unix epoch) at which the parent started the process, the
/// marks count from the process's start; set to anything else, from its `main`.
pub const ENV: &str = "TRANCHE_TIMING";

/// The prefix of every mark on stderr.
pub const PREFIX: &str = "timing ";

/// A mark line's phase and milliseconds.
pub fn parse(line: &str) -> Option<(&str, f64)> {
    let (phase, ms) = line.strip_prefix(PREFIX)?.split_once(' ')?;
    Some((phase, ms.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn marks_parse_back() {
        assert_eq!(
            super::parse("timing connect 3.250"),
            Some(("connect", 3.25))
        );
        assert_eq!(super::parse("timing connect"), None);
        assert_eq!(super::parse("Submitted job 4"), None);
    }
}
