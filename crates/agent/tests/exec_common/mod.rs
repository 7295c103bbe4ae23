//! Shared helpers of the executor tests: the agent binary that shims run from, unique
//! job ids, launch specs, and for the container tests runc plus a busybox rootfs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use tranche_agent::exec::{Attempt, BoundGpu, ExitStatus, LaunchSpec};

/// Makes shims run from the `tranche-agent` binary built for these tests.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_var(
            tranche_agent::exec::AGENT_BIN_ENV,
            env!("CARGO_BIN_EXE_tranche-agent"),
        );
    });
}

/// A job id unique to this test process and call, so that parallel tests (and test
/// binaries) never share a cgroup or container name.
pub fn job_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 16) | NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A spec for `image` running `command`, no GPU, no limit.
pub fn spec(image: &str, command: &[&str]) -> LaunchSpec {
    LaunchSpec {
        job: job_id(),
        attempt: 0,
        restart_count: 0,
        share: "research".into(),
        image: image.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        user: None,
        cpus: 0,
        memory_mb: 0,
        gpus: Vec::new(),
        fake_devices: true,
    }
}

/// GPUs with these indices and UUIDs `GPU-fake-<index>`.
pub fn gpus(indices: &[u32]) -> Vec<BoundGpu> {
    indices
        .iter()
        .map(|&index| BoundGpu {
            index,
            uuid: format!("GPU-fake-{index}"),
        })
        .collect()
}

/// Polls [`Attempt::exit`] until it is there.
pub fn wait_exit(a: &Attempt, timeout: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = a.exit() {
            return s;
        }
        assert!(
            t0.elapsed() < timeout,
            "job {} attempt {} did not end within {timeout:?}",
            a.job(),
            a.attempt()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `path` exists.
pub fn wait_file(path: &Path, timeout: Duration) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(
            t0.elapsed() < timeout,
            "{} did not appear within {timeout:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The job's stdout.
pub fn stdout(a: &Attempt) -> String {
    std::fs::read_to_string(a.log_paths().0).unwrap_or_default()
}

/// The job's stderr.
pub fn stderr(a: &Attempt) -> String {
    std::fs::read_to_string(a.log_paths().1).unwrap_or_default()
}

/// `KEY=VALUE` lines as a map.
pub fn env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The attempt's directory in the v1 pids hierarchy, where the node has one.
pub fn pids_cgroup(a: &Attempt) -> Option<PathBuf> {
    let root = Path::new("/sys/fs/cgroup/pids");
    root.join("tranche")
        .is_dir()
        .then(|| root.join("tranche").join(a.cgroup_name()))
}

/// True if no process with this pid is left (a zombie counts as gone).
pub fn pid_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => {
            let rest = &s[s.rfind(')').unwrap() + 1..];
            matches!(rest.split_whitespace().next(), Some("Z" | "X"))
        }
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { nix::libc::geteuid() == 0 }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// True if the ELF file at `path` has no program interpreter (is statically linked).
fn is_static_elf(path: &Path) -> bool {
    let Ok(b) = std::fs::read(path) else {
        return false;
    };
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        o + 4 <= b.len() && u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) != 3
    })
}

fn static_busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| is_static_elf(p))
}

fn apt_install() -> Result<(), String> {
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "runc", "busybox-static"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
    };
    let out = install().map_err(|e| format!("apt-get: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let _ = Command::new("apt-get")
        .arg("update")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .output();
    let out = install().map_err(|e| format!("apt-get: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "apt-get install -y runc busybox-static failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Ensures runc and a static busybox, installing them with apt-get when missing and
/// running as root. `Err` says why the container tests cannot run.
pub fn container_tools() -> Result<PathBuf, String> {
    static TOOLS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            if which("runc").is_some() {
                if let Some(bb) = static_busybox() {
                    return Ok(bb);
                }
            }
            if !is_root() {
                return Err("not root, and runc or a static busybox is missing".into());
            }
            apt_install()?;
            if which("runc").is_none() {
                return Err("runc still missing after apt-get install".into());
            }
            static_busybox().ok_or_else(|| "no static busybox after apt-get install".into())
        })
        .clone()
}

/// Says loudly why a container test did not run; true if it must return early.
pub fn skip_containers(test: &str) -> bool {
    if !is_root() {
        eprintln!("SKIPPED (needs root and runc): {test}: not running as root");
        return true;
    }
    match container_tools() {
        Ok(_) => false,
        Err(why) => {
            eprintln!("SKIPPED (needs root and runc): {test}: {why}");
            true
        }
    }
}

/// Builds a busybox rootfs in `dir/rootfs`: `/bin/busybox`, a relative symlink per
/// applet, and the usual empty directories.
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    let bb = container_tools().expect("container tools");
    let root = dir.join("rootfs");
    for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "root"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy(&bb, root.join("bin/busybox")).unwrap();
    let list = Command::new(&bb).arg("--list").output().unwrap();
    let mut applets: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    for must in ["sh", "sleep", "echo", "cat", "env", "ls", "setsid", "test"] {
        if !applets.iter().any(|a| a == must) {
            applets.push(must.to_string());
        }
    }
    for a in applets {
        if a != "busybox" && !a.contains('/') {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(&a));
        }
    }
    root
}
