//! The process executor (`image = "host"`), with real processes and shims.

mod exec_common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use exec_common::*;
use tranche_agent::exec::{signal_number, ExecError, ExecKind, Executors, StopOutcome};

const LONG: Duration = Duration::from_secs(20);

#[test]
fn output_and_exit_code() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    eprintln!("cgroups: {}", ex.cgroup_summary());
    let a = ex
        .start(&spec("host", &["sh", "-c", "echo hello; exit 3"]))
        .unwrap();
    assert_eq!(a.kind(), ExecKind::Process);
    let st = wait_exit(&a, LONG);
    assert_eq!(st.code, Some(3), "{st:?}");
    assert_eq!(st.signal, None);
    assert_eq!(stdout(&a), "hello\n");
    assert!(!a.alive());
    if let Some(cg) = pids_cgroup(&a) {
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
    a.acknowledge().unwrap();
    assert!(!a.dir().exists());
}

#[test]
fn env_holds_exactly_the_gpu_binding() {
    init();
    let spool = tempfile::tempdir().unwrap();
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

#[test]
fn job_runs_in_its_cgroup_with_limits() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let mut s = spec("host", &["sh", "-c", "cat /proc/self/cgroup; sleep 30"]);
    s.memory_mb = 96;
    s.cpus = 1;
    let a = ex.start(&s).unwrap();
    let name = a.cgroup_name();
    assert!(
        name.ends_with(&format!("-{}.{}", a.job(), a.attempt())),
        "{name}"
    );
    let t0 = Instant::now();
    while !stdout(&a).contains("pids") && t0.elapsed() < LONG {
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = stdout(&a);
    let mem = Path::new("/sys/fs/cgroup/memory/tranche").join(&name);
    let cpu = Path::new("/sys/fs/cgroup/cpu/tranche").join(&name);
    if ex.cgroup_summary().contains("track=v1 pids") {
        assert!(
            out.lines()
                .any(|l| l.contains(":pids:") && l.ends_with(&format!("/tranche/{name}"))),
            "{out}"
        );
        assert!(a.alive());
    }
    if mem.is_dir() {
        let limit = std::fs::read_to_string(mem.join("memory.limit_in_bytes")).unwrap();
        assert_eq!(limit.trim(), (96u64 << 20).to_string());
    }
    if cpu.is_dir() {
        let quota = std::fs::read_to_string(cpu.join("cpu.cfs_quota_us")).unwrap();
        assert_eq!(quota.trim(), "100000");
    }
    // A generous grace: on a loaded machine the shim may be slow to reap; a job that
    // dies of SIGTERM must still be seen to exit within it.
    let out = a.stop(signal_number("TERM").unwrap(), Duration::from_secs(20));
    assert!(matches!(out, StopOutcome::ExitedInGrace { .. }), "{out:?}");
    assert_eq!(out.status().signal, Some(15));
    assert!(!mem.exists() && !cpu.exists(), "cgroups left behind");
}

#[test]
fn stop_lets_a_checkpointing_job_exit_in_grace() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            "trap 'echo saved > ckpt; exit 0' TERM; echo ready > ready; sleep 100 & wait",
        ],
    );
    s.cwd = Some(work.path().to_string_lossy().into_owned());
    let a = ex.start(&s).unwrap();
    wait_file(&work.path().join("ready"), LONG);
    let t0 = Instant::now();
    let out = a.stop(signal_number("SIGTERM").unwrap(), Duration::from_secs(5));
    let took = t0.elapsed();
    eprintln!("process executor: checkpointing job ended {took:?} after SIGTERM");
    match out {
        StopOutcome::ExitedInGrace { status } => assert_eq!(status.code, Some(0)),
        other => panic!("expected ExitedInGrace, got {other:?}"),
    }
    assert!(took < Duration::from_secs(5));
    assert_eq!(
        std::fs::read_to_string(work.path().join("ckpt")).unwrap(),
        "saved\n"
    );
    assert!(!a.alive());
}

#[test]
fn stop_kills_every_process_after_the_grace() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    // The job ignores SIGTERM and starts a child in a session of its own (so neither
    // its parent nor its process group lead to it) that ignores SIGTERM too.
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            "trap '' TERM; setsid sh -c 'echo $$ > child; exec sleep 1000' & \
             echo ready > ready; while :; do sleep 1; done",
        ],
    );
    s.cwd = Some(work.path().to_string_lossy().into_owned());
    let a = ex.start(&s).unwrap();
    wait_file(&work.path().join("ready"), LONG);
    wait_file(&work.path().join("child"), LONG);
    std::thread::sleep(Duration::from_millis(50));
    let child: i32 = std::fs::read_to_string(work.path().join("child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!pid_gone(child));
    let grace = Duration::from_millis(1500);
    let t0 = Instant::now();
    let out = a.stop(15, grace);
    let took = t0.elapsed();
    eprintln!(
        "process executor: SIGTERM-ignoring job killed {took:?} after SIGTERM (grace {grace:?})"
    );
    match out {
        StopOutcome::Killed { status } => assert_eq!(status.signal, Some(9), "{status:?}"),
        other => panic!("expected Killed, got {other:?}"),
    }
    assert!(
        took >= grace - Duration::from_millis(500) && took <= grace + Duration::from_millis(500),
        "took {took:?} for a grace of {grace:?}"
    );
    assert!(!a.alive());
    assert!(pid_gone(child), "the job's child {child} survived");
    if let Some(cg) = pids_cgroup(&a) {
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
}

#[test]
fn runs_as_the_given_user() {
    if !is_root() {
        eprintln!("SKIPPED (needs root): runs_as_the_given_user");
        return;
    }
    init();
    let spool = tempfile::tempdir().unwrap();
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
    let spool = tempfile::tempdir().unwrap();
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

#[test]
fn an_attempt_cannot_be_started_twice() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let s = spec("host", &["true"]);
    let a = ex.start(&s).unwrap();
    let err = ex.start(&s).unwrap_err();
    assert!(matches!(err, ExecError::AttemptExists { .. }), "{err}");
    wait_exit(&a, LONG);
    a.acknowledge().unwrap();
    ex.start(&s).unwrap();
}

/// Runs as the "agent" in a child process of `jobs_survive_the_agent_being_killed`.
#[test]
fn agent_role_for_restart_test() {
    let Some(spool) = std::env::var_os("TRANCHE_TEST_AGENT_SPOOL") else {
        return;
    };
    init();
    let ex = Executors::new(Path::new(&spool)).unwrap();
    let mut s = spec("host", &["sh", "-c", "sleep 2; echo done"]);
    s.job = std::env::var("TRANCHE_TEST_AGENT_JOB")
        .unwrap()
        .parse()
        .unwrap();
    ex.start(&s).unwrap();
    println!("STARTED");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn jobs_survive_the_agent_being_killed() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let job = job_id();
    // The agent: this test binary again, running only `agent_role_for_restart_test`.
    let mut agent = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "agent_role_for_restart_test",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TRANCHE_TEST_AGENT_SPOOL", spool.path())
        .env("TRANCHE_TEST_AGENT_JOB", job.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    let t0 = Instant::now();
    loop {
        let line = lines
            .next()
            .expect("agent exited before starting the job")
            .unwrap();
        if line.contains("STARTED") {
            break;
        }
        assert!(t0.elapsed() < LONG);
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
        (job, 0, ExecKind::Process)
    );
    assert!(a.exit().is_none(), "the job died with the agent");
    assert!(a.alive());
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
    let spool = tempfile::tempdir().unwrap();
    let job = {
        let ex = Executors::new(spool.path()).unwrap();
        let a = ex
            .start(&spec("host", &["sh", "-c", "sleep 2; echo done"]))
            .unwrap();
        a.job()
    };
    let ex = Executors::new(spool.path()).unwrap();
    let found = ex.adopt().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].job(), job);
    assert!(found[0].alive());
    assert_eq!(wait_exit(&found[0], LONG).code, Some(0));
    assert_eq!(stdout(&found[0]), "done\n");
    found[0].acknowledge().unwrap();
    assert!(ex.adopt().unwrap().is_empty());
}

#[test]
fn a_vanished_shim_leaves_a_lost_attempt_that_can_still_be_stopped() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let a = ex.start(&spec("host", &["sleep", "30"])).unwrap();
    let shim: i32 = std::fs::read_to_string(a.dir().join("shim.pid"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: kill(2) on the shim this test started.
    assert_eq!(unsafe { nix::libc::kill(shim, nix::libc::SIGKILL) }, 0);
    let t0 = Instant::now();
    while !pid_gone(shim) {
        assert!(t0.elapsed() < LONG);
        std::thread::sleep(Duration::from_millis(10));
    }
    // The job outlives its shim, and is still found.
    assert!(a.alive());
    assert_eq!(a.exit(), None);
    let out = a.stop(15, Duration::from_secs(5));
    assert!(matches!(out, StopOutcome::ExitedInGrace { .. }), "{out:?}");
    // Nobody reaped the job, so its status is unknown: the attempt is settled as lost.
    assert_eq!((out.status().code, out.status().signal), (None, None));
    assert_eq!(a.exit(), Some(*out.status()));
    if let Some(cg) = pids_cgroup(&a) {
        assert!(!cg.exists(), "cgroup {} left behind", cg.display());
    }
    a.acknowledge().unwrap();
    assert!(ex.adopt().unwrap().is_empty());
}

/// The daemon holds more than one handle of an attempt (its table, a stop in progress):
/// once one handle acknowledges the exit and clears the directory, the others see an
/// ended attempt at once, and do not wait for an exit status that will never come.
#[test]
fn an_attempt_acknowledged_through_another_handle_has_ended() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let a = ex.start(&spec("host", &["true"])).unwrap();
    let other = a.clone();
    wait_exit(&a, LONG);
    a.acknowledge().unwrap();
    assert!(!a.dir().exists());
    assert!(other.exit().is_some(), "a cleared attempt reads as ended");
    let t0 = Instant::now();
    let outcome = other.stop(15, Duration::from_secs(5));
    assert!(
        matches!(outcome, StopOutcome::ExitedInGrace { .. }),
        "{outcome:?}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "stop took {:?}",
        t0.elapsed()
    );
    assert!(
        !other.dir().exists(),
        "nothing is written into a cleared attempt"
    );
}

/// Each attempt with GPUs leaves a bind and a free line in the spool's GPU ledger, the
/// free after the job's end.
#[test]
fn the_gpu_ledger_pairs_bind_and_free() {
    init();
    let spool = tempfile::tempdir().unwrap();
    let ex = Executors::new(spool.path()).unwrap();
    let mut s = spec("host", &["sleep", "0.2"]);
    s.gpus = gpus(&[1, 3]);
    let a = ex.start(&s).unwrap();
    let st = wait_exit(&a, LONG);
    let (entries, bad) = tranche_agent::exec::ledger::read(spool.path()).unwrap();
    assert_eq!(bad, 0);
    assert_eq!(entries.len(), 2, "{entries:?}");
    let (bind, free) = (&entries[0], &entries[1]);
    assert!(bind.bind && !free.bind);
    assert_eq!((bind.job, bind.attempt), (s.job, s.attempt));
    assert_eq!(bind.gpus, vec![1, 3]);
    assert_eq!(free.gpus, vec![1, 3]);
    assert!(free.t_us >= bind.t_us + 200_000, "{bind:?} {free:?}");
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
