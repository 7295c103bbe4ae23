//! Cgroups of attempts: detection of the usable hierarchies, creation with limits,
//! listing and signalling every process, removal.
//!
//! The attempt's cgroup is `tranche/<spool>-<job>.<attempt>` below the root of each hierarchy
//! used. Which hierarchy tracks a process job (finds every process of it) follows the
//! agent's `cgroup` setting ([`CgroupMode`]): `auto` uses the v1 `pids` hierarchy, else
//! the v1 `freezer` one, else the v2 hierarchy; `v1` and `v2` force one. Limits use the
//! v1 `memory` and `cpu` hierarchies where they are mounted, else the v2 one where it has
//! those controllers. Containers are tracked where their runtime puts them, as `auto`
//! would choose, whatever the setting.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::policy::{CharDev, Limits};
use super::procfs;

/// The parent of every attempt's cgroup, below each hierarchy's root.
pub(crate) const PARENT: &str = "tranche";

/// CFS period given with a CPU limit, in microseconds.
const CFS_PERIOD_US: u64 = 100_000;

/// The cgroup path handed to the OCI runtime (`linux.cgroupsPath`).
pub(crate) fn runtime_path(name: &str) -> String {
    format!("/{PARENT}/{name}")
}

/// Which cgroup hierarchy tracks the processes of a process job: the agent's `cgroup`
/// setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CgroupMode {
    /// The v1 `pids` hierarchy, else the v1 `freezer` one, else the v2 hierarchy (the
    /// unified mount of a hybrid node, or `/sys/fs/cgroup` on a pure v2 node).
    #[default]
    Auto,
    /// The v1 `pids` hierarchy, else the v1 `freezer` one; refused where neither is
    /// writable.
    V1,
    /// The v2 hierarchy (the job is killed at once with `cgroup.kill`); refused where
    /// no v2 hierarchy is writable.
    V2,
}

impl CgroupMode {
    /// The setting's value: `auto`, `v1` or `v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupMode::Auto => "auto",
            CgroupMode::V1 => "v1",
            CgroupMode::V2 => "v2",
        }
    }
}

impl std::str::FromStr for CgroupMode {
    type Err = CgroupError;
    fn from_str(s: &str) -> Result<CgroupMode, CgroupError> {
        match s {
            "auto" => Ok(CgroupMode::Auto),
            "v1" => Ok(CgroupMode::V1),
            "v2" => Ok(CgroupMode::V2),
            _ => Err(CgroupError::BadMode {
                given: s.to_string(),
            }),
        }
    }
}

/// Why the `cgroup` setting cannot be had on this node (the `reason` of
/// [`ExecError::Cgroups`](super::ExecError::Cgroups)), or is not a setting at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupError {
    /// The setting is none of `auto`, `v1` and `v2`.
    #[error("`{given}`: must be \"auto\", \"v1\" or \"v2\"")]
    BadMode {
        /// The setting as given.
        given: String,
    },
    /// `v1` on a node without any v1 hierarchy.
    #[error("this node mounts no cgroup v1 hierarchy")]
    NoV1,
    /// `v1` on a node whose v1 `pids` and `freezer` hierarchies are missing or read-only.
    #[error(
        "no writable cgroup v1 pids or freezer hierarchy (v1 controllers mounted: {})",
        mounted.join(", ")
    )]
    NoWritableV1 {
        /// The v1 controllers the node mounts.
        mounted: Vec<String>,
    },
    /// `v2` on a node without the v2 hierarchy.
    #[error("this node mounts no cgroup v2 hierarchy")]
    NoV2,
    /// `v2` on a node whose v2 hierarchy the agent may not write.
    #[error("the cgroup v2 hierarchy at {} is not writable", mount.display())]
    V2ReadOnly {
        /// Where the v2 hierarchy is mounted.
        mount: PathBuf,
    },
}

impl std::fmt::Display for CgroupMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One usable hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hier {
    /// Where it is mounted.
    pub mount: PathBuf,
    /// It is a cgroup v2 hierarchy.
    pub v2: bool,
    /// What it is, for messages: `pids`, `freezer`, `memory`, `cpu` or `v2`.
    pub what: &'static str,
}

impl Hier {
    fn dir(&self, name: &str) -> PathBuf {
        self.mount.join(PARENT).join(name)
    }
}

/// The hierarchies this node lets the agent use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Cgroups {
    /// Tracks process jobs (per [`CgroupMode`]).
    track: Option<Hier>,
    /// Where the OCI runtime puts containers (what `auto` tracks in).
    runtime: Option<Hier>,
    memory: Option<Hier>,
    cpu: Option<Hier>,
    /// Where `pids.max` goes.
    pids: Option<Hier>,
    /// The v1 `devices` controller, which confines a process job to its own GPUs. A
    /// pure v2 node has no such controller: there a device filter is a BPF program
    /// attached to the cgroup (`BPF_CGROUP_DEVICE`), which runc installs for containers
    /// but which the agent does not install for process jobs (no maintained crate does
    /// it without a BPF toolchain at build time); the agent warns at start, and GPU
    /// jobs that must be confined run in containers there.
    devices: Option<Hier>,
}

/// Cgroup mounts from `/proc/self/mountinfo`: v1 controllers (`pids`, `freezer`,
/// `memory`, `cpu`, `devices`) to mount points, and the v2 mount point.
pub(crate) fn mounts() -> (BTreeMap<String, PathBuf>, Option<PathBuf>) {
    parse_mounts(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

fn parse_mounts(text: &str) -> (BTreeMap<String, PathBuf>, Option<PathBuf>) {
    let mut v1 = BTreeMap::new();
    let mut v2 = None;
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let lf: Vec<&str> = left.split_whitespace().collect();
        let rf: Vec<&str> = right.split_whitespace().collect();
        let (Some(mp), Some(fstype)) = (lf.get(4), rf.first()) else {
            continue;
        };
        let mp = PathBuf::from(mp.replace("\\040", " "));
        match *fstype {
            "cgroup2" => {
                v2.get_or_insert(mp);
            }
            "cgroup" => {
                for opt in rf.get(2).unwrap_or(&"").split(',') {
                    if matches!(opt, "pids" | "freezer" | "memory" | "cpu" | "devices") {
                        v1.entry(opt.to_string()).or_insert_with(|| mp.clone());
                    }
                }
            }
            _ => {}
        }
    }
    (v1, v2)
}

/// True if the agent can create and remove cgroups below `<mount>/tranche`.
fn usable(mount: &Path) -> bool {
    let parent = mount.join(PARENT);
    if std::fs::create_dir_all(&parent).is_err() {
        return false;
    }
    let probe = parent.join(format!(".probe-{}", std::process::id()));
    let _ = std::fs::remove_dir(&probe);
    if std::fs::create_dir(&probe).is_err() {
        return false;
    }
    std::fs::remove_dir(&probe).is_ok()
}

/// Enables the pids, memory and cpu controllers for the agent's subtree of the v2
/// hierarchy at `mount` (where the node lets it: on a hybrid node they belong to v1);
/// returns the controllers enabled below `<mount>/tranche`.
fn enable_v2_controllers(mount: &Path) -> Vec<String> {
    for ctl in ["+pids", "+memory", "+cpu"] {
        let _ = std::fs::write(mount.join("cgroup.subtree_control"), ctl);
        let _ = std::fs::write(mount.join(PARENT).join("cgroup.subtree_control"), ctl);
    }
    std::fs::read_to_string(mount.join(PARENT).join("cgroup.subtree_control"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// What the node offers, as [`Cgroups::select`] sees it.
pub(crate) struct Offer<'a> {
    /// v1 controllers (`pids`, `freezer`, `memory`, `cpu`) and where they are mounted.
    pub v1: &'a BTreeMap<String, PathBuf>,
    /// The v2 mount, if any.
    pub v2: Option<&'a Path>,
    /// Whether the agent may create cgroups below a mount's `tranche/`.
    pub usable: &'a dyn Fn(&Path) -> bool,
    /// Enables the v2 controllers for the agent's subtree; returns those enabled.
    pub enable_v2: &'a dyn Fn(&Path) -> Vec<String>,
}

impl Cgroups {
    /// Detects the hierarchies this node offers and the agent may write, tracking
    /// process jobs as `mode` says. `Err` says why the hierarchy `mode` forces cannot
    /// be used.
    pub(crate) fn detect(mode: CgroupMode) -> Result<Cgroups, CgroupError> {
        let (v1, v2) = mounts();
        Cgroups::select(
            mode,
            &Offer {
                v1: &v1,
                v2: v2.as_deref(),
                usable: &usable,
                enable_v2: &enable_v2_controllers,
            },
        )
    }

    /// The choice of [`Cgroups::detect`], from what the node offers.
    pub(crate) fn select(mode: CgroupMode, offer: &Offer<'_>) -> Result<Cgroups, CgroupError> {
        let v1_hier = |what: &'static str| -> Option<Hier> {
            let m = offer.v1.get(what)?;
            (offer.usable)(m).then(|| Hier {
                mount: m.clone(),
                v2: false,
                what,
            })
        };
        let v2_hier = || -> Option<Hier> {
            let m = offer.v2.filter(|m| (offer.usable)(m))?;
            Some(Hier {
                mount: m.to_path_buf(),
                v2: true,
                what: "v2",
            })
        };
        let mut cg = Cgroups::default();
        if offer.v1.is_empty() {
            // Pure v2: one hierarchy, with the controllers enabled for our subtree.
            if let Some(h) = v2_hier() {
                let enabled = (offer.enable_v2)(&h.mount);
                let has = |c: &str| enabled.iter().any(|x| x == c);
                if has("memory") {
                    cg.memory = Some(h.clone());
                }
                if has("cpu") {
                    cg.cpu = Some(h.clone());
                }
                if has("pids") {
                    cg.pids = Some(h.clone());
                }
                cg.runtime = Some(h.clone());
                cg.track = Some(h);
            }
        } else {
            cg.runtime = v1_hier("pids")
                .or_else(|| v1_hier("freezer"))
                .or_else(v2_hier);
            cg.memory = v1_hier("memory");
            cg.cpu = v1_hier("cpu");
            cg.pids = v1_hier("pids");
            cg.devices = v1_hier("devices");
            cg.track = cg.runtime.clone();
        }
        match mode {
            CgroupMode::Auto => {}
            CgroupMode::V1 => {
                cg.track = v1_hier("pids").or_else(|| v1_hier("freezer"));
                if cg.track.is_none() {
                    let mounted: Vec<String> = offer.v1.keys().cloned().collect();
                    return Err(if mounted.is_empty() {
                        CgroupError::NoV1
                    } else {
                        CgroupError::NoWritableV1 { mounted }
                    });
                }
            }
            CgroupMode::V2 => {
                let Some(h) = v2_hier() else {
                    return Err(match offer.v2 {
                        None => CgroupError::NoV2,
                        Some(m) => CgroupError::V2ReadOnly {
                            mount: m.to_path_buf(),
                        },
                    });
                };
                if !offer.v1.is_empty() {
                    // A hybrid node: limits stay in v1 where its controllers are mounted,
                    // else in v2 where the node lets the agent enable them.
                    let enabled = (offer.enable_v2)(&h.mount);
                    let has = |c: &str| enabled.iter().any(|x| x == c);
                    if cg.memory.is_none() && has("memory") {
                        cg.memory = Some(h.clone());
                    }
                    if cg.cpu.is_none() && has("cpu") {
                        cg.cpu = Some(h.clone());
                    }
                    if cg.pids.is_none() && has("pids") {
                        cg.pids = Some(h.clone());
                    }
                }
                cg.track = Some(h);
            }
        }
        Ok(cg)
    }

    /// The hierarchy processes are tracked in, if any.
    pub(crate) fn track(&self) -> Option<&Hier> {
        self.track.as_ref()
    }

    /// One line naming the hierarchies used.
    pub(crate) fn describe(&self) -> String {
        let one = |h: &Option<Hier>| match h {
            Some(h) => format!(
                "{} {} {}",
                if h.v2 { "v2" } else { "v1" },
                h.what,
                h.mount.display()
            ),
            None => "none".to_string(),
        };
        format!(
            "track={}, memory={}, cpu={}, containers={}, pids={}, devices={}",
            one(&self.track),
            one(&self.memory),
            one(&self.cpu),
            one(&self.runtime),
            one(&self.pids),
            one(&self.devices)
        )
    }

    /// Whether process jobs can be confined to their own devices (a v1 `devices`
    /// hierarchy the agent may write).
    pub(crate) fn confines_devices(&self) -> bool {
        self.devices.is_some()
    }

    /// The cgroups of a process-executor attempt named `name` (`<spool>-<job>.<attempt>`),
    /// or `None` without a usable tracking hierarchy. Memory, CPU and pids directories
    /// are included only when those limits are asked for; the `devices` one where the
    /// node has that controller.
    pub(crate) fn plan_for(&self, name: &str, limits: Limits) -> Option<CgroupPlan> {
        let track = self.track.as_ref()?;
        let mut plan = CgroupPlan {
            track: track.dir(name),
            v2: track.v2,
            ..CgroupPlan::default()
        };
        let mut limit = |h: &Option<Hier>, wanted: bool| -> Option<(PathBuf, bool)> {
            let h = h.as_ref().filter(|_| wanted)?;
            let d = h.dir(name);
            if d != plan.track && !plan.extra.contains(&d) {
                plan.extra.push(d.clone());
            }
            Some((d, h.v2))
        };
        let memory = limit(&self.memory, limits.memory_mb > 0);
        let cpu = limit(&self.cpu, limits.cpus > 0);
        let pids = limit(&self.pids, limits.pids > 0);
        let devices = limit(&self.devices, true).map(|(d, _)| d);
        plan.memory = memory;
        plan.cpu = cpu;
        plan.pids = pids;
        plan.devices = devices;
        Some(plan)
    }

    /// Where the OCI runtime puts the processes of the container of attempt `name`
    /// (it is given `linux.cgroupsPath = /tranche/<name>`); the agent only reads it.
    pub(crate) fn runtime_plan_for(&self, name: &str) -> Option<CgroupPlan> {
        let track = self.runtime.as_ref()?;
        Some(CgroupPlan {
            track: track.dir(name),
            v2: track.v2,
            ..CgroupPlan::default()
        })
    }
}

/// The cgroup directories of one attempt (`plan.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CgroupPlan {
    /// The directory whose `cgroup.procs` lists every process of the job.
    pub track: PathBuf,
    /// `track` is in a v2 hierarchy.
    pub v2: bool,
    /// Further directories the job joins (v1 memory and cpu).
    #[serde(default)]
    pub extra: Vec<PathBuf>,
    /// Where the memory limit is written, and whether that is v2.
    #[serde(default)]
    pub memory: Option<(PathBuf, bool)>,
    /// Where the CPU limit is written, and whether that is v2.
    #[serde(default)]
    pub cpu: Option<(PathBuf, bool)>,
    /// Where `pids.max` is written, and whether that is v2.
    #[serde(default)]
    pub pids: Option<(PathBuf, bool)>,
    /// The v1 `devices` directory, denied every device but those allowed.
    #[serde(default)]
    pub devices: Option<PathBuf>,
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing `{value}` to {}: {e}", path.display()),
        )
    })
}

impl CgroupPlan {
    /// Every directory the job joins, tracking one first.
    pub(crate) fn dirs(&self) -> Vec<PathBuf> {
        let mut v = vec![self.track.clone()];
        v.extend(self.extra.iter().cloned());
        v
    }

    /// True while the tracking directory exists.
    pub(crate) fn exists(&self) -> bool {
        self.track.is_dir()
    }

    /// Creates the directories and writes the limits. A directory that is there
    /// already was left by an earlier incarnation of this attempt (an agent stopped
    /// between making it and recording the attempt): whatever runs in it is killed and
    /// it is made anew. Making it first, rather than looking for it first, spares every
    /// start a lookup in the directory where every other attempt's cgroup is being made
    /// and removed (on cgroup v1 such lookups wait behind those changes).
    pub(crate) fn create(&self, limits: Limits, devices: &[CharDev]) -> io::Result<()> {
        let (cpus, memory_mb) = (limits.cpus, limits.memory_mb);
        for d in self.dirs() {
            let made = match std::fs::create_dir(&d) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    self.clear_dir(&d, Instant::now());
                    std::fs::create_dir(&d)
                }
                r => r,
            };
            match made {
                Ok(()) => {}
                // Still there: a process in it outlived SIGKILL's wait. It is used as
                // it is, emptied of the old attempt's processes as far as they die.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("creating {}: {e}", d.display()),
                    ))
                }
            }
        }
        if let Some((d, v2)) = &self.memory {
            let bytes = (memory_mb.saturating_mul(1024 * 1024)).to_string();
            if *v2 {
                write(&d.join("memory.max"), &bytes)?;
            } else {
                write(&d.join("memory.limit_in_bytes"), &bytes)?;
            }
        }
        if let Some((d, v2)) = &self.cpu {
            let quota = u64::from(cpus) * CFS_PERIOD_US;
            if *v2 {
                write(&d.join("cpu.max"), &format!("{quota} {CFS_PERIOD_US}"))?;
            } else {
                write(&d.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
                write(&d.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        if let Some((d, _)) = &self.pids {
            write(&d.join("pids.max"), &limits.pids.to_string())?;
        }
        if let Some(d) = &self.devices {
            // Everything denied first (which also clears what the parent passed
            // down), then each allowed device.
            write(&d.join("devices.deny"), "a")?;
            for dev in devices {
                write(&d.join("devices.allow"), &dev.rule())?;
            }
        }
        Ok(())
    }

    /// Every process in the tracking directory.
    pub(crate) fn procs(&self) -> Vec<i32> {
        std::fs::read_to_string(self.track.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Sends `sig` to every process of the cgroup.
    pub(crate) fn signal(&self, sig: i32) -> io::Result<()> {
        let mut err = None;
        for p in self.procs() {
            match procfs::kill(p, sig) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => err = err.or(Some(e)),
            }
        }
        match err {
            None => Ok(()),
            Some(e) => Err(io::Error::from(e)),
        }
    }

    /// Kills every process at once with v2's `cgroup.kill`; false where that is not
    /// available (v1, or kernels before 5.14).
    pub(crate) fn kill_all_fast(&self) -> bool {
        self.v2 && std::fs::write(self.track.join("cgroup.kill"), "1").is_ok()
    }

    /// Removes the directories (waiting up to 2 s for exiting tasks to leave).
    pub(crate) fn remove(&self) {
        for d in self.dirs().iter().rev() {
            let t0 = Instant::now();
            loop {
                match std::fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) => {
                        if t0.elapsed() > Duration::from_secs(2) {
                            tracing::warn!("removing cgroup {}: {e}", d.display());
                            eprintln!("removing cgroup {}: {e}", d.display());
                            break;
                        }
                        sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }

    /// Removes the directories if no process is left in them.
    pub(crate) fn remove_if_empty(&self) {
        if self.exists() && self.procs().is_empty() {
            self.remove();
        }
    }

    /// Kills whatever a previous incarnation of this attempt left in these cgroups
    /// and removes them.
    pub(crate) fn clear_leftover(&self) {
        let t0 = Instant::now();
        for d in self.dirs() {
            if d.is_dir() {
                self.clear_dir(&d, t0);
            }
        }
    }

    /// Kills the processes in directory `d` of this attempt (for up to 5 s from `t0`)
    /// and removes it.
    fn clear_dir(&self, d: &Path, t0: Instant) {
        let probe = CgroupPlan {
            track: d.to_path_buf(),
            v2: self.v2,
            ..CgroupPlan::default()
        };
        while !probe.procs().is_empty() && t0.elapsed() < Duration::from_secs(5) {
            let _ = probe.signal(nix::libc::SIGKILL);
            sleep(Duration::from_millis(10));
        }
        probe.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    const PURE_V2: &str = "\
30 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
";

    fn hier(mount: &str, v2: bool, what: &'static str) -> Option<Hier> {
        Some(Hier {
            mount: PathBuf::from(mount),
            v2,
            what,
        })
    }

    /// The choice on a node with these mounts, every mount writable, and `enabled` the
    /// controllers the v2 hierarchy lets the agent enable.
    fn select(mountinfo: &str, mode: CgroupMode, enabled: &[&str]) -> Result<Cgroups, CgroupError> {
        let (v1, v2) = parse_mounts(mountinfo);
        let enabled: Vec<String> = enabled.iter().map(|c| c.to_string()).collect();
        Cgroups::select(
            mode,
            &Offer {
                v1: &v1,
                v2: v2.as_deref(),
                usable: &|_| true,
                enable_v2: &|_| enabled.clone(),
            },
        )
    }

    #[test]
    fn mountinfo_names_the_v1_controllers_and_the_v2_mount() {
        let (v1, v2) = parse_mounts(HYBRID);
        let names: Vec<&str> = v1.keys().map(String::as_str).collect();
        assert_eq!(names, ["cpu", "freezer", "memory", "pids"]);
        assert_eq!(v1["pids"], Path::new("/sys/fs/cgroup/pids"));
        assert_eq!(v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        let (v1, v2) = parse_mounts(PURE_V2);
        assert!(v1.is_empty());
        assert_eq!(v2.as_deref(), Some(Path::new("/sys/fs/cgroup")));
    }

    #[test]
    fn a_hybrid_node_tracks_in_v1_unless_v2_is_asked_for() {
        let v1_limits = (
            hier("/sys/fs/cgroup/memory", false, "memory"),
            hier("/sys/fs/cgroup/cpu", false, "cpu"),
        );
        for mode in [CgroupMode::Auto, CgroupMode::V1] {
            let cg = select(HYBRID, mode, &[]).unwrap();
            assert_eq!(
                cg.track,
                hier("/sys/fs/cgroup/pids", false, "pids"),
                "{mode}"
            );
            assert_eq!((cg.memory.clone(), cg.cpu.clone()), v1_limits, "{mode}");
            assert_eq!(cg.runtime, cg.track, "{mode}");
        }
        let cg = select(HYBRID, CgroupMode::V2, &[]).unwrap();
        assert_eq!(cg.track, hier("/sys/fs/cgroup/unified", true, "v2"));
        // Limits stay where the controllers are; containers where runc puts them.
        assert_eq!((cg.memory.clone(), cg.cpu.clone()), v1_limits);
        assert_eq!(cg.runtime, hier("/sys/fs/cgroup/pids", false, "pids"));
        assert!(cg
            .describe()
            .starts_with("track=v2 v2 /sys/fs/cgroup/unified, memory=v1 memory"));
    }

    #[test]
    fn a_pure_v2_node_uses_v2_for_everything_it_enables() {
        for mode in [CgroupMode::Auto, CgroupMode::V2] {
            let cg = select(PURE_V2, mode, &["pids", "memory", "cpu"]).unwrap();
            let v2 = hier("/sys/fs/cgroup", true, "v2");
            assert_eq!(
                (&cg.track, &cg.memory, &cg.cpu, &cg.runtime),
                (&v2, &v2, &v2, &v2)
            );
        }
        let cg = select(PURE_V2, CgroupMode::Auto, &["pids"]).unwrap();
        assert_eq!((cg.memory, cg.cpu), (None, None));
        let e = select(PURE_V2, CgroupMode::V1, &[]).unwrap_err();
        assert_eq!(e, CgroupError::NoV1);
        assert!(e.to_string().contains("no cgroup v1 hierarchy"), "{e}");
    }

    #[test]
    fn a_forced_hierarchy_that_is_missing_or_read_only_is_refused() {
        let e = select(
            HYBRID
                .lines()
                .filter(|l| !l.contains("cgroup2"))
                .collect::<Vec<_>>()
                .join("\n")
                .as_str(),
            CgroupMode::V2,
            &[],
        )
        .unwrap_err();
        assert_eq!(e, CgroupError::NoV2);
        assert!(e.to_string().contains("no cgroup v2 hierarchy"), "{e}");
        let (v1, v2) = parse_mounts(HYBRID);
        let offer = Offer {
            v1: &v1,
            v2: v2.as_deref(),
            usable: &|_| false,
            enable_v2: &|_| Vec::new(),
        };
        let e = Cgroups::select(CgroupMode::V2, &offer).unwrap_err();
        assert!(matches!(&e, CgroupError::V2ReadOnly { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("/sys/fs/cgroup/unified is not writable"),
            "{e}"
        );
        let e = Cgroups::select(CgroupMode::V1, &offer).unwrap_err();
        assert!(
            matches!(&e, CgroupError::NoWritableV1 { mounted } if mounted.len() == 4),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("no writable cgroup v1 pids or freezer"),
            "{e}"
        );
        // Auto settles for no cgroup at all (process group tracking).
        assert_eq!(
            Cgroups::select(CgroupMode::Auto, &offer).unwrap().track,
            None
        );
    }

    #[test]
    fn modes_parse_and_print() {
        for m in [CgroupMode::Auto, CgroupMode::V1, CgroupMode::V2] {
            assert_eq!(m.as_str().parse::<CgroupMode>(), Ok(m));
        }
        let e = "v3".parse::<CgroupMode>().unwrap_err();
        assert!(matches!(&e, CgroupError::BadMode { given } if given == "v3"));
        let e = e.to_string();
        assert!(e.contains("`v3`") && e.contains("\"v2\""), "{e}");
    }

    fn read(p: &Path) -> String {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// Three v1 hierarchies as plain directories: the job's directory in each, the
    /// limits in v1's files.
    #[test]
    fn create_writes_v1_limits() {
        let t = tempfile::tempdir().unwrap();
        let cg = Cgroups {
            track: hier(t.path().join("pids").to_str().unwrap(), false, "pids"),
            runtime: None,
            memory: hier(t.path().join("memory").to_str().unwrap(), false, "memory"),
            cpu: hier(t.path().join("cpu").to_str().unwrap(), false, "cpu"),
            ..Cgroups::default()
        };
        for h in ["pids", "memory", "cpu"] {
            std::fs::create_dir_all(t.path().join(h).join(PARENT)).unwrap();
        }
        let plan = cg
            .plan_for(
                "abcd0123-7.1",
                Limits {
                    cpus: 2,
                    memory_mb: 96,
                    pids: 0,
                },
            )
            .unwrap();
        let dir = |h: &str| t.path().join(h).join(PARENT).join("abcd0123-7.1");
        assert_eq!(plan.dirs(), [dir("pids"), dir("memory"), dir("cpu")]);
        assert!(!plan.v2);
        plan.create(
            Limits {
                cpus: 2,
                memory_mb: 96,
                pids: 0,
            },
            &[],
        )
        .unwrap();
        assert_eq!(
            read(&dir("memory").join("memory.limit_in_bytes")),
            (96u64 << 20).to_string()
        );
        assert_eq!(read(&dir("cpu").join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(&dir("cpu").join("cpu.cfs_quota_us")), "200000");
        assert!(!dir("memory").join("memory.max").exists());
        assert!(!dir("cpu").join("cpu.max").exists());
        // v1 has no cgroup.kill: killing goes process by process.
        assert!(!plan.kill_all_fast());
        // No limit asked for: only the tracking directory.
        let plan = cg
            .plan_for(
                "abcd0123-8.1",
                Limits {
                    cpus: 0,
                    memory_mb: 0,
                    pids: 0,
                },
            )
            .unwrap();
        assert_eq!(
            plan.dirs(),
            [t.path().join("pids").join(PARENT).join("abcd0123-8.1")]
        );
    }

    /// One v2 hierarchy as a plain directory: one directory for the job, the limits in
    /// v2's files, and `cgroup.kill` used to kill.
    #[test]
    fn create_writes_v2_limits() {
        let t = tempfile::tempdir().unwrap();
        let v2 = hier(t.path().to_str().unwrap(), true, "v2");
        let cg = Cgroups {
            track: v2.clone(),
            runtime: v2.clone(),
            memory: v2.clone(),
            cpu: v2,
            ..Cgroups::default()
        };
        std::fs::create_dir_all(t.path().join(PARENT)).unwrap();
        let plan = cg
            .plan_for(
                "abcd0123-7.1",
                Limits {
                    cpus: 3,
                    memory_mb: 64,
                    pids: 0,
                },
            )
            .unwrap();
        let dir = t.path().join(PARENT).join("abcd0123-7.1");
        assert_eq!(plan.dirs(), std::slice::from_ref(&dir));
        assert!(plan.v2);
        plan.create(
            Limits {
                cpus: 3,
                memory_mb: 64,
                pids: 0,
            },
            &[],
        )
        .unwrap();
        assert_eq!(read(&dir.join("memory.max")), (64u64 << 20).to_string());
        assert_eq!(read(&dir.join("cpu.max")), "300000 100000");
        assert!(!dir.join("memory.limit_in_bytes").exists());
        assert!(plan.kill_all_fast());
        assert_eq!(read(&dir.join("cgroup.kill")), "1");
    }

    /// A hybrid node tracking in v2: the job joins the v2 directory and the v1 memory
    /// and cpu ones, whose files take the limits.
    #[test]
    fn create_on_a_hybrid_node_tracking_in_v2() {
        let t = tempfile::tempdir().unwrap();
        let p = |h: &str| t.path().join(h).to_str().unwrap().to_string();
        let cg = Cgroups {
            track: hier(&p("unified"), true, "v2"),
            runtime: hier(&p("pids"), false, "pids"),
            memory: hier(&p("memory"), false, "memory"),
            cpu: hier(&p("cpu"), false, "cpu"),
            ..Cgroups::default()
        };
        for h in ["unified", "memory", "cpu"] {
            std::fs::create_dir_all(t.path().join(h).join(PARENT)).unwrap();
        }
        let plan = cg
            .plan_for(
                "x-1.0",
                Limits {
                    cpus: 1,
                    memory_mb: 32,
                    pids: 0,
                },
            )
            .unwrap();
        let dir = |h: &str| t.path().join(h).join(PARENT).join("x-1.0");
        assert_eq!(plan.dirs(), [dir("unified"), dir("memory"), dir("cpu")]);
        plan.create(
            Limits {
                cpus: 1,
                memory_mb: 32,
                pids: 0,
            },
            &[],
        )
        .unwrap();
        assert_eq!(
            read(&dir("memory").join("memory.limit_in_bytes")),
            (32u64 << 20).to_string()
        );
        assert_eq!(read(&dir("cpu").join("cpu.cfs_quota_us")), "100000");
        assert!(plan.kill_all_fast());
        // Containers go where the runtime puts them.
        let rt = cg.runtime_plan_for("x-1.0").unwrap();
        assert_eq!((rt.track, rt.v2), (dir("pids"), false));
    }
}
