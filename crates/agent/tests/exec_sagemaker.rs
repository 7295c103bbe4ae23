//! SageMaker's training container contract on the node: a job with a SageMaker part
//! reads `/opt/ml/input/config/*.json` and its `SM_*` variables, writes `/opt/ml/model`,
//! and finds what it wrote kept in the spool once its exit is acknowledged; without a
//! command it runs its image's entrypoint with `train`.
//!
//! The container tests need root, `useradd`, runc (or crun) and a static busybox (as
//! root, `apt-get install -y runc busybox-static`); without them each says so through
//! `exec_common::not_run` and returns, or fails under CI as root. The `host` tests
//! need nothing.

mod exec_common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use exec_common::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tranche_agent::exec::{kept_sagemaker_output, Attempt, Executors};
use tranche_agent::work_item::launch_spec;
use tranche_model::{JobStatus, SageMakerJob};
use tranche_proto::{Rendezvous, WorkItem};

const LONG: Duration = Duration::from_secs(30);

/// A training job `mnist-7` with two hyperparameters and the channel `train` at
/// `train_dir`.
fn sagemaker(train_dir: &Path) -> SageMakerJob {
    SageMakerJob {
        training_job_name: "mnist-7".into(),
        hyperparameters: BTreeMap::from([
            ("learning-rate".to_string(), "0.05".to_string()),
            ("epochs".to_string(), "2".to_string()),
        ]),
        channels: BTreeMap::from([("train".to_string(), train_dir.display().to_string())]),
        payload: "{}".into(),
        instance_type: "ml.p4d.24xlarge".into(),
    }
}

/// A channel directory holding `a.csv`.
fn channel(dir: &Path) -> PathBuf {
    let train = dir.join("data/train");
    std::fs::create_dir_all(&train).unwrap();
    std::fs::write(train.join("a.csv"), "1,2,3\n").unwrap();
    train
}

fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

/// Waits for a successful end, then acknowledges it; returns the kept output dir.
fn run_to_the_end(ex: &Executors, a: &Attempt) -> PathBuf {
    let st = wait_exit(a, LONG);
    assert_eq!(
        st.code,
        Some(0),
        "{st:?}; stdout: {}; stderr: {}",
        stdout(a),
        stderr(a)
    );
    a.acknowledge().unwrap();
    assert!(!a.dir().exists());
    kept_sagemaker_output(ex.spool(), a.job(), a.attempt())
}

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

fn put_blob(layout: &Path, media_type: &str, bytes: &[u8]) -> Value {
    let hex = sha256_hex(bytes);
    std::fs::write(layout.join("blobs/sha256").join(&hex), bytes).unwrap();
    json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": bytes.len()})
}

/// An OCI image layout of the busybox rootfs with `/usr/local/bin/train-entry` (this
/// `script`) as its `Entrypoint`.
fn training_image(dir: &Path, script: &str) -> PathBuf {
    let base = busybox_rootfs(dir);
    let entry = base.join("usr/local/bin/train-entry");
    std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
    std::fs::write(&entry, script).unwrap();
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
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
    let l = put_blob(&layout, "application/vnd.oci.image.layer.v1.tar", &layer);
    let config = json!({
        "os": "linux",
        "config": {"Entrypoint": ["/usr/local/bin/train-entry"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha256_hex(&layer))]},
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
        "layers": [l],
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

/// Rank 1 of a gang of two (`n1`, `n3`) of user `alice`, running `image` with no
/// command.
fn work_item(image: &Path, sm: SageMakerJob) -> WorkItem {
    WorkItem {
        job: job_id(),
        attempt: 1,
        status: JobStatus::Scheduled,
        share: "research".into(),
        restarts: 0,
        image: image.display().to_string(),
        command: Vec::new(),
        env: BTreeMap::new(),
        cpus: 2,
        memory_mb: 0,
        gpus: Vec::new(),
        time_limit_s: None,
        scheduled_at: 0,
        started_at: None,
        signal: "SIGTERM".into(),
        stop: None,
        user: "alice".into(),
        cwd: None,
        rendezvous: Rendezvous {
            nodes: vec!["n1".into(), "n3".into()],
            rank: 1,
            gpus_per_node: 0,
            master_addr: "127.0.0.1".into(),
            master_port: 20_000,
        },
        name: "mnist".into(),
        array: None,
        output: None,
        error: None,
        sagemaker: Some(Box::new(sm)),
    }
}

/// The entrypoint, run as `train-entry train` as the job's user, reads the config
/// files, a variable and its channel (read-only), and writes the model; the model and
/// the output are kept in the spool, the job's user's, after the attempt is gone.
#[test]
fn a_sagemaker_container_trains_with_its_entrypoint_and_keeps_its_model() {
    let test = "a_sagemaker_container_trains_with_its_entrypoint_and_keeps_its_model";
    if lacks_accounts(test, Need::Containers) {
        return;
    }
    init();
    let mut accounts = TestAccounts::new();
    let acct = accounts.user("sm", &[], true);
    let cfg = agent_config(&format!("[users]\nalice = \"{}\"\n", acct.name));
    let t = test_dir();
    let train = channel(t.path());
    let script = r#"#!/bin/sh
set -e
m=/opt/ml/model
echo "$# $1" > $m/args.txt
cp /opt/ml/input/config/hyperparameters.json $m/hps.json
cp /opt/ml/input/config/resourceconfig.json $m/resourceconfig.json
cp /opt/ml/input/config/inputdataconfig.json $m/inputdataconfig.json
echo "lr=$SM_HP_LEARNING_RATE host=$SM_CURRENT_HOST hosts=$SM_HOSTS data=$(cat $SM_CHANNEL_TRAIN/a.csv) job=$TRAINING_JOB_NAME" > $m/out.txt
touch $SM_CHANNEL_TRAIN/written 2>/dev/null && echo channel-writable >> $m/out.txt
echo done > $SM_OUTPUT_DATA_DIR/metrics.txt
echo checkpoint > /opt/ml/checkpoints/c1
"#;
    let layout = training_image(t.path(), script);
    let ex = Executors::new(&t.path().join("spool")).unwrap();
    let item = work_item(&layout, sagemaker(&train));
    let spec = launch_spec(&cfg, &item, true).unwrap();
    assert!(spec.command.is_empty());
    let a = ex.start(&spec).unwrap();
    assert_eq!(a.spec().command, ["/usr/local/bin/train-entry", "train"]);
    let kept = run_to_the_end(&ex, &a);

    let model = kept.join("model");
    let out = std::fs::read_to_string(model.join("out.txt")).unwrap();
    assert_eq!(
        out,
        "lr=0.05 host=algo-2 hosts=[\"algo-1\",\"algo-2\"] data=1,2,3 job=mnist-7\n"
    );
    assert_eq!(
        std::fs::read_to_string(model.join("args.txt")).unwrap(),
        "1 train\n"
    );
    assert_eq!(
        json_file(&model.join("hps.json")),
        json!({"learning-rate": "0.05", "epochs": "2"})
    );
    let rc = json_file(&model.join("resourceconfig.json"));
    assert_eq!(rc["current_host"], "algo-2");
    assert_eq!(rc["hosts"], json!(["algo-1", "algo-2"]));
    assert_eq!(rc["current_instance_type"], "ml.p4d.24xlarge");
    assert_eq!(
        json_file(&model.join("inputdataconfig.json")),
        json!({"train": {"TrainingInputMode": "File"}})
    );
    let metrics = kept.join("output/data/metrics.txt");
    assert_eq!(std::fs::read_to_string(&metrics).unwrap(), "done\n");
    for f in [model.join("out.txt"), metrics] {
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!((m.uid(), m.gid()), (acct.uid, acct.gid), "{}", f.display());
    }
    assert!(!train.join("written").exists());
}

/// A SageMaker job without a command whose image has no entrypoint (a rootfs
/// directory) is not started, and says why.
#[test]
fn a_sagemaker_rootfs_without_a_command_is_not_started() {
    if lacks(
        "a_sagemaker_rootfs_without_a_command_is_not_started",
        Need::Containers,
    ) {
        return;
    }
    init();
    let t = test_dir();
    let rootfs = busybox_rootfs(t.path());
    let ex = Executors::new(&t.path().join("spool")).unwrap();
    let mut s = spec(rootfs.to_str().unwrap(), &[]);
    s.sagemaker = Some(Box::new(sagemaker(&channel(t.path()))));
    let e = ex.start(&s).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "image `{}` has no entrypoint; give ContainerEntrypoint",
            rootfs.display()
        )
    );
}

/// A `host` job reads the same tree in a directory of its own outside the spool
/// (`<work_dir>/<job>.<attempt>`), through variables naming the node's paths, and its
/// model is kept the same way; given no command, it is not started.
#[test]
fn a_sagemaker_host_job_reads_its_tree_in_its_own_directory() {
    init();
    let t = test_dir();
    let train = channel(t.path());
    let ex = Executors::new(&t.path().join("spool")).unwrap();
    let script = r#"set -e
cp "$SM_INPUT_CONFIG_DIR/resourceconfig.json" "$SM_MODEL_DIR/resourceconfig.json"
echo "host=$SM_CURRENT_HOST data=$(cat "$SM_CHANNEL_TRAIN/a.csv") linked=$(cat "$SM_INPUT_DIR/data/train/a.csv") hps=$SM_HPS" > "$SM_MODEL_DIR/out.txt"
echo "$SM_CHANNEL_TRAIN $SM_MODEL_DIR" > "$SM_OUTPUT_DIR/paths.txt"
"#;
    let mut s = spec("host", &["sh", "-c", script]);
    s.sagemaker = Some(Box::new(sagemaker(&train)));
    let a = ex.start(&s).unwrap();
    let tree = ex
        .work_dir()
        .join(format!("{}.{}", a.job(), a.attempt()))
        .join("opt-ml");
    assert!(tree.is_dir(), "{}", tree.display());
    let kept = run_to_the_end(&ex, &a);
    assert_eq!(
        std::fs::read_to_string(kept.join("model/out.txt")).unwrap(),
        "host=algo-1 data=1,2,3 linked=1,2,3 hps={\"epochs\":\"2\",\"learning-rate\":\"0.05\"}\n"
    );
    let rc = json_file(&kept.join("model/resourceconfig.json"));
    assert_eq!(
        (&rc["current_host"], &rc["hosts"]),
        (&json!("algo-1"), &json!(["algo-1"]))
    );
    assert_eq!(
        std::fs::read_to_string(kept.join("output/paths.txt")).unwrap(),
        format!("{} {}/model\n", train.display(), tree.display())
    );
    assert!(!tree.exists(), "the job's own directory is removed");

    let mut s = spec("host", &[]);
    s.sagemaker = Some(Box::new(sagemaker(&train)));
    let e = ex.start(&s).unwrap_err().to_string();
    assert_eq!(
        e,
        "image `host` has no entrypoint; give ContainerEntrypoint"
    );
    // Without a SageMaker part, an empty command is refused as ever.
    s.sagemaker = None;
    let e = ex.start(&s).unwrap_err().to_string();
    assert!(e.contains("`command`"), "{e}");
}
