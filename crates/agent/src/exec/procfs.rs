//! What `/proc` says about processes: state, parent, process group, start time.

use std::collections::{BTreeMap, BTreeSet};

use nix::errno::Errno;

/// The fields of `/proc/<pid>/stat` the executors use.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// Start time in clock ticks since boot: with the pid, names a process uniquely.
    pub starttime: u64,
}

/// A pidfd of `pid` (Linux 5.3 and later): readable once the process has ended, so
/// its end can be waited for by a process that is not its parent. `None` where the
/// process is gone or the kernel has no pidfds.
pub(crate) fn pidfd_open(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if pid <= 0 {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor, or -1.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Reads `/proc/<pid>/stat`.
pub(crate) fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The fields of a `/proc/<pid>/stat` text after the command name, from the state
/// (field 3) on: `pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt
/// majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue
/// starttime ...`; comm may hold spaces and parentheses, so the split is after the last
/// ')'.
fn fields_after_comm(text: &str) -> Option<Vec<&str>> {
    Some(text[text.rfind(')')? + 1..].split_whitespace().collect())
}

/// Where this process's argument strings lie in its memory: `arg_start` and `arg_end`
/// (fields 48 and 49 of `/proc/self/stat`).
pub(crate) fn own_arg_range() -> Option<(usize, usize)> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let f = fields_after_comm(&text)?;
    Some((f.get(45)?.parse().ok()?, f.get(46)?.parse().ok()?))
}

fn parse_stat(text: &str) -> Option<Stat> {
    let f = fields_after_comm(text)?;
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        starttime: f.get(19)?.parse().ok()?,
    })
}

/// How long ago `pid` started (and, when given, started at `starttime`), on the
/// kernel's boot clock, which setting the wall clock does not move; `None` where it is
/// gone or a zombie.
pub(crate) fn age(pid: i32, starttime: Option<u64>) -> Option<std::time::Duration> {
    if !alive(pid, starttime) {
        return None;
    }
    let start = stat(pid)?.starttime;
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)? as u64;
    let now_ms = super::lease::boottime_ms();
    Some(std::time::Duration::from_millis(
        now_ms.saturating_sub(start * 1000 / tick),
    ))
}

/// True if `pid` is a live process (not a zombie) and, when given, started at
/// `starttime`.
pub(crate) fn alive(pid: i32, starttime: Option<u64>) -> bool {
    if pid <= 0 {
        return false;
    }
    match stat(pid) {
        Some(s) => {
            !matches!(s.state, 'Z' | 'X' | 'x') && starttime.is_none_or(|t| t == s.starttime)
        }
        None => false,
    }
}

/// Every live process on the node with its stat.
fn all() -> BTreeMap<i32, Stat> {
    let mut out = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) {
                if let Some(s) = stat(pid) {
                    if !matches!(s.state, 'Z' | 'X' | 'x') {
                        out.insert(pid, s);
                    }
                }
            }
        }
    }
    out
}

/// The processes of a job found without a cgroup: the members of process group
/// `pgid` and every descendant of `shim` (not the shim itself).
pub(crate) fn job_processes(pgid: Option<i32>, shim: Option<i32>) -> Vec<i32> {
    let procs = all();
    let mut found = BTreeSet::new();
    if let Some(g) = pgid.filter(|&g| g > 0) {
        found.extend(procs.iter().filter(|(_, s)| s.pgrp == g).map(|(&p, _)| p));
    }
    if let Some(root) = shim.filter(|&p| p > 0) {
        let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (&p, s) in &procs {
            children.entry(s.ppid).or_default().push(p);
        }
        let mut seen = BTreeSet::from([root]);
        let mut stack = vec![root];
        while let Some(p) = stack.pop() {
            for &c in children.get(&p).map(|v| v.as_slice()).unwrap_or(&[]) {
                if seen.insert(c) {
                    found.insert(c);
                    stack.push(c);
                }
            }
        }
    }
    found.into_iter().collect()
}

/// `kill(2)` with a raw signal number (real-time signals included).
pub(crate) fn kill(pid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let r = unsafe { nix::libc::kill(pid, sig) };
    Errno::result(r).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_comm() {
        let s =
            parse_stat("42 (a) b (c)) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0 0")
                .unwrap();
        assert_eq!((s.state, s.ppid, s.pgrp, s.starttime), ('S', 1, 42, 12345));
    }

    #[test]
    fn self_is_alive() {
        let me = std::process::id() as i32;
        let st = stat(me).unwrap();
        assert!(alive(me, Some(st.starttime)));
        assert!(!alive(me, Some(st.starttime + 1)));
        // This process started moments ago, by the boot clock.
        let a = age(me, Some(st.starttime)).unwrap();
        assert!(a < std::time::Duration::from_secs(600), "{a:?}");
        assert_eq!(age(me, Some(st.starttime + 1)), None);
        assert!(!alive(0, None));
    }
}
