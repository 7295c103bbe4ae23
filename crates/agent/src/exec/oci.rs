//! The OCI executor's agent side: finding the runtime, the GPU device nodes, the
//! runtime bundle's `config.json`, the overlay over a cached image rootfs, and the
//! runtime's `kill` and `delete`.
//!
//! Namespaces: pid, ipc, uts and mount are the container's own; the network namespace
//! is the node's, so that the processes of a multi-node job reach each other (NCCL,
//! MPI, RDMA devices) through the node's interfaces without a container network. The
//! hostname is the node's too, for the same tools.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use tranche_model::GpuIndex;

use super::spool::{self, files, LaunchRecord};
use super::{
    image, job_env, sagemaker, sagemaker_env, ExecError, LaunchSpec, DEFAULT_PATH, OCI_RUNTIME_ENV,
};

/// Major number of the NVIDIA character devices.
pub(crate) const NVIDIA_MAJOR: u64 = 195;
/// Minor number of `/dev/nvidiactl`.
pub(crate) const NVIDIACTL_MINOR: u64 = 255;

/// Directories searched for the runtime besides `PATH`.
const SEARCH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

fn executable(p: &Path) -> bool {
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn search(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SEARCH.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| executable(p))
}

/// The OCI runtime: `TRANCHE_OCI_RUNTIME` if set, else `runc`, else `crun`.
pub(crate) fn find_runtime() -> Option<PathBuf> {
    if let Some(r) = std::env::var_os(OCI_RUNTIME_ENV).filter(|r| !r.is_empty()) {
        let p = PathBuf::from(&r);
        return if p.components().count() > 1 {
            Some(p)
        } else {
            search(&p.to_string_lossy())
        };
    }
    search("runc").or_else(|| search("crun"))
}

/// A device node given to a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Device {
    /// Path inside the container (same as on the node).
    pub path: String,
    pub major: u64,
    pub minor: u64,
}

/// Why a container's device or root file system could not be set up, or the runtime
/// not asked to signal it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OciError {
    /// A device node cannot be examined.
    #[error("{path}: {source}")]
    Device {
        /// The node on the node's `/dev`.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A GPU's device node is something else than a character device.
    #[error("{path} is not a character device")]
    NotCharDevice {
        /// The node on the node's `/dev`.
        path: String,
    },
    /// A directory of the overlay cannot be created.
    #[error("creating {}: {source}", path.display())]
    Create {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The overlay's upper directory cannot be given the image root's mode.
    #[error("setting the mode of {}: {source}", path.display())]
    Mode {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A path that the overlay's mount options cannot carry.
    #[error("a path holds ',', ':' or '\\', which overlay options cannot carry")]
    OverlayPath,
    /// The overlay cannot be mounted.
    #[error("mount -t overlay {opts} {}: {source}", target.display())]
    Mount {
        /// The mount options.
        opts: String,
        /// Where it was to be mounted.
        target: PathBuf,
        /// The underlying error.
        source: nix::errno::Errno,
    },
    /// The plan has no runtime or container to signal.
    #[error("no runtime or container id")]
    NoContainer,
    /// The runtime could not be run.
    #[error("{0}")]
    Run(io::Error),
    /// The runtime refused, saying this on its stderr.
    #[error("{stderr}")]
    Refused {
        /// The runtime's stderr, trimmed.
        stderr: String,
    },
}

fn char_device(path: &str) -> Option<Result<(u64, u64), OciError>> {
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(source) => {
            return Some(Err(OciError::Device {
                path: path.to_string(),
                source,
            }))
        }
    };
    if !m.file_type().is_char_device() {
        return Some(Err(OciError::NotCharDevice {
            path: path.to_string(),
        }));
    }
    let rdev = m.rdev();
    Some(Ok((
        nix::sys::stat::major(rdev),
        nix::sys::stat::minor(rdev),
    )))
}

/// The device nodes of the attempt's GPUs: `/dev/nvidia<index>` for each, then
/// `/dev/nvidiactl`, `/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools` where the node has
/// them (looked up in `dev`, the node's `/dev`). With `fake_devices` they are
/// synthesized: `nvidia<index>` = 195:index and `nvidiactl` = 195:255, no uvm.
pub(crate) fn gpu_devices(spec: &LaunchSpec, dev: &Path) -> Result<Vec<Device>, ExecError> {
    let mut out = Vec::new();
    if spec.gpus.is_empty() {
        return Ok(out);
    }
    if spec.fake_devices {
        for g in &spec.gpus {
            out.push(Device {
                path: format!("/dev/nvidia{}", g.index),
                major: NVIDIA_MAJOR,
                minor: u64::from(g.index.0),
            });
        }
        out.push(Device {
            path: "/dev/nvidiactl".into(),
            major: NVIDIA_MAJOR,
            minor: NVIDIACTL_MINOR,
        });
        return Ok(out);
    }
    let on_node = |name: &str| dev.join(name).to_string_lossy().into_owned();
    for g in &spec.gpus {
        let name = format!("nvidia{}", g.index);
        let gpu_err = |reason: String| ExecError::Gpu {
            index: g.index,
            uuid: g.uuid.clone(),
            reason,
        };
        let node_path = on_node(&name);
        match char_device(&node_path) {
            None => return Err(gpu_err(format!("{node_path} does not exist on this node"))),
            Some(Err(e)) => return Err(gpu_err(e.to_string())),
            Some(Ok((major, minor))) => out.push(Device {
                path: format!("/dev/{name}"),
                major,
                minor,
            }),
        }
    }
    for name in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] {
        if let Some(Ok((major, minor))) = char_device(&on_node(name)) {
            out.push(Device {
                path: format!("/dev/{name}"),
                major,
                minor,
            });
        }
    }
    Ok(out)
}

/// The environment inside the container: the image's, then [`job_env`] with
/// `CUDA_VISIBLE_DEVICES` rewritten to container ordinals (only the allocated GPUs'
/// device nodes exist there, and CUDA numbers them from 0 in PCI order, which is the
/// order of their node indices), and `TRANCHE_GPU_HOST_INDICES` holding the node's
/// indices; `PATH` and `HOME` get defaults when neither sets them.
pub(crate) fn container_env(spec: &LaunchSpec, image_env: &[String]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for kv in image_env {
        if let Some((k, v)) = kv.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
    }
    env.extend(job_env(spec));
    env.extend(sagemaker_env(spec, None));
    env.insert(
        "TRANCHE_CHECKPOINT_FILE".into(),
        format!(
            "{}/{}",
            spool::CONTAINER_CHECKPOINT_DIR,
            spool::CHECKPOINT_FILE
        ),
    );
    let mut sorted: Vec<GpuIndex> = spec.gpus.iter().map(|g| g.index).collect();
    sorted.sort_unstable();
    let local: Vec<String> = spec
        .gpus
        .iter()
        .map(|g| sorted.binary_search(&g.index).unwrap_or(0).to_string())
        .collect();
    let host: Vec<String> = spec.gpus.iter().map(|g| g.index.to_string()).collect();
    env.insert("CUDA_VISIBLE_DEVICES".into(), local.join(","));
    env.insert("TRANCHE_GPU_HOST_INDICES".into(), host.join(","));
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    // The agent sets `HOME` to the job's user's home; a spec without one gets root's,
    // or `/` for any other uid.
    let home = if spec.user.map_or(0, |u| u.0) == 0 {
        "/root"
    } else {
        "/"
    };
    env.entry("HOME".into()).or_insert_with(|| home.into());
    env
}

/// Whether `dir` (absolute, as the container sees it) is a directory of the rootfs at
/// `root`; no component may be a symlink.
fn in_rootfs_dir(root: &Path, dir: &str) -> bool {
    let mut at = root.to_path_buf();
    for c in Path::new(dir).components() {
        match c {
            std::path::Component::RootDir => {}
            std::path::Component::Normal(n) => {
                at.push(n);
                match std::fs::symlink_metadata(&at) {
                    Ok(m) if m.is_dir() => {}
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    true
}

/// The runtime bundle's `config.json` (the shape `runc spec` writes, filled in), for
/// the attempt directory `dir` (where a SageMaker job's `opt-ml/` is).
pub(crate) fn config(
    spec: &LaunchSpec,
    dir: &Path,
    root: &Path,
    rootfs: &image::Prepared,
    devices: &[Device],
    cgroups_path: &str,
    limits: super::policy::Limits,
) -> Value {
    let env: Vec<String> = container_env(spec, &rootfs.env)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    // The spec's directory (the user's home) where the image has it, else the image's
    // own working directory, else `/`. The home is looked up in the rootfs without
    // following symlinks, which would resolve on the node, not in the container.
    let cwd = spec
        .cwd
        .clone()
        .filter(|c| in_rootfs_dir(root, c))
        .or_else(|| rootfs.workdir.clone().filter(|w| w.starts_with('/')))
        .unwrap_or_else(|| "/".into());
    let (uid, gid) = spec.user.unwrap_or((0, 0));
    // A job of any account but root gets no capability at all (every set empty): with
    // the node's network namespace, CAP_NET_BIND_SERVICE would let it take a
    // privileged port, which NFS servers (`secure`) take as proof of root.
    let caps = if uid == 0 {
        json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"])
    } else {
        json!([])
    };
    let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(_, hard)| hard)
        .unwrap_or(1024 * 1024);
    let hostname = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into());

    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts",
               "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        // No size: tmpfs defaults to half the node's memory, and shm pages are charged
        // to the container's memory limit (data loaders need more than 64 MiB).
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
               "options": ["nosuid", "noexec", "nodev", "mode=1777"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
               "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
               "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}),
    ];
    // The node's network namespace is shared, so is its name resolution.
    for f in ["/etc/resolv.conf", "/etc/hosts"] {
        if Path::new(f).is_file() {
            mounts.push(json!({"destination": f, "type": "bind", "source": f,
                               "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]}));
        }
    }
    mounts.extend(sagemaker::mounts(spec, dir));
    mounts.push(
        json!({"destination": spool::CONTAINER_CHECKPOINT_DIR, "type": "bind",
                       "source": dir.join(spool::CHECKPOINT_DIR),
                       "options": ["rbind", "rw", "nosuid", "nodev", "noexec"]}),
    );

    let mut dev_rules = vec![json!({"allow": false, "access": "rwm"})];
    let mut dev_nodes = Vec::new();
    for d in devices {
        dev_rules.push(
            json!({"allow": true, "type": "c", "major": d.major, "minor": d.minor,
                              "access": "rwm"}),
        );
        dev_nodes.push(
            json!({"path": d.path, "type": "c", "major": d.major, "minor": d.minor,
                              "fileMode": 0o666, "uid": 0, "gid": 0}),
        );
    }
    let mut resources = json!({"devices": dev_rules});
    if limits.memory_mb > 0 {
        resources["memory"] = json!({"limit": limits.memory_mb.saturating_mul(1024 * 1024)});
    }
    if limits.cpus > 0 {
        resources["cpu"] = json!({"quota": u64::from(limits.cpus) * 100_000, "period": 100_000});
    }
    if limits.pids > 0 {
        resources["pids"] = json!({"limit": limits.pids});
    }

    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": uid, "gid": gid, "additionalGids": spec.groups, "umask": 0o022},
            "args": spec.command,
            "env": env,
            "cwd": cwd,
            "capabilities": {
                "bounding": caps, "effective": caps, "permitted": caps, "ambient": caps,
                "inheritable": caps,
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": nofile, "soft": nofile}],
            "noNewPrivileges": true,
        },
        "root": {"path": root, "readonly": false},
        "hostname": hostname,
        "mounts": mounts,
        "linux": {
            "cgroupsPath": cgroups_path,
            "resources": resources,
            "devices": dev_nodes,
            // No "network": the node's network namespace (see the module docs).
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
            ],
        },
    })
}

/// Mounts an overlay with `lower` (a cached image rootfs, shared by attempts) below
/// and a per-attempt upper layer in the bundle, at `<bundle>/rootfs`.
/// The container's checkpoint directory in its attempt directory: 0700 and the job
/// user's, so that only the job writes there.
pub(crate) fn make_checkpoint_dir(spec: &LaunchSpec, dir: &Path) -> Result<(), ExecError> {
    use std::os::unix::fs::DirBuilderExt;
    let d = dir.join(spool::CHECKPOINT_DIR);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&d)
        .map_err(|e| ExecError::io("creating directory", &d, e))?;
    if let Some((uid, gid)) = spec.user {
        std::os::unix::fs::lchown(&d, Some(uid), Some(gid))
            .map_err(|e| ExecError::io("giving the job's user", &d, e))?;
    }
    Ok(())
}

pub(crate) fn mount_overlay(lower: &Path, bundle: &Path) -> Result<PathBuf, OciError> {
    let upper = bundle.join("upper");
    let work = bundle.join("work");
    let merged = bundle.join("rootfs");
    for d in [&upper, &work, &merged] {
        std::fs::create_dir_all(d).map_err(|source| OciError::Create {
            path: d.clone(),
            source,
        })?;
    }
    // The container's `/` is the upper layer's root: it takes the image root's mode,
    // not what the agent's umask (0077 in its unit) left.
    let root_mode = std::fs::metadata(lower).map_or(0o755, |m| m.permissions().mode() & 0o7777);
    std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(root_mode)).map_err(
        |source| OciError::Mode {
            path: upper.clone(),
            source,
        },
    )?;
    let paths = [lower, &upper, &work];
    if paths
        .iter()
        .any(|p| p.to_string_lossy().contains([',', ':', '\\']))
    {
        return Err(OciError::OverlayPath);
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    nix::mount::mount(
        Some("overlay"),
        &merged,
        Some("overlay"),
        nix::mount::MsFlags::empty(),
        Some(opts.as_str()),
    )
    .map_err(|source| OciError::Mount {
        opts: opts.clone(),
        target: merged.clone(),
        source,
    })?;
    Ok(merged)
}

/// Unmounts (lazily) what [`mount_overlay`] mounted; nothing mounted is fine.
pub(crate) fn unmount(path: &Path) {
    match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => {
            tracing::warn!("unmounting {}: {e}", path.display());
            eprintln!("unmounting {}: {e}", path.display());
        }
    }
}

/// The runtime command with its state directory, if the plan has a runtime.
pub(crate) fn runtime_cmd(plan: &LaunchRecord) -> Option<Command> {
    let rt = plan.runtime.as_ref()?;
    let mut c = Command::new(rt);
    if let Some(root) = &plan.runtime_root {
        c.arg("--root").arg(root);
    }
    c.stdin(Stdio::null());
    Some(c)
}

/// `runc kill --all <id> <sig>`.
pub(crate) fn kill(plan: &LaunchRecord, sig: i32) -> Result<(), OciError> {
    let (Some(mut c), Some(id)) = (runtime_cmd(plan), plan.container_id.as_ref()) else {
        return Err(OciError::NoContainer);
    };
    let out = c
        .arg("kill")
        .arg("--all")
        .arg(id)
        .arg(sig.to_string())
        .output()
        .map_err(OciError::Run)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(OciError::Refused {
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// `runc delete --force <id>`, ignoring the outcome.
pub(crate) fn delete(plan: &LaunchRecord) {
    if let (Some(mut c), Some(id)) = (runtime_cmd(plan), plan.container_id.as_ref()) {
        let _ = c.arg("delete").arg("--force").arg(id).output();
    }
}

/// Deletes the container if the runtime still has state for it.
pub(crate) fn delete_stale(plan: &LaunchRecord) {
    if let (Some(root), Some(id)) = (&plan.runtime_root, &plan.container_id) {
        if root.join(id).exists() {
            delete(plan);
        }
    }
}

/// Removes a container of the same id, and processes in its cgroup, left by an
/// earlier incarnation of the attempt.
pub(crate) fn clear_leftover(plan: &LaunchRecord) {
    delete(plan);
    if let Some(cg) = &plan.cgroup {
        cg.clear_leftover();
    }
}

/// The last error the runtime logged (`--log-format json`), if any.
pub(crate) fn runtime_error(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(files::RUNTIME_LOG)).ok()?;
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| matches!(v["level"].as_str(), Some("error" | "fatal")))
        .filter_map(|v| v["msg"].as_str().map(str::to_string))
        .next_back()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::BoundGpu;

    fn spec() -> LaunchSpec {
        LaunchSpec {
            job: tranche_model::JobId(1),
            attempt: crate::exec::AttemptNo(0),
            restart_count: 0,
            share: "s".into(),
            image: "/x".into(),
            command: vec!["sh".into()],
            env: BTreeMap::new(),
            cwd: None,
            user: Some((1000, 100)),
            groups: vec![100, 27],
            cpus: 2,
            memory_mb: 512,
            gpus: vec![
                BoundGpu {
                    index: GpuIndex(5),
                    uuid: "GPU-5".into(),
                },
                BoundGpu {
                    index: GpuIndex(2),
                    uuid: "GPU-2".into(),
                },
            ],
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

    #[test]
    fn fake_devices_and_config() {
        let mut s = spec();
        s.name = "sweep".into();
        s.array = Some(crate::exec::ArrayTask {
            array: tranche_model::JobId(42),
            index: 7,
            count: 10,
        });
        let devs = gpu_devices(&s, Path::new("/dev")).unwrap();
        let paths: Vec<_> = devs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/dev/nvidia5", "/dev/nvidia2", "/dev/nvidiactl"]);
        assert_eq!((devs[0].major, devs[0].minor), (195, 5));
        assert_eq!((devs[2].major, devs[2].minor), (195, 255));
        let prepared = image::Prepared {
            path: "/r".into(),
            shared: false,
            env: vec!["PATH=/opt/bin:/bin".into(), "LANG=C".into()],
            workdir: Some("/work".into()),
            entrypoint: None,
        };
        let c = config(
            &s,
            Path::new("/a"),
            Path::new("/r"),
            &prepared,
            &devs,
            "/tranche/1.0",
            crate::exec::policy::Limits {
                cpus: 2,
                memory_mb: 512,
                pids: 4096,
            },
        );
        assert_eq!(c["process"]["user"]["uid"], 1000);
        assert_eq!(c["process"]["user"]["gid"], 100);
        assert_eq!(
            c["process"]["user"]["additionalGids"],
            serde_json::json!([100, 27])
        );
        assert_eq!(c["process"]["cwd"], "/work");
        assert_eq!(c["linux"]["resources"]["memory"]["limit"], 512u64 << 20);
        assert_eq!(c["linux"]["resources"]["cpu"]["quota"], 200_000);
        assert_eq!(c["linux"]["resources"]["pids"]["limit"], 4096);
        // A job of another account than root has no capability at all.
        for set in [
            "bounding",
            "effective",
            "permitted",
            "ambient",
            "inheritable",
        ] {
            assert_eq!(
                c["process"]["capabilities"][set],
                serde_json::json!([]),
                "{set}"
            );
        }
        let env: Vec<&str> = c["process"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(env.contains(&"PATH=/opt/bin:/bin"), "{env:?}");
        assert!(env.contains(&"CUDA_VISIBLE_DEVICES=1,0"), "{env:?}");
        assert!(env.contains(&"TRANCHE_GPU_HOST_INDICES=5,2"), "{env:?}");
        assert!(
            env.contains(&"NVIDIA_VISIBLE_DEVICES=GPU-5,GPU-2"),
            "{env:?}"
        );
        assert!(env.contains(&"HOME=/"), "{env:?}");
        for slurmish in [
            "TRANCHE_JOB_NAME=sweep",
            "TRANCHE_ARRAY_JOB_ID=42",
            "TRANCHE_ARRAY_TASK_ID=7",
            "TRANCHE_ARRAY_TASK_COUNT=10",
            "TRANCHE_CPUS_PER_NODE=2",
            "TRANCHE_MEM_PER_NODE=512",
        ] {
            assert!(env.contains(&slurmish), "{slurmish} not in {env:?}");
        }
        let ns: Vec<&str> = c["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert!(!ns.contains(&"network"));
    }

    /// The user's home is the container's working directory where the rootfs has it
    /// (as a directory, not a symlink); elsewhere the image's, or `/`.
    #[test]
    fn the_home_is_the_working_directory_where_the_rootfs_has_it() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("home/asmith")).unwrap();
        std::os::unix::fs::symlink("/tmp", root.path().join("home/link")).unwrap();
        let mut prepared = image::Prepared {
            path: root.path().into(),
            shared: false,
            env: vec![],
            workdir: Some("/work".into()),
            entrypoint: None,
        };
        let cwd = |home: &str, prepared: &image::Prepared| {
            let mut s = spec();
            s.cwd = Some(home.into());
            let limits = crate::exec::policy::Limits::default();
            config(
                &s,
                Path::new("/a"),
                root.path(),
                prepared,
                &[],
                "/t",
                limits,
            )["process"]["cwd"]
                .clone()
        };
        assert_eq!(cwd("/home/asmith", &prepared), "/home/asmith");
        assert_eq!(cwd("/home/nobody", &prepared), "/work");
        assert_eq!(cwd("/home/link", &prepared), "/work");
        prepared.workdir = None;
        assert_eq!(cwd("/home/nobody", &prepared), "/");
    }

    #[test]
    fn real_devices_must_exist() {
        let mut s = spec();
        s.fake_devices = false;
        s.gpus[0].index = GpuIndex(9999);
        let e = gpu_devices(&s, Path::new("/dev")).unwrap_err().to_string();
        assert!(e.contains("/dev/nvidia9999"), "{e}");
    }
}
