//! The attempt spec: the typed description of one attempt of a job as the agent runs
//! it (written to the attempt directory as `spec.json`), its checks, and the
//! environment a job gets from it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use tranche_model::{GpuIndex, JobId};

use super::ExecError;

/// An attempt's number within its job, as the controllers count attempts; `(job,
/// attempt)` names one attempt on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttemptNo(pub u32);

impl fmt::Display for AttemptNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One GPU bound to an attempt: its index on the node (NVML order, which is PCI bus
/// order) and its UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundGpu {
    /// Index of the GPU on the node (`/dev/nvidia<index>`).
    pub index: GpuIndex,
    /// The GPU's UUID, e.g. `GPU-5f1c...`.
    pub uuid: String,
}

/// Everything an executor needs to run one attempt of a job on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// The job's id.
    pub job: JobId,
    /// The attempt number; `(job, attempt)` names the attempt on this node.
    pub attempt: AttemptNo,
    /// How many times the job has been restarted before this attempt.
    pub restart_count: u32,
    /// The quota share the job runs in.
    pub share: String,
    /// `"host"` runs the command as a plain process on the node; anything else is an
    /// absolute path to a rootfs directory, an OCI image layout directory, or a
    /// `.tar`/`.tar.gz` archive of an OCI image layout, run in a container.
    pub image: String,
    /// The program and its arguments (no shell is added).
    pub command: Vec<String>,
    /// Environment of the job (Tranche adds the variables of [`job_env`]).
    pub env: BTreeMap<String, String>,
    /// Working directory. A process job fails to start where it does not exist; a
    /// container uses it where it exists in the rootfs, else the image's working
    /// directory, else `/`. Unset: the image's working directory, or `/`.
    pub cwd: Option<String>,
    /// `(uid, gid)` the job runs as (inside the container for OCI); unset: the agent's
    /// own account (the agent sets it for every job it runs as another account).
    pub user: Option<(u32, u32)>,
    /// Supplementary groups of `user` (absent from `spec.json` when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<u32>,
    /// CPU limit in whole CPUs (CFS quota); 0 = no limit.
    pub cpus: u32,
    /// Memory limit in MiB; 0 = no limit.
    pub memory_mb: u64,
    /// The GPUs allocated to the attempt, in allocation order.
    pub gpus: Vec<BoundGpu>,
    /// The GPUs come from the fake inventory: their device nodes are synthesized
    /// (major 195, minor = index; `nvidiactl` 195:255) instead of read from `/dev`.
    pub fake_devices: bool,
    /// Where this node stands in the attempt's gang; the agent sets it for every job
    /// (a single-node job is a gang of one). Unset (and absent from the `spec.json` of
    /// an older agent): no rendezvous variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendezvous: Option<Rendezvous>,
    /// The job's name (`TRANCHE_JOB_NAME`; empty and absent from an older `spec.json`:
    /// none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Set for a task of an array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayTask>,
    /// The directory the job was submitted from (or `--chdir`), whether or not it
    /// exists on this node (`TRANCHE_SUBMIT_DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_dir: Option<String>,
    /// An absolute path on the node for the job's stdout, created as the job's user
    /// (see [`output`](super::output)); unset: `stdout` in the attempt directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_file: Option<String>,
    /// The same for stderr; it may be `stdout_file` (Slurm's `--output` alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_file: Option<String>,
    /// A SageMaker training job's part: the agent gives the job SageMaker's container
    /// contract (see [`sagemaker`](super::sagemaker)); its `command` may be empty, for
    /// the image's entrypoint with `train`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sagemaker: Option<Box<tranche_model::SageMakerJob>>,
    /// The signal a stop sends first: the job's checkpoint signal (e.g. `SIGUSR1`).
    /// Unset (and absent from an older `spec.json`): SIGTERM. The shim sends it when
    /// the agent's [lease](super::lease) runs out, and a re-adopting agent when it
    /// stops the attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
}

/// Where a task of an array stands in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTask {
    /// The array's id (its first task's job id).
    pub array: JobId,
    /// This task's index.
    pub index: u32,
    /// How many tasks the array has.
    pub count: u32,
}

/// What a member of a gang needs to find the others: see [`job_env`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendezvous {
    /// The attempt's node names in rank order.
    pub nodes: Vec<String>,
    /// This node's rank, from 0.
    pub rank: u32,
    pub gpus_per_node: u32,
    /// Rank 0's address as its agent advertises it.
    pub master_addr: String,
    /// The attempt's rendezvous port on rank 0.
    pub master_port: u16,
}

impl LaunchSpec {
    /// The command as one line, for messages.
    pub(super) fn command_line(&self) -> String {
        self.command.join(" ")
    }
}

/// The environment of an attempt: `spec.env`, then (overriding it)
///
/// * `CUDA_VISIBLE_DEVICES`: the GPU indices in allocation order, comma-separated
///   (`""` with no GPU, so the job sees none),
/// * `NVIDIA_VISIBLE_DEVICES`: their UUIDs, comma-separated (`"void"` with no GPU),
/// * `CUDA_DEVICE_ORDER=PCI_BUS_ID` (so CUDA numbers GPUs as NVML and the node do),
/// * `TRANCHE_JOB_ID`, `TRANCHE_ATTEMPT`, `TRANCHE_RESTART_COUNT`, `TRANCHE_SHARE`,
///   `TRANCHE_JOB_NAME` (empty for a job without a name),
/// * for a task of an array, `TRANCHE_ARRAY_JOB_ID` (the array's id),
///   `TRANCHE_ARRAY_TASK_ID` (this task's index) and `TRANCHE_ARRAY_TASK_COUNT`,
/// * `TRANCHE_SUBMIT_DIR` where the submit directory is known, and
///   `TRANCHE_CPUS_PER_NODE` and `TRANCHE_MEM_PER_NODE` (MiB) where the job asks for
///   CPUs or memory,
/// * for a SageMaker job, the `SM_*` variables and `TRAINING_JOB_NAME` of
///   [`sagemaker_env`](super::sagemaker_env), added beside these by each executor,
/// * with a [`Rendezvous`], what distributed launchers (torchrun, NCCL, DeepSpeed) read:
///   `TRANCHE_NODELIST` (node names in rank order, comma-separated),
///   `TRANCHE_NUM_NODES`, `TRANCHE_NODE_RANK` and `NODE_RANK` (from 0),
///   `TRANCHE_GPUS_PER_NODE`, `WORLD_SIZE` (nodes × GPUs per node), `MASTER_ADDR` and
///   `MASTER_PORT` (rank 0's advertised address and the attempt's port).
///
/// A script ported from `sbatch` finds under these names what it read from Slurm:
///
/// | Slurm | Tranche |
/// |---|---|
/// | `SLURM_JOB_ID` | `TRANCHE_JOB_ID` |
/// | `SLURM_JOB_NAME` | `TRANCHE_JOB_NAME` |
/// | `SLURM_JOB_PARTITION` | `TRANCHE_SHARE` (the quota share) |
/// | `SLURM_JOB_USER` | `USER` (the job runs as its user) |
/// | `SLURM_ARRAY_JOB_ID`, `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT` | `TRANCHE_ARRAY_JOB_ID`, `TRANCHE_ARRAY_TASK_ID`, `TRANCHE_ARRAY_TASK_COUNT` |
/// | `SLURM_SUBMIT_DIR` | `TRANCHE_SUBMIT_DIR` |
/// | `SLURM_JOB_NODELIST` | `TRANCHE_NODELIST` (comma-separated, not Slurm's `n[1-2]`) |
/// | `SLURM_JOB_NUM_NODES`, `SLURM_NNODES` | `TRANCHE_NUM_NODES` |
/// | `SLURM_NODEID` | `TRANCHE_NODE_RANK` |
/// | `SLURM_GPUS_PER_NODE`, `SLURM_GPUS_ON_NODE` | `TRANCHE_GPUS_PER_NODE` |
/// | `SLURM_CPUS_ON_NODE` | `TRANCHE_CPUS_PER_NODE` |
/// | `SLURM_MEM_PER_NODE` | `TRANCHE_MEM_PER_NODE` (MiB, as Slurm's) |
/// | `SLURM_RESTART_COUNT` | `TRANCHE_RESTART_COUNT` |
///
/// The same variables reach a process job and a container. This is the environment of
/// a process-executor job. Inside an OCI container only the
/// allocated GPUs' device nodes exist, so CUDA numbers them from 0 in PCI order; the
/// OCI executor therefore rewrites `CUDA_VISIBLE_DEVICES` to those container ordinals,
/// still in allocation order (GPUs 5 and 2 become `1,0`), and adds
/// `TRANCHE_GPU_HOST_INDICES` with the node's indices.
pub fn job_env(spec: &LaunchSpec) -> BTreeMap<String, String> {
    let mut env = spec.env.clone();
    let (cuda, nvidia) = if spec.gpus.is_empty() {
        (String::new(), "void".to_string())
    } else {
        (
            spec.gpus
                .iter()
                .map(|g| g.index.to_string())
                .collect::<Vec<_>>()
                .join(","),
            spec.gpus
                .iter()
                .map(|g| g.uuid.clone())
                .collect::<Vec<_>>()
                .join(","),
        )
    };
    env.insert("CUDA_VISIBLE_DEVICES".into(), cuda);
    env.insert("NVIDIA_VISIBLE_DEVICES".into(), nvidia);
    env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
    env.insert("TRANCHE_JOB_ID".into(), spec.job.to_string());
    env.insert("TRANCHE_ATTEMPT".into(), spec.attempt.to_string());
    env.insert(
        "TRANCHE_RESTART_COUNT".into(),
        spec.restart_count.to_string(),
    );
    env.insert("TRANCHE_SHARE".into(), spec.share.clone());
    env.insert("TRANCHE_JOB_NAME".into(), spec.name.clone());
    // Absent unless they apply: a job submitted from inside an array task, with that
    // task's environment, is not a task of that array.
    let mut set = |name: &str, value: Option<String>| match value {
        Some(v) => env.insert(name.into(), v),
        None => env.remove(name),
    };
    let array = spec.array.as_ref();
    set("TRANCHE_ARRAY_JOB_ID", array.map(|a| a.array.to_string()));
    set("TRANCHE_ARRAY_TASK_ID", array.map(|a| a.index.to_string()));
    set(
        "TRANCHE_ARRAY_TASK_COUNT",
        array.map(|a| a.count.to_string()),
    );
    set("TRANCHE_SUBMIT_DIR", spec.submit_dir.clone());
    set(
        "TRANCHE_CPUS_PER_NODE",
        (spec.cpus > 0).then(|| spec.cpus.to_string()),
    );
    set(
        "TRANCHE_MEM_PER_NODE",
        (spec.memory_mb > 0).then(|| spec.memory_mb.to_string()),
    );
    if let Some(r) = &spec.rendezvous {
        let n = r.nodes.len() as u32;
        env.insert("TRANCHE_NODELIST".into(), r.nodes.join(","));
        env.insert("TRANCHE_NUM_NODES".into(), n.to_string());
        env.insert("TRANCHE_NODE_RANK".into(), r.rank.to_string());
        env.insert("NODE_RANK".into(), r.rank.to_string());
        env.insert("TRANCHE_GPUS_PER_NODE".into(), r.gpus_per_node.to_string());
        env.insert("WORLD_SIZE".into(), (n * r.gpus_per_node).to_string());
        env.insert("MASTER_ADDR".into(), r.master_addr.clone());
        env.insert("MASTER_PORT".into(), r.master_port.to_string());
    }
    env
}

pub(super) fn validate(spec: &LaunchSpec) -> Result<(), ExecError> {
    let bad = |field, reason: &str| ExecError::Spec {
        field,
        reason: reason.to_string(),
    };
    // A SageMaker job without a command runs its image's entrypoint (resolved once
    // the image is).
    let sagemaker_entrypoint = spec.command.is_empty() && spec.sagemaker.is_some();
    if !sagemaker_entrypoint && (spec.command.is_empty() || spec.command[0].is_empty()) {
        return Err(bad("command", "empty: name the program to run"));
    }
    if spec.command.iter().any(|a| a.contains('\0')) {
        return Err(bad("command", "contains a NUL byte"));
    }
    if spec.image.is_empty() {
        return Err(bad(
            "image",
            "empty: use \"host\", a rootfs directory, or an OCI image layout or archive",
        ));
    }
    for (k, v) in &spec.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(ExecError::Spec {
                field: "env",
                reason: format!("invalid variable name `{k}`"),
            });
        }
        if v.contains('\0') {
            return Err(ExecError::Spec {
                field: "env",
                reason: format!("value of `{k}` contains a NUL byte"),
            });
        }
    }
    if let Some(cwd) = &spec.cwd {
        if !cwd.starts_with('/') {
            return Err(ExecError::Spec {
                field: "cwd",
                reason: format!("`{cwd}` is not an absolute path"),
            });
        }
    }
    for (field, path) in [
        ("stdout_file", &spec.stdout_file),
        ("stderr_file", &spec.stderr_file),
    ] {
        match path {
            Some(p) if !p.starts_with('/') || p.contains('\0') => {
                return Err(ExecError::Spec {
                    field,
                    reason: format!("`{p}` is not an absolute path"),
                });
            }
            _ => {}
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for g in &spec.gpus {
        if !seen.insert(g.index) {
            return Err(ExecError::Spec {
                field: "gpus",
                reason: format!("GPU index {} listed twice", g.index),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::exec) fn spec() -> LaunchSpec {
        LaunchSpec {
            job: JobId(7),
            attempt: AttemptNo(2),
            restart_count: 1,
            share: "vision".into(),
            image: "host".into(),
            command: vec!["true".into()],
            env: BTreeMap::from([("A".to_string(), "1".to_string())]),
            cwd: None,
            user: None,
            groups: vec![],
            cpus: 0,
            memory_mb: 0,
            gpus: vec![],
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

    /// Task 7 of array 42 (of 10), named `sweep`, submitted from `/shared/kim/project`.
    fn array_task() -> LaunchSpec {
        LaunchSpec {
            name: "sweep".into(),
            array: Some(ArrayTask {
                array: JobId(42),
                index: 7,
                count: 10,
            }),
            submit_dir: Some("/shared/kim/project".into()),
            ..spec()
        }
    }

    #[test]
    fn env_binds_gpus_in_allocation_order() {
        let mut s = spec();
        s.gpus = vec![
            BoundGpu {
                index: GpuIndex(5),
                uuid: "GPU-b".into(),
            },
            BoundGpu {
                index: GpuIndex(2),
                uuid: "GPU-a".into(),
            },
        ];
        assert_env(
            &job_env(&s),
            &[
                ("CUDA_VISIBLE_DEVICES", "5,2"),
                ("NVIDIA_VISIBLE_DEVICES", "GPU-b,GPU-a"),
                ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
                ("TRANCHE_JOB_ID", "7"),
                ("TRANCHE_ATTEMPT", "2"),
                ("TRANCHE_RESTART_COUNT", "1"),
                ("TRANCHE_SHARE", "vision"),
                ("A", "1"),
            ],
        );
        s.gpus.clear();
        s.env
            .insert("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into());
        let e = job_env(&s);
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "void");
        assert!(!e.contains_key("MASTER_ADDR"));
        assert_eq!(e["TRANCHE_JOB_NAME"], "");
        for absent in [
            "TRANCHE_ARRAY_JOB_ID",
            "TRANCHE_SUBMIT_DIR",
            "TRANCHE_CPUS_PER_NODE",
            "TRANCHE_MEM_PER_NODE",
        ] {
            assert!(!e.contains_key(absent), "{absent}");
        }
    }

    #[test]
    fn env_has_slurms_array_name_dir_and_size_variables() {
        let mut s = spec();
        // Inherited from the array task that submitted this job: not this job's.
        s.env.insert("TRANCHE_ARRAY_TASK_ID".into(), "3".into());
        let e = job_env(&s);
        assert!(!e.contains_key("TRANCHE_ARRAY_TASK_ID"));
        let mut s = array_task();
        s.cpus = 8;
        s.memory_mb = 65_536;
        assert_env(
            &job_env(&s),
            &[
                ("TRANCHE_JOB_NAME", "sweep"),
                ("TRANCHE_ARRAY_JOB_ID", "42"),
                ("TRANCHE_ARRAY_TASK_ID", "7"),
                ("TRANCHE_ARRAY_TASK_COUNT", "10"),
                ("TRANCHE_SUBMIT_DIR", "/shared/kim/project"),
                ("TRANCHE_CPUS_PER_NODE", "8"),
                ("TRANCHE_MEM_PER_NODE", "65536"),
            ],
        );
    }

    fn assert_env(env: &BTreeMap<String, String>, want: &[(&str, &str)]) {
        for (k, v) in want {
            assert_eq!(env.get(*k).map(String::as_str), Some(*v), "{k} in {env:?}");
        }
    }

    #[test]
    fn env_tells_a_gang_member_where_the_others_are() {
        let mut s = spec();
        s.env.insert("WORLD_SIZE".into(), "99".into());
        s.rendezvous = Some(Rendezvous {
            nodes: vec!["n3".into(), "n1".into()],
            rank: 1,
            gpus_per_node: 4,
            master_addr: "10.0.0.3".into(),
            master_port: 23_456,
        });
        assert_env(
            &job_env(&s),
            &[
                ("TRANCHE_NODELIST", "n3,n1"),
                ("TRANCHE_NUM_NODES", "2"),
                ("TRANCHE_NODE_RANK", "1"),
                ("NODE_RANK", "1"),
                ("TRANCHE_GPUS_PER_NODE", "4"),
                ("WORLD_SIZE", "8"),
                ("MASTER_ADDR", "10.0.0.3"),
                ("MASTER_PORT", "23456"),
            ],
        );
    }

    /// `spec.json` of an attempt in the spool: ids and GPU indices are plain numbers, so
    /// an attempt directory written by any agent of this format is read back.
    #[test]
    fn spec_json_encodes_ids_as_numbers() {
        let on_disk = serde_json::json!({
            "job": 7, "attempt": 2, "restart_count": 1, "share": "vision", "image": "host",
            "command": ["true"], "env": {"A": "1"}, "cwd": null, "user": [1000, 100],
            "cpus": 0, "memory_mb": 0, "gpus": [{"index": 5, "uuid": "GPU-b"}],
            "fake_devices": true
        });
        let mut want = spec();
        want.user = Some((1000, 100));
        want.gpus = vec![BoundGpu {
            index: GpuIndex(5),
            uuid: "GPU-b".into(),
        }];
        let read: LaunchSpec = serde_json::from_value(on_disk.clone()).unwrap();
        assert_eq!(read, want);
        assert_eq!(serde_json::to_value(&want).unwrap(), on_disk);
    }

    /// The fields an older agent did not write are read back from a newer `spec.json`
    /// under these names, and a spec without them writes none of them (above).
    #[test]
    fn spec_json_names_the_array_and_output_fields() {
        let mut want = array_task();
        want.submit_dir = Some("/p".into());
        want.stdout_file = Some("/p/out".into());
        want.stderr_file = Some("/p/out".into());
        let v = serde_json::to_value(&want).unwrap();
        assert_eq!(
            v["array"],
            serde_json::json!({"array": 42, "index": 7, "count": 10})
        );
        assert_eq!(
            (&v["name"], &v["submit_dir"]),
            (&"sweep".into(), &"/p".into())
        );
        assert_eq!(
            (&v["stdout_file"], &v["stderr_file"]),
            (&"/p/out".into(), &"/p/out".into())
        );
        assert_eq!(serde_json::from_value::<LaunchSpec>(v).unwrap(), want);
    }

    #[test]
    fn invalid_specs_name_the_field() {
        let mut s = spec();
        s.command.clear();
        assert!(validate(&s).unwrap_err().to_string().contains("`command`"));
        // A SageMaker job may leave it to its image's entrypoint.
        s.sagemaker = Some(Box::new(tranche_model::SageMakerJob {
            training_job_name: "t".into(),
            hyperparameters: BTreeMap::new(),
            channels: BTreeMap::new(),
            payload: String::new(),
            instance_type: "ml.m5.large".into(),
        }));
        validate(&s).unwrap();
        let mut s = spec();
        s.cwd = Some("rel".into());
        assert!(validate(&s).unwrap_err().to_string().contains("`cwd`"));
        let mut s = spec();
        s.env.insert("A=B".into(), "x".into());
        assert!(validate(&s).unwrap_err().to_string().contains("`env`"));
        let mut s = spec();
        s.stderr_file = Some("err.txt".into());
        assert!(validate(&s)
            .unwrap_err()
            .to_string()
            .contains("`stderr_file`"));
    }
}
