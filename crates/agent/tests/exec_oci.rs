//! The OCI executor with runc: a busybox rootfs directory, an OCI image layout (and an
//! archive of it) with whiteouts, GPU device nodes, stop, and adoption.
//!
//! These tests need root, runc (or crun) and a static busybox (as root, `apt-get
//! install -y runc busybox-static`); without them each says so through
//! `exec_common::not_run` and returns, or fails under CI as root.

mod exec_common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use exec_common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tranche_agent::exec::{ExecError, ExecKind, Executors, KillMethod, StopOutcome};

const LONG: Duration = Duration::from_secs(30);

fn config_json(a: &tranche_agent::exec::Attempt) -> Value {
    let text = std::fs::read_to_string(a.dir().join("bundle/config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn busybox_rootfs_runs_with_its_gpu_devices() {
    if lacks("busybox_rootfs_runs_with_its_gpu_devices", Need::Containers) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let ex = executors_trusting(&t.path().join("spool"), t.path());
    let mut s = spec(
        rootfs.to_str().unwrap(),
        &[
            "sh",
            "-c",
            "echo hello from the container; ls /dev; env; exit 7",
        ],
    );
    s.gpus = gpus(&[2, 5]);
    let t0 = Instant::now();
    let a = ex.start(&s).unwrap();
    eprintln!("oci: start returned after {:?}", t0.elapsed());
    assert_eq!(a.kind(), ExecKind::Oci);
    let st = wait_exit(&a, LONG);
    eprintln!("oci: short job ended {:?} after start", t0.elapsed());
    assert_eq!(st.code, Some(7), "{st:?}; stderr: {}", stderr(&a));
    let out = stdout(&a);
    assert!(out.starts_with("hello from the container\n"), "{out}");
    for d in ["nvidia2", "nvidia5", "nvidiactl"] {
        assert!(out.lines().any(|l| l == d), "/dev/{d} missing: {out}");
    }
    assert!(
        !out.lines().any(|l| l == "nvidia0" || l == "nvidia-uvm"),
        "{out}"
    );
    let env = env_lines(&out);
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1");
    assert_eq!(env["TRANCHE_GPU_HOST_INDICES"], "2,5");
    assert_eq!(env["NVIDIA_VISIBLE_DEVICES"], "GPU-fake-2,GPU-fake-5");
    assert_eq!(env["TRANCHE_JOB_ID"], s.job.to_string());

    let c = config_json(&a);
    let devices: Vec<(String, u64, u64)> = c["linux"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["path"].as_str().unwrap().to_string(),
                d["major"].as_u64().unwrap(),
                d["minor"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        devices,
        [
            ("/dev/nvidia2".to_string(), 195, 2),
            ("/dev/nvidia5".to_string(), 195, 5),
            ("/dev/nvidiactl".to_string(), 195, 255)
        ]
    );
    let allowed: Vec<(u64, u64)> = c["linux"]["resources"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["allow"] == true)
        .map(|r| (r["major"].as_u64().unwrap(), r["minor"].as_u64().unwrap()))
        .collect();
    assert_eq!(allowed, [(195, 2), (195, 5), (195, 255)]);
    assert_eq!(c["root"]["path"], rootfs.to_str().unwrap());
    assert_eq!(c["process"]["terminal"], false);
    let ns: Vec<&str> = c["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap())
        .collect();
    assert_eq!(ns, ["pid", "ipc", "uts", "mount"]);
    a.acknowledge().unwrap();
}

#[test]
fn oci_user_cwd_and_limits() {
    if lacks("oci_user_cwd_and_limits", Need::Containers) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let ex = Executors::new(&t.path().join("spool")).unwrap();
    // The container sees its own cgroup at /sys/fs/cgroup: v1's memory hierarchy, or
    // v2's single one.
    let mut s = spec(
        rootfs.to_str().unwrap(),
        &[
            "sh",
            "-c",
            "id -u; id -g; pwd; cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null \
             || cat /sys/fs/cgroup/memory.max",
        ],
    );
    s.user = Some((1000, 1001));
    s.cwd = Some("/tmp".into());
    s.memory_mb = 80;
    let a = ex.start(&s).unwrap();
    assert_eq!(wait_exit(&a, LONG).code, Some(0), "{}", stderr(&a));
    let out = stdout(&a);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..3], ["1000", "1001", "/tmp"], "{out}");
    if memory_limit_file(&a.cgroup_name()).is_some() {
        assert_eq!(
            lines.get(3).copied(),
            Some((80u64 << 20).to_string().as_str()),
            "{out}"
        );
    } else {
        not_run(
            "oci_user_cwd_and_limits",
            "no hierarchy here has the memory controller, so the memory limit is not checked",
            "run the tests as root on a node with the memory controller",
        );
    }
}

#[test]
fn runtime_errors_name_the_command() {
    if lacks("runtime_errors_name_the_command", Need::Containers) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let ex = Executors::new(&t.path().join("spool")).unwrap();
    let s = spec(
        rootfs.to_str().unwrap(),
        &["no-such-trainer", "--lr", "3e-4"],
    );
    let err = ex.start(&s).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ExecError::Launch { .. }), "{msg}");
    assert!(msg.contains("no-such-trainer"), "{msg}");
    assert!(msg.contains(rootfs.to_str().unwrap()), "{msg}");
    assert!(msg.contains("executable file not found"), "{msg}");
    eprintln!("oci: launch error: {msg}");
    assert!(ex.adopt().unwrap().is_empty());

    let err = ex
        .start(&spec("/nonexistent/image", &["true"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("image `/nonexistent/image`"), "{err}");
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Writes a blob into the layout; returns its descriptor.
fn put_blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Value {
    let hex = sha256_hex(bytes);
    std::fs::write(layout.join("blobs/sha256").join(&hex), bytes).unwrap();
    json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
}

fn file_entry(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    b.append_data(&mut h, path, data).unwrap();
}

/// An OCI image layout with two layers: the busybox rootfs plus `/etc/old.txt`,
/// `/etc/keep.txt` and `/opt/stale`; then (gzip) a layer deleting `/etc/old.txt` with
/// a whiteout, making `/opt` opaque, and adding `/etc/new.txt` and `/opt/fresh`.
fn build_layout(dir: &Path) -> PathBuf {
    let base = busybox_rootfs(dir);
    std::fs::write(base.join("etc/old.txt"), "old\n").unwrap();
    std::fs::write(base.join("etc/keep.txt"), "keep\n").unwrap();
    std::fs::create_dir_all(base.join("opt")).unwrap();
    std::fs::write(base.join("opt/stale"), "stale\n").unwrap();
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(".", &base).unwrap();
    let layer1 = b.into_inner().unwrap();

    let mut b = tar::Builder::new(Vec::new());
    file_entry(&mut b, "etc/.wh.old.txt", b"");
    file_entry(&mut b, "etc/new.txt", b"new content\n");
    file_entry(&mut b, "opt/fresh", b"fresh\n");
    file_entry(&mut b, "opt/.wh..wh..opq", b"");
    let layer2_tar = b.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&layer2_tar).unwrap();
    let layer2 = gz.finish().unwrap();

    let layout = dir.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let l1 = put_blob(&layout, "application/vnd.oci.image.layer.v1.tar", &layer1);
    let l2 = put_blob(
        &layout,
        "application/vnd.oci.image.layer.v1.tar+gzip",
        &layer2,
    );
    let config = json!({
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/bin:/bin", "GREETING=hello from the image"],
            "WorkingDir": "/etc",
        },
        "rootfs": {"type": "layers", "diff_ids": [
            format!("sha256:{}", sha256_hex(&layer1)),
            format!("sha256:{}", sha256_hex(&layer2_tar)),
        ]},
    });
    let cfg = put_blob(
        &layout,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": cfg,
        "layers": [l1, l2],
    });
    let m = put_blob(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.to_string().as_bytes(),
    );
    std::fs::write(
        layout.join("index.json"),
        json!({"schemaVersion": 2, "manifests": [m]}).to_string(),
    )
    .unwrap();
    layout
}

fn mounts_now() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap()
}

fn cache_entries(spool: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(spool.join("images"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn oci_image_layout_with_whiteouts() {
    if lacks("oci_image_layout_with_whiteouts", Need::Containers) {
        return;
    }
    init();
    let t = test_dir();
    let layout = build_layout(t.path());
    let spool = t.path().join("spool");
    let ex = Executors::new(&spool).unwrap();
    let script = "echo \"$GREETING\"; pwd; cat /etc/new.txt; ls /etc /opt; \
                  test -e /etc/old.txt && echo OLD-PRESENT; test -e /etc/scratch && echo SCRATCH-PRESENT; \
                  echo scratch > /etc/scratch; exit 0";
    let t0 = Instant::now();
    let a = ex
        .start(&spec(layout.to_str().unwrap(), &["sh", "-c", script]))
        .unwrap();
    eprintln!("oci layout: unpacked and started in {:?}", t0.elapsed());
    // The cached rootfs is shared: the container runs on an overlay of its own, where
    // the node can mount one (not on an overlayfs spool, e.g. inside some CI containers).
    let root = a.dir().join("bundle/rootfs");
    let overlay = config_json(&a)["root"]["path"] == root.to_str().unwrap();
    if !overlay {
        not_run_unless_ci(
            "oci_image_layout_with_whiteouts (its overlay part)",
            "no overlay could be mounted here; the job ran on the image cache directly",
            "run the tests on a spool that is not itself on overlayfs",
            false,
        );
    }
    let st = wait_exit(&a, LONG);
    assert_eq!(st.code, Some(0), "{st:?}; stderr: {}", stderr(&a));
    let out = stdout(&a);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "hello from the image", "{out}");
    assert_eq!(lines[1], "/etc", "{out}");
    assert_eq!(lines[2], "new content", "{out}");
    assert!(
        lines.contains(&"keep.txt") && lines.contains(&"new.txt"),
        "{out}"
    );
    assert!(lines.contains(&"fresh"), "{out}");
    assert!(!lines.contains(&"old.txt"), "whiteout not applied: {out}");
    assert!(
        !lines.contains(&"stale"),
        "opaque directory not applied: {out}"
    );
    assert!(
        !out.contains("OLD-PRESENT") && !out.contains("SCRATCH-PRESENT"),
        "{out}"
    );
    let entries = cache_entries(&spool);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let cached = spool.join("images").join(&entries[0]).join("rootfs");
    assert!(cached.join("etc/new.txt").is_file());
    assert!(!cached.join("etc/old.txt").exists());
    if overlay {
        // The job's writes went to its own upper layer, not into the cache.
        assert!(
            !cached.join("etc/scratch").exists(),
            "the job wrote into the image cache"
        );
        assert!(a.dir().join("bundle/upper/etc/scratch").is_file());
        assert!(
            !mounts_now().contains(root.to_str().unwrap()),
            "overlay left mounted"
        );
    } else {
        std::fs::remove_file(cached.join("etc/scratch")).unwrap();
    }
    a.acknowledge().unwrap();

    // Again, from a .tar.gz of the same layout: same cache entry, and the first job's
    // writes are not seen.
    let archive = t.path().join("image.tar.gz");
    {
        let gz = flate2::write::GzEncoder::new(
            std::fs::File::create(&archive).unwrap(),
            flate2::Compression::fast(),
        );
        let mut b = tar::Builder::new(gz);
        b.append_dir_all(".", &layout).unwrap();
        b.into_inner().unwrap().finish().unwrap();
    }
    let a = ex
        .start(&spec(archive.to_str().unwrap(), &["sh", "-c", script]))
        .unwrap();
    let st = wait_exit(&a, LONG);
    assert_eq!(st.code, Some(0), "{st:?}; stderr: {}", stderr(&a));
    let out = stdout(&a);
    assert!(
        out.contains("new content") && !out.contains("SCRATCH-PRESENT"),
        "{out}"
    );
    assert_eq!(cache_entries(&spool), entries);
    a.acknowledge().unwrap();
}

#[test]
fn oci_stop_lets_a_checkpointing_job_exit_in_grace() {
    if lacks(
        "oci_stop_lets_a_checkpointing_job_exit_in_grace",
        Need::Containers,
    ) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let ex = executors_trusting(&t.path().join("spool"), t.path());
    let a = ex
        .start(&spec(
            rootfs.to_str().unwrap(),
            &[
                "sh",
                "-c",
                // `ready` from the child after its exec (see the process executor's
                // test of the same: a SIGTERM before that exec would be lost).
                "trap 'echo saved > /ckpt; exit 0' TERM; sh -c 'echo ready > /ready; exec sleep 100' & wait",
            ],
        ))
        .unwrap();
    wait_file(&rootfs.join("ready"), LONG);
    // The job needs milliseconds of its grace; a long one keeps a slow machine from
    // turning the exit into a kill.
    let out = a.stop(15, Duration::from_secs(60));
    match out {
        StopOutcome::ExitedInGrace { status } => {
            assert_eq!(status.code, Some(0), "{status:?}")
        }
        other => panic!("expected ExitedInGrace, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(rootfs.join("ckpt")).unwrap(),
        "saved\n"
    );
    assert!(!a.alive());
}

#[test]
fn oci_a_container_stops_once_the_agents_lease_runs_out() {
    let test = "oci_a_container_stops_once_the_agents_lease_runs_out";
    if lacks(test, Need::Containers) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let spool = t.path().join("spool");
    let ex = executors_trusting(&spool, t.path());
    let mut s = spec(
        rootfs.to_str().unwrap(),
        &[
            "sh",
            "-c",
            "trap 'echo usr1 > /noted; exit 0' USR1; while :; do sleep 0.1; done",
        ],
    );
    s.stop_signal = Some("SIGUSR1".into());
    let a = ex.start(&s).unwrap();
    lease_holds_then_runs_out(&spool, &a, &rootfs.join("noted"));
}

#[test]
fn oci_stop_signals_then_kills_every_process_after_the_grace() {
    let test = "oci_stop_signals_then_kills_every_process_after_the_grace";
    if lacks(test, Need::Containers) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let ex = executors_trusting(&t.path().join("spool"), t.path());
    // The container's init notes SIGTERM and goes on; its child, in a session of its
    // own, ignores SIGTERM.
    let a = ex
        .start(&spec(
            rootfs.to_str().unwrap(),
            &[
                "sh",
                "-c",
                "trap 'echo term >> /got_term' TERM; \
                 setsid sh -c 'trap \"\" TERM; exec sleep 1000' & echo ready > /ready; \
                 while :; do sleep 1000 & wait $!; done",
            ],
        ))
        .unwrap();
    wait_file(&rootfs.join("ready"), LONG);
    let dirs = cgroup_dirs(test, &a);
    let mut pids = Vec::new();
    if let Some(d) = &dirs {
        wait_until(
            "sh, its child and a sleep in the container's cgroup",
            LONG,
            || {
                pids = cgroup_procs(&d.track);
                pids.len() >= 3
            },
        );
    }
    // Long enough for the shell to run its trap on a loaded machine.
    let grace = Duration::from_secs(3);
    let via = stop_a_job_that_outlives_term(&a, grace, &rootfs.join("got_term"));
    if let Some(d) = &dirs {
        let expected = if d.v2 {
            KillMethod::CgroupKill
        } else {
            KillMethod::Signals
        };
        assert_eq!(via, expected);
    }
    assert_nothing_left(test, &a, &pids);
}

#[test]
fn oci_jobs_are_adopted_by_a_new_agent() {
    if lacks("oci_jobs_are_adopted_by_a_new_agent", Need::Containers) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let spool = t.path().join("spool");
    // Runs until the test creates `/go` in its rootfs.
    let mut s = spec(
        rootfs.to_str().unwrap(),
        &[
            "sh",
            "-c",
            "while [ ! -e /go ]; do sleep 0.01; done; echo done",
        ],
    );
    s.memory_mb = 64;
    s.cpus = 1;
    {
        let ex = executors_trusting(&spool, t.path());
        let a = ex.start(&s).unwrap();
        match memory_limit_file(&a.cgroup_name()) {
            Some(f) => {
                let limit =
                    std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                assert_eq!(limit.trim(), (64u64 << 20).to_string());
            }
            None => not_run(
                "oci_jobs_are_adopted_by_a_new_agent",
                "no hierarchy here has the memory controller, so the memory limit is not checked",
                "run the tests as root on a node with the memory controller",
            ),
        }
    }
    let ex = executors_trusting(&spool, t.path());
    let found = ex.adopt().unwrap();
    assert_eq!(found.len(), 1);
    let a = &found[0];
    assert_eq!((a.job(), a.kind()), (s.job, ExecKind::Oci));
    assert!(a.alive() && a.exit().is_none());
    std::fs::write(rootfs.join("go"), "").unwrap();
    let st = wait_exit(a, LONG);
    assert_eq!(st.code, Some(0), "{st:?}; stderr: {}", stderr(a));
    assert_eq!(stdout(a), "done\n");
    a.acknowledge().unwrap();
    assert!(ex.adopt().unwrap().is_empty());
}
