//! A hostile tenant on a node: real accounts (alice, bob) made with `useradd`, jobs run
//! as them by the executors as the agent runs them, and each job trying what another
//! tenant's job must not do: read someone else's spec, output and `/opt/ml`, gain root
//! through a setuid file, make root copy a file it may not read, open a GPU it was not
//! given, run without limits, keep capabilities in a container, or run as a system or
//! privileged account.
//!
//! These tests need root and `useradd` (the container ones runc and a static busybox);
//! without them each says so through `exec_common::not_run` and returns, or fails
//! under CI as root.

mod exec_common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use exec_common::*;
use tranche_agent::exec::{kept_logs, kept_sagemaker_output, Attempt, Executors, JobPolicy};
use tranche_agent::users::{resolve, Account, Refusal};
use tranche_model::SageMakerJob;

const LONG: Duration = Duration::from_secs(30);

/// A test directory that other accounts may enter (as `/var/spool` is), with the
/// spool in `spool/`.
fn open_dir() -> TestDir {
    let t = test_dir();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    t
}

/// Executors on `<t>/spool` with `policy`, or `None` (said) where the machine cannot.
fn executors(test: &str, t: &TestDir, policy: JobPolicy) -> Option<Executors> {
    executors_at(test, &t.path().join("spool"), None, policy)
}

fn executors_at(
    test: &str,
    spool: &Path,
    attempts: Option<&Path>,
    policy: JobPolicy,
) -> Option<Executors> {
    // What the machine offers is checked (and said) once; those executors go at once.
    executors_on(test, spool, tranche_agent::exec::CgroupMode::Auto)?;
    Some(
        Executors::open(spool, attempts, tranche_agent::exec::CgroupMode::Auto)
            .unwrap()
            .with_policy(policy),
    )
}

/// A node for a hostile-tenant test: a spool in a directory others may enter,
/// executors with the policy `policy` makes (given that directory), and the accounts
/// alice and bob. Dropped in this order: jobs killed, then accounts removed.
struct Node {
    ex: Executors,
    alice: Account,
    bob: Account,
    t: TestDir,
    _accounts: TestAccounts,
}

fn node(test: &str, need: Need, policy: impl FnOnce(&Path) -> JobPolicy) -> Option<Node> {
    init();
    if lacks_accounts(test, need) {
        return None;
    }
    let t = open_dir();
    let ex = executors(test, &t, policy(t.path()))?;
    let mut accounts = TestAccounts::new();
    Some(Node {
        ex,
        alice: account(&accounts.user("alice", &[], true)),
        bob: account(&accounts.user("bob", &[], true)),
        t,
        _accounts: accounts,
    })
}

/// The account `acct` as the agent resolves it (mapped from the user `tag`).
fn account(acct: &TestAccount) -> Account {
    let cfg = agent_config(&format!("[users]\nu = \"{}\"\n", acct.name));
    resolve(&cfg, "u").unwrap()
}

/// Starts `script` with `sh -c` as `who` on the node.
fn start_as(ex: &Executors, who: &Account, script: &str) -> Attempt {
    let mut s = spec("host", &["sh", "-c", script]);
    who.apply_to(&mut s, "n3", None).unwrap();
    ex.start(&s).unwrap()
}

/// Runs `script` as `who` to its end: `(exit code, stdout, stderr)`.
fn run_as(ex: &Executors, who: &Account, script: &str) -> (Option<i32>, String, String) {
    let a = start_as(ex, who, script);
    let st = wait_exit(&a, LONG);
    let out = (st.code, stdout(&a), stderr(&a));
    a.acknowledge().unwrap();
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .mode()
        & 0o7777
}

/// Bob, from a job of his own on the node, reads nothing of alice's: neither the spec
/// of her running job (its environment holds her secret) nor its output, nor, once it
/// has ended, the output the agent keeps.
#[test]
fn h4_another_tenant_reads_nothing_of_a_job_in_the_spool() {
    let test = "h4_another_tenant_reads_nothing_of_a_job_in_the_spool";
    let Some(n) = node(test, Need::Root, |_| JobPolicy::default()) else {
        return;
    };
    let (ex, alice, bob, t) = (&n.ex, &n.alice, &n.bob, &n.t);
    let mut s = spec("host", &["sh", "-c", "echo alice-output-$SECRET; sleep 30"]);
    s.env.insert("SECRET".into(), "hunter2".into());
    alice.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    let out = a.log_paths().0;
    wait_until("alice's output", LONG, || stdout(&a).contains("hunter2"));
    let spool = ex.spool().to_path_buf();
    for d in ["", "attempts", "logs", "images", "runc", "sagemaker"] {
        assert_eq!(mode(&spool.join(d)), 0o700, "{}", spool.join(d).display());
    }
    assert_eq!(mode(a.dir()), 0o700);
    assert_eq!(mode(&a.dir().join("spec.json")), 0o600);
    assert_eq!(mode(&a.dir().join("plan.json")), 0o600);
    assert_eq!(mode(&out), 0o600);
    let probe = format!(
        "cat {} {} 2>&1; ls {} 2>&1; exit 0",
        a.dir().join("spec.json").display(),
        out.display(),
        spool.join("attempts").display()
    );
    let (code, seen, _) = run_as(ex, bob, &probe);
    assert_eq!(code, Some(0));
    assert!(!seen.contains("hunter2"), "bob read alice's job: {seen}");
    assert!(seen.contains("Permission denied"), "{seen}");
    a.stop(9, Duration::from_secs(1));
    a.acknowledge().unwrap();
    let (kept, _) = kept_logs(&spool, a.job(), a.attempt());
    assert_eq!(mode(&kept), 0o600);
    assert!(std::fs::read_to_string(&kept).unwrap().contains("hunter2"));
    let (_, seen, _) = run_as(ex, bob, &format!("cat {} 2>&1; exit 0", kept.display()));
    assert!(
        !seen.contains("hunter2"),
        "bob read alice's kept log: {seen}"
    );
    // A spool left wide open by an earlier agent is closed at start.
    std::fs::set_permissions(spool.join("logs"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ex = executors(test, t, JobPolicy::default()).unwrap();
    assert_eq!(mode(&spool.join("logs")), 0o700);
}

/// A SageMaker job of image `host` has its `/opt/ml` in a directory of its own user's,
/// outside the spool: alice's job reads its hyperparameters and writes its model
/// there; bob reads neither.
#[test]
fn h4_a_host_sagemaker_jobs_opt_ml_is_its_users_alone() {
    let test = "h4_a_host_sagemaker_jobs_opt_ml_is_its_users_alone";
    let Some(n) = node(test, Need::Root, |_| JobPolicy::default()) else {
        return;
    };
    let (ex, alice, bob, t) = (&n.ex, &n.alice, &n.bob, &n.t);
    let train = t.path().join("train");
    std::fs::create_dir(&train).unwrap();
    std::fs::set_permissions(&train, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            "echo $SM_MODEL_DIR; cat $SM_INPUT_CONFIG_DIR/hyperparameters.json; \
             echo weights > $SM_MODEL_DIR/w.bin; sleep 30",
        ],
    );
    s.sagemaker = Some(Box::new(SageMakerJob {
        training_job_name: "t".into(),
        hyperparameters: [("token".to_string(), "sesame-42".to_string())].into(),
        channels: [("train".to_string(), train.display().to_string())].into(),
        payload: "{}".into(),
        instance_type: "ml.p4d.24xlarge".into(),
    }));
    alice.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    wait_until("alice's model", LONG, || stdout(&a).contains("sesame-42"));
    let model = PathBuf::from(stdout(&a).lines().next().unwrap());
    wait_file(&model.join("w.bin"), LONG);
    let opt_ml = model.parent().unwrap();
    let probe = format!(
        "cat {}/input/config/hyperparameters.json {}/w.bin 2>&1; ls {} 2>&1; exit 0",
        opt_ml.display(),
        model.display(),
        ex.work_dir().display()
    );
    let (_, seen, _) = run_as(ex, bob, &probe);
    assert!(
        !seen.contains("sesame-42"),
        "bob read alice's hyperparameters: {seen}"
    );
    assert!(!seen.contains("weights"), "bob read alice's model: {seen}");
    assert!(seen.contains("Permission denied"), "{seen}");
    assert!(!model.starts_with(ex.spool()), "{}", model.display());
    assert_eq!(
        mode(&opt_ml.join("input/config/hyperparameters.json")),
        0o600
    );
    for d in ["model", "output", "checkpoints"] {
        assert_eq!(mode(&opt_ml.join(d)), 0o700, "{d}");
        assert_eq!(
            std::fs::metadata(opt_ml.join(d)).unwrap().uid(),
            alice.uid,
            "{d}"
        );
    }
    a.stop(9, Duration::from_secs(1));
    a.acknowledge().unwrap();
    let kept = kept_sagemaker_output(ex.spool(), a.job(), a.attempt());
    assert_eq!(
        std::fs::read_to_string(kept.join("model/w.bin")).unwrap(),
        "weights\n"
    );
    assert!(!opt_ml.exists(), "the job's own directory is removed");
}

/// A process job runs with `no_new_privs`: a setuid-root copy of `id`, placed by root
/// where the job can run it, does not make it root. A share the admin lets run setuid
/// programs keeps them.
#[test]
fn c1_a_setuid_root_file_does_not_make_a_process_job_root() {
    let test = "c1_a_setuid_root_file_does_not_make_a_process_job_root";
    let policy = |_: &Path| JobPolicy {
        allow_setuid_shares: vec!["ops".into()],
        ..JobPolicy::default()
    };
    let Some(n) = node(test, Need::Root, policy) else {
        return;
    };
    let (ex, alice, t) = (&n.ex, &n.alice, &n.t);
    let rootid = t.path().join("rootid");
    std::fs::copy("/usr/bin/id", &rootid).unwrap();
    std::os::unix::fs::chown(&rootid, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&rootid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let script = format!("grep NoNewPrivs /proc/self/status; {} -u", rootid.display());
    let (code, out, err) = run_as(ex, alice, &script);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["NoNewPrivs:\t1", alice.uid.to_string().as_str()],
        "the setuid-root file ran as root: {out}"
    );
    // The share the admin opted out keeps setuid semantics.
    let mut s = spec("host", &["sh", "-c", &script]);
    s.share = "ops".into();
    alice.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    wait_exit(&a, LONG);
    assert_eq!(
        stdout(&a).lines().collect::<Vec<_>>(),
        ["NoNewPrivs:\t0", "0"]
    );
    a.acknowledge().unwrap();
}

/// `renameat2(RENAME_EXCHANGE)` of the two names.
fn exchange(a: &Path, b: &Path) {
    let (a, b) = (
        CString::new(a.as_os_str().as_bytes()).unwrap(),
        CString::new(b.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: two NUL-terminated paths.
    unsafe {
        nix::libc::syscall(
            nix::libc::SYS_renameat2,
            nix::libc::AT_FDCWD,
            a.as_ptr(),
            nix::libc::AT_FDCWD,
            b.as_ptr(),
            2u32, // RENAME_EXCHANGE
        );
    }
}

/// The kept output of a host SageMaker job whose own directory is on another file
/// system than the spool (a tmpfs) is copied by root while its user swaps each of its
/// files with a symbolic link to a file only root may read, over and over: no copy
/// ever holds that file.
#[test]
fn h5_a_symlink_swapped_into_the_kept_output_never_leaks_a_root_file() {
    let test = "h5_a_symlink_swapped_into_the_kept_output_never_leaks_a_root_file";
    init();
    if lacks_accounts(test, Need::Root) {
        return;
    }
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        not_run(
            test,
            "no /dev/shm (a tmpfs)",
            "run it where /dev/shm is a tmpfs",
        );
        return;
    }
    let t = open_dir();
    let fast = tempfile::tempdir_in(shm).unwrap();
    let Some(ex) = executors_at(
        test,
        &t.path().join("spool"),
        Some(&fast.path().join("attempts")),
        JobPolicy {
            work_dir: Some(fast.path().join("work")),
            ..JobPolicy::default()
        },
    ) else {
        return;
    };
    let mut accounts = TestAccounts::new();
    let alice = account(&accounts.user("alice", &[], true));
    // A directory only root may read, holding what the copy must never get.
    let secret = t.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("x"), "TOPSECRET\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    // The model: directories `d<i>` holding `x`, and links `l<i>` to the secret one.
    const N: usize = 8;
    let script = format!(
        "echo $SM_MODEL_DIR; for i in $(seq 1 {N}); do mkdir $SM_MODEL_DIR/d$i; \
         echo mine > $SM_MODEL_DIR/d$i/x; ln -s {} $SM_MODEL_DIR/l$i; done",
        secret.display()
    );
    let mut regular = 0;
    for _round in 0..5 {
        let mut s = spec("host", &["sh", "-c", &script]);
        s.sagemaker = Some(Box::new(SageMakerJob {
            training_job_name: "t".into(),
            hyperparameters: Default::default(),
            channels: Default::default(),
            payload: "{}".into(),
            instance_type: "ml.p4d.24xlarge".into(),
        }));
        alice.apply_to(&mut s, "n3", None).unwrap();
        let a = ex.start(&s).unwrap();
        let st = wait_exit(&a, LONG);
        assert_eq!(st.code, Some(0), "{}", stderr(&a));
        let model = PathBuf::from(stdout(&a).lines().next().unwrap());
        // Alice's other jobs, as it were: each swaps a directory with its link, as fast
        // as it can, while root copies the tree.
        let stop = Arc::new(AtomicBool::new(false));
        let swappers: Vec<_> = (1..=N)
            .map(|i| {
                let (stop, model) = (stop.clone(), model.clone());
                std::thread::spawn(move || {
                    let (d, l) = (model.join(format!("d{i}")), model.join(format!("l{i}")));
                    while !stop.load(Ordering::Relaxed) {
                        exchange(&d, &l);
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        a.acknowledge().unwrap();
        stop.store(true, Ordering::Relaxed);
        for s in swappers {
            s.join().unwrap();
        }
        let kept = kept_sagemaker_output(ex.spool(), a.job(), a.attempt()).join("model");
        for ent in std::fs::read_dir(&kept).unwrap() {
            let ent = ent.unwrap();
            // A link is kept as a link (its target is not read); a directory's `x` is
            // the copy.
            if !ent.file_type().unwrap().is_dir() {
                continue;
            }
            let x = ent.path().join("x");
            let Ok(m) = std::fs::symlink_metadata(&x) else {
                continue;
            };
            if m.is_file() {
                regular += 1;
                let text = std::fs::read_to_string(&x).unwrap();
                assert_eq!(text, "mine\n", "{} holds a root-only file", x.display());
                assert_eq!(m.uid(), alice.uid);
            }
        }
    }
    assert!(regular > 0, "nothing of the model was kept");
}

/// A job whose cached image cannot get an overlay is not started: it never runs on
/// the shared cache itself (here the spool's path holds a `:`, which overlay options
/// cannot carry).
#[test]
fn h1_without_an_overlay_the_container_does_not_run_on_the_cache() {
    let test = "h1_without_an_overlay_the_container_does_not_run_on_the_cache";
    init();
    if lacks(test, Need::Containers) {
        return;
    }
    let t = open_dir();
    let spool = t.path().join("spo:ol");
    let Some(ex) = executors_at(test, &spool, None, JobPolicy::default()) else {
        return;
    };
    let layout = image_layout(t.path());
    let marker = "/etc/written-by-a-container";
    let s = spec(
        layout.to_str().unwrap(),
        &["sh", "-c", &format!("echo x > {marker}")],
    );
    let e = match ex.start(&s) {
        Ok(a) => {
            wait_exit(&a, LONG);
            a.acknowledge().unwrap();
            panic!("the container started without an overlay")
        }
        Err(e) => e.to_string(),
    };
    assert!(e.contains("cannot mount an overlay"), "{e}");
    assert!(e.contains("not run on the shared cache"), "{e}");
    let images = spool.join("images");
    for ent in std::fs::read_dir(&images).unwrap() {
        let rootfs = ent.unwrap().path().join("rootfs");
        assert!(!rootfs.join(&marker[1..]).exists(), "the cache was written");
    }
}

/// An OCI image layout of the busybox rootfs, in `dir/layout`.
fn image_layout(dir: &Path) -> PathBuf {
    use sha2::{Digest, Sha256};
    let hex = |b: &[u8]| -> String {
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let base = busybox_rootfs(dir);
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(".", &base).unwrap();
    let layer = b.into_inner().unwrap();
    let layout = dir.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let put = |media: &str, bytes: &[u8]| {
        let h = hex(bytes);
        std::fs::write(layout.join("blobs/sha256").join(&h), bytes).unwrap();
        serde_json::json!({"mediaType": media, "digest": format!("sha256:{h}"), "size": bytes.len()})
    };
    let l = put("application/vnd.oci.image.layer.v1.tar", &layer);
    let config = serde_json::json!({
        "os": "linux", "config": {"Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", hex(&layer))]},
    });
    let c = put(
        "application/vnd.oci.image.config.v1+json",
        &serde_json::to_vec(&config).unwrap(),
    );
    let manifest = serde_json::json!({"schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": c, "layers": [l]});
    let m = put(
        "application/vnd.oci.image.manifest.v1+json",
        &serde_json::to_vec(&manifest).unwrap(),
    );
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&serde_json::json!({"schemaVersion": 2, "manifests": [m]})).unwrap(),
    )
    .unwrap();
    layout
}

/// `mknod path c major:minor`, mode 0666.
fn char_node(path: &Path, major: u64, minor: u64) {
    nix::sys::stat::mknod(
        path,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(major, minor),
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
}

/// A process job given GPU 0 opens GPU 0's device node, not GPU 1's: the GPUs are
/// char devices made in a test directory (GPU 0 with `/dev/kmsg`'s numbers, GPU 1
/// with `/dev/fuse`'s, both of which any account may open where nothing confines it).
#[test]
fn m8_a_process_job_cannot_open_a_gpu_it_was_not_given() {
    let test = "m8_a_process_job_cannot_open_a_gpu_it_was_not_given";
    if !tranche_agent::exec::cgroup_mounts()
        .v1
        .contains_key("devices")
    {
        not_run_unless_ci(
            test,
            "no cgroup v1 devices hierarchy (a pure v2 node)",
            "run it on a node with cgroup v1",
            false,
        );
        return;
    }
    let policy = |t: &Path| {
        let dev = t.join("dev");
        std::fs::create_dir(&dev).unwrap();
        std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o755)).unwrap();
        char_node(&dev.join("nvidia0"), 1, 11);
        char_node(&dev.join("nvidia1"), 10, 229);
        JobPolicy {
            device_dir: dev,
            ..JobPolicy::default()
        }
    };
    let Some(n) = node(test, Need::Root, policy) else {
        return;
    };
    let (ex, alice, t) = (&n.ex, &n.alice, &n.t);
    let dev = t.path().join("dev");
    let mut s = spec(
        "host",
        &[
            "sh",
            "-c",
            &format!(
                "(: > {0}/nvidia0) 2>&1 && echo gpu0 opened; (: > {0}/nvidia1) 2>&1 || echo gpu1 refused; \
                 (: > /dev/null) && echo null opened",
                dev.display()
            ),
        ],
    );
    s.fake_devices = false;
    s.gpus = gpus(&[0]);
    alice.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    wait_exit(&a, LONG);
    let out = stdout(&a);
    a.acknowledge().unwrap();
    assert!(out.contains("gpu0 opened"), "{out}");
    assert!(out.contains("null opened"), "{out}");
    assert!(out.contains("gpu1 refused"), "{out}");
    assert!(out.contains("Operation not permitted"), "{out}");
}

/// A job that asks for no memory gets the node's default limit, and every job gets a
/// `pids.max`.
#[test]
fn m8_a_job_without_requests_gets_default_memory_and_pids_limits() {
    let test = "m8_a_job_without_requests_gets_default_memory_and_pids_limits";
    init();
    if lacks(test, Need::Root) {
        return;
    }
    let t = open_dir();
    let Some(ex) = executors(
        test,
        &t,
        JobPolicy {
            default_memory_mb_per_gpu: 768,
            default_cpus_per_gpu: 1,
            pids_max_per_gpu: 300,
            ..JobPolicy::default()
        },
    ) else {
        return;
    };
    let mut s = spec("host", &["sleep", "30"]);
    s.gpus = gpus(&[0, 1]);
    let a = ex.start(&s).unwrap();
    let dirs = a.cgroup_dirs().expect("a cgroup");
    let read = |p: PathBuf| std::fs::read_to_string(&p).map(|s| s.trim().to_string());
    let (mem, v2) = dirs.memory.clone().expect("a memory limit");
    let limit = read(mem.join(if v2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    }))
    .unwrap();
    let pids: Vec<String> = dirs
        .all
        .iter()
        .filter_map(|d| read(d.join("pids.max")).ok())
        .collect();
    a.stop(9, Duration::from_secs(1));
    a.acknowledge().unwrap();
    assert_eq!(limit, ((2 * 768u64) << 20).to_string());
    assert_eq!(pids, ["600"]);
}

/// A container job of an account other than root has no capability at all.
#[test]
fn m10_a_container_job_has_no_capabilities() {
    let test = "m10_a_container_job_has_no_capabilities";
    let Some(n) = node(test, Need::Containers, |_| JobPolicy::default()) else {
        return;
    };
    let (ex, alice, t) = (&n.ex, &n.alice, &n.t);
    let rootfs = busybox_rootfs(t.path());
    let mut s = spec(
        rootfs.to_str().unwrap(),
        &["grep", "^Cap", "/proc/self/status"],
    );
    alice.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    let st = wait_exit(&a, LONG);
    let out = stdout(&a);
    a.acknowledge().unwrap();
    assert_eq!(st.code, Some(0), "{out}");
    let caps = env_lines(&out.replace(":\t", "="));
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            caps.get(set).map(String::as_str),
            Some("0000000000000000"),
            "{set} in {out}"
        );
    }
}

/// An `--output` file is created 0600, and the log port serves one only while the
/// job's own user owns it: alice pointing `--output` at bob's file, which others may
/// only write, does not read it through the agent.
#[test]
fn l6_output_files_are_private_and_only_the_jobs_own_are_served() {
    let test = "l6_output_files_are_private_and_only_the_jobs_own_are_served";
    let Some(n) = node(test, Need::Root, |_| JobPolicy::default()) else {
        return;
    };
    let (ex, alice, bob, t) = (&n.ex, &n.alice, &n.bob, &n.t);
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mine = shared.join("alice.out");
    let mut s = spec("host", &["echo", "hello"]);
    s.stdout_file = Some(mine.display().to_string());
    alice.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    wait_exit(&a, LONG);
    assert_eq!(mode(&mine), 0o600);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut a.output(false).unwrap().open().unwrap(), &mut text)
        .unwrap();
    assert_eq!(text, "hello\n");
    a.acknowledge().unwrap();
    // Bob's file, which others may write but not read.
    let his = shared.join("bob.log");
    std::fs::write(&his, "bob's notes\n").unwrap();
    std::os::unix::fs::chown(&his, Some(bob.uid), Some(bob.gid)).unwrap();
    std::fs::set_permissions(&his, std::fs::Permissions::from_mode(0o622)).unwrap();
    let mut s = spec("host", &["echo", "x"]);
    s.stdout_file = Some(his.display().to_string());
    alice.apply_to(&mut s, "n3", None).unwrap();
    let a = ex.start(&s).unwrap();
    wait_exit(&a, LONG);
    let e = a.output(false).unwrap().open().unwrap_err().to_string();
    a.acknowledge().unwrap();
    assert!(e.contains("not by the job's uid"), "{e}");
}

/// A user mapped to a system account (below `min_uid`) or to a member of `sudo` is
/// refused, by name, uid and rule.
#[test]
fn l10_system_accounts_and_sudo_members_are_refused() {
    let test = "l10_system_accounts_and_sudo_members_are_refused";
    init();
    if lacks_accounts(test, Need::Root) {
        return;
    }
    let cfg = agent_config("[users]\nalice = \"daemon\"\n");
    let e = resolve(&cfg, "alice").unwrap_err();
    assert!(matches!(e, Refusal::SystemAccount { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("account daemon (uid 1)") && msg.contains("min_uid = 1000"),
        "{msg}"
    );
    let mut accounts = TestAccounts::new();
    let admin = accounts.user("adm", &["sudo"], true);
    let cfg = agent_config(&format!("[users]\nalice = \"{}\"\n", admin.name));
    let e = resolve(&cfg, "alice").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Refusal::DeniedGroup { .. }), "{msg}");
    assert!(
        msg.contains(&format!("(uid {})", admin.uid))
            && msg.contains("group sudo")
            && msg.contains("deny_groups"),
        "{msg}"
    );
    // Not in a denied group and above min_uid: runs.
    let plain = accounts.user("plain", &[], true);
    let cfg = agent_config(&format!("[users]\nalice = \"{}\"\n", plain.name));
    assert_eq!(resolve(&cfg, "alice").unwrap().uid, plain.uid);
}
