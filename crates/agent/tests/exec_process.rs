//! The process executor (`image = "host"`), with real processes and shims.
//!
//! The tests of how a job is tracked (every process signalled and killed, nothing left
//! behind, the cgroup removed) run twice, `<test>::v1` and `<test>::v2`, with the
//! cgroup v1 and then the v2 hierarchy forced to track the job; a hybrid node has both.
//! What a machine cannot run is said through `exec_common::not_run`.

mod exec_common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use exec_common::*;
use tranche_agent::exec::{
    signal_number, AttemptNo, CgroupMode, ExecError, ExecKind, Executors, KillMethod, StopOutcome,
};
use tranche_model::{GpuIndex, JobId};

/// The deadline of every wait for something that takes milliseconds on an idle machine.
const LONG: Duration = Duration::from_secs(30);

/// Runs `$name(test, mode)` as two tests, `$name::v1` and `$name::v2`: one per cgroup
/// hierarchy forced to track the job's processes.
macro_rules! on_v1_and_v2 {
    ($name:ident) => {
        mod $name {
            use tranche_agent::exec::CgroupMode;

            #[test]
            fn v1() {
                super::$name(concat!(stringify!($name), "::v1"), CgroupMode::V1);
            }

            #[test]
            fn v2() {
                super::$name(concat!(stringify!($name), "::v2"), CgroupMode::V2);
            }
        }
    };
}

/// The attempt's shim's pid, from its `shim.pid` file.
fn shim_pid(a: &tranche_agent::exec::Attempt) -> i32 {
    std::fs::read_to_string(a.dir().join("shim.pid"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The job's main pid, from the attempt's `pid` file.
fn main_pid(a: &tranche_agent::exec::Attempt) -> i32 {
    wait_pid_file(&a.dir().join("pid"), LONG)
}

on_v1_and_v2!(output_and_exit_code);
fn output_and_exit_code(test: &str, mode: CgroupMode) {
    init();
    let spool = test_dir();
    let Some(ex) = executors_on(test, spool.path(), mode) else {
        return;
    };
    let a = ex
        .start(&spec("host", &["sh", "-c", "echo hello; exit 3"]))
        .unwrap();
    assert_eq!(a.kind(), ExecKind::Process);
    let dirs = a.cgroup_dirs().expect("a cgroup");
    assert_eq!(dirs.v2, mode == CgroupMode::V2, "{}", ex.cgroup_summary());
    let pid = main_pid(&a);
    let st = wait_exit(&a, LONG);
    assert_eq!(st.code, Some(3), "{st:?}");
    assert_eq!(st.signal, None);
    assert_eq!(stdout(&a), "hello\n");
    // The exit is recorded only once the cgroup is empty; its directory is removed
    // when the end is acknowledged, not on the way to the exit.
    let dirs = a.cgroup_dirs().unwrap();
    assert!(dirs.track.exists() && cgroup_procs(&dirs.track).is_empty());
    assert_nothing_left(test, &a, &[pid]);
    assert!(!a.dir().exists());
}

#[test]
fn env_holds_exactly_the_gpu_binding() {
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let mut s = spec("host", &["env"]);
    s.gpus = gpus(&[2, 5]);
    s.restart_count = 4;
    s.env.insert("FOO".into(), "bar baz".into());
    // A stale binding in the submitted env is overridden.
    s.env
        .insert("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into());
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0));
    let env = env_lines(&stdout(&a));
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "2,5");
    assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], "GPU-fake-2,GPU-fake-5");
    assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
    assert_eq!(env["TRANCHE_JOB_ID"], s.job.to_string());
    assert_eq!(env["TRANCHE_ATTEMPT"], "0");
    assert_eq!(env["TRANCHE_RESTART_COUNT"], "4");
    assert_eq!(env["TRANCHE_SHARE"], "research");
    assert_eq!(env["FOO"], "bar baz");
    let gpu_vars: Vec<&String> = env
        .keys()
        .filter(|k| k.starts_with("CUDA_") || k.starts_with("NVIDIA_"))
        .collect();
    assert_eq!(
        gpu_vars,
        [
            "CUDA_DEVICE_ORDER",
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES"
        ]
    );

    // No GPU: the job sees none.
    let a = ex.start(&spec("host", &["env"])).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0));
    let env = env_lines(&stdout(&a));
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "");
    assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], "void");
}

/// The file a limit is written to in `dir`: v2's name, or v1's.
fn limit_file(dir: &(PathBuf, bool), v2: &str, v1: &str) -> String {
    let file = dir.0.join(if dir.1 { v2 } else { v1 });
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .to_string()
}

on_v1_and_v2!(job_runs_in_its_cgroup_with_limits);
fn job_runs_in_its_cgroup_with_limits(test: &str, mode: CgroupMode) {
    init();
    let spool = test_dir();
    let Some(ex) = executors_on(test, spool.path(), mode) else {
        return;
    };
    let mut s = spec(
        "host",
        &["sh", "-c", "cat /proc/self/cgroup; echo end; sleep 30"],
    );
    s.memory_mb = 96;
    s.cpus = 1;
    let a = ex.start(&s).unwrap();
    let name = a.cgroup_name();
    assert!(
        name.ends_with(&format!("-{}.{}", a.job(), a.attempt())),
        "{name}"
    );
    let dirs = a.cgroup_dirs().expect("a cgroup");
    wait_until("the job's /proc/self/cgroup", LONG, || {
        stdout(&a).contains("end\n")
    });
    let out = stdout(&a);
    // `<id>:<controllers>:<path>`: v2's line has no controllers.
    let member = |v2: bool| {
        out.lines().any(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctls, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
            ctls.is_empty() == v2 && path == format!("/tranche/{name}")
        })
    };
    assert!(member(mode == CgroupMode::V2), "{out}");
    assert!(a.alive());
    assert!(cgroup_procs(&dirs.track).contains(&main_pid(&a)));
    match &dirs.memory {
        Some(d) => assert_eq!(
            limit_file(d, "memory.max", "memory.limit_in_bytes"),
            (96u64 << 20).to_string()
        ),
        None => not_run(
            test,
            "no writable memory controller here, so the memory limit is not checked",
            "run the tests as root on a node with the memory controller",
        ),
    }
    match &dirs.cpu {
        Some(d) => {
            let v = limit_file(d, "cpu.max", "cpu.cfs_quota_us");
            assert_eq!(v, if d.1 { "100000 100000" } else { "100000" });
        }
        None => not_run(
            test,
            "no writable cpu controller here, so the CPU limit is not checked",
            "run the tests as root on a node with the cpu controller",
        ),
    }
    // A generous grace: on a loaded machine the shim may be slow to reap; a job that
    // dies of SIGTERM must still be seen to exit within it.
    let out = a.stop(signal_number("TERM").unwrap(), Duration::from_secs(20));
    assert!(matches!(out, StopOutcome::ExitedInGrace { .. }), "{out:?}");
    assert_eq!(out.status().signal, Some(15));
    assert_nothing_left(test, &a, &[]);
}

/// True if the node has swap, where a job over its memory limit swaps instead of dying.
fn swap_on() -> bool {
    std::fs::read_to_string("/proc/swaps")
        .map(|s| s.lines().count() > 1)
        .unwrap_or(false)
}

/// A job that holds more memory than its limit is killed by the kernel; the same job
/// without a limit runs to its end.
#[test]
fn the_kernel_enforces_the_memory_limit() {
    let test = "the_kernel_enforces_the_memory_limit";
    init();
    let spool = test_dir();
    let Some(ex) = executors_on(test, spool.path(), CgroupMode::Auto) else {
        return;
    };
    if swap_on() {
        not_run_unless_ci(
            test,
            "this node has swap, where a job over its memory limit swaps instead of dying",
            "run the tests on a node without swap",
            false,
        );
        return;
    }
    // The shell holds the 100 MB string it reads: three times its 32 MiB limit.
    let script = "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo survived ${#x}";
    let mut s = spec("host", &["sh", "-c", script]);
    s.memory_mb = 32;
    let a = ex.start(&s).unwrap();
    if cgroup_dirs(test, &a).and_then(|d| d.memory).is_none() {
        not_run(
            test,
            "no writable memory controller here, so the memory limit cannot be enforced",
            "run the tests as root on a node with the memory controller",
        );
        wait_exit(&a, LONG);
        return;
    }
    let st = wait_exit(&a, LONG);
    assert_eq!(
        (st.code, st.signal),
        (None, Some(9)),
        "not killed by the kernel: {}",
        stdout(&a)
    );
    assert_nothing_left(test, &a, &[]);
    s.job = job_id();
    s.memory_mb = 0;
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0), "{}", stderr(&a));
    assert_eq!(stdout(&a), "survived 100000000\n");
}

/// A job that would use more CPUs than its limit is throttled by the kernel.
#[test]
fn the_kernel_enforces_the_cpu_limit() {
    let test = "the_kernel_enforces_the_cpu_limit";
    init();
    let spool = test_dir();
    let work = tempfile::tempdir().unwrap();
    let Some(ex) = executors_on(test, spool.path(), CgroupMode::Auto) else {
        return;
    };
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        not_run_unless_ci(
            test,
            "this node has one CPU: a job limited to one is never throttled",
            "run the tests on a node with two CPUs or more",
            false,
        );
        return;
    }
    // Three busy loops want more than the one CPU the job may use.
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            "for i in 1 2 3; do (while :; do :; done) & done; echo ready > ready; wait",
        ],
    );
    s.cpus = 1;
    s.cwd = Some(work.path().to_string_lossy().into_owned());
    let a = ex.start(&s).unwrap();
    let cpu = cgroup_dirs(test, &a).and_then(|d| d.cpu);
    match cpu {
        None => not_run(
            test,
            "no writable cpu controller here, so the CPU limit cannot be enforced",
            "run the tests as root on a node with the cpu controller",
        ),
        Some((dir, v2)) => {
            // On a machine busy with other tests the job's cgroup, weighted as one
            // process, would never get more than one CPU and so never meet its quota:
            // the largest weight lets it want more (and its quota keeps it to one).
            let (file, weight) = if v2 {
                ("cpu.weight", "10000")
            } else {
                ("cpu.shares", "262144")
            };
            std::fs::write(dir.join(file), weight).unwrap();
            wait_file(&work.path().join("ready"), LONG);
            let throttled = || {
                std::fs::read_to_string(dir.join("cpu.stat"))
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| l.strip_prefix("nr_throttled "))
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            // Any period in which the loops got more than one CPU is throttled.
            wait_until(
                "the kernel to throttle the job (cpu.stat nr_throttled)",
                LONG,
                || throttled() > 0,
            );
        }
    }
    let out = a.stop(15, Duration::from_secs(20));
    assert!(matches!(out, StopOutcome::ExitedInGrace { .. }), "{out:?}");
    assert_nothing_left(test, &a, &[]);
}

#[test]
fn stop_lets_a_checkpointing_job_exit_in_grace() {
    init();
    let spool = test_dir();
    let work = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            // The child says `ready` itself, after its exec: a SIGTERM that reaches a
            // child forked for `sleep 100 &` before it has exec'd is caught by the
            // trap it inherited and lost, and `sleep` then outlives the grace (on a
            // loaded machine, 10 times in 20 with `sleep 100 & echo ready`).
            "trap 'echo saved > ckpt; exit 0' TERM; sh -c 'echo ready > ready; exec sleep 100' & wait",
        ],
    );
    s.cwd = Some(work.path().to_string_lossy().into_owned());
    let a = ex.start(&s).unwrap();
    wait_file(&work.path().join("ready"), LONG);
    // The job needs milliseconds of its grace; a long one keeps a slow machine from
    // turning the exit into a kill.
    let out = a.stop(signal_number("SIGTERM").unwrap(), Duration::from_secs(60));
    match out {
        StopOutcome::ExitedInGrace { status } => assert_eq!(status.code, Some(0)),
        other => panic!("expected ExitedInGrace, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(work.path().join("ckpt")).unwrap(),
        "saved\n"
    );
    assert!(!a.alive());
}

#[test]
fn a_job_stops_once_the_agents_lease_runs_out() {
    init();
    let spool = test_dir();
    let work = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            "trap 'echo usr1 > noted; exit 0' USR1; while :; do sleep 0.1; done",
        ],
    );
    s.cwd = Some(work.path().to_string_lossy().into_owned());
    s.stop_signal = Some("SIGUSR1".into());
    let a = ex.start(&s).unwrap();
    lease_holds_then_runs_out(spool.path(), &a, &work.path().join("noted"));
}

on_v1_and_v2!(stop_signals_then_kills_every_process_after_the_grace);
fn stop_signals_then_kills_every_process_after_the_grace(test: &str, mode: CgroupMode) {
    init();
    let spool = test_dir();
    let work = tempfile::tempdir().unwrap();
    let Some(ex) = executors_on(test, spool.path(), mode) else {
        return;
    };
    // The job notes SIGTERM and goes on; it starts a child in a session of its own (so
    // neither its parent nor its process group lead to it) that ignores SIGTERM.
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            "trap 'echo term >> got_term' TERM; \
             setsid sh -c 'trap \"\" TERM; echo $$ > child; exec sleep 1000' & \
             echo ready > ready; while :; do sleep 1000 & wait $!; done",
        ],
    );
    s.cwd = Some(work.path().to_string_lossy().into_owned());
    let a = ex.start(&s).unwrap();
    wait_file(&work.path().join("ready"), LONG);
    let child = wait_pid_file(&work.path().join("child"), LONG);
    let pid = main_pid(&a);
    assert!(!pid_gone(child));
    // Long enough for the shell to run its trap on a loaded machine.
    let grace = Duration::from_secs(3);
    let via = stop_a_job_that_outlives_term(&a, grace, &work.path().join("got_term"));
    // v2 kills the whole cgroup at once.
    let expected = match mode {
        CgroupMode::V2 => KillMethod::CgroupKill,
        _ => KillMethod::Signals,
    };
    assert_eq!(via, expected);
    assert!(pid_gone(child), "the job's child {child} survived");
    assert_nothing_left(test, &a, &[pid, child]);
}

#[test]
fn runs_as_the_given_user() {
    if lacks("runs_as_the_given_user", Need::Root) {
        return;
    }
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let mut s = spec("host", &["sh", "-c", "id -u; id -g; id -G; pwd"]);
    s.user = Some((65534, 65533));
    s.cwd = Some("/tmp".into());
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0), "{}", stderr(&a));
    assert_eq!(stdout(&a), "65534\n65533\n65533\n/tmp\n");
}

#[test]
fn a_missing_program_is_a_clear_error_and_leaves_nothing() {
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let s = spec("host", &["/nonexistent/train.py", "--epochs", "3"]);
    let err = ex.start(&s).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ExecError::Launch { .. }), "{msg}");
    assert!(msg.contains("/nonexistent/train.py"), "{msg}");
    assert!(msg.contains("image `host`"), "{msg}");
    assert!(msg.contains("No such file"), "{msg}");
    assert!(ex.adopt().unwrap().is_empty());
    // The attempt may be started again.
    let err = ex.start(&s).unwrap_err();
    assert!(matches!(err, ExecError::Launch { .. }), "{err}");
}

/// The job's process is started clean, whatever the shim's state: standard input on
/// `/dev/null`, a process group of its own, no signal blocked or ignored (the shim, a
/// Rust program, ignores SIGPIPE), and its program looked up on the job's own `PATH`
/// as `execvp` does (a candidate that may not be run is passed over). The script reads
/// its own status with the shell's builtins: dash blocks every signal in itself while a
/// command it vforked has not yet exec'd, which a forked `grep` could catch.
#[test]
fn a_job_starts_clean_and_is_found_on_its_own_path() {
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let bin = test_dir();
    let (first, second) = (bin.path().join("first"), bin.path().join("second"));
    for d in [&first, &second] {
        std::fs::create_dir(d).unwrap();
    }
    let script = "#!/bin/sh\nread -r _ _ _ _ pgid _ < /proc/$$/stat\necho \"$0 pgid=$pgid pid=$$\"\nwhile IFS= read -r l; do case \"$l\" in SigBlk*|SigIgn*) echo \"$l\";; esac; done < /proc/$$/status\nreadlink /proc/$$/fd/0\n";
    // Not executable: passed over for the one after it on PATH.
    std::fs::write(first.join("probe"), script).unwrap();
    std::fs::write(second.join("probe"), script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(second.join("probe"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut s = spec("host", &["probe"]);
    s.env.insert(
        "PATH".into(),
        format!("{}:{}:/usr/bin:/bin", first.display(), second.display()),
    );
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0), "{}", stderr(&a));
    let out = stdout(&a);
    let lines: Vec<&str> = out.lines().collect();
    let pid = lines[0].rsplit("pid=").next().unwrap();
    assert_eq!(
        lines[0],
        format!("{} pgid={pid} pid={pid}", second.join("probe").display()),
        "{out}"
    );
    assert_eq!(lines[1], "SigBlk:\t0000000000000000", "{out}");
    assert_eq!(lines[2], "SigIgn:\t0000000000000000", "{out}");
    assert_eq!(lines[3], "/dev/null", "{out}");

    // Only a candidate that may not be run: the error says so.
    s.job = job_id();
    s.env.insert("PATH".into(), first.display().to_string());
    let msg = ex.start(&s).unwrap_err().to_string();
    assert!(msg.contains("cannot run `probe`"), "{msg}");
    assert!(msg.contains("Permission denied"), "{msg}");

    // A file that is no executable is not handed to a shell.
    let plain = bin.path().join("plain");
    std::fs::write(&plain, "echo not a program\n").unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut s = spec("host", &[plain.to_str().unwrap()]);
    s.job = job_id();
    let msg = ex.start(&s).unwrap_err().to_string();
    assert!(msg.contains("Exec format error"), "{msg}");
}

#[test]
fn an_attempt_cannot_be_started_twice() {
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let s = spec("host", &["true"]);
    let a = ex.start(&s).unwrap();
    let err = ex.start(&s).unwrap_err();
    assert!(matches!(err, ExecError::AttemptExists { .. }), "{err}");
    wait_exit(&a, LONG);
    a.acknowledge().unwrap();
    ex.start(&s).unwrap();
}

/// Whether `fd` is readable within `ms` milliseconds.
fn readable_within(fd: &std::os::fd::OwnedFd, ms: i32) -> bool {
    use nix::libc;
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n == 1
}

#[test]
fn the_shims_pidfd_fires_once_the_end_is_recorded() {
    init();
    let spool = test_dir();
    let work = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let a = ex.start(&job_waiting_for_go(work.path())).unwrap();
    let fd = a.shim_pidfd().expect("a pidfd of the running shim");
    // Running: the descriptor stays quiet, and there is no end to read.
    assert!(!readable_within(&fd, 200));
    assert_eq!(a.exit(), None);
    std::fs::write(work.path().join("go"), "").unwrap();
    assert!(readable_within(&fd, 30_000), "the pidfd did not fire");
    // The shim records the end before it exits: the end is there to read at once.
    let st = a.exit().expect("the end, recorded before the shim went");
    assert_eq!(st.code, Some(0), "{st:?}");
    assert_eq!(stdout(&a), "done\n");
    // Gone: no descriptor for a shim that has ended.
    assert!(a.shim_pidfd().is_none());
    a.acknowledge().unwrap();
}

#[test]
fn an_attempt_whose_spec_never_reached_the_disk_is_cleared_and_may_start_again() {
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let s = spec("host", &["true"]);
    // What a crash leaves when the spec was not written, or not kept: the directory,
    // and a spec file without its bytes.
    let dir = ex.start(&s).map(|a| a.dir().to_path_buf()).unwrap();
    let adopted = &Executors::new(spool.path()).unwrap().adopt().unwrap()[0];
    wait_exit(adopted, LONG);
    // As after a crash, no shim is left: it records the end just before it exits, and
    // an attempt whose shim still runs is kept whatever its spec says.
    if let Some(fd) = adopted.shim_pidfd() {
        assert!(readable_within(&fd, 30_000), "the shim did not exit");
    }
    std::fs::write(dir.join("spec.json"), "").unwrap();
    std::fs::remove_file(dir.join("exit.json")).unwrap();
    assert!(ex.adopt().unwrap().is_empty());
    assert!(!dir.exists(), "{} is left", dir.display());
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0));
}

/// A job that runs until a file `go` appears in `dir`, then prints `done`.
fn job_waiting_for_go(dir: &Path) -> tranche_agent::exec::LaunchSpec {
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            "while [ ! -e go ]; do sleep 0.01; done; echo done",
        ],
    );
    s.cwd = Some(dir.to_string_lossy().into_owned());
    s
}

const AGENT_SPOOL_ENV: &str = "TRANCHE_TEST_AGENT_SPOOL";
const AGENT_WORK_ENV: &str = "TRANCHE_TEST_AGENT_WORK";
const AGENT_JOB_ENV: &str = "TRANCHE_TEST_AGENT_JOB";

/// The "agent" of `jobs_survive_the_agent_being_killed`, which runs it in a child process
/// of this test binary (`--ignored --exact`): starts a job, says so, and waits to be
/// killed. It is no test by itself.
#[test]
#[ignore = "the agent process of jobs_survive_the_agent_being_killed, which runs it"]
fn agent_role_for_restart_test() {
    let env = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} unset: this is run by jobs_survive_the_agent_being_killed; run that")
        })
    };
    init();
    let ex = Executors::new(Path::new(&env(AGENT_SPOOL_ENV))).unwrap();
    let mut s = job_waiting_for_go(Path::new(&env(AGENT_WORK_ENV)));
    s.job = JobId(env(AGENT_JOB_ENV).parse().unwrap());
    ex.start(&s).unwrap();
    let mut out = std::io::stdout();
    out.write_all(b"STARTED\n").unwrap();
    out.flush().unwrap();
    // Blocks until the parent kills this process (or, had the parent died, until its
    // end of the pipe closes).
    let _ = std::io::stdin().read_line(&mut String::new());
}

#[test]
fn jobs_survive_the_agent_being_killed() {
    init();
    let spool = test_dir();
    let work = tempfile::tempdir().unwrap();
    let job = job_id();
    // The agent: this test binary again, running only `agent_role_for_restart_test`.
    let mut agent = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "agent_role_for_restart_test",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(AGENT_SPOOL_ENV, spool.path())
        .env(AGENT_WORK_ENV, work.path())
        .env(AGENT_JOB_ENV, job.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + LONG;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("STARTED") => break,
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = agent.kill();
                panic!("the agent did not start the job within {LONG:?}");
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!(
                    "the agent exited before starting the job: {:?}",
                    agent.wait()
                )
            }
        }
    }
    // kill -9 the agent.
    agent.kill().unwrap();
    agent.wait().unwrap();

    let ex = Executors::new(spool.path()).unwrap();
    let found = ex.adopt().unwrap();
    assert_eq!(found.len(), 1);
    let a = &found[0];
    assert_eq!(
        (a.job(), a.attempt(), a.kind()),
        (job, AttemptNo(0), ExecKind::Process)
    );
    // The job waits for `go`: it can only have ended with the agent.
    assert!(a.exit().is_none(), "the job died with the agent");
    assert!(a.alive());
    std::fs::write(work.path().join("go"), "").unwrap();
    let st = wait_exit(a, LONG);
    assert_eq!(st.code, Some(0), "{st:?}");
    assert_eq!(stdout(a), "done\n");
    // Not acknowledged yet: still adopted, with its exit.
    let again = ex.adopt().unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].exit(), Some(st));
    a.acknowledge().unwrap();
    assert!(ex.adopt().unwrap().is_empty());
}

#[test]
fn adopt_in_process_after_dropping_the_executors() {
    init();
    let spool = test_dir();
    let work = tempfile::tempdir().unwrap();
    let job = {
        let ex = Executors::new(spool.path()).unwrap();
        ex.start(&job_waiting_for_go(work.path())).unwrap().job()
    };
    let ex = Executors::new(spool.path()).unwrap();
    let found = ex.adopt().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].job(), job);
    assert!(found[0].alive() && found[0].exit().is_none());
    std::fs::write(work.path().join("go"), "").unwrap();
    assert_eq!(wait_exit(&found[0], LONG).code, Some(0));
    assert_eq!(stdout(&found[0]), "done\n");
    found[0].acknowledge().unwrap();
    assert!(ex.adopt().unwrap().is_empty());
}

#[test]
fn a_vanished_shim_leaves_a_lost_attempt_that_can_still_be_stopped() {
    let test = "a_vanished_shim_leaves_a_lost_attempt_that_can_still_be_stopped";
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let a = ex.start(&spec("host", &["sleep", "1000"])).unwrap();
    let pid = main_pid(&a);
    let shim = shim_pid(&a);
    // SAFETY: kill(2) on the shim this test started.
    assert_eq!(unsafe { nix::libc::kill(shim, nix::libc::SIGKILL) }, 0);
    wait_until("the shim to go", LONG, || pid_gone(shim));
    // The job outlives its shim, and is still found.
    assert!(a.alive());
    assert_eq!(a.exit(), None);
    // `sleep` dies of SIGTERM at once; the grace only keeps a slow machine from
    // turning that into a kill.
    let out = a.stop(15, Duration::from_secs(30));
    assert!(matches!(out, StopOutcome::ExitedInGrace { .. }), "{out:?}");
    // Nobody reaped the job, so its status is unknown: the attempt is settled as lost.
    assert_eq!((out.status().code, out.status().signal), (None, None));
    assert_eq!(a.exit(), Some(*out.status()));
    assert_nothing_left(test, &a, &[pid]);
    assert!(ex.adopt().unwrap().is_empty());
}

/// The daemon holds more than one handle of an attempt (its table, a stop in progress):
/// once one handle acknowledges the exit and clears the directory, the others see an
/// ended attempt at once, and do not wait for an exit status that will never come.
#[test]
fn an_attempt_acknowledged_through_another_handle_has_ended() {
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    let a = ex.start(&spec("host", &["true"])).unwrap();
    let other = a.clone();
    wait_exit(&a, LONG);
    a.acknowledge().unwrap();
    assert!(!a.dir().exists());
    assert!(other.exit().is_some(), "a cleared attempt reads as ended");
    let (tx, rx) = mpsc::channel();
    let stopping = other.clone();
    std::thread::spawn(move || {
        let _ = tx.send(stopping.stop(15, Duration::from_secs(5)));
    });
    // A stop that waited for the shim's exit status would give up only after 30 s
    // and record the attempt as lost; this one has nothing to wait for.
    let outcome = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the stop waited for an exit status that never comes");
    assert!(
        matches!(outcome, StopOutcome::ExitedInGrace { .. }),
        "{outcome:?}"
    );
    assert!(
        !other.dir().exists(),
        "nothing is written into a cleared attempt"
    );
}

/// Each attempt with GPUs leaves a bind and a free line in the spool's GPU ledger,
/// around every instant the job ran.
#[test]
fn the_gpu_ledger_pairs_bind_and_free() {
    init();
    let spool = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    // The job's first and last instants, in µs since the epoch.
    let mut s = spec("host", &["sh", "-c", "date +%s%6N; sleep 0.2; date +%s%6N"]);
    s.gpus = gpus(&[1, 3]);
    let a = ex.start(&s).unwrap();
    let st = wait_exit(&a, LONG);
    assert_eq!(st.code, Some(0), "{}", stderr(&a));
    let ran: Vec<u64> = stdout(&a).lines().map(|l| l.parse().unwrap()).collect();
    let (entries, bad) = tranche_agent::exec::ledger::read(spool.path()).unwrap();
    assert_eq!(bad, 0);
    assert_eq!(entries.len(), 2, "{entries:?}");
    let (bind, free) = (&entries[0], &entries[1]);
    assert!(bind.bind && !free.bind);
    assert_eq!((bind.job, bind.attempt), (s.job, s.attempt));
    assert_eq!(bind.gpus, [GpuIndex(1), GpuIndex(3)]);
    assert_eq!(free.gpus, [GpuIndex(1), GpuIndex(3)]);
    assert!(
        bind.t_us <= ran[0] && ran[1] <= free.t_us,
        "the job ran {ran:?} outside {bind:?} .. {free:?}"
    );
    // Read right after the exit status appeared: the free line was written before it,
    // and after the job's last process was gone.
    assert!(
        free.t_us / 1000 >= st.at_ms,
        "free is written after the job ended: {free:?} {st:?}"
    );
    a.acknowledge().unwrap();
    // An attempt without GPUs writes nothing.
    let b = ex.start(&spec("host", &["true"])).unwrap();
    wait_exit(&b, LONG);
    assert_eq!(
        tranche_agent::exec::ledger::read(spool.path())
            .unwrap()
            .0
            .len(),
        2
    );
}

on_v1_and_v2!(two_spools_run_the_same_attempt_side_by_side);
/// Two agents on one host (two clusters, so job ids collide): the same job and attempt
/// runs from both spools at once, each in its own cgroup, and neither the end nor the
/// restart of one touches the other.
fn two_spools_run_the_same_attempt_side_by_side(test: &str, mode: CgroupMode) {
    init();
    let (spool1, spool2) = (test_dir(), test_dir());
    let work = tempfile::tempdir().unwrap();
    let Some(ex1) = executors_on(test, spool1.path(), mode) else {
        return;
    };
    let ex2 = Executors::with_cgroups(spool2.path(), mode).unwrap();
    let job = job_id();
    // Prints `from <who>` and runs until the file `go-<who>` appears.
    let start = |ex: &Executors, who: &str| {
        let script = format!("echo from {who}; while [ ! -e go-{who} ]; do sleep 0.01; done");
        let mut s = spec("host", &["sh", "-c", &script]);
        s.job = job;
        s.cwd = Some(work.path().to_string_lossy().into_owned());
        ex.start(&s).unwrap()
    };
    let go = |who: &str| std::fs::write(work.path().join(format!("go-{who}")), "").unwrap();
    let a1 = start(&ex1, "one");
    let a2 = start(&ex2, "two");
    assert_eq!((a1.job(), a1.attempt()), (a2.job(), a2.attempt()));
    assert_ne!(a1.cgroup_name(), a2.cgroup_name());
    let (d1, d2) = (a1.cgroup_dirs().unwrap(), a2.cgroup_dirs().unwrap());
    assert_ne!(d1.track, d2.track);
    let p2 = main_pid(&a2);
    assert!(cgroup_procs(&d1.track).contains(&main_pid(&a1)));
    assert!(!cgroup_procs(&d1.track).contains(&p2));
    assert!(cgroup_procs(&d2.track).contains(&p2));

    // The first ends; its cgroup goes once the end is acknowledged, the other's stays
    // with its job in it.
    go("one");
    assert_eq!(wait_exit(&a1, LONG).code, Some(0));
    assert_eq!(stdout(&a1), "from one\n");
    assert!(cgroup_procs(&d1.track).is_empty());
    a1.acknowledge().unwrap();
    assert!(!d1.track.exists(), "{} left behind", d1.track.display());
    assert!(a2.alive() && cgroup_procs(&d2.track).contains(&p2));

    // An earlier incarnation of the attempt left its cgroup with a process in it (an
    // agent stopped between making the cgroup and recording the attempt).
    std::fs::create_dir(&d1.track).unwrap();
    let mut stray = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    std::fs::write(d1.track.join("cgroup.procs"), stray.id().to_string()).unwrap();
    assert_eq!(cgroup_procs(&d1.track), [stray.id() as i32]);
    // The first spool starts the same attempt again: what the earlier incarnation left
    // in its cgroup is killed, and nothing of the other spool's job.
    let again = start(&ex1, "again");
    assert_eq!(again.cgroup_dirs().unwrap().track, d1.track);
    let killed = stray.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed),
        Some(9)
    );
    let procs = cgroup_procs(&d1.track);
    assert!(procs.contains(&main_pid(&again)), "{procs:?}");
    assert!(!procs.contains(&(stray.id() as i32)), "{procs:?}");
    assert!(a2.alive() && cgroup_procs(&d2.track).contains(&p2));

    go("two");
    assert_eq!(wait_exit(&a2, LONG).code, Some(0));
    assert_eq!(stdout(&a2), "from two\n");
    a2.acknowledge().unwrap();
    assert!(!d2.track.exists(), "{} left behind", d2.track.display());
    assert!(again.alive() && d1.track.exists());
    go("again");
    assert_eq!(wait_exit(&again, LONG).code, Some(0));
    assert_eq!(stdout(&again), "from again\n");
    assert_nothing_left(test, &again, &[p2]);
}

/// The shim launchers running for the executors spooling in `spool` (from their
/// command lines; a launcher that has exited but is not reaped yet has none).
fn launchers_of(spool: &Path) -> Vec<i32> {
    let needle = format!("shim-launcher --spool {} ", spool.display());
    tranche_local::pids_matching(&needle)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

/// The field after the command name in `/proc/<pid>/stat`: state, then the parent's pid.
fn parent_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(1).unwrap().parse().unwrap()
}

#[test]
fn shims_are_forked_by_one_launcher_which_is_replaced_when_it_dies() {
    init();
    let spool = test_dir();
    let work = test_dir();
    let ex = Executors::new(spool.path()).unwrap();
    assert!(
        launchers_of(spool.path()).is_empty(),
        "started before any attempt"
    );
    let a = ex.start(&job_waiting_for_go(work.path())).unwrap();
    let first = launchers_of(spool.path());
    assert_eq!(first.len(), 1, "launchers: {first:?}");
    // The shim is the launcher's child, named for `ps` after its attempt.
    let shim = shim_pid(&a);
    assert_eq!(parent_of(shim), first[0]);
    let comm = std::fs::read_to_string(format!("/proc/{shim}/comm")).unwrap();
    assert_eq!(comm.trim(), "tranche-shim");
    let cmdline = std::fs::read(format!("/proc/{shim}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    let shown = cmdline.trim_end_matches('\0');
    assert_eq!(shown, format!("tranche-shim {}", a.dir().display()));
    // A launcher that dies is replaced by the next attempt's start; its shim goes on.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("the launcher is gone", LONG, || {
        launchers_of(spool.path()).is_empty()
    });
    let b = ex
        .start(&spec("host", &["sh", "-c", "echo second"]))
        .unwrap();
    assert_eq!(wait_exit(&b, LONG).code, Some(0), "{}", stderr(&b));
    assert_eq!(stdout(&b), "second\n");
    // The new launcher reaps the shims it forked once they end.
    let b_shim = shim_pid(&b);
    wait_until("the second shim is reaped", LONG, || {
        !Path::new(&format!("/proc/{b_shim}")).exists()
    });
    // Attempts started at once from several threads each get their own shim.
    let many: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let ex = &ex;
                scope.spawn(move || {
                    ex.start(&spec("host", &["sh", "-c", &format!("echo {i}")]))
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, m) in many.iter().enumerate() {
        assert_eq!(wait_exit(m, LONG).code, Some(0), "{}", stderr(m));
        assert_eq!(stdout(m), format!("{i}\n"));
    }
    let second = launchers_of(spool.path());
    assert_eq!(second.len(), 1, "launchers: {second:?}");
    assert_ne!(second, first);
    // Dropping the executors (as the agent stopping does) ends the launcher and
    // leaves the job running.
    drop(ex);
    assert!(launchers_of(spool.path()).is_empty());
    assert!(a.alive() && a.exit().is_none());
    std::fs::write(work.path().join("go"), "").unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0));
    assert_eq!(stdout(&a), "done\n");
}

/// A directory for attempts outside a spool: on `/dev/shm` (a tmpfs, another file
/// system than the spool's) where this machine has it, else beside the spool.
fn attempts_elsewhere() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let t = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    };
    t.unwrap()
}

/// With `attempts_dir` set, attempts run from there, while what outlives them stays in
/// the spool: the kept output (moved across file systems), the GPU ledger.
#[test]
fn attempts_kept_outside_the_spool_keep_their_output_and_ledger_in_it() {
    init();
    let spool = test_dir();
    let elsewhere = attempts_elsewhere();
    let attempts = elsewhere.path().join("attempts-n1");
    let ex = Executors::open(spool.path(), Some(&attempts), CgroupMode::Auto).unwrap();
    let mut s = spec("host", &["sh", "-c", "echo out; echo err >&2"]);
    s.gpus = gpus(&[2]);
    let a = ex.start(&s).unwrap();
    assert!(a.dir().starts_with(&attempts), "{}", a.dir().display());
    assert!(!spool.path().join("attempts").exists());
    let st = wait_exit(&a, LONG);
    assert_eq!(st.code, Some(0), "{}", stderr(&a));
    a.acknowledge().unwrap();
    assert!(!a.dir().exists());
    let (out, err) = tranche_agent::exec::kept_logs(spool.path(), s.job, s.attempt);
    assert_eq!(std::fs::read_to_string(out).unwrap(), "out\n");
    assert_eq!(std::fs::read_to_string(err).unwrap(), "err\n");
    let (entries, bad) = tranche_agent::exec::ledger::read(spool.path()).unwrap();
    assert_eq!((entries.len(), bad), (2, 0), "{entries:?}");
    assert!(entries[0].bind && !entries[1].bind);
    assert_eq!(entries[0].gpus, [GpuIndex(2)]);
    assert!(ex.adopt().unwrap().is_empty());
}

/// An agent restarted with another `attempts_dir` (or without one) still adopts the
/// attempts running from the one before: none is left unsupervised.
#[test]
fn a_restart_that_moves_the_attempts_directory_adopts_the_running_ones() {
    init();
    let spool = test_dir();
    let work = tempfile::tempdir().unwrap();
    let elsewhere = attempts_elsewhere();
    let attempts = elsewhere.path().join("attempts-n1");
    let job = {
        let ex = Executors::open(spool.path(), Some(&attempts), CgroupMode::Auto).unwrap();
        ex.start(&job_waiting_for_go(work.path())).unwrap().job()
    };
    // Back to the default, `<spool>/attempts`.
    let ex = Executors::new(spool.path()).unwrap();
    let found = ex.adopt().unwrap();
    assert_eq!(found.len(), 1, "the running attempt was not adopted");
    assert_eq!(found[0].job(), job);
    assert!(found[0].dir().starts_with(&attempts));
    assert!(found[0].alive() && found[0].exit().is_none());
    // And a new attempt starts in the new place.
    let b = ex.start(&spec("host", &["true"])).unwrap();
    assert!(b.dir().starts_with(spool.path().join("attempts")));
    wait_exit(&b, LONG);
    b.acknowledge().unwrap();
    std::fs::write(work.path().join("go"), "").unwrap();
    assert_eq!(wait_exit(&found[0], LONG).code, Some(0));
    assert_eq!(stdout(&found[0]), "done\n");
    found[0].acknowledge().unwrap();
    assert!(ex.adopt().unwrap().is_empty());
}
