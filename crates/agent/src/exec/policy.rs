//! What the node's admin decides for every job the executors start: setuid programs,
//! default limits, the device nodes a process job may open, and where a process job's
//! own files on the node go (see [`JobPolicy`]).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::LaunchSpec;

/// The node's rules for the jobs it runs (the agent config's keys of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPolicy {
    /// Shares whose process jobs may gain privileges by executing setuid/setgid
    /// programs (`sudo`, `ping` on old systems, ...). Every other process job runs with
    /// `PR_SET_NO_NEW_PRIVS`, as containers do: a setuid-root file, wherever it comes
    /// from, does not make it root.
    pub allow_setuid_shares: Vec<String>,
    /// Memory limit (MiB) of a job that asks for none, per GPU it has (a job without a
    /// GPU gets one GPU's); 0: no limit.
    pub default_memory_mb_per_gpu: u64,
    /// CPU limit of a job that asks for none, per GPU it has (as memory); 0: no limit.
    pub default_cpus_per_gpu: u32,
    /// `pids.max` of every job, per GPU it has (a job without a GPU gets one GPU's);
    /// 0: no limit.
    pub pids_max_per_gpu: u64,
    /// Where the GPUs' device nodes are: `nvidia<index>`, `nvidiactl`, `nvidia-uvm`,
    /// `nvidia-uvm-tools` (`/dev`).
    pub device_dir: PathBuf,
    /// Further device nodes, or directories of them, that every process job may open
    /// (RDMA: `/dev/infiniband`).
    pub job_devices: Vec<PathBuf>,
    /// Where a process job's per-attempt directory is made (a SageMaker job's
    /// `/opt/ml`): `None` is `<spool>.work` beside the spool.
    pub work_dir: Option<PathBuf>,
}

/// Default of [`JobPolicy::pids_max_per_gpu`].
pub const DEFAULT_PIDS_MAX_PER_GPU: u64 = 4096;

impl Default for JobPolicy {
    /// No setuid share, no default memory or CPU limit, 4096 pids per GPU, `/dev`,
    /// `/dev/infiniband`.
    fn default() -> JobPolicy {
        JobPolicy {
            allow_setuid_shares: Vec::new(),
            default_memory_mb_per_gpu: 0,
            default_cpus_per_gpu: 0,
            pids_max_per_gpu: DEFAULT_PIDS_MAX_PER_GPU,
            device_dir: PathBuf::from("/dev"),
            job_devices: vec![PathBuf::from("/dev/infiniband")],
            work_dir: None,
        }
    }
}

/// The limits an attempt runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Limits {
    /// Whole CPUs (CFS quota); 0: none.
    pub cpus: u32,
    /// MiB; 0: none.
    pub memory_mb: u64,
    /// `pids.max`; 0: none.
    pub pids: u64,
}

/// A character device rule of the v1 `devices` controller: `c MAJOR:MINOR rwm`, the
/// minor `None` for every minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct CharDev {
    pub major: u64,
    pub minor: Option<u64>,
}

impl CharDev {
    /// The rule's line for `devices.allow`.
    pub(crate) fn rule(&self) -> String {
        match self.minor {
            Some(m) => format!("c {}:{m} rwm", self.major),
            None => format!("c {}:* rwm", self.major),
        }
    }
}

/// The character devices any process needs, as runc allows them to a container:
/// `null`, `zero`, `full`, `random`, `urandom`, `tty`, `console`, `ptmx` and the pty
/// slaves.
const STANDARD: &[(u64, Option<u64>)] = &[
    (1, Some(3)),
    (1, Some(5)),
    (1, Some(7)),
    (1, Some(8)),
    (1, Some(9)),
    (5, Some(0)),
    (5, Some(1)),
    (5, Some(2)),
    (136, None),
];

/// `(major, minor)` of the character device at `path`, if it is one.
fn char_dev(path: &Path) -> Option<CharDev> {
    let m = std::fs::metadata(path).ok()?;
    m.file_type().is_char_device().then(|| CharDev {
        major: nix::sys::stat::major(m.rdev()),
        minor: Some(nix::sys::stat::minor(m.rdev())),
    })
}

impl JobPolicy {
    /// Whether a process job of `share` runs with `PR_SET_NO_NEW_PRIVS`.
    pub(crate) fn no_new_privs(&self, share: &str) -> bool {
        !self.allow_setuid_shares.iter().any(|s| s == share)
    }

    /// The limits of `spec`: what it asks for, else the node's defaults for its GPUs.
    pub(crate) fn limits(&self, spec: &LaunchSpec) -> Limits {
        let units = spec.gpus.len().max(1) as u64;
        Limits {
            cpus: if spec.cpus > 0 {
                spec.cpus
            } else {
                self.default_cpus_per_gpu.saturating_mul(units as u32)
            },
            memory_mb: if spec.memory_mb > 0 {
                spec.memory_mb
            } else {
                self.default_memory_mb_per_gpu.saturating_mul(units)
            },
            pids: self.pids_max_per_gpu.saturating_mul(units),
        }
    }

    /// The character devices a process job of `spec` may open (the v1 `devices`
    /// controller's allow list; everything else, every block device included, is
    /// denied): the standard ones, its own GPUs and the NVIDIA control and UVM nodes,
    /// and [`JobPolicy::job_devices`]. The GPUs of a fake inventory are 195:index and
    /// `nvidiactl` 195:255 where `device_dir` has no node for them.
    pub(crate) fn allowed_devices(&self, spec: &LaunchSpec) -> Vec<CharDev> {
        let mut out: Vec<CharDev> = STANDARD
            .iter()
            .map(|&(major, minor)| CharDev { major, minor })
            .collect();
        let dev = |name: &str| char_dev(&self.device_dir.join(name));
        for g in &spec.gpus {
            match dev(&format!("nvidia{}", g.index)) {
                Some(d) => out.push(d),
                None if spec.fake_devices => out.push(CharDev {
                    major: super::oci::NVIDIA_MAJOR,
                    minor: Some(u64::from(g.index.0)),
                }),
                None => {}
            }
        }
        if !spec.gpus.is_empty() {
            for name in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] {
                if let Some(d) = dev(name) {
                    out.push(d);
                }
            }
            if spec.fake_devices && dev("nvidiactl").is_none() {
                out.push(CharDev {
                    major: super::oci::NVIDIA_MAJOR,
                    minor: Some(super::oci::NVIDIACTL_MINOR),
                });
            }
        }
        for p in &self.job_devices {
            if let Some(d) = char_dev(p) {
                out.push(d);
            } else if let Ok(rd) = std::fs::read_dir(p) {
                out.extend(rd.flatten().filter_map(|e| char_dev(&e.path())));
            }
        }
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_default_in_proportion_to_the_gpus() {
        let p = JobPolicy {
            default_memory_mb_per_gpu: 1000,
            default_cpus_per_gpu: 4,
            ..JobPolicy::default()
        };
        let mut s = crate::exec::spec::tests::spec();
        s.gpus.clear();
        s.cpus = 0;
        s.memory_mb = 0;
        assert_eq!(
            p.limits(&s),
            Limits {
                cpus: 4,
                memory_mb: 1000,
                pids: 4096
            }
        );
        s.gpus = (0..2)
            .map(|i| crate::exec::BoundGpu {
                index: tranche_model::GpuIndex(i),
                uuid: format!("GPU-{i}"),
            })
            .collect();
        assert_eq!(
            p.limits(&s),
            Limits {
                cpus: 8,
                memory_mb: 2000,
                pids: 8192
            }
        );
        s.cpus = 1;
        s.memory_mb = 10;
        assert_eq!((p.limits(&s).cpus, p.limits(&s).memory_mb), (1, 10));
        assert!(p.no_new_privs("research"));
        let q = JobPolicy {
            allow_setuid_shares: vec!["ops".into()],
            ..JobPolicy::default()
        };
        assert!(!q.no_new_privs("ops") && q.no_new_privs("research"));
    }
}
