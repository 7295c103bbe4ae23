//! Cgroups of attempts: detection of the usable hierarchies, creation with limits,
//! listing and signalling every process, removal.
//!
//! The attempt's cgroup is `tranche/<spool>-<job>.<attempt>` below the root of each hierarchy
//! used. Tracking (finding every process of a job) uses the v1 `pids` hierarchy, else
//! the v1 `freezer` one, else the v2 hierarchy; limits use the v1 `memory` and `cpu`
//! hierarchies, or the v2 one on a pure v2 node.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::procfs;

/// The parent of every attempt's cgroup, below each hierarchy's root.
pub(crate) const PARENT: &str = "tranche";

/// CFS period given with a CPU limit, in microseconds.
const CFS_PERIOD_US: u64 = 100_000;

/// The cgroup path handed to the OCI runtime (`linux.cgroupsPath`).
pub(crate) fn runtime_path(name: &str) -> String {
    format!("/{PARENT}/{name}")
}

/// One usable hierarchy.
#[derive(Debug, Clone)]
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
#[derive(Debug, Clone, Default)]
pub(crate) struct Cgroups {
    track: Option<Hier>,
    memory: Option<Hier>,
    cpu: Option<Hier>,
}

/// Cgroup mounts from `/proc/self/mountinfo`: v1 controllers to mount points, and the
/// v2 mount point.
fn mounts() -> (BTreeMap<String, PathBuf>, Option<PathBuf>) {
    let mut v1 = BTreeMap::new();
    let mut v2 = None;
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
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
                    if matches!(opt, "pids" | "freezer" | "memory" | "cpu") {
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

impl Cgroups {
    /// Detects the hierarchies this node offers and the agent may write.
    pub(crate) fn detect() -> Cgroups {
        let (v1, v2) = mounts();
        let mut cg = Cgroups::default();
        let hier = |what: &'static str| -> Option<Hier> {
            let m = v1.get(what)?;
            usable(m).then(|| Hier {
                mount: m.clone(),
                v2: false,
                what,
            })
        };
        if v1.is_empty() {
            // Pure v2: one hierarchy, with the controllers enabled for our subtree.
            if let Some(m) = v2.filter(|m| usable(m)) {
                for ctl in ["+pids", "+memory", "+cpu"] {
                    let _ = std::fs::write(m.join("cgroup.subtree_control"), ctl);
                    let _ = std::fs::write(m.join(PARENT).join("cgroup.subtree_control"), ctl);
                }
                let enabled =
                    std::fs::read_to_string(m.join(PARENT).join("cgroup.subtree_control"))
                        .unwrap_or_default();
                let has = |c: &str| enabled.split_whitespace().any(|x| x == c);
                let h = Hier {
                    mount: m.clone(),
                    v2: true,
                    what: "v2",
                };
                if has("memory") {
                    cg.memory = Some(h.clone());
                }
                if has("cpu") {
                    cg.cpu = Some(h.clone());
                }
                cg.track = Some(h);
            }
            return cg;
        }
        cg.track = hier("pids").or_else(|| hier("freezer")).or_else(|| {
            v2.filter(|m| usable(m)).map(|m| Hier {
                mount: m,
                v2: true,
                what: "v2",
            })
        });
        cg.memory = hier("memory");
        cg.cpu = hier("cpu");
        cg
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
            "track={}, memory={}, cpu={}",
            one(&self.track),
            one(&self.memory),
            one(&self.cpu)
        )
    }

    /// The cgroups of a process-executor attempt named `name` (`<spool>-<job>.<attempt>`),
    /// or `None` without a usable tracking hierarchy. Memory and CPU directories are
    /// included only when those limits are asked for.
    pub(crate) fn plan_for(&self, name: &str, cpus: u32, memory_mb: u64) -> Option<CgroupPlan> {
        let track = self.track.as_ref()?;
        let mut plan = CgroupPlan {
            track: track.dir(name),
            v2: track.v2,
            extra: Vec::new(),
            memory: None,
            cpu: None,
        };
        let mut limit = |h: &Option<Hier>, wanted: bool| -> Option<(PathBuf, bool)> {
            let h = h.as_ref().filter(|_| wanted)?;
            let d = h.dir(name);
            if d != plan.track && !plan.extra.contains(&d) {
                plan.extra.push(d.clone());
            }
            Some((d, h.v2))
        };
        let memory = limit(&self.memory, memory_mb > 0);
        let cpu = limit(&self.cpu, cpus > 0);
        plan.memory = memory;
        plan.cpu = cpu;
        Some(plan)
    }

    /// Where the OCI runtime puts the processes of the container of attempt `name`
    /// (it is given `linux.cgroupsPath = /tranche/<name>`); the agent only reads it.
    pub(crate) fn runtime_plan_for(&self, name: &str) -> Option<CgroupPlan> {
        let track = self.track.as_ref()?;
        Some(CgroupPlan {
            track: track.dir(name),
            v2: track.v2,
            extra: Vec::new(),
            memory: None,
            cpu: None,
        })
    }
}

/// The cgroup directories of one attempt (`plan.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

    /// Creates the directories and writes the limits.
    pub(crate) fn create(&self, cpus: u32, memory_mb: u64) -> io::Result<()> {
        for d in self.dirs() {
            match std::fs::create_dir(&d) {
                Ok(()) => {}
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

    /// Kills whatever a previous incarnation of this attempt left in these cgroups
    /// and removes them.
    pub(crate) fn clear_leftover(&self) {
        let t0 = Instant::now();
        for d in self.dirs() {
            if !d.is_dir() {
                continue;
            }
            let probe = CgroupPlan {
                track: d.clone(),
                v2: self.v2,
                extra: Vec::new(),
                memory: None,
                cpu: None,
            };
            while !probe.procs().is_empty() && t0.elapsed() < Duration::from_secs(5) {
                let _ = probe.signal(nix::libc::SIGKILL);
                sleep(Duration::from_millis(10));
            }
        }
        self.remove();
    }
}
