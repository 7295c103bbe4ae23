//! A controller trio and real `tranche-agent` processes on 127.0.0.1, fake GPUs,
//! jobs as real processes.

use std::path::{Path, PathBuf};
use std::process::Command as Proc;
use std::time::{Duration, Instant, SystemTime};

use tranche_agent::exec::AttemptNo;
use tranche_client::{Client, ClientError};
use tranche_local::rig::{self, http_get, job, now_ms, rss_mib, rt, serial, wait_for};
use tranche_local::{demo, LocalCluster};
use tranche_model::{JobId, JobSpec, JobStatus};
use tranche_proto::{ApiError, Query, Response};
use tranche_tls::{issue_valid_between, revoke, RevokeTarget, Role};

mod exec_common;

fn agent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tranche-agent"))
}

/// `tranched` from the same target dir; built on demand when this package's tests run
/// alone.
fn tranched_bin() -> PathBuf {
    rig::sibling_bin(&agent_bin(), "tranched", "tranched")
}

/// The `tranche` CLI from the same target dir, built on demand like `tranched`.
fn tranche_bin() -> PathBuf {
    rig::sibling_bin(&agent_bin(), "tranche", "tranche-cli")
}

/// Runs the `tranche` CLI as `user` (a config file pointing at the cluster with that
/// user's certificate, through `$TRANCHE_CONFIG`).
fn cli(c: &LocalCluster, dir: &Path, user: &str, args: &[&str]) -> std::process::Output {
    cli_as(c, dir, Role::User, user, args)
}

/// Runs the `tranche` CLI with the certificate of `role` and `name`.
fn cli_as(
    c: &LocalCluster,
    dir: &Path,
    role: Role,
    user: &str,
    args: &[&str],
) -> std::process::Output {
    let cfg = rig::cli_config(c, dir, role, user);
    Proc::new(tranche_bin())
        .args(args)
        .env("TRANCHE_CONFIG", &cfg)
        .output()
        .unwrap()
}

/// A local cluster whose agents' jobs are all killed when the test ends (jobs outlive
/// their agent by design; a test leaves none behind).
struct TestCluster(LocalCluster);

impl std::ops::Deref for TestCluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.0
    }
}

impl std::ops::DerefMut for TestCluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.0
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for i in 0..self.0.agents.len() {
            self.0.kill_agent(i);
            exec_common::clear_spool(&self.0.agents[i].spool);
        }
    }
}

/// Starts an agent for `node` with fake GPUs; `extra` adds top-level settings.
fn agent(c: &mut TestCluster, node: &str, gpus: &str, fence_after_s: u64, extra: &str) -> usize {
    let settings = format!("heartbeat_ms = 300\nfence_after_s = {fence_after_s}\n{extra}");
    c.add_agent(&agent_bin(), node, gpus, &settings).unwrap()
}

/// Three controllers that find a silent agent unreachable after 2 s and down after
/// 6 s, started; no agent yet.
fn cluster(dir: &Path) -> TestCluster {
    cluster_of(dir, tranched_bin())
}

/// [`cluster`] with the controllers run from `tranched` (a wrapper, say).
fn cluster_of(dir: &Path, tranched: PathBuf) -> TestCluster {
    let mut opts = rig::options(
        tranched,
        "[agents]\nunreachable_after_s = 2\ndown_after_s = 6\n",
    );
    opts.log_filter = "info".into();
    TestCluster(rig::start(dir, 3, opts))
}

/// One queue on 4 GPUs: `lender` (LEND, 2) and `borrower` (LEND_AND_BORROW, 2, no cap).
async fn policy(admin: &Client) {
    rig::apply(admin, demo::lend_borrow(4, 5)).await;
}

fn host_job(share: &str, token: &str, script: &str) -> JobSpec {
    let mut spec = demo::job(share, "kim", token);
    spec.image = "host".into();
    spec.command = vec!["sh".into(), "-c".into(), script.into()];
    spec
}

#[test]
fn a_job_runs_on_an_agent_and_succeeds() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "4 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let mut spec = host_job(
            "lender",
            "ok1",
            "echo \"gpus=$CUDA_VISIBLE_DEVICES job=$TRANCHE_JOB_ID\" > \"$OUT_FILE\"; exit 0",
        );
        let out = dir.path().join("ok1.out");
        spec.env
            .insert("OUT_FILE".into(), out.display().to_string());
        spec.request.gpus_per_node = 2;
        let (id, _) = admin.submit(spec).await.unwrap();
        let j = wait_for(&admin, id, "success", Duration::from_secs(30), |j| {
            j.status == JobStatus::Succeeded
        })
        .await;
        let alloc = &j.attempts[0].allocation[0];
        let want: Vec<String> = alloc.gpus.iter().map(|g| g.0.to_string()).collect();
        let text = std::fs::read_to_string(&out).unwrap();
        assert_eq!(text.trim(), format!("gpus={} job={id}", want.join(",")));

        let (bad, _) = admin
            .submit(host_job("lender", "bad1", "exit 7"))
            .await
            .unwrap();
        let j = wait_for(&admin, bad, "failure", Duration::from_secs(30), |j| {
            j.status.is_terminal() || j.attempts.len() > 1
        })
        .await;
        assert_eq!(
            j.attempts[0].end,
            Some(tranche_model::AttemptEnd::Exited { code: 7 }),
            "{j:?}"
        );
    });
}

#[test]
fn reclaim_signals_the_borrower_which_exits_and_requeues() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "4 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let ckpt = dir.path().join("ckpt");
        std::fs::create_dir_all(&ckpt).unwrap();
        // Four borrower jobs fill the node (two of them on the lender's idle GPUs). Each
        // writes a checkpoint file on SIGTERM and exits 0.
        let mut borrowers = vec![];
        for i in 0..4 {
            let script = format!(
                "trap 'touch {}/$TRANCHE_JOB_ID.$TRANCHE_ATTEMPT; exit 0' TERM; while true; do sleep 0.1; done",
                ckpt.display()
            );
            let (id, _) = admin.submit(host_job("borrower", &format!("b{i}"), &script)).await.unwrap();
            borrowers.push(id);
        }
        for &b in &borrowers {
            wait_for(&admin, b, "running", Duration::from_secs(30), |j| j.status == JobStatus::Running).await;
        }
        // The lender's own job arrives: it takes its capacity back.
        let (lend, _) = admin.submit(host_job("lender", "l1", "sleep 1; exit 0")).await.unwrap();
        wait_for(&admin, lend, "success", Duration::from_secs(30), |j| j.status == JobStatus::Succeeded).await;
        let mut preempted = 0;
        for &b in &borrowers {
            let j = job(&admin, b).await;
            if j.preemptions > 0 {
                preempted += 1;
                // Preempted and exited within its grace with code 0: never killed.
                assert!(
                    matches!(
                        j.attempts[0].end,
                        Some(tranche_model::AttemptEnd::Stopped { code: Some(0), .. })
                    ),
                    "{:?}",
                    j.attempts[0].end
                );
                assert!(ckpt.join(format!("{b}.1")).exists(), "job {b} wrote no checkpoint");
                // It was requeued and runs again once there is room.
                assert!(j.attempts.len() >= 2 || !j.status.is_terminal(), "{j:?}");
            }
        }
        assert_eq!(preempted, 1, "one borrower makes room for one lender job");
    });
}

#[test]
fn an_agent_killed_mid_job_readopts_it_and_reports_once() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    let a = agent(&mut c, "n1", "2 x h100", 30, "");
    let go = dir.path().join("go");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        // The job runs until the test creates `go`: it is still running when the new
        // agent adopts it.
        let script = format!(
            "while [ ! -e {} ]; do sleep 0.01; done; exit 0",
            go.display()
        );
        let (id, _) = admin
            .submit(host_job("lender", "k1", &script))
            .await
            .unwrap();
        wait_for(&admin, id, "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
        c.kill_agent(a);
        c.start_agent(&agent_bin(), a).unwrap();
        std::fs::write(&go, "").unwrap();
        let j = wait_for(&admin, id, "success", Duration::from_secs(30), |j| {
            j.status == JobStatus::Succeeded
        })
        .await;
        assert_eq!(
            j.attempts.len(),
            1,
            "the job ran more than once: {:?}",
            j.attempts
        );
        assert_eq!(
            j.attempts[0].end,
            Some(tranche_model::AttemptEnd::Exited { code: 0 })
        );
    });
}

#[test]
fn without_controllers_jobs_go_on_until_the_agent_fences() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    let maddr = c.reserve_tcp().unwrap();
    let mport: u16 = maddr.rsplit(':').next().unwrap().parse().unwrap();
    agent(
        &mut c,
        "n1",
        "2 x h100",
        3,
        &format!("metrics_addr = \"{maddr}\""),
    );
    let tick = dir.path().join("tick");
    let fenced = dir.path().join("fenced");
    let id = rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        // The job counts in `tick` until SIGTERM, which it notes in `fenced`.
        let script = format!(
            "trap 'echo TERM > {}; exit 0' TERM; i=0; \
             while true; do i=$((i+1)); echo $i > {}; sleep 0.1; done",
            fenced.display(),
            tick.display()
        );
        let (id, _) = admin
            .submit(host_job("lender", "f1", &script))
            .await
            .unwrap();
        wait_for(&admin, id, "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
        id
    });
    let ticks = || -> Option<u64> { std::fs::read_to_string(&tick).ok()?.trim().parse().ok() };
    let wait = |what: &str, done: &mut dyn FnMut() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < deadline, "{what} never happened");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait("the job's first tick", &mut || ticks().is_some());
    assert!(http_get(mport, "/metrics").contains("tranche_agent_fenced 0"));
    for i in 0..3 {
        c.kill(i);
    }
    let at_kill = ticks().unwrap();
    // The job goes on while the controllers are gone...
    wait("a tick after the controllers were gone", &mut || {
        fenced.exists() || ticks().is_some_and(|t| t > at_kill)
    });
    assert!(
        ticks().unwrap() > at_kill,
        "the job stopped with the controllers"
    );
    // ...and is stopped by the agent with its checkpoint signal once fence_after (3 s)
    // has passed since the agent last heard from them.
    wait("the agent's fence", &mut || fenced.exists());
    let mut m = String::new();
    wait("the fence in the agent's metrics", &mut || {
        m = http_get(mport, "/metrics");
        m.contains("tranche_agent_fenced 1") && m.contains("tranche_agent_attempts_running 0")
    });
    let age: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("tranche_agent_heartbeat_age_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .expect(&m);
    assert!(
        age >= 3.0,
        "fenced {age} s after the last contact, before fence_after: {m}"
    );
    // The agent restarts before it could report the fenced exit (it re-adopts the
    // attempt), then the controllers come back: the attempt is reported lost, not
    // failed (nor succeeded, though the job exited 0 on its checkpoint signal), and the
    // job runs again.
    c.kill_agent(0);
    c.start_agent(&agent_bin(), 0).unwrap();
    for i in 0..3 {
        c.start(i).unwrap();
    }
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        let j = wait_for(
            &admin,
            id,
            "a second attempt",
            Duration::from_secs(60),
            |j| j.attempts.len() >= 2 || j.status.is_terminal(),
        )
        .await;
        assert!(!j.status.is_terminal(), "{j:?}");
        assert_eq!(
            j.attempts[0].end,
            Some(tranche_model::AttemptEnd::Lost),
            "{j:?}"
        );
    });
}

#[test]
fn an_agent_restarted_without_controllers_fences_the_jobs_it_adopts() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 3, "");
    let fenced = dir.path().join("fenced");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let script = format!(
            "trap 'echo TERM > {}; exit 0' TERM; while true; do sleep 0.1; done",
            fenced.display()
        );
        let (id, _) = admin
            .submit(host_job("lender", "f2", &script))
            .await
            .unwrap();
        wait_for(&admin, id, "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
    });
    // The controllers go, then the agent restarts: it re-adopts the job, and cannot
    // register. It must still stop the job once fence_after (3 s) has passed.
    for i in 0..3 {
        c.kill(i);
    }
    c.kill_agent(0);
    c.start_agent(&agent_bin(), 0).unwrap();
    let restarted = Instant::now();
    while !fenced.exists() {
        assert!(
            restarted.elapsed() < Duration::from_secs(30),
            "the restarted agent never fenced the job it re-adopted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An agent frozen (SIGSTOP) longer than the controllers' `down_after_s` cannot fence
/// its node itself: the shims do, when the lease it no longer renews runs out, before
/// the controllers requeue the job on another node. The job never runs on two nodes.
#[test]
fn a_frozen_agents_jobs_stop_when_its_lease_runs_out() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 3, "");
    let log = dir.path().join("runs");
    let id = rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        // Each attempt notes its start and its checkpoint signal, with the time, in
        // `runs`.
        let script = format!(
            "note() {{ echo \"$1 $TRANCHE_ATTEMPT $(date +%s%N)\" >> {log}; }}; \
             trap 'note term; exit 0' USR1; note start; while true; do sleep 0.1; done",
            log = log.display()
        );
        let mut spec = host_job("lender", "frozen1", &script);
        spec.checkpoint.signal = "SIGUSR1".into();
        let (id, _) = admin.submit(spec).await.unwrap();
        wait_for(&admin, id, "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
        id
    });
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    let pid = c.agents[0].child.as_ref().unwrap().id() as i32;
    let pid = nix::unistd::Pid::from_raw(pid);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let frozen = Instant::now();
    // The lease runs out 3 s after the agent's last contact; the shim signals the job
    // with its own checkpoint signal.
    while !lines().contains("term 1") {
        assert!(
            frozen.elapsed() < Duration::from_secs(20),
            "the job of a frozen agent ran on: {}",
            lines()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stopped_after = frozen.elapsed();
    assert!(
        stopped_after < Duration::from_secs(5),
        "stopped {stopped_after:?} after the freeze, past fence_after (3 s) and a second"
    );
    // A second agent joins; the controllers find n1 DOWN after 6 s and requeue the job
    // there. Its first attempt was stopped before.
    agent(&mut c, "n2", "2 x h100", 3, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        wait_for(
            &admin,
            id,
            "a second attempt",
            Duration::from_secs(60),
            |j| j.attempts.len() >= 2 && j.status == JobStatus::Running,
        )
        .await;
    });
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let mut second = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while second.is_none() {
        assert!(
            Instant::now() < deadline,
            "no start of attempt 2: {}",
            lines()
        );
        second = lines()
            .lines()
            .find(|l| l.starts_with("start 2 "))
            .map(str::to_string);
        std::thread::sleep(Duration::from_millis(50));
    }
    let at = |l: &str| -> u128 { l.rsplit(' ').next().unwrap().trim().parse().unwrap() };
    let text = lines();
    let term1 = text.lines().find(|l| l.starts_with("term 1 ")).unwrap();
    assert!(
        at(term1) < at(second.as_deref().unwrap()),
        "attempt 2 started before attempt 1 was stopped: {text}"
    );
    // Once thawed, the first attempt stays ended lost (requeued), not failed.
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        let j = wait_for(
            &admin,
            id,
            "attempt 1's end",
            Duration::from_secs(30),
            |j| j.attempts[0].end.is_some(),
        )
        .await;
        assert_eq!(
            j.attempts[0].end,
            Some(tranche_model::AttemptEnd::Lost),
            "{j:?}"
        );
    });
}

/// The cluster's first node once it is drained (`drained`) or registered and not
/// drained (within 30 s).
async fn drained_or_up(admin: &Client, drained: bool) -> tranche_model::Node {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Response::Nodes(nodes)) = admin.read(Query::Nodes, false).await {
            if let Some(n) = nodes
                .into_iter()
                .next()
                .filter(|n| n.drain.is_some() == drained)
            {
                return n;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the node was never {}",
            if drained { "drained" } else { "up" }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A small tmpfs mounted for a test, unmounted when dropped (also on failure).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs at `at` with mount options `opts` (`size=64k`).
    fn mount(at: &Path, opts: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let st = Proc::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tranche-test"])
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs on {}", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Proc::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// An agent whose spool cannot be written (its attempts' file system full) does not
/// fail the jobs placed on it: each attempt is lost and requeued, and the node drains,
/// so that no further job is placed there to fail the same way.
#[test]
fn a_full_spool_loses_the_attempt_and_drains_the_node_rather_than_failing_the_job() {
    // Fill the file system to the last byte.
    let test = "a_full_spool_loses_the_attempt_and_drains_the_node_rather_than_failing_the_job";
    full_spool_run(test, "size=64k", |fs| {
        let mut i = 0;
        while std::fs::write(fs.join(format!("fill{i}")), vec![0u8; 4096]).is_ok() {
            i += 1;
        }
        let _ = std::fs::write(fs.join("last"), b"x");
    });
}

/// A spool with room for the agent's own files of an attempt but not for the shim's:
/// the shim can neither start the job nor say why, and the agent, looking at its
/// storage before it clears the attempt away (which gives the room back), still sees
/// the node's fault: the attempt is lost, not failed, and the node drains.
#[test]
fn a_spool_that_fills_under_the_shim_loses_the_attempt_rather_than_failing_the_job() {
    // Every inode taken but three: the attempt's directory, its spec and its plan.
    let test = "a_spool_that_fills_under_the_shim_loses_the_attempt_rather_than_failing_the_job";
    full_spool_run(test, "size=4m,nr_inodes=64", |fs| {
        let mut made = Vec::new();
        while std::fs::write(fs.join(format!("fill{}", made.len())), b"").is_ok() {
            made.push(fs.join(format!("fill{}", made.len())));
        }
        for f in made.iter().rev().take(3) {
            std::fs::remove_file(f).unwrap();
        }
    });
}

/// Runs one host job on an agent whose attempts live on a tmpfs mounted with `opts`
/// (filled by `fill` once the agent is up) and checks that its attempts are lost, not
/// failed, and the node drained for its spool.
fn full_spool_run(test: &str, opts: &str, fill: impl Fn(&Path)) {
    let _g = serial();
    if exec_common::lacks(test, exec_common::Need::Root) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let full = Tmpfs::mount(&dir.path().join("attempts-fs"), opts);
    let how = test;
    let attempts = full.0.join("attempts");
    std::fs::create_dir_all(&attempts).unwrap();
    let mut c = cluster(dir.path());
    agent(
        &mut c,
        "n1",
        "2 x h100",
        30,
        &format!("attempts_dir = \"{}\"", attempts.display()),
    );
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        // Up and registered before its spool fills.
        drop(drained_or_up(&admin, false).await);
        fill(&full.0);
        let (id, _) = admin
            .submit(host_job("lender", "full1", "echo should not fail"))
            .await
            .unwrap();
        let j = wait_for(
            &admin,
            id,
            "its attempt lost",
            Duration::from_secs(30),
            |j| j.attempts.first().is_some_and(|a| a.end.is_some()),
        )
        .await;
        assert_eq!(
            j.attempts[0].end,
            Some(tranche_model::AttemptEnd::Lost),
            "{how}: {j:?}"
        );
        assert!(!j.status.is_terminal(), "{how}: the job ended: {j:?}");
        let n = drained_or_up(&admin, true).await;
        let reason = n.drain.unwrap_or_default();
        assert!(reason.contains("cannot write its spool"), "{reason}");
        assert!(reason.contains("No space left on device"), "{reason}");
        // Drained, the node takes no job: the requeued one waits, and has not failed
        // (a placement made before the drain is lost the same way).
        let j = wait_for(&admin, id, "waiting again", Duration::from_secs(30), |j| {
            j.status == JobStatus::Runnable
        })
        .await;
        assert!(
            j.failures == 0
                && j.attempts
                    .iter()
                    .all(|a| a.end == Some(tranche_model::AttemptEnd::Lost)),
            "{how}: {j:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let again = wait_for(&admin, id, "still waiting", Duration::from_secs(5), |_| {
            true
        })
        .await;
        assert_eq!(
            again.attempts.len(),
            j.attempts.len(),
            "placed on the drained node: {again:?}"
        );
    });
    c.kill_agent(0);
}

#[test]
fn a_container_job_gets_its_gpus_env_and_output() {
    let _g = serial();
    if exec_common::lacks(
        "a_container_job_gets_its_gpus_env_and_output",
        exec_common::Need::Containers,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rootfs = exec_common::busybox_rootfs(dir.path());
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "4 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let mut spec = demo::job("lender", "kim", "oci1");
        spec.image = rootfs.display().to_string();
        spec.request.gpus_per_node = 2;
        spec.command = vec![
            "sh".into(),
            "-c".into(),
            "echo CUDA=$CUDA_VISIBLE_DEVICES NV=$NVIDIA_VISIBLE_DEVICES JOB=$TRANCHE_JOB_ID \
             ATTEMPT=$TRANCHE_ATTEMPT SHARE=$TRANCHE_SHARE ORDER=$CUDA_DEVICE_ORDER; \
             ls /dev | grep nvidia | sort | tr '\\n' ' '; echo; echo to-stderr >&2"
                .into(),
        ];
        let (id, _) = admin.submit(spec).await.unwrap();
        let j = wait_for(&admin, id, "success", Duration::from_secs(60), |j| {
            j.status.is_terminal()
        })
        .await;
        assert_eq!(j.status, JobStatus::Succeeded, "{:?}", j.attempts);
        let alloc = &j.attempts[0].allocation[0];
        let uuids: Vec<String> = alloc
            .gpus
            .iter()
            .map(|g| format!("GPU-fake-n1-{}", g.0))
            .collect();
        let (out, err) =
            tranche_agent::exec::kept_logs(&dir.path().join("spool-n1"), id, AttemptNo(1));
        // The output is kept once the agent learns the exit is acknowledged, which may
        // come after the job reads SUCCEEDED here.
        wait_until_file(&out).await;
        wait_until_file(&err).await;
        let out = std::fs::read_to_string(&out).expect("stdout kept after the attempt");
        let lines: Vec<&str> = out.lines().collect();
        // Inside the container the job's GPUs are numbered from 0 in allocation order,
        // as CUDA sees only their device nodes; the UUIDs name the host's GPUs.
        assert_eq!(
            lines[0],
            format!(
                "CUDA=0,1 NV={} JOB={id} ATTEMPT=1 SHARE=lender ORDER=PCI_BUS_ID",
                uuids.join(",")
            )
        );
        let mut devs: Vec<String> = alloc
            .gpus
            .iter()
            .map(|g| format!("nvidia{}", g.0))
            .collect();
        devs.push("nvidiactl".into());
        devs.sort();
        assert_eq!(lines[1].trim(), devs.join(" "));
        assert_eq!(std::fs::read_to_string(&err).unwrap().trim(), "to-stderr");
    });
}

#[test]
fn an_unhealthy_gpu_drains_the_node_with_the_reason() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "4 x h100", 30, "fake_unhealthy = [1]");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        // Registration with an unhealthy GPU drains at once; the agent's health check
        // then drains with its own words.
        let n = drained_or_up(&admin, true).await;
        let reason = n.drain.clone().unwrap_or_default();
        assert!(
            reason.contains("GPU 1") && reason.contains("unhealthy"),
            "{reason}"
        );
        assert!(!n.inventory.gpus[1].healthy);
    });
}

#[test]
fn a_job_past_its_time_limit_is_stopped_and_fails() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let mut spec = host_job("lender", "t1", "sleep 100");
        spec.time_limit_s = Some(1);
        let (id, _) = admin.submit(spec).await.unwrap();
        // Well before the job's `sleep 100` could end by itself.
        let j = wait_for(&admin, id, "the end", Duration::from_secs(60), |j| {
            j.status.is_terminal()
        })
        .await;
        assert_eq!(j.status, JobStatus::Failed, "{:?}", j.transitions);
        assert!(
            j.transitions
                .iter()
                .any(|t| t.reason.contains("time limit")),
            "{:?}",
            j.transitions
        );
        assert!(j.attempts[0].end.is_some(), "{:?}", j.attempts);
    });
}

/// The node label where the agent serves output, and the node's name.
async fn log_port(admin: &Client, id: JobId) -> (std::net::SocketAddr, String) {
    let j = job(admin, id).await;
    let node = j.attempts[0].allocation[0].node.clone();
    let Response::Nodes(nodes) = admin.read(Query::Nodes, false).await.unwrap() else {
        panic!("nodes")
    };
    let n = nodes.iter().find(|n| n.inventory.name == node).unwrap();
    let addr = n.inventory.labels[tranche_proto::LOGS_LABEL]
        .parse()
        .unwrap();
    (addr, node.to_string())
}

/// M5: a client that follows a job's output over HTTPS and reads it slowly holds the
/// controller's relay to a bounded buffer (backpressure onto the agent's stream): the
/// job writes 256 MiB, curl reads 4 KiB/s, and the controller that relays grows by
/// far less than what the job wrote.
#[test]
fn m5_a_slow_reader_of_followed_output_does_not_grow_the_controller() {
    let _g = serial();
    if exec_common::which("curl").is_none() {
        exec_common::not_run(
            "m5_a_slow_reader_of_followed_output_does_not_grow_the_controller",
            "no curl found",
            "as root, `apt-get install -y curl` (scripts/test.sh does)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "4 x h100", 60, "");
    let http = c.controllers[0].http_addr.clone().expect("an HTTPS port");
    let port = http.rsplit(':').next().unwrap().to_string();
    let pid = c.controllers[0].child.as_ref().unwrap().id();
    let files = tranche_tls::TlsFiles::in_dir(&c.certs, Role::Admin, "admin");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let spec = host_job("lender", "m5", "head -c 268435456 /dev/zero; sleep 120");
        let (id, _) = admin.submit(spec).await.unwrap();
        wait_for(&admin, id, "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
        // The whole output is written before the reader starts.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = rss_mib(pid).expect("VmRSS");
        let mut curl = Proc::new("curl")
            .args(["-sN", "--limit-rate", "4k", "-o", "/dev/null", "--cacert"])
            .arg(&files.ca)
            .arg("--cert")
            .arg(&files.cert)
            .arg("--key")
            .arg(&files.key)
            .arg("--connect-to")
            .arg(format!("controller.tranche:{port}:127.0.0.1:{port}"))
            .arg(format!(
                "https://controller.tranche:{port}/api/v1/jobs/{id}/logs?follow=1"
            ))
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let after = rss_mib(pid).expect("VmRSS");
        let _ = curl.kill();
        let _ = curl.wait();
        let _ = admin
            .command(tranche_proto::ClientCommand::Cancel {
                job: tranche_model::JobRef::job(id),
                reason: "done".into(),
            })
            .await;
        assert!(
            after < before + 64,
            "the relaying controller grew from {before} MiB to {after} MiB for a reader of 4 KiB/s"
        );
    });
}

#[test]
fn a_jobs_owner_follows_its_output_and_nobody_else_reads_it() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 30, "logs_addr = \"127.0.0.1:0\"");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let (id, _) = admin
            .submit(host_job(
                "lender",
                "log1",
                "echo first; sleep 1; echo second; echo oops >&2; exit 0",
            ))
            .await
            .unwrap();
        wait_for(&admin, id, "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
        let (addr, node) = log_port(&admin, id).await;
        let req = tranche_proto::LogRequest {
            job: id,
            attempt: None,
            stderr: false,
            follow: true,
            offset: 0,
        };
        // The owner (`kim`) follows stdout to the end of the attempt.
        let kim = c.client(Role::User, "kim").unwrap();
        let mut out = Vec::new();
        let (attempt, running) = kim
            .logs(addr, &node, &req, |b| out.extend_from_slice(b))
            .await
            .unwrap();
        assert_eq!((attempt, running), (1, false));
        assert_eq!(String::from_utf8(out).unwrap(), "first\nsecond\n");
        // After the attempt, from the kept output: stderr, from an offset.
        wait_for(&admin, id, "success", Duration::from_secs(30), |j| {
            j.status == JobStatus::Succeeded
        })
        .await;
        let mut err = Vec::new();
        let req2 = tranche_proto::LogRequest {
            stderr: true,
            follow: false,
            offset: 1,
            ..req.clone()
        };
        kim.logs(addr, &node, &req2, |b| err.extend_from_slice(b)).await.unwrap();
        assert_eq!(String::from_utf8(err).unwrap(), "ops\n");
        // Another user may not; an admin may.
        let other = c.client(Role::User, "lena").unwrap();
        let r = other.logs(addr, &node, &req, |_| {}).await;
        assert!(
            matches!(&r, Err(tranche_client::ClientError::Api(tranche_proto::ApiError::Unauthorized(m))) if m.contains("belongs to kim")),
            "{r:?}"
        );
        let mut all = Vec::new();
        admin.logs(addr, &node, &req, |b| all.extend_from_slice(b)).await.unwrap();
        assert_eq!(all, b"first\nsecond\n");

        // The same through the CLI, as kim and as lena.
        for (user, want_code, want) in [("kim", 0, "first\nsecond\n"), ("lena", 1, "")] {
            let out = cli(&c, dir.path(), user, &["logs", &id.0.to_string()]);
            assert_eq!(out.status.code(), Some(want_code), "{user}: {out:?}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{user}");
            if want_code != 0 {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("belongs to kim"), "{err}");
            }
        }
    });
}

/// A host job of `lender` that sleeps 100 s with a time limit of `limit_s`, submitted
/// with `token`, once it runs (within 30 s).
async fn running_with_limit(
    admin: &Client,
    token: &str,
    limit_s: u64,
) -> (JobId, tranche_model::Job) {
    let mut spec = host_job("lender", token, "sleep 100");
    spec.time_limit_s = Some(limit_s);
    let (id, _) = admin.submit(spec).await.unwrap();
    let j = wait_for(admin, id, "running", Duration::from_secs(30), |j| {
        j.status == JobStatus::Running
    })
    .await;
    (id, j)
}

/// Job `id` once it has ended (within 60 s), checked to have ended FAILED by its time
/// limit.
async fn ended_by_its_time_limit(admin: &Client, id: JobId) -> tranche_model::Job {
    let j = wait_for(admin, id, "the end", Duration::from_secs(60), |j| {
        j.status.is_terminal()
    })
    .await;
    assert_eq!(j.status, JobStatus::Failed);
    assert!(
        j.transitions
            .iter()
            .any(|t| t.reason.contains("time limit")),
        "{:?}",
        j.transitions
    );
    j
}

#[test]
fn the_time_limit_holds_across_an_agent_restart() {
    const LIMIT_S: u64 = 5;
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    let a = agent(&mut c, "n1", "2 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let (id, j) = running_with_limit(&admin, "tr1", LIMIT_S).await;
        let started = j.attempts[0].started_at.expect("started");
        c.kill_agent(a);
        // The agent stays down until the job's time limit has passed: with no agent
        // there, nothing stops the job.
        let limit_ends = started + LIMIT_S * 1000;
        std::thread::sleep(Duration::from_millis(
            (limit_ends + 200).saturating_sub(now_ms()),
        ));
        let execs = tranche_agent::exec::Executors::new(&c.agents[a].spool).unwrap();
        let found = execs.adopt().unwrap();
        assert!(
            found.len() == 1 && found[0].alive(),
            "the job did not outlive its limit without an agent"
        );
        let restarted = now_ms();
        c.start_agent(&agent_bin(), a).unwrap();
        let j = ended_by_its_time_limit(&admin, id).await;
        // Stopped at once by the new agent: before a limit counted from the restart
        // would have ended.
        let ended = j.attempts[0].ended_at.expect("ended");
        assert!(
            ended < restarted + LIMIT_S * 1000,
            "ended at {ended}, as if the limit counted from the restart at {restarted}"
        );
    });
}

/// An agent restarted while every controller's wall clock is 5 minutes ahead adopts
/// its job and counts the job's time limit from the job's start on its own node's
/// boot clock: the controllers' time does not end the job early (it did: the time
/// limit left was taken as their recorded start plus the limit, less their now).
#[test]
fn an_adopted_job_is_not_timed_out_early_by_controllers_whose_clocks_lead() {
    const LIMIT_S: u64 = 12;
    let test = "an_adopted_job_is_not_timed_out_early_by_controllers_whose_clocks_lead";
    let _g = serial();
    let Some(lib) = rig::find_faketime() else {
        exec_common::not_run(test, "needs libfaketime", "apt-get install faketime");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The controllers run under libfaketime, their wall clock set by this file (their
    // monotonic clocks, which elections and timers use, stay right).
    let clock = dir.path().join("controllers-clock");
    std::fs::write(&clock, "+0\n").unwrap();
    let faked = dir.path().join("tranched-faked");
    std::fs::write(
        &faked,
        format!(
            "#!/bin/sh\nexec env LD_PRELOAD={} FAKETIME_TIMESTAMP_FILE={} \
             FAKETIME_CACHE_DURATION=1 FAKETIME_DONT_FAKE_MONOTONIC=1 {} \"$@\"\n",
            lib.display(),
            clock.display(),
            tranched_bin().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&faked, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut c = cluster_of(dir.path(), faked);
    let a = agent(&mut c, "n1", "2 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let (id, _) = running_with_limit(&admin, "lead1", LIMIT_S).await;
        let running = Instant::now();
        c.kill_agent(a);
        std::fs::write(&clock, "+300\n").unwrap();
        // libfaketime rereads the file once a second.
        std::thread::sleep(Duration::from_millis(2_500));
        c.start_agent(&agent_bin(), a).unwrap();
        // Adopted, and still running well after the agent has had the job's work.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let j = wait_for(&admin, id, "a look", Duration::from_secs(5), |_| true).await;
        assert!(
            running.elapsed() < Duration::from_secs(LIMIT_S),
            "the test was too slow to tell"
        );
        assert_eq!(j.status, JobStatus::Running, "{:?}", j.transitions);
        // Its limit still ends it, counted from its start.
        ended_by_its_time_limit(&admin, id).await;
        assert!(
            running.elapsed() >= Duration::from_secs(LIMIT_S - 1),
            "ended {:?} after it was seen running",
            running.elapsed()
        );
    });
}

#[test]
fn a_user_submits_lists_shows_and_cancels_with_the_cli() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 30, "");
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    // An unknown share is refused before anything is sent.
    let out = cli(
        &c,
        dir.path(),
        "kim",
        &["submit", "--share", "nope", "--gpus", "1", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--share nope"),
        "{out:?}"
    );
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
    });
    let out = cli(
        &c,
        dir.path(),
        "kim",
        &[
            "submit",
            "--share",
            "lender",
            "--gpus",
            "1",
            "--name",
            "train",
            "--time",
            "1h",
            "--parsable",
            "--",
            "sleep",
            "100",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let id: u64 = text(&out).trim().parse().expect("--parsable prints the id");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        let j = wait_for(&admin, JobId(id), "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
        assert_eq!(j.spec.user.as_str(), "kim");
        assert_eq!(j.spec.time_limit_s, Some(3600));
    });
    let out = cli(&c, dir.path(), "kim", &["jobs", "--me"]);
    assert!(out.status.success(), "{out:?}");
    let listing = text(&out);
    let row = listing
        .lines()
        .find(|l| l.trim_start().starts_with(&id.to_string()))
        .expect(&listing);
    assert!(
        row.contains("train") && row.contains(" R ") && row.contains("n1"),
        "{row}"
    );
    let out = cli(&c, dir.path(), "kim", &["show", &id.to_string()]);
    assert!(text(&out).contains("attempt 1: n1["), "{}", text(&out));
    // Someone else may not cancel it; its owner may.
    let out = cli(&c, dir.path(), "lena", &["cancel", &id.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("belongs to kim"),
        "{out:?}"
    );
    let out = cli(&c, dir.path(), "kim", &["cancel", &id.to_string()]);
    assert!(out.status.success(), "{out:?}");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        wait_for(
            &admin,
            JobId(id),
            "cancelled",
            Duration::from_secs(30),
            |j| j.status == JobStatus::Cancelled,
        )
        .await;
    });
    // Bad input: a clear message and exit status 2.
    let out = cli(
        &c,
        dir.path(),
        "kim",
        &[
            "submit", "--share", "lender", "--gpus", "1", "--time", "4x", "--", "true",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--time `4x`"),
        "{out:?}"
    );
}

#[test]
fn operators_drain_and_resume_and_everyone_reads_the_cluster() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        // The agent has registered once the node is listed.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !matches!(admin.read(Query::Nodes, false).await, Ok(Response::Nodes(n)) if !n.is_empty()) {
            assert!(Instant::now() < deadline, "the agent never registered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let d = dir.path();
    let out = cli(&c, d, "kim", &["nodes"]);
    assert!(
        out.status.success() && text(&out).contains("n1") && text(&out).contains("h100:0/2"),
        "{out:?}"
    );
    // Drain needs a reason; users may not drain; operators may.
    let out = cli_as(&c, d, Role::Operator, "ops", &["drain", "n1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(err(&out).contains("--reason"), "{out:?}");
    let out = cli(&c, d, "kim", &["drain", "n1", "--reason", "mine"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = cli_as(
        &c,
        d,
        Role::Operator,
        "ops",
        &["drain", "n1", "--reason", "PSU swap"],
    );
    assert!(out.status.success(), "{out:?}");
    let out = cli(&c, d, "kim", &["nodes", "-R"]);
    assert!(
        text(&out).contains("PSU swap") && text(&out).contains("drained"),
        "{}",
        text(&out)
    );
    // A job waits while the only node is drained, and explain says why.
    let out = cli(
        &c,
        d,
        "kim",
        &[
            "submit",
            "--share",
            "lender",
            "--gpus",
            "1",
            "--parsable",
            "--",
            "true",
        ],
    );
    let id = text(&out).trim().to_string();
    let out = cli(&c, d, "kim", &["update", &id, "--priority", "50"]);
    assert!(out.status.success(), "{out:?}");
    // Proves that something does not happen: for a while (several scheduling passes)
    // the job is not placed on the drained node.
    std::thread::sleep(Duration::from_millis(1500));
    let out = cli(&c, d, "kim", &["explain", &id]);
    assert!(
        out.status.success() && text(&out).contains("waiting"),
        "{}",
        text(&out)
    );
    let out = cli_as(&c, d, Role::Operator, "ops", &["resume", "n1"]);
    assert!(out.status.success(), "{out:?}");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        let j = wait_for(
            &admin,
            JobId(id.parse().unwrap()),
            "done",
            Duration::from_secs(30),
            |j| j.status.is_terminal(),
        )
        .await;
        assert_eq!(j.spec.priority, 50);
    });
    let out = cli(&c, d, "kim", &["shares"]);
    assert!(
        text(&out).contains("lender") && text(&out).contains("borrower"),
        "{}",
        text(&out)
    );
    let out = cli(&c, d, "kim", &["queue"]);
    assert!(out.status.success(), "{out:?}");
    let out = cli(&c, d, "kim", &["controllers"]);
    assert!(
        text(&out).contains("leader") && text(&out).lines().count() >= 5,
        "{}",
        text(&out)
    );
}

const DAY: Duration = Duration::from_secs(86_400);

/// Who may read a job's output from the agent's log port: its owner, admins and
/// operators; not another user, not an agent, and no certificate that is revoked,
/// expired or not yet valid.
#[test]
fn job_output_is_read_only_by_its_owner_and_by_good_certificates() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    let now = SystemTime::now();
    let rex = c.issue(Role::User, "rex").unwrap();
    let crl = revoke(&c.certs, &RevokeTarget::Cert(rex.cert.clone()))
        .unwrap()
        .crl;
    let old = issue_valid_between(
        &c.certs,
        &c.certs,
        Role::User,
        "old",
        now - 3 * DAY,
        now - DAY,
    )
    .unwrap();
    let early = issue_valid_between(
        &c.certs,
        &c.certs,
        Role::Operator,
        "early",
        now + DAY,
        now + 3 * DAY,
    )
    .unwrap();

    // The agent, restarted with the revocation list (read at start; `[tls]` is the
    // last table of its config, so an appended key lands in it).
    let a = agent(&mut c, "n1", "2 x h100", 30, "");
    c.kill_agent(a);
    let mut text = std::fs::read_to_string(&c.agents[a].config).unwrap();
    assert!(text.contains("\n[tls]\n") && !text.contains("crl ="));
    text += &format!("crl = \"{}\"\n", crl.display());
    std::fs::write(&c.agents[a].config, text).unwrap();
    c.start_agent(&agent_bin(), a).unwrap();

    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let spec = host_job("lender", "sec1", "echo secret; echo err >&2");
        let (id, _) = admin.submit(spec).await.unwrap();
        wait_for(&admin, id, "success", Duration::from_secs(30), |j| {
            j.status == JobStatus::Succeeded
        })
        .await;
        let (addr, node) = log_port(&admin, id).await;
        let req = tranche_proto::LogRequest {
            job: id,
            attempt: None,
            stderr: false,
            follow: false,
            offset: 0,
        };
        let read = |client: Client, req: tranche_proto::LogRequest| {
            let node = node.clone();
            async move {
                let mut out = Vec::new();
                client
                    .logs(addr, &node, &req, |b| out.extend_from_slice(b))
                    .await
                    .map(|_| String::from_utf8_lossy(&out).into_owned())
            }
        };

        // The owner, an admin and an operator read it.
        let kim = c.client(Role::User, "kim").unwrap();
        assert_eq!(read(kim, req.clone()).await.unwrap(), "secret\n");
        assert_eq!(read(admin, req.clone()).await.unwrap(), "secret\n");
        let ops = c.client(Role::Operator, "ops").unwrap();
        assert_eq!(read(ops, req.clone()).await.unwrap(), "secret\n");

        // Another user reads neither stream of any attempt.
        for r in [
            req.clone(),
            tranche_proto::LogRequest {
                stderr: true,
                attempt: Some(1),
                ..req.clone()
            },
        ] {
            let lena = c.client(Role::User, "lena").unwrap();
            let got = read(lena, r).await;
            assert!(
                matches!(&got, Err(ClientError::Api(ApiError::Unauthorized(m))) if m.contains("belongs to kim")),
                "{got:?}"
            );
        }
        // No agent does, not even the one that ran it.
        for name in ["n1", "n2"] {
            let agent = c.client(Role::Agent, name).unwrap();
            let got = read(agent, req.clone()).await;
            assert!(
                matches!(&got, Err(ClientError::Api(ApiError::Unauthorized(m))) if m.contains("may not read jobs' output")),
                "agent {name}: {got:?}"
            );
        }
        // A revoked, an expired and a not-yet-valid certificate are refused at the
        // handshake.
        for (what, files, alert) in [
            ("revoked", &rex, "certificate_revoked"),
            ("expired", &old, "certificate_expired"),
            ("not yet valid", &early, "certificate_expired"),
        ] {
            let client = Client::new(c.client_addrs(), files).unwrap();
            let got = read(client, req.clone()).await;
            assert!(
                matches!(&got, Err(ClientError::Refused { reason, .. }) if reason.contains(alert)),
                "{what}: {got:?}"
            );
        }
    });
}

/// An agent frozen (SIGSTOP) past `down_after_s`: its node goes DOWN and its job is
/// requeued, while the job goes on. When the agent wakes, the job's new attempt is placed
/// on the same GPU; it starts only once the old attempt, which ignores its checkpoint
/// signal, has been killed. The GPU ledger shows the two never overlap.
#[test]
fn a_gpu_is_not_given_to_a_new_attempt_while_a_requeued_one_still_runs() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    let a = agent(&mut c, "n1", "1 x h100", 30, "");
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let spec = host_job("lender", "frozen1", "trap '' TERM; sleep 60");
        let (id, _) = admin.submit(spec).await.unwrap();
        wait_for(&admin, id, "running", Duration::from_secs(30), |j| {
            j.status == JobStatus::Running
        })
        .await;
        let pid = Pid::from_raw(c.agents[a].child.as_ref().unwrap().id() as i32);
        kill(pid, Signal::SIGSTOP).unwrap();
        let j = wait_for(&admin, id, "requeued", Duration::from_secs(30), |j| {
            j.attempts.len() >= 2 || j.status == JobStatus::Runnable
        })
        .await;
        assert!(
            j.transitions.iter().any(|t| t.reason.contains("DOWN")),
            "{:?}",
            j.transitions
        );
        kill(pid, Signal::SIGCONT).unwrap();
        let j = wait_for(&admin, id, "running again", Duration::from_secs(60), |j| {
            j.status == JobStatus::Running && j.attempts.len() == 2
        })
        .await;
        assert_eq!(j.attempts[1].allocation[0].node.as_str(), "n1");
        let (entries, bad) = tranche_agent::exec::ledger::read(&c.agents[a].spool).unwrap();
        assert_eq!(bad, 0);
        let at = |attempt: AttemptNo, bind: bool| {
            entries
                .iter()
                .find(|e| e.job == id && e.attempt == attempt && e.bind == bind)
                .map(|e| e.t_us)
        };
        let freed = at(AttemptNo(1), false).expect("the first attempt gave the GPU back");
        let bound = at(AttemptNo(2), true).expect("the second attempt took it");
        assert!(
            bound >= freed,
            "GPU held twice for {} µs: {entries:?}",
            freed - bound
        );
        // The first attempt ignored SIGTERM: it was killed when its grace ended.
        let log = std::fs::read_to_string(&c.agents[a].log).unwrap();
        let killed = format!("job={} attempt=1", id.0);
        assert!(
            log.lines()
                .any(|l| l.contains("killed when its grace period ended") && l.contains(&killed)),
            "{log}"
        );
    });
}

/// A job runs as its user's account (mapped by the agent's `[users]`), owning its
/// output; a user with no account on the node gets that as the attempt's reason, in
/// `tranche show`, and the node stays in service.
#[test]
fn jobs_run_as_their_users_accounts_and_one_without_is_refused() {
    let test = "jobs_run_as_their_users_accounts_and_one_without_is_refused";
    if exec_common::lacks_accounts(test, exec_common::Need::Root) {
        return;
    }
    let _g = serial();
    let mut accounts = exec_common::TestAccounts::new();
    let acct = accounts.user("ee", &[], true);
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(
        &mut c,
        "n1",
        "4 x h100",
        30,
        &format!("[users]\nkim = \"{}\"\n", acct.name),
    );
    let spool = c.agents[0].spool.clone();
    let refused = rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let spec = host_job("lender", "asuser", "id -u; id -g; pwd; echo $USER");
        let (id, _) = admin.submit(spec).await.unwrap();
        wait_for(&admin, id, "success", Duration::from_secs(30), |j| {
            j.status == JobStatus::Succeeded
        })
        .await;
        let (out, _) = tranche_agent::exec::kept_logs(&spool, id, AttemptNo(1));
        wait_until_file(&out).await;
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            format!(
                "{}\n{}\n{}\n{}\n",
                acct.uid,
                acct.gid,
                acct.home.display(),
                acct.name
            )
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&out).unwrap().uid(), acct.uid);

        let mut spec = host_job("lender", "nouser", "echo ran");
        spec.user = "zed".into();
        let (id, _) = admin.submit(spec).await.unwrap();
        let j = wait_for(&admin, id, "failure", Duration::from_secs(30), |j| {
            j.status.is_terminal()
        })
        .await;
        assert_eq!(j.status, JobStatus::Failed, "{:?}", j.transitions);
        let Response::Nodes(nodes) = admin.read(Query::Nodes, false).await.unwrap() else {
            panic!("nodes")
        };
        let n1 = nodes
            .iter()
            .find(|n| n.inventory.name.as_str() == "n1")
            .unwrap();
        assert_eq!(n1.drain, None, "the node is not blamed");
        id
    });
    let out = cli_as(
        &c,
        dir.path(),
        Role::Admin,
        "admin",
        &["show", &refused.to_string()],
    );
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.contains("user zed has no account on node n1"),
        "{shown}"
    );
    let (out, _) = tranche_agent::exec::kept_logs(&spool, refused, AttemptNo(1));
    assert!(!out.exists(), "nothing of the refused job ran");
}

/// `--output` on a real agent: the file in the submit directory is the user's and holds
/// stdout and stderr; the log port serves it from there, during the attempt's life and
/// after; a file the user cannot create fails the job with a reason naming the path and
/// the user, and the node stays in service.
#[test]
fn an_output_file_is_the_users_and_the_log_port_serves_it() {
    let test = "an_output_file_is_the_users_and_the_log_port_serves_it";
    if exec_common::lacks_accounts(test, exec_common::Need::Root) {
        return;
    }
    let _g = serial();
    let mut accounts = exec_common::TestAccounts::new();
    let acct = accounts.user("eo", &[], true);
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let submit = dir.path().join("project");
    std::fs::create_dir(&submit).unwrap();
    std::os::unix::fs::chown(&submit, Some(acct.uid), Some(acct.gid)).unwrap();
    let mut c = cluster(dir.path());
    agent(
        &mut c,
        "n1",
        "2 x h100",
        30,
        &format!(
            "logs_addr = \"127.0.0.1:0\"\n[users]\nkim = \"{}\"\n",
            acct.name
        ),
    );
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let mut spec = host_job(
            "lender",
            "outfile",
            "echo first; echo oops >&2; echo second",
        );
        spec.cwd = Some(submit.display().to_string());
        spec.output = Some("out-%j-%u.txt".into());
        let (id, _) = admin.submit(spec).await.unwrap();
        wait_for(&admin, id, "success", Duration::from_secs(30), |j| {
            j.status == JobStatus::Succeeded
        })
        .await;
        let out = submit.join(format!("out-{id}-{}.txt", acct.name));
        let want = "first\noops\nsecond\n";
        assert_eq!(std::fs::read_to_string(&out).unwrap(), want);
        assert_eq!(std::fs::metadata(&out).unwrap().uid(), acct.uid);
        let (addr, node) = log_port(&admin, id).await;
        let kim = c.client(Role::User, "kim").unwrap();
        for stderr in [false, true] {
            let req = tranche_proto::LogRequest {
                job: id,
                attempt: None,
                stderr,
                follow: false,
                offset: 0,
            };
            let mut got = Vec::new();
            // The log port may be asked before the agent has kept the record.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                got.clear();
                match kim
                    .logs(addr, &node, &req, |b| got.extend_from_slice(b))
                    .await
                {
                    Ok(_) => break,
                    Err(e) => assert!(Instant::now() < deadline, "{e}"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert_eq!(String::from_utf8_lossy(&got), want, "stderr: {stderr}");
        }

        // A directory the user may not write: the job fails, and says where and who.
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        let mut spec = host_job("lender", "nofile", "echo ran");
        spec.cwd = Some(submit.display().to_string());
        spec.output = Some(format!("{}/out-%j", closed.display()));
        let (id, _) = admin.submit(spec).await.unwrap();
        let j = wait_for(&admin, id, "failure", Duration::from_secs(30), |j| {
            j.status.is_terminal()
        })
        .await;
        assert_eq!(j.status, JobStatus::Failed, "{:?}", j.transitions);
        let want = format!(
            "cannot create the stdout file {}/out-{id} as user {}",
            closed.display(),
            acct.name
        );
        assert!(
            j.transitions.iter().any(|t| t.reason.contains(&want)),
            "{want} not in {:?}",
            j.transitions
        );
        assert_eq!(std::fs::read_dir(&closed).unwrap().count(), 0);
        let Response::Nodes(nodes) = admin.read(Query::Nodes, false).await.unwrap() else {
            panic!("nodes")
        };
        assert_eq!(nodes[0].drain, None, "the node is not blamed");
    });
}

/// Waits (up to 10 s) for a file the agent keeps once it has reported an exit.
async fn wait_until_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The busybox multi-call binary, whose `nc` the gang jobs below talk through.
fn busybox() -> String {
    let found = std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("busybox"))
                .find(|b| b.exists())
        })
        .expect("busybox is not installed: apt-get install busybox-static (scripts/test.sh does)");
    found.display().to_string()
}

/// A 2-node job of one GPU per node on agents n1 and n2, running `script` in `sh`.
fn gang_job(token: &str, out: &Path, script: &str) -> JobSpec {
    let mut spec = host_job("lender", token, script);
    spec.request.nodes = 2;
    spec.request.gpus_per_node = 1;
    spec.env.insert("OUT".into(), out.display().to_string());
    spec.env.insert("BUSYBOX".into(), busybox());
    spec
}

/// The members of a gang find each other with only the rendezvous variables: rank 1
/// connects to `MASTER_ADDR:MASTER_PORT`, where rank 0 listens, and says who it is.
/// Each member's output is kept on its node; `tranche logs --all` shows both.
#[test]
fn the_members_of_a_gang_meet_at_master_addr_and_port() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 30, "");
    agent(&mut c, "n2", "2 x h100", 30, "");
    let out = dir.path().join("gang");
    std::fs::create_dir(&out).unwrap();
    let script = r#"
        env | grep -E '^(TRANCHE_NODELIST|TRANCHE_NUM_NODES|TRANCHE_NODE_RANK|TRANCHE_GPUS_PER_NODE|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|NODE_RANK)=' | sort > "$OUT/rank$NODE_RANK.env"
        echo "member rank $NODE_RANK"
        if [ "$NODE_RANK" = 0 ]; then
            # The connection, not the job's stdin, feeds the reader (`-e`).
            "$BUSYBOX" nc -l -p "$MASTER_PORT" -e "$BUSYBOX" sh -c 'cat > "$OUT/heard"'
        else
            i=0
            until echo "rank $NODE_RANK of $TRANCHE_NUM_NODES says hello" | "$BUSYBOX" nc "$MASTER_ADDR" "$MASTER_PORT"; do
                i=$((i + 1)); [ "$i" -lt 300 ] || exit 9; sleep 0.1
            done
        fi
    "#;
    let id = rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let (id, _) = admin.submit(gang_job("meet", &out, script)).await.unwrap();
        let j = wait_for(&admin, id, "the end", Duration::from_secs(60), |j| {
            j.status.is_terminal()
        })
        .await;
        assert_eq!(j.status, JobStatus::Succeeded, "{:?}", j.transitions);
        assert_eq!(j.attempts.len(), 1, "{:?}", j.transitions);
        let nodes: Vec<String> = j.attempts[0]
            .allocation
            .iter()
            .map(|a| a.node.to_string())
            .collect();
        assert_eq!(nodes.len(), 2);
        let port = tranche_proto::master_port(id, 1, (20000, 29999));
        for rank in 0..2 {
            let env = std::fs::read_to_string(out.join(format!("rank{rank}.env"))).unwrap();
            let want = format!(
                "MASTER_ADDR=127.0.0.1\nMASTER_PORT={port}\nNODE_RANK={rank}\n\
                 TRANCHE_GPUS_PER_NODE=1\nTRANCHE_NODELIST={}\nTRANCHE_NODE_RANK={rank}\n\
                 TRANCHE_NUM_NODES=2\nWORLD_SIZE=2\n",
                nodes.join(",")
            );
            assert_eq!(env, want, "rank {rank}");
        }
        let heard = std::fs::read_to_string(out.join("heard")).unwrap();
        assert_eq!(heard, "rank 1 of 2 says hello\n");
        (id, nodes)
    });
    let (id, nodes) = id;
    let id = id.to_string();
    let all = cli(&c, dir.path(), "kim", &["logs", &id, "--all"]);
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&all.stdout),
        format!(
            "==> {} (rank 0) <==\nmember rank 0\n==> {} (rank 1) <==\nmember rank 1\n",
            nodes[0], nodes[1]
        )
    );
    let first = cli(&c, dir.path(), "kim", &["logs", &id]);
    assert_eq!(String::from_utf8_lossy(&first.stdout), "member rank 0\n");
    let by_rank = cli(&c, dir.path(), "kim", &["logs", &id, "--node", "1"]);
    assert_eq!(String::from_utf8_lossy(&by_rank.stdout), "member rank 1\n");
    let by_name = cli(&c, dir.path(), "kim", &["logs", &id, "--node", &nodes[1]]);
    assert_eq!(String::from_utf8_lossy(&by_name.stdout), "member rank 1\n");
    let bad = cli(&c, dir.path(), "kim", &["logs", &id, "--node", "n9"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("did not run on n9"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// One member of a gang fails: the other gets the checkpoint signal (it was still
/// running), and the job ends FAILED once, as the failed member ended.
#[test]
fn a_gang_member_that_fails_gets_the_other_signalled_and_the_job_fails_once() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    agent(&mut c, "n1", "2 x h100", 30, "");
    agent(&mut c, "n2", "2 x h100", 30, "");
    let out = dir.path().join("gang");
    std::fs::create_dir(&out).unwrap();
    let script = r#"
        if [ "$NODE_RANK" = 0 ]; then
            trap 'echo TERM > "$OUT/rank0-signalled"; exit 143' TERM
            touch "$OUT/rank0-ready"
            while :; do sleep 0.1; done
        else
            while [ ! -e "$OUT/rank0-ready" ]; do sleep 0.05; done
            exit 1
        fi
    "#;
    rt().block_on(async {
        let admin = c.client(Role::Admin, "admin").unwrap();
        policy(&admin).await;
        let (id, _) = admin.submit(gang_job("fail", &out, script)).await.unwrap();
        let j = wait_for(&admin, id, "the end", Duration::from_secs(60), |j| {
            j.status.is_terminal()
        })
        .await;
        assert_eq!(j.status, JobStatus::Failed, "{:?}", j.transitions);
        assert_eq!(j.attempts.len(), 1);
        assert_eq!(j.failures, 1);
        assert_eq!(
            j.attempts[0].end,
            Some(tranche_model::AttemptEnd::Exited { code: 1 })
        );
        assert_eq!(
            std::fs::read_to_string(out.join("rank0-signalled")).unwrap(),
            "TERM\n"
        );
        let reasons: Vec<&str> = j.transitions.iter().map(|t| t.reason.as_str()).collect();
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("stopping (a member of the gang exited with code 1)")),
            "{reasons:?}"
        );
        assert_eq!(
            reasons.last(),
            Some(&"exited with code 1 (the first member of the gang to fail; the others were stopped)"),
            "{reasons:?}"
        );
        // Its GPUs are free again on both nodes.
        let Response::Nodes(nodes) = admin.read(Query::Nodes, false).await.unwrap() else {
            panic!("nodes")
        };
        assert!(nodes
            .iter()
            .all(|n| n.allocated.iter().all(|a| a.is_none())));
    });
}
