//! The GPU ledger: `<spool>/gpu-ledger.log`, one line each time an attempt takes its
//! GPUs and each time it gives them back, written by the attempt's shim.
//!
//! `bind` is written before the job's first process is started, `free` after the last
//! one is gone (and its container removed) and before the attempt's end is
//! recorded, so that the interval a line pair gives covers every instant the job could
//! touch the GPUs. A line is `<unix time in µs> bind|free <job> <attempt> <i,j,...>`,
//! written with one `write` on a file opened for appending, so lines of concurrent
//! shims never interleave. An attempt without GPUs writes nothing.

use std::io::Write;
use std::path::{Path, PathBuf};

use tranche_model::{GpuIndex, JobId};

use super::AttemptNo;

/// The ledger's file name in the spool directory.
pub const GPU_LEDGER: &str = "gpu-ledger.log";

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Unix time in microseconds.
    pub t_us: u64,
    /// `true`: the attempt took the GPUs; `false`: it gave them back.
    pub bind: bool,
    pub job: JobId,
    pub attempt: AttemptNo,
    /// GPU indices on the node.
    pub gpus: Vec<GpuIndex>,
}

/// The ledger of `spool`.
pub(crate) fn ledger_of(spool: &Path) -> PathBuf {
    spool.join(GPU_LEDGER)
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl LedgerEntry {
    pub fn now(bind: bool, job: JobId, attempt: AttemptNo, gpus: Vec<GpuIndex>) -> LedgerEntry {
        LedgerEntry {
            t_us: now_us(),
            bind,
            job,
            attempt,
            gpus,
        }
    }

    pub fn to_line(&self) -> String {
        let gpus: Vec<String> = self.gpus.iter().map(|g| g.to_string()).collect();
        format!(
            "{} {} {} {} {}\n",
            self.t_us,
            if self.bind { "bind" } else { "free" },
            self.job,
            self.attempt,
            gpus.join(",")
        )
    }

    /// Parses one line; `None` for anything malformed.
    pub fn parse(line: &str) -> Option<LedgerEntry> {
        let mut f = line.split_whitespace();
        let t_us = f.next()?.parse().ok()?;
        let bind = match f.next()? {
            "bind" => true,
            "free" => false,
            _ => return None,
        };
        let job = JobId(f.next()?.parse().ok()?);
        let attempt = AttemptNo(f.next()?.parse().ok()?);
        let gpus = f
            .next()?
            .split(',')
            .map(|g| g.parse().ok().map(GpuIndex))
            .collect::<Option<Vec<GpuIndex>>>()?;
        if f.next().is_some() {
            return None;
        }
        Some(LedgerEntry {
            t_us,
            bind,
            job,
            attempt,
            gpus,
        })
    }
}

/// Appends one entry (a single write). A `bind` is synced to the disk before this
/// returns, so that the job starts only once its line would survive the node's crash.
/// A `free` is not: losing one to a crash only makes its interval end at the crash
/// rather than earlier, which still covers every instant the job could touch the GPUs,
/// and the next `bind` synced on the node makes every earlier line durable with it
/// (they are in the same file). That halves the ledger's disk writes.
pub(crate) fn append(path: &Path, entry: &LedgerEntry) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(entry.to_line().as_bytes())?;
    if entry.bind {
        f.sync_data()?;
    }
    Ok(())
}

/// Every well-formed entry of a spool's ledger, in file order, and the number of lines
/// that could not be read.
pub fn read(spool: &Path) -> std::io::Result<(Vec<LedgerEntry>, usize)> {
    let text = match std::fs::read_to_string(spool.join(GPU_LEDGER)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match LedgerEntry::parse(line) {
            Some(e) => out.push(e),
            None => bad += 1,
        }
    }
    Ok((out, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_junk_is_refused() {
        let e = LedgerEntry {
            t_us: 1_700_000_000_000_001,
            bind: true,
            job: JobId(42),
            attempt: AttemptNo(3),
            gpus: vec![GpuIndex(0), GpuIndex(5)],
        };
        assert_eq!(LedgerEntry::parse(&e.to_line()), Some(e.clone()));
        assert_eq!(
            LedgerEntry::parse("1700000000000001 bind 42 3 0,5"),
            Some(e.clone())
        );
        let f = LedgerEntry { bind: false, ..e };
        assert_eq!(LedgerEntry::parse(&f.to_line()), Some(f));
        for bad in [
            "",
            "1 bind 2 3",
            "1 take 2 3 0",
            "x bind 2 3 0",
            "1 bind 2 3 0,a",
            "1 bind 2 3 0 9",
        ] {
            assert_eq!(LedgerEntry::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn appends_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = ledger_of(dir.path());
        assert_eq!(path, dir.path().join(GPU_LEDGER));
        append(
            &path,
            &LedgerEntry::now(true, JobId(7), AttemptNo(1), vec![GpuIndex(1)]),
        )
        .unwrap();
        append(
            &path,
            &LedgerEntry::now(false, JobId(7), AttemptNo(1), vec![GpuIndex(1)]),
        )
        .unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"torn")
            .unwrap();
        let (entries, bad) = read(dir.path()).unwrap();
        assert_eq!(entries.len(), 2);
        assert!(entries[0].bind && !entries[1].bind);
        assert!(entries[0].t_us <= entries[1].t_us);
        assert_eq!(bad, 1);
    }
}
