//! The agent's lease on the jobs of its node (`<spool>/lease`).
//!
//! The agent renews the lease while it hears from a controller quorum: it runs out
//! `fence_after_s` after the agent's last contact. Each attempt's shim reads it every
//! second and, once it has run out, stops its job itself (the job's checkpoint signal,
//! then SIGKILL after [`FENCE_GRACE`]) and marks the attempt fenced. This is the fence
//! of DESIGN §4 below the agent: an agent that is frozen, stuck or dead cannot stop its
//! jobs, and the controllers requeue them elsewhere once the node is DOWN
//! (`down_after_s`, which must exceed `fence_after_s` plus the grace).
//!
//! The expiry is a `CLOCK_BOOTTIME` time in milliseconds, which no change of the wall
//! clock moves, with the kernel's boot id: a lease left from an earlier boot has run
//! out. The file is rewritten in place (no new file: a full spool does not stop its
//! renewal) and holds the expiry twice, so that a read that overlaps a write is seen
//! for what it is and ignored. Only the agent's account can write the spool, so a job
//! cannot renew its own lease.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The lease's file in the spool.
pub const FILE: &str = "lease";

/// How long a job stopped by the lease's end is given between its checkpoint signal
/// and SIGKILL: the agent's own fence gives the same ([`crate::daemon::ORPHAN_GRACE`]).
pub const FENCE_GRACE: Duration = crate::daemon::ORPHAN_GRACE;

/// The lease's file in `spool`.
pub fn path(spool: &Path) -> PathBuf {
    spool.join(FILE)
}

/// Milliseconds of `CLOCK_BOOTTIME`: since boot, suspend included, never set.
pub fn boottime_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0)
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), or `unknown` where it
/// cannot be read.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
        .unwrap_or_else(|| "unknown".into())
}

/// Sets the lease in `spool` to run out at `expires_ms` (of [`boottime_ms`]).
pub fn renew(spool: &Path, boot: &str, expires_ms: u64) -> io::Result<()> {
    let line = format!("{boot:<36} {expires_ms:020} {expires_ms:020}\n");
    let f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .mode(0o600)
        .open(path(spool))?;
    f.write_all_at(line.as_bytes(), 0)?;
    if f.metadata()?.len() != line.len() as u64 {
        f.set_len(line.len() as u64)?;
    }
    Ok(())
}

/// Where a lease stands, as a shim reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No lease file: the attempt was started without a lease (by the executors alone,
    /// not by an agent), and nothing fences it but the agent.
    Absent,
    /// The file could not be read whole (a read overlapping a write): look again.
    Unreadable,
    /// The lease holds for this many more milliseconds.
    Holds {
        /// Milliseconds until it runs out.
        left_ms: u64,
    },
    /// The lease ran out this many milliseconds ago (0 for a lease of an earlier boot).
    RunOut {
        /// Milliseconds since it ran out.
        ago_ms: u64,
    },
}

/// Reads the lease in `spool` at `now_ms` (of [`boottime_ms`]) in the boot `boot`.
pub fn standing(spool: &Path, boot: &str, now_ms: u64) -> Standing {
    let text = match std::fs::read_to_string(path(spool)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Standing::Absent,
        Err(_) => return Standing::Unreadable,
    };
    let mut words = text.split_whitespace();
    let (Some(b), Some(x), Some(y), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Standing::Unreadable;
    };
    let (Ok(x), Ok(y)) = (x.parse::<u64>(), y.parse::<u64>()) else {
        return Standing::Unreadable;
    };
    if x != y {
        return Standing::Unreadable;
    }
    if b != boot {
        return Standing::RunOut { ago_ms: 0 };
    }
    if now_ms < x {
        Standing::Holds {
            left_ms: x - now_ms,
        }
    } else {
        Standing::RunOut { ago_ms: now_ms - x }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_holds_until_it_runs_out_and_only_in_its_boot() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path();
        let boot = "0f0e0d0c-0b0a-0908-0706-050403020100";
        assert_eq!(standing(s, boot, 5), Standing::Absent);
        renew(s, boot, 10_000).unwrap();
        assert_eq!(standing(s, boot, 4_000), Standing::Holds { left_ms: 6_000 });
        assert_eq!(standing(s, boot, 10_250), Standing::RunOut { ago_ms: 250 });
        assert_eq!(
            standing(s, "another-boot", 4_000),
            Standing::RunOut { ago_ms: 0 }
        );
        // Renewed in place: a shorter line leaves nothing of a longer one behind.
        let long = "0f0e0d0c-0b0a-0908-0706-050403020100-and-more";
        renew(s, long, 20_000).unwrap();
        assert_eq!(
            standing(s, long, 19_000),
            Standing::Holds { left_ms: 1_000 }
        );
        renew(s, boot, 30_000).unwrap();
        assert_eq!(
            standing(s, boot, 29_000),
            Standing::Holds { left_ms: 1_000 }
        );
        let text = std::fs::read_to_string(path(s)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text:?}");
    }

    #[test]
    fn a_torn_or_foreign_lease_is_unreadable_not_run_out() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path();
        for text in [
            "b 00000000000000001000 00000000000000002000\n",
            "b 12\n",
            "",
            "b x x\n",
        ] {
            std::fs::write(path(s), text).unwrap();
            assert_eq!(standing(s, "b", 5_000), Standing::Unreadable, "{text:?}");
        }
    }

    #[test]
    fn the_boot_clock_runs_forward() {
        let a = boottime_ms();
        std::thread::sleep(Duration::from_millis(20));
        assert!(boottime_ms() >= a + 20);
        assert_eq!(boot_id(), boot_id());
        assert!(!boot_id().contains(' '));
    }
}
