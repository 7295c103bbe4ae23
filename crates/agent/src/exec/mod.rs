//! Job executors: how the agent runs an attempt of a job, signals it, stops it and
//! learns how it ended.
//!
//! # A shim per attempt
//!
//! Every attempt has a directory `<spool>/attempts/<job>.<attempt>/` holding
//!
//! | file | written by | content |
//! |---|---|---|
//! | `spec.json` | agent | the [`LaunchSpec`] |
//! | `plan.json` | agent | what the executor decided: kind, cgroup paths, runtime, container id, overlay mount |
//! | `shim.pid` | shim | the shim's pid and start time (to tell whether it is still there) |
//! | `stdout`, `stderr` | job | the job's output |
//! | `pid` | shim | the job's main pid (process executor), or the container id and then the container init's host pid on a second line (OCI) |
//! | `exit.json` | shim | `{"code", "signal", "at_ms"}`, written atomically once no process of the job is left |
//! | `launch_error` | shim | why the job could not be started (the agent's [`Executors::start`] returns it) |
//! | `shim.log`, `runtime.log` | shim, runc | diagnostics |
//! | `bundle/` | agent | OCI only: `config.json`, and the rootfs or the overlay mounted over a cached one |
//!
//! The agent starts `tranche-agent shim --dir <attemptdir>` (a hidden subcommand) in a
//! new session with stdin on `/dev/null`; the shim forks once more so that it is no
//! child of the agent, makes itself a child subreaper (every orphaned descendant of the
//! job is re-parented to it), launches the job, reaps it and its descendants, writes
//! `exit.json` and exits. Killing the agent (even with SIGKILL) therefore never kills a
//! job, and a restarted agent re-adopts the attempts by scanning the spool
//! ([`Executors::adopt`]).
//!
//! # Executors
//!
//! * `image = "host"`: the **process executor** runs the command on the node in its own
//!   process group and, where cgroups are writable, its own cgroup (see [`Executors`]
//!   for the hierarchy), with the [`job_env`], cwd and uid/gid of the spec.
//! * anything else: the **OCI executor** runs the command in a container with `runc`
//!   (or `crun` where runc is absent) on a rootfs directory, an OCI image layout
//!   directory, or a `.tar`/`.tar.gz` of one (unpacked once per manifest digest into
//!   `<spool>/images/`).
//!
//! "Every process of the job" is every pid in the attempt's cgroup; without a writable
//! cgroup, the process executor falls back to the job's process group plus every
//! descendant of its shim.

mod cgroup;
mod fsutil;
mod image;
pub mod ledger;
mod oci;
mod procfs;
mod shim;

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use cgroup::CgroupMode;
pub use shim::shim_main;

use cgroup::{CgroupPlan, Cgroups};

/// Environment variable naming the `tranche-agent` binary whose hidden `shim`
/// subcommand supervises each attempt; unset, the running executable is used.
pub const AGENT_BIN_ENV: &str = "TRANCHE_AGENT_BIN";

/// Environment variable naming the OCI runtime binary; unset, `runc` is looked for in
/// `PATH` and the usual sbin/bin directories, then `crun`.
pub const OCI_RUNTIME_ENV: &str = "TRANCHE_OCI_RUNTIME";

/// `PATH` given to a job whose environment does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long [`Executors::start`] waits for the shim to report the job running.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One GPU bound to an attempt: its index on the node (NVML order, which is PCI bus
/// order) and its UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundGpu {
    /// Index of the GPU on the node (`/dev/nvidia<index>`).
    pub index: u32,
    /// The GPU's UUID, e.g. `GPU-5f1c...`.
    pub uuid: String,
}

/// Everything an executor needs to run one attempt of a job on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// The job's id.
    pub job: u64,
    /// The attempt number; `(job, attempt)` names the attempt on this node.
    pub attempt: u32,
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
    /// Working directory; unset: the image's working directory, or `/`.
    pub cwd: Option<String>,
    /// `(uid, gid)` the job runs as (inside the container for OCI); unset: root.
    pub user: Option<(u32, u32)>,
    /// CPU limit in whole CPUs (CFS quota); 0 = no limit.
    pub cpus: u32,
    /// Memory limit in MiB; 0 = no limit.
    pub memory_mb: u64,
    /// The GPUs allocated to the attempt, in allocation order.
    pub gpus: Vec<BoundGpu>,
    /// The GPUs come from the fake inventory: their device nodes are synthesized
    /// (major 195, minor = index; `nvidiactl` 195:255) instead of read from `/dev`.
    pub fake_devices: bool,
}

impl LaunchSpec {
    /// The command as one line, for messages.
    fn command_line(&self) -> String {
        self.command.join(" ")
    }
}

/// Which executor runs an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExecKind {
    /// A plain process on the node (`image = "host"`).
    Process,
    /// An OCI container run by runc (or crun).
    Oci,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    /// Exit code of the job's main process, if it exited.
    pub code: Option<i32>,
    /// Signal that ended the job's main process, if one did. For OCI, runc reports a
    /// container killed by signal N as exit code 128+N, which is read as signal N.
    /// Both `code` and `signal` are `None` when the attempt was lost (its shim vanished
    /// or the job could not be launched).
    pub signal: Option<i32>,
    /// When the shim saw the last process of the job gone, in ms since the Unix epoch.
    pub at_ms: u64,
}

impl ExitStatus {
    /// True for exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "killed by signal {s}"),
            (None, None) => write!(f, "lost (no exit status)"),
        }
    }
}

/// How [`Attempt::kill_all`] killed the processes of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillMethod {
    /// cgroup v2's `cgroup.kill`: the kernel killed every process of the cgroup at once,
    /// including any forked meanwhile.
    CgroupKill,
    /// SIGKILL sent to each process of the job.
    Signals,
}

impl fmt::Display for KillMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KillMethod::CgroupKill => "cgroup.kill",
            KillMethod::Signals => "SIGKILL to each process",
        })
    }
}

/// What [`Attempt::stop`] had to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// Every process of the job was gone within the grace period (or before the
    /// signal was sent).
    ExitedInGrace {
        /// How the attempt ended.
        status: ExitStatus,
    },
    /// The grace period ran out; every process of the job was killed with SIGKILL.
    Killed {
        /// How the attempt ended.
        status: ExitStatus,
        /// How the processes were killed (`cgroup.kill` if it was used at all).
        via: KillMethod,
    },
}

impl StopOutcome {
    /// The exit status, whichever way the attempt ended.
    pub fn status(&self) -> &ExitStatus {
        match self {
            StopOutcome::ExitedInGrace { status } | StopOutcome::Killed { status, .. } => status,
        }
    }
}

/// The node's cgroup mounts, whether or not the agent may write them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMounts {
    /// v1 controllers the executors use (`pids`, `freezer`, `memory`, `cpu`) and where
    /// each is mounted.
    pub v1: BTreeMap<String, PathBuf>,
    /// Where the v2 hierarchy is mounted (the unified mount of a hybrid node).
    pub v2: Option<PathBuf>,
}

/// The node's cgroup mounts, from `/proc/self/mountinfo`.
pub fn cgroup_mounts() -> CgroupMounts {
    let (v1, v2) = cgroup::mounts();
    CgroupMounts { v1, v2 }
}

/// Errors of the executors. Messages name the field, file, image or command at fault.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A file system or process operation failed.
    #[error("{what} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        what: String,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The launch spec is invalid.
    #[error("launch spec field `{field}`: {reason}")]
    Spec {
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The image cannot be used.
    #[error("image `{image}`: {reason}")]
    Image {
        /// The image as given in the spec.
        image: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A container image was asked for but no OCI runtime is installed.
    #[error(
        "image `{image}` needs an OCI runtime, but neither runc nor crun was found \
         (looked in PATH and /usr/local/sbin, /usr/local/bin, /usr/sbin, /usr/bin, /sbin, /bin; \
         set TRANCHE_OCI_RUNTIME to override)"
    )]
    NoRuntime {
        /// The image as given in the spec.
        image: String,
    },
    /// A GPU of the allocation has no usable device node.
    #[error("GPU {index} ({uuid}): {reason}")]
    Gpu {
        /// Index of the GPU.
        index: u32,
        /// UUID of the GPU.
        uuid: String,
        /// What is wrong.
        reason: String,
    },
    /// The job could not be started.
    #[error("job {job} attempt {attempt}: cannot start `{command}` (image `{image}`): {reason}")]
    Launch {
        /// The job.
        job: u64,
        /// The attempt.
        attempt: u32,
        /// The image.
        image: String,
        /// The command line.
        command: String,
        /// Why it could not be started.
        reason: String,
    },
    /// The attempt was started before on this node and not acknowledged.
    #[error(
        "job {job} attempt {attempt}: attempt directory `{}` already exists \
         (started before and not acknowledged)", dir.display()
    )]
    AttemptExists {
        /// The job.
        job: u64,
        /// The attempt.
        attempt: u32,
        /// The attempt directory.
        dir: PathBuf,
    },
    /// A file of an attempt directory cannot be read or parsed.
    #[error("attempt file `{}`: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A signal name or number is not valid.
    #[error(
        "signal `{name}`: {reason} (expected a name such as SIGTERM or TERM, or a number 1-64)"
    )]
    BadSignal {
        /// The signal as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A signal could not be delivered.
    #[error("sending signal {signal} to {target}: {reason}")]
    Signal {
        /// The signal number.
        signal: i32,
        /// Which processes.
        target: String,
        /// What went wrong.
        reason: String,
    },
    /// The cgroup hierarchy the agent's `cgroup` setting asks for cannot be used.
    #[error("cgroup = \"{mode}\": {reason}")]
    Cgroups {
        /// The setting.
        mode: CgroupMode,
        /// Why it cannot be used.
        reason: String,
    },
    /// The attempt has not ended yet.
    #[error(
        "job {job} attempt {attempt} has not ended (no exit status yet); \
         stop it before acknowledging its exit"
    )]
    StillRunning {
        /// The job.
        job: u64,
        /// The attempt.
        attempt: u32,
    },
}

impl ExecError {
    pub(crate) fn io(what: impl Into<String>, path: &Path, source: io::Error) -> ExecError {
        ExecError::Io {
            what: what.into(),
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The signal number for a name (`"SIGTERM"`, `"TERM"`, `"sigusr1"`, `"SIGRTMIN+2"`)
/// or a number (`"15"`).
pub fn signal_number(name: &str) -> Result<i32, ExecError> {
    let bad = |reason: &str| ExecError::BadSignal {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    let s = name.trim();
    if s.is_empty() {
        return Err(bad("empty"));
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let n: i32 = s.parse().map_err(|_| bad("not a signal number"))?;
        if !(1..=64).contains(&n) {
            return Err(bad("out of range"));
        }
        return Ok(n);
    }
    let upper = s.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let rt = |base: i32, rest: &str, sign: i32| -> Result<i32, ExecError> {
        let off: i32 = if rest.is_empty() {
            0
        } else {
            rest.parse().map_err(|_| bad("bad real-time offset"))?
        };
        let n = base + sign * off;
        if (nix::libc::SIGRTMIN()..=nix::libc::SIGRTMAX()).contains(&n) {
            Ok(n)
        } else {
            Err(bad("real-time signal out of range"))
        }
    };
    if let Some(rest) = bare.strip_prefix("RTMIN") {
        return match rest.strip_prefix('+') {
            Some(off) => rt(nix::libc::SIGRTMIN(), off, 1),
            None if rest.is_empty() => rt(nix::libc::SIGRTMIN(), "", 1),
            None => Err(bad("unknown signal name")),
        };
    }
    if let Some(rest) = bare.strip_prefix("RTMAX") {
        return match rest.strip_prefix('-') {
            Some(off) => rt(nix::libc::SIGRTMAX(), off, -1),
            None if rest.is_empty() => rt(nix::libc::SIGRTMAX(), "", 1),
            None => Err(bad("unknown signal name")),
        };
    }
    use nix::libc as l;
    let n = match bare {
        "HUP" => l::SIGHUP,
        "INT" => l::SIGINT,
        "QUIT" => l::SIGQUIT,
        "ILL" => l::SIGILL,
        "TRAP" => l::SIGTRAP,
        "ABRT" | "IOT" => l::SIGABRT,
        "BUS" => l::SIGBUS,
        "FPE" => l::SIGFPE,
        "KILL" => l::SIGKILL,
        "USR1" => l::SIGUSR1,
        "SEGV" => l::SIGSEGV,
        "USR2" => l::SIGUSR2,
        "PIPE" => l::SIGPIPE,
        "ALRM" => l::SIGALRM,
        "TERM" => l::SIGTERM,
        "STKFLT" => l::SIGSTKFLT,
        "CHLD" | "CLD" => l::SIGCHLD,
        "CONT" => l::SIGCONT,
        "STOP" => l::SIGSTOP,
        "TSTP" => l::SIGTSTP,
        "TTIN" => l::SIGTTIN,
        "TTOU" => l::SIGTTOU,
        "URG" => l::SIGURG,
        "XCPU" => l::SIGXCPU,
        "XFSZ" => l::SIGXFSZ,
        "VTALRM" => l::SIGVTALRM,
        "PROF" => l::SIGPROF,
        "WINCH" => l::SIGWINCH,
        "IO" | "POLL" => l::SIGIO,
        "PWR" => l::SIGPWR,
        "SYS" => l::SIGSYS,
        _ => return Err(bad("unknown signal name")),
    };
    Ok(n)
}

/// The environment of an attempt: `spec.env`, then (overriding it)
///
/// * `CUDA_VISIBLE_DEVICES`: the GPU indices in allocation order, comma-separated
///   (`""` with no GPU, so the job sees none),
/// * `NVIDIA_VISIBLE_DEVICES`: their UUIDs, comma-separated (`"void"` with no GPU),
/// * `CUDA_DEVICE_ORDER=PCI_BUS_ID` (so CUDA numbers GPUs as NVML and the node do),
/// * `TRANCHE_JOB_ID`, `TRANCHE_ATTEMPT`, `TRANCHE_RESTART_COUNT`, `TRANCHE_SHARE`.
///
/// This is the environment of a process-executor job. Inside an OCI container only the
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
    env
}

/// What the agent decided for an attempt (`plan.json`); read by the shim and by a
/// re-adopting agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Plan {
    pub kind: ExecKind,
    /// The attempt's cgroup (process: created by the agent; OCI: where runc puts it).
    #[serde(default)]
    pub cgroup: Option<CgroupPlan>,
    /// OCI: the runtime binary.
    #[serde(default)]
    pub runtime: Option<PathBuf>,
    /// OCI: the runtime's state directory (`--root`).
    #[serde(default)]
    pub runtime_root: Option<PathBuf>,
    /// OCI: the container id.
    #[serde(default)]
    pub container_id: Option<String>,
    /// OCI: an overlay mounted by the agent as the container's rootfs, unmounted by
    /// the shim when the container is gone.
    #[serde(default)]
    pub rootfs_mount: Option<PathBuf>,
}

/// Names of the files of an attempt directory.
pub(crate) mod files {
    pub const SPEC: &str = "spec.json";
    pub const PLAN: &str = "plan.json";
    pub const SHIM_PID: &str = "shim.pid";
    pub const PID: &str = "pid";
    pub const EXIT: &str = "exit.json";
    pub const LAUNCH_ERROR: &str = "launch_error";
    pub const STDOUT: &str = "stdout";
    pub const STDERR: &str = "stderr";
    pub const SHIM_LOG: &str = "shim.log";
    pub const RUNTIME_LOG: &str = "runtime.log";
    pub const INIT_PID: &str = "init.pid";
    pub const BUNDLE: &str = "bundle";
}

/// The executors of one node: the spool directory, the OCI runtime found on the node
/// and the cgroup support detected.
///
/// Cgroups: the attempt's cgroup is `tranche/<spool>-<job>.<attempt>` (see
/// [`Attempt::cgroup_name`]) below the root of each
/// hierarchy used. A process job's processes are tracked (found, signalled, counted) as
/// [`CgroupMode`] says: by default in the v1 `pids` hierarchy, else the v1 `freezer`
/// one, else the v2 hierarchy (the unified mount of a hybrid layout, or `/sys/fs/cgroup`
/// itself on a pure v2 node). Memory and CPU limits go into the v1 `memory` and `cpu`
/// hierarchies, or into the v2 one where it has those controllers. Runc is given the
/// same cgroup path (`/tranche/<spool>-<job>.<attempt>`) and chooses its hierarchies
/// itself; a container is tracked where the default would track it.
#[derive(Debug)]
pub struct Executors {
    spool: PathBuf,
    attempts: PathBuf,
    images: PathBuf,
    runtime: Option<PathBuf>,
    runtime_root: PathBuf,
    cgroups: Cgroups,
}

impl Executors {
    /// Executors spooling under `spool` (created with `attempts/`, `images/` and the
    /// runtime's state directory `runc/` if missing), tracking process jobs in the
    /// cgroup hierarchy [`CgroupMode::Auto`] chooses.
    pub fn new(spool: &Path) -> Result<Executors, ExecError> {
        Executors::with_cgroups(spool, CgroupMode::Auto)
    }

    /// Executors as [`Executors::new`], tracking process jobs in the cgroup hierarchy
    /// `mode` asks for; refused where that hierarchy cannot be used.
    pub fn with_cgroups(spool: &Path, mode: CgroupMode) -> Result<Executors, ExecError> {
        let spool = if spool.is_absolute() {
            spool.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| ExecError::io("reading the current directory", spool, e))?
                .join(spool)
        };
        let attempts = spool.join("attempts");
        let images = spool.join("images");
        let runtime_root = spool.join("runc");
        for d in [&attempts, &images, &runtime_root] {
            std::fs::create_dir_all(d)
                .map_err(|e| ExecError::io("creating spool directory", d, e))?;
        }
        let runtime = oci::find_runtime();
        let cgroups =
            Cgroups::detect(mode).map_err(|reason| ExecError::Cgroups { mode, reason })?;
        if cgroups.track().is_none() {
            tracing::warn!(
                "no writable cgroup hierarchy: process jobs are tracked by process group and \
                 shim descendants, and their cpu/memory limits are not enforced"
            );
        }
        Ok(Executors {
            spool,
            attempts,
            images,
            runtime,
            runtime_root,
            cgroups,
        })
    }

    /// The spool directory.
    pub fn spool(&self) -> &Path {
        &self.spool
    }

    /// The OCI runtime binary, if one was found.
    pub fn runtime(&self) -> Option<&Path> {
        self.runtime.as_deref()
    }

    /// A one-line description of the cgroup hierarchies in use, e.g.
    /// `track=v1 pids /sys/fs/cgroup/pids, memory=v1 ..., cpu=v1 ..., containers=v1 ...`.
    pub fn cgroup_summary(&self) -> String {
        self.cgroups.describe()
    }

    /// Starts an attempt: `image = "host"` with the process executor, anything else
    /// with the OCI executor. Returns once the job's process is running (or has
    /// already ended); on failure nothing of the attempt is left behind and the error
    /// names the image and command.
    pub fn start(&self, spec: &LaunchSpec) -> Result<Attempt, ExecError> {
        validate(spec)?;
        let name = attempt_name(spec.job, spec.attempt);
        let dir = self.attempts.join(&name);
        let exists = || ExecError::AttemptExists {
            job: spec.job,
            attempt: spec.attempt,
            dir: dir.clone(),
        };
        if dir.exists() {
            return Err(exists());
        }
        let kind = if spec.image == "host" {
            ExecKind::Process
        } else {
            ExecKind::Oci
        };
        // Everything that can fail on the image happens before the attempt exists.
        let prepared = match kind {
            ExecKind::Process => None,
            ExecKind::Oci => {
                let runtime = self.runtime.clone().ok_or_else(|| ExecError::NoRuntime {
                    image: spec.image.clone(),
                })?;
                let rootfs = image::prepare(&self.images, &spec.image)?;
                let devices = oci::gpu_devices(spec)?;
                Some((runtime, rootfs, devices))
            }
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(exists()),
            Err(e) => return Err(ExecError::io("creating attempt directory", &dir, e)),
        }
        let mut plan = Plan {
            kind,
            cgroup: None,
            runtime: None,
            runtime_root: None,
            container_id: None,
            rootfs_mount: None,
        };
        match self.launch(spec, &dir, &mut plan, prepared) {
            Ok(()) => Ok(Attempt {
                job: spec.job,
                attempt: spec.attempt,
                dir,
                spec: spec.clone(),
                plan,
            }),
            Err(e) => {
                // Whatever did start (a job slower to come up than the start timeout)
                // is killed; a shim that reported the failure finishes its cleanup.
                let partial = Attempt {
                    job: spec.job,
                    attempt: spec.attempt,
                    dir: dir.clone(),
                    spec: spec.clone(),
                    plan: plan.clone(),
                };
                let t0 = Instant::now();
                while (partial.alive() || shim_alive(&dir))
                    && t0.elapsed() < Duration::from_secs(10)
                {
                    if partial.alive() {
                        let _ = partial.kill_all();
                    }
                    sleep(Duration::from_millis(10));
                }
                cleanup_attempt(&dir, &plan);
                remove_attempt_dir(&self.attempts, &dir);
                Err(e)
            }
        }
    }

    fn launch(
        &self,
        spec: &LaunchSpec,
        dir: &Path,
        plan: &mut Plan,
        prepared: Option<(PathBuf, image::Prepared, Vec<oci::Device>)>,
    ) -> Result<(), ExecError> {
        fsutil::write_json(&dir.join(files::SPEC), spec)?;
        match prepared {
            None => {
                let cg_name = cgroup_name(&self.spool, spec.job, spec.attempt);
                if let Some(cg) = self.cgroups.plan_for(&cg_name, spec.cpus, spec.memory_mb) {
                    if (spec.memory_mb > 0 && cg.memory.is_none())
                        || (spec.cpus > 0 && cg.cpu.is_none())
                    {
                        tracing::warn!(
                            "job {} attempt {}: no writable memory or cpu cgroup, its limits \
                             are not all enforced ({})",
                            spec.job,
                            spec.attempt,
                            self.cgroups.describe()
                        );
                    }
                    cg.clear_leftover();
                    match cg.create(spec.cpus, spec.memory_mb) {
                        Ok(()) => plan.cgroup = Some(cg),
                        Err(e) => {
                            tracing::warn!(
                                "job {} attempt {}: cannot create its cgroup ({e}); tracking it \
                                 by process group and shim descendants instead",
                                spec.job,
                                spec.attempt
                            );
                            cg.remove();
                        }
                    }
                } else if spec.cpus > 0 || spec.memory_mb > 0 {
                    tracing::warn!(
                        "job {} attempt {}: no writable cgroup, cpu/memory limits not enforced",
                        spec.job,
                        spec.attempt
                    );
                }
            }
            Some((runtime, rootfs, devices)) => {
                let id = container_id(spec.job, spec.attempt);
                plan.runtime = Some(runtime);
                plan.runtime_root = Some(self.runtime_root.clone());
                plan.container_id = Some(id);
                let cg_name = cgroup_name(&self.spool, spec.job, spec.attempt);
                plan.cgroup = self.cgroups.runtime_plan_for(&cg_name);
                oci::clear_leftover(plan);
                let bundle = dir.join(files::BUNDLE);
                std::fs::create_dir(&bundle)
                    .map_err(|e| ExecError::io("creating bundle directory", &bundle, e))?;
                let root = if rootfs.shared {
                    match oci::mount_overlay(&rootfs.path, &bundle) {
                        Ok(merged) => {
                            plan.rootfs_mount = Some(merged.clone());
                            merged
                        }
                        Err(e) => {
                            tracing::warn!(
                                "job {} attempt {}: cannot mount an overlay over the cached \
                                 image rootfs ({e}); the container writes into the cache at {}",
                                spec.job,
                                spec.attempt,
                                rootfs.path.display()
                            );
                            rootfs.path.clone()
                        }
                    }
                } else {
                    rootfs.path.clone()
                };
                let config = oci::config(
                    spec,
                    &root,
                    &rootfs,
                    &devices,
                    &cgroup::runtime_path(&cg_name),
                );
                fsutil::write_json(&bundle.join("config.json"), &config)?;
            }
        }
        fsutil::write_json(&dir.join(files::PLAN), plan)?;
        self.spawn_shim(spec, dir)
    }

    fn spawn_shim(&self, spec: &LaunchSpec, dir: &Path) -> Result<(), ExecError> {
        let launch_err = |reason: String| ExecError::Launch {
            job: spec.job,
            attempt: spec.attempt,
            image: spec.image.clone(),
            command: spec.command_line(),
            reason,
        };
        let bin = match std::env::var_os(AGENT_BIN_ENV) {
            Some(b) if !b.is_empty() => PathBuf::from(b),
            _ => std::env::current_exe()
                .map_err(|e| launch_err(format!("cannot locate the tranche-agent binary: {e}")))?,
        };
        let log_path = dir.join(files::SHIM_LOG);
        let log = fsutil::open_append(&log_path)?;
        let log2 = log
            .try_clone()
            .map_err(|e| ExecError::io("duplicating", &log_path, e))?;
        let mut cmd = Command::new(&bin);
        cmd.arg("shim")
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid().map_err(io::Error::from)?;
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            launch_err(format!(
                "cannot run the shim `{} shim` (set {AGENT_BIN_ENV}?): {e}",
                bin.display()
            ))
        })?;
        // The shim forks at once and its first process exits: reap it.
        let st = child
            .wait()
            .map_err(|e| launch_err(format!("waiting for the shim: {e}")))?;
        if !st.success() {
            return Err(launch_err(format!(
                "the shim failed ({st}): {}",
                fsutil::tail(&log_path, 2000)
            )));
        }
        let deadline = Instant::now() + START_TIMEOUT;
        let mut nap = Duration::from_millis(1);
        loop {
            if let Some(msg) = fsutil::read_string(&dir.join(files::LAUNCH_ERROR)) {
                return Err(launch_err(msg.trim().to_string()));
            }
            if dir.join(files::PID).exists() || dir.join(files::EXIT).exists() {
                return Ok(());
            }
            if !shim_alive(dir) {
                // Re-check: the shim may have written its files just before exiting.
                if let Some(msg) = fsutil::read_string(&dir.join(files::LAUNCH_ERROR)) {
                    return Err(launch_err(msg.trim().to_string()));
                }
                if dir.join(files::PID).exists() || dir.join(files::EXIT).exists() {
                    return Ok(());
                }
                return Err(launch_err(format!(
                    "the shim exited without starting the job: {}",
                    fsutil::tail(&log_path, 2000)
                )));
            }
            if Instant::now() >= deadline {
                return Err(launch_err(format!(
                    "the job was not running after {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(20));
        }
    }

    /// Every attempt in the spool that has not been acknowledged: running ones, and
    /// ended ones whose exit the controller has not acknowledged yet, ordered by job
    /// and attempt. An attempt whose shim and processes are all gone without an
    /// `exit.json` (the node lost the shim) is given an exit with neither code nor
    /// signal. Meant for agent start-up, before new attempts are started.
    pub fn adopt(&self) -> Result<Vec<Attempt>, ExecError> {
        let rd = std::fs::read_dir(&self.attempts)
            .map_err(|e| ExecError::io("listing attempts", &self.attempts, e))?;
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| ExecError::io("listing attempts", &self.attempts, e))?;
            let fname = ent.file_name();
            let Some(fname) = fname.to_str() else {
                continue;
            };
            let path = ent.path();
            if fname.starts_with('.') {
                // An acknowledged attempt whose removal was interrupted.
                if fname.starts_with(".acked-") {
                    let _ = std::fs::remove_dir_all(&path);
                }
                continue;
            }
            let Some((job, attempt)) = parse_attempt_name(fname) else {
                continue;
            };
            let spec: LaunchSpec = match fsutil::read_json(&path.join(files::SPEC)) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("skipping attempt directory {}: {e}", path.display());
                    continue;
                }
            };
            let plan: Plan = match fsutil::read_json(&path.join(files::PLAN)) {
                Ok(p) => p,
                Err(_) => {
                    // The agent died before it started the shim: the job never ran.
                    let plan = Plan {
                        kind: if spec.image == "host" {
                            ExecKind::Process
                        } else {
                            ExecKind::Oci
                        },
                        cgroup: None,
                        runtime: None,
                        runtime_root: None,
                        container_id: None,
                        rootfs_mount: None,
                    };
                    fsutil::write_json(&path.join(files::PLAN), &plan)?;
                    plan
                }
            };
            let a = Attempt {
                job,
                attempt,
                dir: path,
                spec,
                plan,
            };
            a.exit(); // settles lost attempts
            out.push(a);
        }
        out.sort_by_key(|a| (a.job, a.attempt));
        Ok(out)
    }
}

/// The cgroup directories of an attempt ([`Attempt::cgroup_dirs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDirs {
    /// The directory whose `cgroup.procs` lists every process of the job.
    pub track: PathBuf,
    /// `track` is in a cgroup v2 hierarchy.
    pub v2: bool,
    /// Every directory the job joined, `track` first.
    pub all: Vec<PathBuf>,
    /// Where the agent wrote its memory limit, and whether that is a v2 directory
    /// (process jobs only: a container's limits are its runtime's).
    pub memory: Option<(PathBuf, bool)>,
    /// Where the agent wrote its CPU limit, and whether that is a v2 directory.
    pub cpu: Option<(PathBuf, bool)>,
}

/// One attempt of a job on this node, started by [`Executors::start`] or found again by
/// [`Executors::adopt`]. Dropping it changes nothing: the job keeps running under its
/// shim.
#[derive(Debug, Clone)]
pub struct Attempt {
    job: u64,
    attempt: u32,
    dir: PathBuf,
    spec: LaunchSpec,
    plan: Plan,
}

impl Attempt {
    /// The job's id.
    pub fn job(&self) -> u64 {
        self.job
    }

    /// The attempt number.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The attempt's cgroup name, below `tranche/` in each hierarchy used.
    pub fn cgroup_name(&self) -> String {
        let attempts = self.dir.parent().unwrap_or(Path::new("/"));
        let spool = attempts.parent().unwrap_or(attempts);
        cgroup_name(spool, self.job, self.attempt)
    }

    /// The attempt's cgroup directories, as decided when it started; `None` for an
    /// attempt tracked without a cgroup (by process group and shim descendants).
    pub fn cgroup_dirs(&self) -> Option<CgroupDirs> {
        let cg = self.plan.cgroup.as_ref()?;
        Some(CgroupDirs {
            track: cg.track.clone(),
            v2: cg.v2,
            all: cg.dirs(),
            memory: cg.memory.clone(),
            cpu: cg.cpu.clone(),
        })
    }

    /// The attempt directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Which executor runs it.
    pub fn kind(&self) -> ExecKind {
        self.plan.kind
    }

    /// The spec it was started with.
    pub fn spec(&self) -> &LaunchSpec {
        &self.spec
    }

    /// The job's stdout and stderr files.
    pub fn log_paths(&self) -> (PathBuf, PathBuf) {
        (self.dir.join(files::STDOUT), self.dir.join(files::STDERR))
    }

    /// Why the job could not be launched, if it could not.
    pub fn launch_error(&self) -> Option<String> {
        fsutil::read_string(&self.dir.join(files::LAUNCH_ERROR)).map(|s| s.trim().to_string())
    }

    /// How the attempt ended; `None` while some process of it may be left.
    /// Non-blocking. If the shim has vanished (killed, or the node rebooted) and no
    /// process of the job is left, the attempt is settled as lost (neither code nor
    /// signal). An attempt whose directory is gone was acknowledged by another handle
    /// of it: it has ended, and its status is no longer known here.
    pub fn exit(&self) -> Option<ExitStatus> {
        let path = self.dir.join(files::EXIT);
        if let Some(st) = read_exit(&path) {
            return Some(st);
        }
        if shim_alive(&self.dir) || !self.procs().is_empty() {
            return None;
        }
        // The shim may have written exit.json just before it went away.
        if let Some(st) = read_exit(&path) {
            return Some(st);
        }
        let st = ExitStatus {
            code: None,
            signal: None,
            at_ms: fsutil::now_ms(),
        };
        if !self.dir.exists() {
            // Acknowledged and cleared by another handle of the attempt: it ended, and
            // the controllers have its exit.
            return Some(st);
        }
        cleanup_attempt(&self.dir, &self.plan);
        match fsutil::write_json(&path, &st) {
            Ok(()) => Some(st),
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        }
    }

    /// True while some process of the job is left.
    pub fn alive(&self) -> bool {
        if self.dir.join(files::EXIT).exists() {
            return false;
        }
        !self.procs().is_empty()
    }

    /// Every process of the job (host pids).
    fn procs(&self) -> Vec<i32> {
        if let Some(cg) = &self.plan.cgroup {
            if cg.exists() {
                return cg.procs();
            }
        }
        match self.plan.kind {
            ExecKind::Process => {
                let pgid = read_pid_file(&self.dir).and_then(|(_, p)| p);
                let shim = read_shim_pid(&self.dir).filter(|&(p, st)| procfs::alive(p, Some(st)));
                procfs::job_processes(pgid, shim.map(|(p, _)| p))
            }
            ExecKind::Oci => {
                // Without a cgroup: the container's init (its pid namespace dies with it).
                match read_pid_file(&self.dir).and_then(|(_, p)| p) {
                    Some(p) if self.plan.cgroup.is_none() && procfs::alive(p, None) => vec![p],
                    _ => Vec::new(),
                }
            }
        }
    }

    /// Sends `sig` to every process of the job (the cgroup's processes; for the process
    /// executor without a cgroup, its process group and every descendant of its shim;
    /// for OCI `runc kill --all`, falling back to the container's cgroup). A job with no
    /// process left is not an error.
    pub fn signal(&self, sig: i32) -> Result<(), ExecError> {
        if !(1..=64).contains(&sig) {
            return Err(ExecError::BadSignal {
                name: sig.to_string(),
                reason: "out of range".into(),
            });
        }
        if self.dir.join(files::EXIT).exists() {
            return Ok(());
        }
        let target = || format!("job {} attempt {}", self.job, self.attempt);
        // The attempt's cgroup holds every process of the job, containers included:
        // signalling its members directly is what `runc kill --all` does, without
        // starting a runc process first (tens of milliseconds on a busy node).
        if let Some(cg) = &self.plan.cgroup {
            if cg.exists() {
                return cg.signal(sig).map_err(|e| ExecError::Signal {
                    signal: sig,
                    target: target(),
                    reason: e.to_string(),
                });
            }
        }
        if self.plan.kind == ExecKind::Oci && oci::kill(&self.plan, sig).is_ok() {
            return Ok(());
        }
        let mut first_err = None;
        if self.plan.kind == ExecKind::Process {
            if let Some(pgid) = read_pid_file(&self.dir).and_then(|(_, p)| p) {
                match procfs::kill(-pgid, sig) {
                    Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                    Err(e) => first_err = Some(e),
                }
            }
        }
        for p in self.procs() {
            match procfs::kill(p, sig) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            None => Ok(()),
            Some(e) => Err(ExecError::Signal {
                signal: sig,
                target: target(),
                reason: e.to_string(),
            }),
        }
    }

    /// Sends SIGKILL to every process of the job: with `cgroup.kill` where its cgroup
    /// is a v2 one, else to each process.
    pub fn kill_all(&self) -> Result<KillMethod, ExecError> {
        if let Some(cg) = &self.plan.cgroup {
            if cg.exists() && cg.kill_all_fast() {
                return Ok(KillMethod::CgroupKill);
            }
        }
        self.signal(nix::libc::SIGKILL)?;
        Ok(KillMethod::Signals)
    }

    /// Stops the attempt: sends `sig` to every process of the job, waits up to `grace`
    /// for none to be left, then sends SIGKILL to every process until none is left.
    /// Blocks until the shim has written the exit status too.
    pub fn stop(&self, sig: i32, grace: Duration) -> StopOutcome {
        let t0 = Instant::now();
        if let Some(status) = read_exit(&self.dir.join(files::EXIT)) {
            return StopOutcome::ExitedInGrace { status };
        }
        if let Err(e) = self.signal(sig) {
            tracing::warn!("{e}");
        }
        let deadline = t0 + grace;
        loop {
            if !self.alive() {
                return StopOutcome::ExitedInGrace {
                    status: self.wait_exit(),
                };
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            sleep((deadline - now).min(Duration::from_millis(10)));
        }
        let mut last_kill: Option<Instant> = None;
        let mut via = KillMethod::Signals;
        while self.alive() {
            if last_kill.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) {
                match self.kill_all() {
                    Ok(KillMethod::CgroupKill) => via = KillMethod::CgroupKill,
                    Ok(KillMethod::Signals) => {}
                    Err(e) => tracing::warn!("{e}"),
                }
                last_kill = Some(Instant::now());
            }
            sleep(Duration::from_millis(5));
        }
        StopOutcome::Killed {
            status: self.wait_exit(),
            via,
        }
    }

    /// Waits for the exit status once no process is left.
    fn wait_exit(&self) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.exit() {
                return st;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                // The shim is stuck (e.g. in the runtime's delete): settle it here.
                let st = ExitStatus {
                    code: None,
                    signal: None,
                    at_ms: fsutil::now_ms(),
                };
                tracing::warn!(
                    "job {} attempt {}: no exit status from the shim 30 s after the job's \
                     processes were gone; recording it as lost",
                    self.job,
                    self.attempt
                );
                let _ = fsutil::write_json(&self.dir.join(files::EXIT), &st);
                return st;
            }
            sleep(Duration::from_millis(5));
        }
    }

    /// The controller has the exit: removes the attempt directory, so that
    /// [`Executors::adopt`] no longer returns it. Fails while the attempt has not
    /// ended (its exit status is not there yet).
    pub fn acknowledge(&self) -> Result<(), ExecError> {
        if self.exit().is_none() {
            return Err(ExecError::StillRunning {
                job: self.job,
                attempt: self.attempt,
            });
        }
        cleanup_attempt(&self.dir, &self.plan);
        let parent = self.dir.parent().unwrap_or(Path::new("/"));
        // The output outlives the attempt dir: it moves to `<spool>/logs`.
        let spool = parent.parent().unwrap_or(parent);
        let (out, err) = self.log_paths();
        let (kept_out, kept_err) = kept_logs(spool, self.job, self.attempt);
        if let Some(logs) = kept_out.parent() {
            let _ = std::fs::create_dir_all(logs);
        }
        for (from, to) in [(out, kept_out), (err, kept_err)] {
            if from.exists() {
                if let Err(e) = std::fs::rename(&from, &to) {
                    tracing::warn!("cannot keep {}: {e}", from.display());
                }
            }
        }
        remove_attempt_dir(parent, &self.dir);
        Ok(())
    }
}

/// Where an acknowledged attempt's stdout and stderr are kept:
/// `<spool>/logs/<job>.<attempt>.stdout` and `.stderr`.
pub fn kept_logs(spool: &Path, job: u64, attempt: u32) -> (PathBuf, PathBuf) {
    let logs = spool.join("logs");
    (
        logs.join(format!("{job}.{attempt}.stdout")),
        logs.join(format!("{job}.{attempt}.stderr")),
    )
}

fn read_exit(path: &Path) -> Option<ExitStatus> {
    let text = fsutil::read_string(path)?;
    match serde_json::from_str(&text) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("{}: {e}", path.display());
            None
        }
    }
}

/// `pid`: (first line, the pid on the first or second line).
fn read_pid_file(dir: &Path) -> Option<(String, Option<i32>)> {
    let text = fsutil::read_string(&dir.join(files::PID))?;
    let mut lines = text.lines();
    let first = lines.next()?.trim().to_string();
    let pid = first
        .parse()
        .ok()
        .or_else(|| lines.next().and_then(|l| l.trim().parse().ok()));
    Some((first, pid))
}

fn read_shim_pid(dir: &Path) -> Option<(i32, u64)> {
    let text = fsutil::read_string(&dir.join(files::SHIM_PID))?;
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

fn shim_alive(dir: &Path) -> bool {
    match read_shim_pid(dir) {
        Some((pid, start)) => procfs::alive(pid, Some(start)),
        None => false,
    }
}

/// Undoes what may outlive the job's processes when its shim is gone: the container's
/// runtime state, the overlay mount and the cgroups.
fn cleanup_attempt(dir: &Path, plan: &Plan) {
    if shim_alive(dir) {
        return;
    }
    if plan.kind == ExecKind::Oci {
        oci::delete_stale(plan);
    }
    if let Some(m) = &plan.rootfs_mount {
        oci::unmount(m);
    }
    if let Some(cg) = &plan.cgroup {
        if cg.exists() && cg.procs().is_empty() {
            cg.remove();
        }
    }
}

/// Removes an attempt directory: renamed first, so that an interrupted removal is never
/// mistaken for an attempt.
fn remove_attempt_dir(attempts: &Path, dir: &Path) {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let trash = attempts.join(format!(".acked-{name}-{}", fsutil::now_nanos()));
    let target = match std::fs::rename(dir, &trash) {
        Ok(()) => trash,
        Err(_) => dir.to_path_buf(),
    };
    if let Err(e) = std::fs::remove_dir_all(&target) {
        tracing::warn!("removing {}: {e}", target.display());
    }
}

fn validate(spec: &LaunchSpec) -> Result<(), ExecError> {
    let bad = |field, reason: &str| ExecError::Spec {
        field,
        reason: reason.to_string(),
    };
    if spec.command.is_empty() || spec.command[0].is_empty() {
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

/// The attempt's cgroup name, below `tranche/` in each hierarchy:
/// `<spool>-<job>.<attempt>`, where `<spool>` is 8 hex digits of a hash of the agent's
/// spool path. Job ids are unique only within a cluster, so agents of different clusters
/// on one host (a development cluster beside a test run) must not share cgroups: one's
/// leftover cleanup would kill the other's job.
fn cgroup_name(spool: &Path, job: u64, attempt: u32) -> String {
    let scope = tranche_proto::fnv1a(spool.as_os_str().as_encoded_bytes()) as u32;
    format!("{scope:08x}-{}", attempt_name(job, attempt))
}

fn attempt_name(job: u64, attempt: u32) -> String {
    format!("{job}.{attempt}")
}

fn container_id(job: u64, attempt: u32) -> String {
    format!("tranche-{job}-{attempt}")
}

fn parse_attempt_name(name: &str) -> Option<(u64, u32)> {
    let (j, a) = name.split_once('.')?;
    if j.is_empty() || a.is_empty() || !j.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !a.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((j.parse().ok()?, a.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LaunchSpec {
        LaunchSpec {
            job: 7,
            attempt: 2,
            restart_count: 1,
            share: "vision".into(),
            image: "host".into(),
            command: vec!["true".into()],
            env: BTreeMap::from([("A".to_string(), "1".to_string())]),
            cwd: None,
            user: None,
            cpus: 0,
            memory_mb: 0,
            gpus: vec![],
            fake_devices: true,
        }
    }

    #[test]
    fn signal_names_and_numbers() {
        assert_eq!(signal_number("SIGTERM").unwrap(), 15);
        assert_eq!(signal_number("TERM").unwrap(), 15);
        assert_eq!(signal_number("sigusr1").unwrap(), nix::libc::SIGUSR1);
        assert_eq!(signal_number("15").unwrap(), 15);
        assert_eq!(signal_number("KILL").unwrap(), 9);
        assert_eq!(
            signal_number("SIGRTMIN+2").unwrap(),
            nix::libc::SIGRTMIN() + 2
        );
        for bad in ["", "0", "65", "SIGFOO", "RTMIN+99", "-1"] {
            let e = signal_number(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn env_binds_gpus_in_allocation_order() {
        let mut s = spec();
        s.gpus = vec![
            BoundGpu {
                index: 5,
                uuid: "GPU-b".into(),
            },
            BoundGpu {
                index: 2,
                uuid: "GPU-a".into(),
            },
        ];
        let e = job_env(&s);
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "5,2");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "GPU-b,GPU-a");
        assert_eq!(e["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        assert_eq!(e["TRANCHE_JOB_ID"], "7");
        assert_eq!(e["TRANCHE_ATTEMPT"], "2");
        assert_eq!(e["TRANCHE_RESTART_COUNT"], "1");
        assert_eq!(e["TRANCHE_SHARE"], "vision");
        assert_eq!(e["A"], "1");
        s.gpus.clear();
        s.env
            .insert("CUDA_VISIBLE_DEVICES".into(), "0,1,2,3".into());
        let e = job_env(&s);
        assert_eq!(e["CUDA_VISIBLE_DEVICES"], "");
        assert_eq!(e["NVIDIA_VISIBLE_DEVICES"], "void");
    }

    #[test]
    fn invalid_specs_name_the_field() {
        let mut s = spec();
        s.command.clear();
        assert!(validate(&s).unwrap_err().to_string().contains("`command`"));
        let mut s = spec();
        s.cwd = Some("rel".into());
        assert!(validate(&s).unwrap_err().to_string().contains("`cwd`"));
        let mut s = spec();
        s.env.insert("A=B".into(), "x".into());
        assert!(validate(&s).unwrap_err().to_string().contains("`env`"));
    }

    #[test]
    fn attempt_names() {
        assert_eq!(parse_attempt_name("12.3"), Some((12, 3)));
        assert_eq!(parse_attempt_name(".acked-12.3-5"), None);
        assert_eq!(parse_attempt_name("12"), None);
        assert_eq!(parse_attempt_name("a.3"), None);
    }
}
