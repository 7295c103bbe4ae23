//! Signal names and numbers, as jobs give their checkpoint signal.

use super::ExecError;

/// The signal number for a name (`"SIGTERM"`, `"TERM"`, `"sigusr1"`, `"SIGRTMIN+2"`)
/// or a number (`"15"`).
pub fn signal_number(name: &str) -> Result<i32, ExecError> {
    let bad = |reason: &str| ExecError::BadSignal {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let s = name.trim();
    if s.is_empty() {
        return Err(bad("empty"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let n: i32 = s.parse().map_err(|_| bad("not a signal number"))?;
        if !(1..=64).contains(&n) {
            return Err(bad("out of range"));
        }
        return Ok(n);
    }
    let upper = s.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let rt = |base: i32, rest: &str, sign: i32| -> Result<i32, ExecError> {
        let off: i32 = if rest.is_empty() {
            0
        } else {
            rest.parse().map_err(|_| bad("bad real-time offset"))?
        };
        let n = base + sign * off;
        if (nix::libc::SIGRTMIN()..=nix::libc::SIGRTMAX()).contains(&n) {
            Ok(n)
        } else {
            Err(bad("real-time signal out of range"))
        }
    };
    if let Some(rest) = bare.strip_prefix("RTMIN") {
        return match rest.strip_prefix('+') {
            Some(off) => rt(nix::libc::SIGRTMIN(), off, 1),
            None if rest.is_empty() => rt(nix::libc::SIGRTMIN(), "", 1),
            None => Err(bad("unknown signal name")),
        };
    }
    if let Some(rest) = bare.strip_prefix("RTMAX") {
        return match rest.strip_prefix('-') {
            Some(off) => rt(nix::libc::SIGRTMAX(), off, -1),
            None if rest.is_empty() => rt(nix::libc::SIGRTMAX(), "", 1),
            None => Err(bad("unknown signal name")),
        };
    }
    use nix::libc as l;
    let n = match bare {
        "HUP" => l::SIGHUP,
        "INT" => l::SIGINT,
        "QUIT" => l::SIGQUIT,
        "ILL" => l::SIGILL,
        "TRAP" => l::SIGTRAP,
        "ABRT" | "IOT" => l::SIGABRT,
        "BUS" => l::SIGBUS,
        "FPE" => l::SIGFPE,
        "KILL" => l::SIGKILL,
        "USR1" => l::SIGUSR1,
        "SEGV" => l::SIGSEGV,
        "USR2" => l::SIGUSR2,
        "PIPE" => l::SIGPIPE,
        "ALRM" => l::SIGALRM,
        "TERM" => l::SIGTERM,
        "STKFLT" => l::SIGSTKFLT,
        "CHLD" | "CLD" => l::SIGCHLD,
        "CONT" => l::SIGCONT,
        "STOP" => l::SIGSTOP,
        "TSTP" => l::SIGTSTP,
        "TTIN" => l::SIGTTIN,
        "TTOU" => l::SIGTTOU,
        "URG" => l::SIGURG,
        "XCPU" => l::SIGXCPU,
        "XFSZ" => l::SIGXFSZ,
        "VTALRM" => l::SIGVTALRM,
        "PROF" => l::SIGPROF,
        "WINCH" => l::SIGWINCH,
        "IO" | "POLL" => l::SIGIO,
        "PWR" => l::SIGPWR,
        "SYS" => l::SIGSYS,
        _ => return Err(bad("unknown signal name")),
    };
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_and_numbers() {
        assert_eq!(signal_number("SIGTERM").unwrap(), 15);
        assert_eq!(signal_number("TERM").unwrap(), 15);
        assert_eq!(signal_number("sigusr1").unwrap(), nix::libc::SIGUSR1);
        assert_eq!(signal_number("15").unwrap(), 15);
        assert_eq!(signal_number("KILL").unwrap(), 9);
        assert_eq!(
            signal_number("SIGRTMIN+2").unwrap(),
            nix::libc::SIGRTMIN() + 2
        );
        for bad in ["", "0", "65", "SIGFOO", "RTMIN+99", "-1"] {
            let e = signal_number(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }
}
