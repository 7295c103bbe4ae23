//! A daemon's log: text (coloured only on a terminal) or JSON lines, filtered by
//! `$TRANCHE_LOG` or the daemon's default filter.

/// Installs the process's log subscriber: JSON lines where `json`, else text, with the
/// filter `$TRANCHE_LOG` or else `default_filter` (e.g. `info,raft=warn`).
pub fn init(json: bool, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TRANCHE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        // Colours only on a terminal: a log file or journal gets plain text.
        use std::io::IsTerminal;
        tracing_subscriber::fmt()
            .with_ansi(std::io::stdout().is_terminal())
            .with_env_filter(filter)
            .init();
    }
}
