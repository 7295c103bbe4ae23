//! Shared helpers of the executor tests: the agent binary that shims run from, unique
//! job ids, launch specs, waits with deadlines, the one policy for tests the machine
//! cannot run ([`not_run`]), and for the container tests a busybox rootfs.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use tranche_model::{GpuIndex, JobId};

use tranche_agent::exec::{
    Attempt, AttemptNo, BoundGpu, CgroupDirs, CgroupMode, Executors, ExitStatus, KillMethod,
    LaunchSpec, StopOutcome,
};

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
pub fn job_id() -> JobId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    JobId((u64::from(std::process::id()) << 16) | NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A spec for `image` running `command`, no GPU, no limit.
pub fn spec(image: &str, command: &[&str]) -> LaunchSpec {
    LaunchSpec {
        job: job_id(),
        attempt: AttemptNo(0),
        restart_count: 0,
        share: "research".into(),
        image: image.into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        user: None,
        groups: Vec::new(),
        cpus: 0,
        memory_mb: 0,
        gpus: Vec::new(),
        fake_devices: true,
        rendezvous: None,
        name: String::new(),
        array: None,
        submit_dir: None,
        stdout_file: None,
        stderr_file: None,
        sagemaker: None,
        stop_signal: None,
    }
}

/// An agent config for node `n3` with these extra top-level settings and tables.
pub fn agent_config(extra: &str) -> tranche_agent::config::AgentConfig {
    let text = format!(
        "node = \"n3\"\ncontrollers = [\"127.0.0.1:7100\"]\nspool_dir = \"/x\"\n\
         inventory = \"fake\"\nfake = \"1 x h100\"\n{extra}\n\
         [tls]\nca = \"/c\"\ncert = \"/c\"\nkey = \"/c\"\n"
    );
    tranche_agent::config::AgentConfig::parse(&text, "agent.toml").unwrap()
}

/// GPUs with these indices and UUIDs `GPU-fake-<index>`.
pub fn gpus(indices: &[u32]) -> Vec<BoundGpu> {
    indices
        .iter()
        .map(|&index| BoundGpu {
            index: GpuIndex(index),
            uuid: format!("GPU-fake-{index}"),
        })
        .collect()
}

/// Polls [`Attempt::exit`] until it is there.
pub fn wait_exit(a: &Attempt, timeout: Duration) -> ExitStatus {
    let mut status = None;
    wait_until(
        &format!("job {} attempt {} to end", a.job(), a.attempt()),
        timeout,
        || {
            status = a.exit();
            status.is_some()
        },
    );
    status.expect("ended")
}

/// Polls `done` every 10 ms until it is true; panics, naming `what`, after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "waited {} s for {what}",
            timeout.as_secs_f64()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `path` exists.
pub fn wait_file(path: &Path, timeout: Duration) {
    wait_until(&path.display().to_string(), timeout, || path.exists());
}

/// Waits until `path` holds a pid (a shell writes it in more than one step).
pub fn wait_pid_file(path: &Path, timeout: Duration) -> i32 {
    let mut pid = None;
    wait_until(&format!("a pid in {}", path.display()), timeout, || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.expect("a pid")
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

/// The pids listed in a cgroup directory's `cgroup.procs`.
pub fn cgroup_procs(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { nix::libc::geteuid() == 0 }
}

/// True when the tests run under CI (`CI=true` or `CI=1`).
pub fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// What the container tests need installed, and how.
pub const INSTALL: &str = "as root, `apt-get install -y runc busybox-static`";

/// The one skip policy of the agent's tests. `test` cannot do what it is for because
/// of `why`; `remedy` says what would let it.
///
/// Under CI (`CI=true` or `1`) as root, where a missing tool or hierarchy is the
/// machine's fault rather than the test's, it panics, so that CI fails. Otherwise it
/// writes a `SKIPPED` line straight to the process's stderr, past the test harness's
/// capture of `eprintln!` (a skipped test still reads `ok`, so the line is what shows
/// it did not run), and returns.
pub fn not_run(test: &str, why: &str, remedy: &str) {
    not_run_unless_ci(test, why, remedy, true)
}

/// [`not_run`], where `fatal_in_ci` says whether CI as root fails instead: false for
/// what the machine does not have at all (a cgroup v1 test on a pure v2 node).
pub fn not_run_unless_ci(test: &str, why: &str, remedy: &str, fatal_in_ci: bool) {
    if fatal_in_ci && in_ci() && is_root() {
        panic!(
            "{test}: {why}. CI is set and the tests run as root, so this test fails \
             instead of skipping. To run it: {remedy}."
        );
    }
    let line = format!("SKIPPED {test}: {why}. To run it: {remedy}.\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// What a test needs that the machine may lack.
#[derive(Debug, Clone, Copy)]
pub enum Need {
    /// Running as root.
    Root,
    /// Root, an OCI runtime (runc, or crun) and a static busybox for a rootfs.
    Containers,
}

/// True if `test` must return early because the machine lacks `need` (see
/// [`not_run`], which has said so).
pub fn lacks(test: &str, need: Need) -> bool {
    if !is_root() {
        let remedy = match need {
            Need::Root => "run the tests as root".to_string(),
            Need::Containers => format!("{INSTALL}, then run the tests as root"),
        };
        not_run(
            test,
            "needs root, and the tests do not run as root",
            &remedy,
        );
        return true;
    }
    match need {
        Need::Root => false,
        Need::Containers => match container_tools() {
            Ok(_) => false,
            Err(why) => {
                not_run(test, &why, INSTALL);
                true
            }
        },
    }
}

/// Executors on `spool` that track process jobs in the cgroup hierarchy `mode` forces,
/// or `None` where this machine cannot give them (having said so through
/// [`not_run`]; a hierarchy the machine does not mount at all is no failure in CI).
pub fn executors_on(test: &str, spool: &Path, mode: CgroupMode) -> Option<Executors> {
    let hierarchy = match mode {
        CgroupMode::Auto => "cgroup".to_string(),
        forced => format!("cgroup {forced}"),
    };
    let remedy = format!("run the tests as root on a node with a writable {hierarchy} hierarchy");
    if !is_root() {
        not_run(
            test,
            "needs root to create cgroups, and the tests do not run as root",
            &remedy,
        );
        return None;
    }
    let mounts = tranche_agent::exec::cgroup_mounts();
    let mounted = match mode {
        CgroupMode::V1 => !mounts.v1.is_empty(),
        CgroupMode::V2 => mounts.v2.is_some(),
        CgroupMode::Auto => !mounts.v1.is_empty() || mounts.v2.is_some(),
    };
    match Executors::with_cgroups(spool, mode) {
        Ok(ex) if ex.cgroup_summary().starts_with("track=none") => {
            not_run(test, "no writable cgroup hierarchy on this node", &remedy);
            None
        }
        Ok(ex) => Some(ex),
        Err(e) => {
            not_run_unless_ci(test, &e.to_string(), &remedy, mounted);
            None
        }
    }
}

/// The attempt's cgroup directories; `None` (said through [`not_run`]) where it has
/// none, so that what only its cgroup shows cannot be checked.
pub fn cgroup_dirs(test: &str, a: &Attempt) -> Option<CgroupDirs> {
    let dirs = a.cgroup_dirs();
    if dirs.is_none() {
        not_run(
            test,
            "the job has no cgroup here (no writable hierarchy, or not root), so that no \
             cgroup of it is left behind is not checked",
            "run the tests as root on a node with a writable cgroup hierarchy",
        );
    }
    dirs
}

/// Asserts that nothing of the ended attempt `a` is left: none of `pids`, no process
/// in its cgroup, and, once its end is acknowledged (which this does), no cgroup
/// directory of it (said loudly where it has none to check).
pub fn assert_nothing_left(test: &str, a: &Attempt, pids: &[i32]) {
    assert!(
        !a.alive(),
        "job {} attempt {} still has processes",
        a.job(),
        a.attempt()
    );
    for &p in pids {
        assert!(pid_gone(p), "process {p} of job {} survived", a.job());
    }
    let dirs = cgroup_dirs(test, a);
    if let Some(dirs) = &dirs {
        for d in &dirs.all {
            assert!(
                cgroup_procs(d).is_empty(),
                "cgroup {} still holds processes",
                d.display()
            );
        }
    }
    a.acknowledge().unwrap();
    if let Some(dirs) = dirs {
        for d in dirs.all {
            assert!(!d.exists(), "cgroup {} left behind", d.display());
        }
    }
}

pub fn which(name: &str) -> Option<PathBuf> {
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

/// The static busybox for a rootfs, once runc (or crun) is there too; `Err` names what
/// is missing. Nothing is installed here: the test command installs them.
pub fn container_tools() -> Result<PathBuf, String> {
    static TOOLS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let runtime = which("runc").or_else(|| which("crun"));
            match (runtime, static_busybox()) {
                (Some(_), Some(bb)) => Ok(bb),
                (None, Some(_)) => Err("no OCI runtime (runc or crun) found".into()),
                (Some(_), None) => Err("no static busybox (/bin/busybox) found".into()),
                (None, None) => {
                    Err("neither an OCI runtime (runc or crun) nor a static busybox found".into())
                }
            }
        })
        .clone()
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

/// The file holding the memory limit of the cgroup `name` (below `tranche/`) in the
/// hierarchy with the memory controller: v1's `memory.limit_in_bytes`, or v2's
/// `memory.max`; `None` where no hierarchy has it.
pub fn memory_limit_file(name: &str) -> Option<PathBuf> {
    let mounts = tranche_agent::exec::cgroup_mounts();
    if let Some(m) = mounts.v1.get("memory") {
        return Some(m.join("tranche").join(name).join("memory.limit_in_bytes"));
    }
    let v2 = mounts.v2?;
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
    controllers
        .split_whitespace()
        .any(|c| c == "memory")
        .then(|| v2.join("tranche").join(name).join("memory.max"))
}

/// Stops `a` (SIGTERM, `grace`), a job that notes SIGTERM by appending `term` to
/// `term_note` and goes on, and asserts the order: SIGTERM first (the job saw it),
/// SIGKILL only once the grace was over, the exit after both. Returns how it was killed.
pub fn stop_a_job_that_outlives_term(a: &Attempt, grace: Duration, term_note: &Path) -> KillMethod {
    let sent_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let t0 = Instant::now();
    let out = a.stop(15, grace);
    let took = t0.elapsed();
    let StopOutcome::Killed { status, via } = out else {
        panic!("expected Killed, got {out:?}");
    };
    assert_eq!(
        std::fs::read_to_string(term_note).unwrap_or_default(),
        "term\n"
    );
    assert!(
        took >= grace,
        "killed {took:?} after TERM, before the grace of {grace:?}"
    );
    assert_eq!(status.signal, Some(9), "{status:?}");
    assert!(
        status.at_ms >= sent_ms,
        "{status:?} ended before the stop at {sent_ms}"
    );
    via
}

/// A temporary directory for a spool (the directory itself, or its `spool/`): when
/// dropped, every job still running from it is killed before the directory goes and
/// every attempt in it is acknowledged (see [`clear_spool`]).
/// Jobs outlive their handles by design; a test that fails midway leaves none behind.
pub struct TestDir(tempfile::TempDir);

/// A new [`TestDir`].
pub fn test_dir() -> TestDir {
    TestDir(tempfile::tempdir().unwrap())
}

impl TestDir {
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        for spool in [self.path().to_path_buf(), self.path().join("spool")] {
            if spool.join("attempts").is_dir() {
                clear_spool(&spool);
            }
        }
    }
}

/// Executors on `spool` that use rootfs directories under `root` as they are (the
/// agent's `[images] roots`), as the tests that share files with a container through
/// its rootfs need; any other rootfs directory is copied into the image cache.
pub fn executors_trusting(spool: &Path, root: &Path) -> Executors {
    Executors::new(spool)
        .unwrap()
        .with_image_policy(tranche_agent::exec::ImagePolicy {
            roots: vec![root.to_path_buf()],
            ..Default::default()
        })
}

/// Kills every job still running from `spool` and acknowledges every attempt in it,
/// which removes its cgroup: a cgroup outlives the spool's directory, and one not
/// removed here would be left on the machine.
pub fn clear_spool(spool: &Path) {
    let Ok(ex) = Executors::new(spool) else {
        return;
    };
    let attempts = ex.adopt().unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    for a in &attempts {
        while a.alive() && Instant::now() < deadline {
            let _ = a.kill_all();
            std::thread::sleep(Duration::from_millis(10));
        }
        // Its end is recorded once its shim sees the cgroup empty.
        while a.exit().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = a.acknowledge();
    }
}

/// Accounts made with `useradd` for a test (root only), removed with their homes and
/// groups when dropped, however the test ends.
pub struct TestAccounts {
    users: Vec<String>,
    groups: Vec<String>,
}

/// One account of [`TestAccounts`], as `id` reports it.
#[derive(Debug, Clone)]
pub struct TestAccount {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// `id -G`: every group, primary first.
    pub groups: Vec<u32>,
    pub home: PathBuf,
}

impl TestAccounts {
    pub fn new() -> TestAccounts {
        TestAccounts {
            users: Vec::new(),
            groups: Vec::new(),
        }
    }

    /// A name unique to this test process and call (at most 16 characters).
    pub fn unique(tag: &str) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        format!(
            "t{tag}{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// A group for supplementary membership.
    pub fn group(&mut self, tag: &str) -> String {
        let name = Self::unique(tag);
        run_tool("groupadd", &[&name]);
        self.groups.push(name.clone());
        name
    }

    /// An account with its own primary group, a home made by `useradd -m` (or none),
    /// and the supplementary `groups`.
    pub fn user(&mut self, tag: &str, groups: &[&str], home: bool) -> TestAccount {
        let name = Self::unique(tag);
        let home_dir = format!("/home/{name}");
        let mut args = vec!["-U", "-s", "/bin/sh", "-d", &home_dir];
        args.push(if home { "-m" } else { "-M" });
        let list = groups.join(",");
        if !groups.is_empty() {
            args.extend(["-G", &list]);
        }
        args.push(&name);
        self.users.push(name.clone());
        run_tool("useradd", &args);
        let id = |flag: &str| -> Vec<u32> {
            let out = Command::new("id").args([flag, &name]).output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(|n| n.parse().unwrap())
                .collect()
        };
        TestAccount {
            uid: id("-u")[0],
            gid: id("-g")[0],
            groups: id("-G"),
            home: PathBuf::from(home_dir),
            name,
        }
    }
}

impl Drop for TestAccounts {
    fn drop(&mut self) {
        for u in &self.users {
            let _ = Command::new("userdel").args(["-r", u]).output();
            // `userdel -r` leaves a home it did not make (`-M`) alone; so does this.
        }
        for g in &self.groups {
            let _ = Command::new("groupdel").arg(g).output();
        }
    }
}

fn run_tool(tool: &str, args: &[&str]) {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// True if `test` must return early because the machine cannot make accounts (not
/// root, or no `useradd`); [`not_run`] has said so.
pub fn lacks_accounts(test: &str, need: Need) -> bool {
    if lacks(test, need) {
        return true;
    }
    if which("useradd").is_none() {
        not_run(
            test,
            "no useradd found",
            "install the passwd package (apt-get install -y passwd), then run the tests as root",
        );
        return true;
    }
    false
}

/// Holds the agent's lease on `spool` for 2.5 s, then lets it run out: the shim of `a`
/// leaves its job alone while the lease holds, then stops it with its stop signal (the
/// job notes it in `note` and exits 0) and marks the attempt fenced.
pub fn lease_holds_then_runs_out(spool: &Path, a: &Attempt, note: &Path) {
    use tranche_agent::exec::lease;
    let boot = lease::boot_id();
    let hold = Instant::now() + Duration::from_millis(2_500);
    while Instant::now() < hold {
        lease::renew(spool, &boot, lease::boottime_ms() + 1_000).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !note.exists() && a.exit().is_none(),
            "the job was stopped while the lease held"
        );
    }
    let last = Instant::now();
    wait_file(note, Duration::from_secs(30));
    let after = last.elapsed();
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(5),
        "stopped {after:?} after the lease's last renewal (1 s lease)"
    );
    let st = wait_exit(a, Duration::from_secs(30));
    assert_eq!(st.code, Some(0), "{st:?}");
    assert!(a.fenced(), "the attempt was not marked fenced");
}
