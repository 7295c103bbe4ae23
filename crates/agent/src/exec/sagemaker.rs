//! SageMaker's training container contract, for a job with a
//! [`SageMakerJob`](tranche_model::SageMakerJob) part (submitted through the AWS
//! Batch-compatible endpoint).
//!
//! # The tree
//!
//! Before the shim starts, the agent writes `opt-ml/`: in the attempt directory for a
//! container, in the job's own directory `<work_dir>/<job>.<attempt>/` for a job of
//! image `host` (which must reach it, and no user enters the spool). Every directory
//! of it is 0700 and every file 0600, the job's user's:
//!
//! | path | content |
//! |---|---|
//! | `input/config/hyperparameters.json` | the hyperparameters, a JSON object of strings |
//! | `input/config/resourceconfig.json` | `current_host`, `current_instance_type`, `current_group_name`, `hosts`, `instance_groups`, `network_interface_name` |
//! | `input/config/inputdataconfig.json` | `{"<channel>": {"TrainingInputMode": "File"}}` |
//! | `input/data/<channel>` | a container: the mount point of the channel's directory (read-only); `host`: a symlink to it |
//! | `input/data/<channel>` of a copied (S3) channel | a copy of the channel's directory, the job's to change |
//! | `model/`, `output/`, `output/data/`, `checkpoints/` | empty |
//!
//! The hosts are `algo-1` … `algo-N`, one per member of the gang in rank order (the
//! [`Rendezvous`](super::Rendezvous)); this node is `algo-<rank+1>`. A job of one node
//! is `algo-1` of `["algo-1"]`.
//!
//! A container gets the tree bind-mounted at `/opt/ml`, each channel's directory
//! mounted read-only at `/opt/ml/input/data/<channel>` over it. A job of image `host`
//! has no mount namespace: it reads the tree in its own directory, and every `SM_*`
//! path variable names that path (`SM_MODEL_DIR=<work_dir>/<job>.<attempt>/opt-ml/model`,
//! ...) and each `SM_CHANNEL_<NAME>` the channel's directory on the node.
//!
//! A job that exits 0 with an output directory (`OutputDataConfig.S3OutputPath` in the
//! S3 store) has `model.tar.gz` of its `model/` written there by the gang's first node
//! before its exit is reported ([`model_destination`], [`deliver_model`]).
//!
//! Once the controller has the attempt's exit, `opt-ml/model` and `opt-ml/output` are
//! kept as the job's output in `<spool>/sagemaker/<job>.<attempt>/` (see
//! [`kept_sagemaker_output`]), as its stdout and stderr are kept in `<spool>/logs`;
//! the job's own directory is removed.
//!
//! # The command
//!
//! A SageMaker job without a command runs its image's entrypoint with the one argument
//! `train`, as SageMaker runs `docker run IMAGE train`: an OCI image layout or archive
//! gives it in its configuration's `Entrypoint`. A rootfs directory or `host` has no
//! entrypoint, nor has an image without one: the attempt is not started and fails
//! with "image X has no entrypoint; give ContainerEntrypoint".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tranche_model::{JobId, SageMakerJob};

use super::spec::AttemptNo;
use super::{fsutil, ExecError, LaunchSpec};

/// The tree's directory in the attempt directory.
pub(super) const OPT_ML: &str = "opt-ml";
/// Where a container sees the tree.
const CONTAINER_ROOT: &str = "/opt/ml";
/// The one instance group of a Tranche job.
const GROUP: &str = "homogeneousCluster";

/// Where an acknowledged attempt's `model/` and `output/` are kept:
/// `<spool>/sagemaker/<job>.<attempt>/`.
pub fn kept_sagemaker_output(spool: &Path, job: JobId, attempt: AttemptNo) -> PathBuf {
    spool.join("sagemaker").join(format!("{job}.{attempt}"))
}

/// `(the hosts in rank order, this node's)`.
fn hosts(spec: &LaunchSpec) -> (Vec<String>, String) {
    let (n, rank) = spec
        .rendezvous
        .as_ref()
        .map_or((1, 0), |r| (r.nodes.len().max(1), r.rank as usize));
    let hosts: Vec<String> = (1..=n).map(|i| format!("algo-{i}")).collect();
    (hosts, format!("algo-{}", rank + 1))
}

/// `resourceconfig.json`.
pub(super) fn resource_config(spec: &LaunchSpec, sm: &SageMakerJob) -> Value {
    let (hosts, current) = hosts(spec);
    json!({
        "current_host": current,
        "current_instance_type": sm.instance_type,
        "current_group_name": GROUP,
        "hosts": hosts,
        "instance_groups": [{
            "instance_group_name": GROUP,
            "instance_type": sm.instance_type,
            "hosts": hosts,
        }],
        "network_interface_name": "eth0",
    })
}

/// `inputdataconfig.json`.
pub(super) fn input_data_config(sm: &SageMakerJob) -> Value {
    sm.channels
        .keys()
        .map(|c| (c.clone(), json!({"TrainingInputMode": "File"})))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A name as the tail of a variable name: upper-cased, anything but a letter, digit
/// or `_` (a `-` or `.`) made `_`.
fn var_suffix(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The `SM_*` variables and `TRAINING_JOB_NAME` of a SageMaker job (none for another
/// job). `host_tree`: the job's `opt-ml/` on the node for a job of image `host`, whose paths
/// are then the node's; `None` for a container, which sees `/opt/ml`.
pub fn sagemaker_env(spec: &LaunchSpec, host_tree: Option<&Path>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let Some(sm) = spec.sagemaker.as_deref() else {
        return env;
    };
    let root = host_tree.map_or_else(|| CONTAINER_ROOT.to_string(), |p| p.display().to_string());
    let (hosts, current) = hosts(spec);
    let mut set = |k: &str, v: String| env.insert(k.to_string(), v);
    set("SM_HOSTS", json(&hosts));
    set("SM_CURRENT_HOST", current);
    set("SM_NUM_GPUS", spec.gpus.len().to_string());
    let cpus = match spec.cpus {
        0 => std::thread::available_parallelism().map_or(0, |n| n.get() as u32),
        n => n,
    };
    if cpus > 0 {
        set("SM_NUM_CPUS", cpus.to_string());
    }
    set("SM_HPS", json(&sm.hyperparameters));
    set("SM_MODEL_DIR", format!("{root}/model"));
    set("SM_OUTPUT_DIR", format!("{root}/output"));
    set("SM_OUTPUT_DATA_DIR", format!("{root}/output/data"));
    set("SM_INPUT_DIR", format!("{root}/input"));
    set("SM_INPUT_CONFIG_DIR", format!("{root}/input/config"));
    set("SM_CHECKPOINT_DIR", format!("{root}/checkpoints"));
    let channels: Vec<&String> = sm.channels.keys().collect();
    let copied = copied_channels(sm);
    set("SM_CHANNELS", json(&channels));
    set("SM_CURRENT_INSTANCE_TYPE", sm.instance_type.clone());
    set("TRAINING_JOB_NAME", sm.training_job_name.clone());
    for (name, value) in &sm.hyperparameters {
        set(&format!("SM_HP_{}", var_suffix(name)), value.clone());
    }
    for (name, dir) in &sm.channels {
        let path = match host_tree {
            Some(_) if !copied.contains(name) => dir.clone(),
            _ => format!("{root}/input/data/{name}"),
        };
        set(&format!("SM_CHANNEL_{}", var_suffix(name)), path);
    }
    env
}

/// JSON text of a list or map of strings (which always serializes).
fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Checks, before the attempt exists, what the node must have for `spec`'s SageMaker
/// part: each channel's directory.
pub(super) fn check(spec: &LaunchSpec) -> Result<(), ExecError> {
    let Some(sm) = spec.sagemaker.as_deref() else {
        return Ok(());
    };
    for (name, dir) in &sm.channels {
        if !Path::new(dir).is_dir() {
            return Err(ExecError::Spec {
                field: "sagemaker.channels",
                reason: format!("channel `{name}`: `{dir}` is not a directory on this node"),
            });
        }
    }
    Ok(())
}

/// The command of a SageMaker job given none: `entrypoint` (the image's), then
/// `train`.
pub(super) fn command(
    spec: &LaunchSpec,
    entrypoint: Option<&[String]>,
) -> Result<Vec<String>, ExecError> {
    match entrypoint {
        Some(e) if !e.is_empty() && !e[0].is_empty() => {
            Ok(e.iter().cloned().chain(["train".to_string()]).collect())
        }
        _ => Err(ExecError::NoEntrypoint {
            image: spec.image.clone(),
        }),
    }
}

/// Writes the tree at `root` (see the module docs); `host`: the job runs on the node,
/// its channels are symlinked in, else they are mount points. Every directory is 0700
/// and every file 0600, all given to the job's user once written: only that user
/// reads the hyperparameters and what the job leaves in `model/`, `output/` and
/// `checkpoints/`.
pub(super) fn write_tree(spec: &LaunchSpec, root: &Path, host: bool) -> Result<(), ExecError> {
    use std::os::unix::fs::DirBuilderExt;
    let Some(sm) = spec.sagemaker.as_deref() else {
        return Ok(());
    };
    let root = root.to_path_buf();
    let mkdir = |p: &Path| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(p)
            .map_err(|e| ExecError::io("creating directory", p, e))
    };
    let config = root.join("input/config");
    let data = root.join("input/data");
    mkdir(&config)?;
    mkdir(&data)?;
    fsutil::write_json(&config.join("hyperparameters.json"), &sm.hyperparameters)?;
    fsutil::write_json(
        &config.join("resourceconfig.json"),
        &resource_config(spec, sm),
    )?;
    fsutil::write_json(&config.join("inputdataconfig.json"), &input_data_config(sm))?;
    let copied = copied_channels(sm);
    for (name, path) in &sm.channels {
        let at = data.join(name);
        if copied.contains(name) {
            copy_channel(Path::new(path), &at)?;
        } else if host {
            std::os::unix::fs::symlink(path, &at)
                .map_err(|e| ExecError::io("linking the channel", &at, e))?;
        } else {
            mkdir(&at)?;
        }
    }
    for d in ["model", "output", "output/data", "checkpoints"] {
        mkdir(&root.join(d))?;
    }
    if let Some((uid, gid)) = spec.user {
        give(&root, uid, gid)?;
    }
    Ok(())
}

/// The channels the request (`payload`) reads from S3: the node copies them into the
/// job's tree, as SageMaker's File mode downloads them, where the job may change them.
pub(super) fn copied_channels(sm: &SageMakerJob) -> std::collections::BTreeSet<String> {
    let v: Value = serde_json::from_str(&sm.payload).unwrap_or_default();
    v.get("InputDataConfig")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.pointer("/DataSource/S3DataSource").is_some())
        .filter_map(|c| c.get("ChannelName").and_then(Value::as_str))
        .filter(|n| sm.channels.contains_key(*n))
        .map(str::to_string)
        .collect()
}

/// Copies the channel directory `from` to `to`: directories and regular files only
/// (a symbolic link or a special file is left out, never followed).
fn copy_channel(from: &Path, to: &Path) -> Result<(), ExecError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(to)
        .map_err(|e| ExecError::io("creating the channel's copy", to, e))?;
    let err = |e| ExecError::io("copying the channel", from, e);
    for ent in std::fs::read_dir(from).map_err(err)? {
        let ent = ent.map_err(err)?;
        let (src, dst) = (ent.path(), to.join(ent.file_name()));
        let t = ent.file_type().map_err(err)?;
        if t.is_dir() {
            copy_channel(&src, &dst)?;
        } else if t.is_file() {
            std::fs::copy(&src, &dst).map_err(|e| ExecError::io("copying the channel", &src, e))?;
        }
    }
    Ok(())
}

/// Gives `p` and everything below it (written by the agent, not followed through a
/// symbolic link) to `uid`:`gid`.
pub(super) fn give(p: &Path, uid: u32, gid: u32) -> Result<(), ExecError> {
    let err = |e| ExecError::io("giving the job's user", p, e);
    let m = std::fs::symlink_metadata(p).map_err(err)?;
    if m.is_dir() {
        for ent in std::fs::read_dir(p).map_err(err)? {
            give(&ent.map_err(err)?.path(), uid, gid)?;
        }
    }
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).map_err(err)
}

/// The container's mounts of the tree in the attempt directory `dir`: it at
/// `/opt/ml`, then each channel read-only.
pub(super) fn mounts(spec: &LaunchSpec, dir: &Path) -> Vec<Value> {
    let Some(sm) = spec.sagemaker.as_deref() else {
        return Vec::new();
    };
    let mut out = vec![json!({"destination": CONTAINER_ROOT, "type": "bind",
                              "source": dir.join(OPT_ML), "options": ["rbind", "rw"]})];
    let copied = copied_channels(sm);
    for (name, path) in sm.channels.iter().filter(|(n, _)| !copied.contains(*n)) {
        out.push(
            json!({"destination": format!("{CONTAINER_ROOT}/input/data/{name}"),
                        "type": "bind", "source": path,
                        "options": ["rbind", "ro", "nosuid", "nodev"]}),
        );
    }
    out
}

/// Moves an ended attempt's `opt-ml/model` and `opt-ml/output` (if it has them) out of
/// its tree `root` (`<base>/<...>/opt-ml`, everything below `base` the job's user's,
/// who owns it as `owner`) to [`kept_sagemaker_output`], which only root can enter. The
/// user may still be changing the tree from another job: it is moved (or copied,
/// across file systems) from descriptors opened without following a symbolic link,
/// and only what `owner` owns is copied (see [`fsutil::move_beneath`]).
pub(super) fn keep(
    base: &Path,
    root: &Path,
    owner: u32,
    spool: &Path,
    job: JobId,
    attempt: AttemptNo,
) {
    let Ok(rel) = root.strip_prefix(base) else {
        return;
    };
    if std::fs::symlink_metadata(root).is_err() {
        return;
    }
    let kept = kept_sagemaker_output(spool, job, attempt);
    let made = fsutil::private_dir(&spool.join("sagemaker"))
        .map_err(|e| e.to_string())
        .and_then(|()| std::fs::create_dir_all(&kept).map_err(|e| e.to_string()));
    if let Err(e) = made {
        tracing::warn!("cannot keep {}: {e}", root.display());
        return;
    }
    for d in ["model", "output"] {
        match fsutil::move_beneath(base, &rel.join(d), &kept.join(d), owner) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot keep {}: {e}", root.join(d).display()),
        }
    }
}

/// Where `spec`'s node writes `model.tar.gz`: the output directory, on the first
/// node of the gang only (SageMaker's model is the first host's).
pub(super) fn model_destination(spec: &LaunchSpec) -> Option<PathBuf> {
    spec.sagemaker.as_deref()?;
    let dir = Path::new(spec.env.get(tranche_model::OUTPUT_DIR_VAR)?);
    // The controller makes it absolute and of plain names; anything else is not
    // written to (the agent writes it as root).
    let plain = dir.is_absolute()
        && dir.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        });
    if !plain {
        tracing::warn!(
            "job {} attempt {}: not writing model.tar.gz to {}: not an absolute path of plain names",
            spec.job,
            spec.attempt,
            dir.display()
        );
        return None;
    }
    let first = spec.rendezvous.as_ref().is_none_or(|r| r.rank == 0);
    first.then(|| dir.join("model.tar.gz"))
}

/// Writes `model.tar.gz` of the kept `model` directory (root's copy, see [`keep`]) at
/// `to`: its files at the top of the archive, symbolic links stored as links (never
/// followed), written beside `to` and renamed over it. A job that left no `model/` gets
/// an empty archive, as SageMaker uploads one.
pub(super) fn deliver_model(model: &Path, to: &Path) -> Result<PathBuf, String> {
    use flate2::write::GzEncoder;
    let dir = to.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let tmp = dir.join(".model.tar.gz.partial");
    let write = || -> std::io::Result<()> {
        let f = std::fs::File::create(&tmp)?;
        let mut t = tar::Builder::new(GzEncoder::new(f, flate2::Compression::default()));
        t.follow_symlinks(false);
        let mut entries: Vec<_> = match std::fs::read_dir(model) {
            Ok(d) => d.collect::<Result<_, _>>()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(e),
        };
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if e.file_type()?.is_dir() {
                t.append_dir_all(e.file_name(), e.path())?;
            } else {
                t.append_path_with_name(e.path(), e.file_name())?;
            }
        }
        t.into_inner()?.finish()?.sync_all()
    };
    write()
        .and_then(|()| std::fs::rename(&tmp, to))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("writing {}: {e}", to.display())
        })?;
    Ok(to.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Rendezvous;

    fn sm() -> SageMakerJob {
        SageMakerJob {
            training_job_name: "mnist-1".into(),
            hyperparameters: BTreeMap::from([
                ("learning-rate".to_string(), "0.1".to_string()),
                ("batch.size".to_string(), "64".to_string()),
                ("epochs".to_string(), "3".to_string()),
            ]),
            channels: BTreeMap::from([
                ("train".to_string(), "/data/mnist/train".to_string()),
                ("val-set".to_string(), "/data/mnist/val".to_string()),
            ]),
            payload: "{}".into(),
            instance_type: "ml.p4d.24xlarge".into(),
        }
    }

    /// Rank 1 of a gang of two, with 2 GPUs and 8 CPUs.
    fn rank1() -> LaunchSpec {
        let mut s = crate::exec::spec::tests::spec();
        s.sagemaker = Some(Box::new(sm()));
        s.cpus = 8;
        s.gpus = vec![
            crate::exec::BoundGpu {
                index: tranche_model::GpuIndex(0),
                uuid: "GPU-0".into(),
            },
            crate::exec::BoundGpu {
                index: tranche_model::GpuIndex(1),
                uuid: "GPU-1".into(),
            },
        ];
        s.rendezvous = Some(Rendezvous {
            nodes: vec!["n7".into(), "n2".into()],
            rank: 1,
            gpus_per_node: 2,
            master_addr: "10.0.0.7".into(),
            master_port: 20_000,
        });
        s
    }

    #[test]
    fn a_gangs_second_member_is_algo_2_of_both() {
        let s = rank1();
        let rc = resource_config(&s, s.sagemaker.as_deref().unwrap());
        assert_eq!(
            rc,
            json!({
                "current_host": "algo-2",
                "current_instance_type": "ml.p4d.24xlarge",
                "current_group_name": "homogeneousCluster",
                "hosts": ["algo-1", "algo-2"],
                "instance_groups": [{
                    "instance_group_name": "homogeneousCluster",
                    "instance_type": "ml.p4d.24xlarge",
                    "hosts": ["algo-1", "algo-2"],
                }],
                "network_interface_name": "eth0",
            })
        );
        let e = sagemaker_env(&s, None);
        assert_eq!(e["SM_HOSTS"], r#"["algo-1","algo-2"]"#);
        assert_eq!(e["SM_CURRENT_HOST"], "algo-2");
        assert_eq!(e["SM_NUM_GPUS"], "2");
        assert_eq!(e["SM_NUM_CPUS"], "8");
    }

    #[test]
    fn a_job_of_one_node_is_algo_1() {
        let mut s = rank1();
        s.rendezvous = None;
        let rc = resource_config(&s, s.sagemaker.as_deref().unwrap());
        assert_eq!(
            (&rc["current_host"], &rc["hosts"]),
            (&json!("algo-1"), &json!(["algo-1"]))
        );
        s.rendezvous = Some(Rendezvous {
            nodes: vec!["n1".into()],
            rank: 0,
            gpus_per_node: 1,
            master_addr: "10.0.0.1".into(),
            master_port: 20_000,
        });
        assert_eq!(sagemaker_env(&s, None)["SM_HOSTS"], r#"["algo-1"]"#);
    }

    #[test]
    fn the_env_names_hyperparameters_and_channels_in_the_container() {
        let e = sagemaker_env(&rank1(), None);
        let want = [
            ("SM_HP_LEARNING_RATE", "0.1"),
            ("SM_HP_BATCH_SIZE", "64"),
            ("SM_HP_EPOCHS", "3"),
            (
                "SM_HPS",
                r#"{"batch.size":"64","epochs":"3","learning-rate":"0.1"}"#,
            ),
            ("SM_MODEL_DIR", "/opt/ml/model"),
            ("SM_OUTPUT_DIR", "/opt/ml/output"),
            ("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"),
            ("SM_INPUT_DIR", "/opt/ml/input"),
            ("SM_INPUT_CONFIG_DIR", "/opt/ml/input/config"),
            ("SM_CHANNELS", r#"["train","val-set"]"#),
            ("SM_CHANNEL_TRAIN", "/opt/ml/input/data/train"),
            ("SM_CHANNEL_VAL_SET", "/opt/ml/input/data/val-set"),
            ("SM_CURRENT_INSTANCE_TYPE", "ml.p4d.24xlarge"),
            ("TRAINING_JOB_NAME", "mnist-1"),
        ];
        for (k, v) in want {
            assert_eq!(e.get(k).map(String::as_str), Some(v), "{k} in {e:?}");
        }
        assert_eq!(
            input_data_config(rank1().sagemaker.as_deref().unwrap()),
            json!({"train": {"TrainingInputMode": "File"},
                   "val-set": {"TrainingInputMode": "File"}})
        );
        // A job of no SageMaker part gets none of it.
        assert!(sagemaker_env(&crate::exec::spec::tests::spec(), None).is_empty());
    }

    #[test]
    fn a_host_job_is_pointed_at_the_spool_and_the_channels_themselves() {
        let e = sagemaker_env(&rank1(), Some(Path::new("/spool/attempts/7.2/opt-ml")));
        assert_eq!(e["SM_MODEL_DIR"], "/spool/attempts/7.2/opt-ml/model");
        assert_eq!(
            e["SM_INPUT_CONFIG_DIR"],
            "/spool/attempts/7.2/opt-ml/input/config"
        );
        assert_eq!(e["SM_CHANNEL_TRAIN"], "/data/mnist/train");
        assert_eq!(e["SM_CHANNEL_VAL_SET"], "/data/mnist/val");
    }

    #[test]
    fn the_tree_holds_the_config_files_and_the_channel_mount_points() {
        let t = tempfile::tempdir().unwrap();
        let s = rank1();
        let root = t.path().join(OPT_ML);
        write_tree(&s, &root, false).unwrap();
        let read = |p: &str| -> Value {
            serde_json::from_str(&std::fs::read_to_string(root.join(p)).unwrap()).unwrap()
        };
        assert_eq!(
            read("input/config/hyperparameters.json"),
            json!({"learning-rate": "0.1", "batch.size": "64", "epochs": "3"})
        );
        assert_eq!(
            read("input/config/resourceconfig.json")["current_host"],
            "algo-2"
        );
        assert_eq!(
            read("input/config/inputdataconfig.json")["train"]["TrainingInputMode"],
            "File"
        );
        for d in [
            "model",
            "output/data",
            "checkpoints",
            "input/data/train",
            "input/data/val-set",
        ] {
            assert!(root.join(d).is_dir(), "{d}");
        }
        let m = mounts(&s, t.path());
        assert_eq!(m[0]["destination"], "/opt/ml");
        assert_eq!(m[0]["source"], json!(root));
        assert_eq!(m[2]["destination"], "/opt/ml/input/data/val-set");
        assert_eq!(m[2]["source"], "/data/mnist/val");
        assert!(m[2]["options"].as_array().unwrap().contains(&json!("ro")));
    }

    #[test]
    fn a_copied_channel_is_the_jobs_own_copy_and_not_mounted() {
        let t = tempfile::tempdir().unwrap();
        let store = t.path().join("store/alice/b/code");
        std::fs::create_dir_all(store.join("pkg")).unwrap();
        std::fs::write(store.join("train.py"), "print(1)").unwrap();
        std::fs::write(store.join("pkg/m.py"), "x = 1").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", store.join("link")).unwrap();
        let mut s = rank1();
        let sm = s.sagemaker.as_mut().unwrap();
        sm.channels
            .insert("code".into(), store.display().to_string());
        sm.payload = r#"{"InputDataConfig":[{"ChannelName":"train","DataSource":{"FileSystemDataSource":{}}},
            {"ChannelName":"code","DataSource":{"S3DataSource":{"S3Uri":"s3://b/code"}}}]}"#
            .into();
        assert_eq!(
            copied_channels(sm).into_iter().collect::<Vec<_>>(),
            ["code"]
        );
        let root = t.path().join("attempt").join(OPT_ML);
        write_tree(&s, &root, false).unwrap();
        let code = root.join("input/data/code");
        assert_eq!(
            std::fs::read_to_string(code.join("train.py")).unwrap(),
            "print(1)"
        );
        assert_eq!(
            std::fs::read_to_string(code.join("pkg/m.py")).unwrap(),
            "x = 1"
        );
        assert!(std::fs::symlink_metadata(code.join("link")).is_err());
        let m = mounts(&s, &t.path().join("attempt"));
        assert!(m.iter().all(|m| m["source"] != json!(store)), "{m:?}");
        assert_eq!(m.len(), 3, "the tree and the two mounted channels");
        let host = sagemaker_env(&s, Some(&root));
        assert_eq!(host["SM_CHANNEL_CODE"], code.display().to_string());
        assert_eq!(host["SM_CHANNEL_TRAIN"], "/data/mnist/train");
    }

    #[test]
    fn the_first_node_delivers_the_model_as_a_tarball() {
        let t = tempfile::tempdir().unwrap();
        let model = t.path().join("kept/model");
        std::fs::create_dir_all(model.join("sub")).unwrap();
        std::fs::write(model.join("weights.txt"), "w=1").unwrap();
        std::fs::write(model.join("sub/more.txt"), "m").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", model.join("link")).unwrap();
        let to = t.path().join("store/alice/b/run/job-1/output/model.tar.gz");
        deliver_model(&model, &to).unwrap();
        let f = std::fs::File::open(&to).unwrap();
        let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
        let mut seen = BTreeMap::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let mut body = String::new();
            std::io::Read::read_to_string(&mut e, &mut body).unwrap();
            let kind = e.header().entry_type();
            seen.insert(e.path().unwrap().display().to_string(), (kind, body));
        }
        assert_eq!(seen["weights.txt"].1, "w=1");
        assert_eq!(seen["sub/more.txt"].1, "m");
        assert!(
            seen["link"].0.is_symlink(),
            "a link is stored, not followed"
        );
        assert!(!to.with_file_name(".model.tar.gz.partial").exists());

        let mut s = rank1();
        s.rendezvous = None;
        assert_eq!(model_destination(&s), None, "no output directory");
        s.env.insert(
            tranche_model::OUTPUT_DIR_VAR.into(),
            "/store/alice/b/o/j/output".into(),
        );
        let first = model_destination(&s);
        s.rendezvous = rank1().rendezvous;
        assert_eq!(model_destination(&s), None, "rank 1 of 2 delivers nothing");
        assert_eq!(
            first,
            Some(PathBuf::from("/store/alice/b/o/j/output/model.tar.gz"))
        );
    }

    #[test]
    fn without_a_command_the_entrypoint_trains() {
        let s = rank1();
        let e = vec!["python".to_string(), "/train.py".to_string()];
        assert_eq!(
            command(&s, Some(&e)).unwrap(),
            ["python", "/train.py", "train"]
        );
        let msg = command(&s, None).unwrap_err().to_string();
        assert_eq!(
            msg,
            "image `host` has no entrypoint; give ContainerEntrypoint"
        );
    }
}
