//! Job executors: how the agent runs an attempt of a job, signals it, stops it and
//! learns how it ended.
//!
//! # A shim per attempt
//!
//! Every attempt has a directory `<spool>/attempts/<job>.<attempt>/` (0700; the spool and
//! each of its directories are 0700 root, and every record is 0600: they hold the jobs'
//! environments and output) holding
//!
//! | file | written by | content |
//! |---|---|---|
//! | `spec.json` | agent | the [`LaunchSpec`] |
//! | `plan.json` | agent | what the executor decided: kind, cgroup paths, runtime, container id, overlay mount |
//! | `shim.pid` | shim | the shim's pid and start time (to tell whether it is still there) |
//! | `stdout`, `stderr` | job | the job's output (a stream with an `--output`/`--error` file goes there instead) |
//! | `outputs.json` | shim | the files outside the spool given to the job for its output, as opened (see [`output`]) |
//! | `pid` | shim | the job's main pid (process executor), or the container id and then the container init's host pid on a second line (OCI) |
//! | `exit.json` | shim | `{"code", "signal", "at_ms"}`, written atomically once no process of the job is left |
//! | `launch_error` | shim | why the job could not be started (the agent's [`Executors::start`] returns it) |
//! | `shim.log`, `runtime.log` | shim, runc | diagnostics |
//! | `opt-ml/` | agent, job | a SageMaker container's `/opt/ml` (see [`sagemaker_env`]; a process job's is in its own directory outside the spool); its `model/` and `output/` are kept in `<spool>/sagemaker/` |
//! | `bundle/` | agent | OCI only: `config.json`, and the rootfs or the overlay mounted over a cached one |
//!
//! `<spool>/attempts` carries ext4's `T` attribute (set by the agent where the file
//! system has it), so that the attempts' directories spread over the block groups
//! (see `fsutil::spread_subdirectories`).
//!
//! Each attempt has a shim, which the agent has forked by its shim launcher (one small
//! single-threaded process, `tranche-agent shim-launcher`, started from the agent's
//! binary; see `shim_launcher`). The shim (`tranche-shim <attemptdir>` in `ps`) runs in a
//! session of its own with stdin on `/dev/null`, makes itself a child subreaper (every
//! orphaned descendant of the job is re-parented to it), launches the job, reaps it and
//! its descendants, writes `exit.json` and exits. It is no child of the agent. Killing
//! the agent (even with SIGKILL) therefore never kills a job, and a restarted agent re-adopts the attempts by scanning the spool
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
//!
//! # From a work item to a running job
//!
//! Five steps, each with its own word:
//!
//! 1. **work item → launch spec**: `crate::work_item::launch_spec` turns the
//!    controllers' work item into this node's [`LaunchSpec`] (the job's account, its
//!    directory, environment and output files);
//! 2. **start**: [`Executors::start`] (`executors`) writes the attempt directory, its
//!    spec and plan (the cgroup, or the container bundle from `image` and `oci`), and
//!    asks for a shim;
//! 3. **shim launcher**: `shim_launcher`, one small process per agent, forks the shim;
//! 4. **spawn**: the shim (`shim`) starts the job, a process job by `spawn` (a clone
//!    that execs at once), a container through the OCI runtime, then reaps it and
//!    records its exit;
//! 5. **attempt and adoption**: the agent holds each started attempt as an [`Attempt`]
//!    (`attempt`: watch, stop, exit, acknowledge); after a restart,
//!    [`Executors::adopt`] makes them again from the spool.
//!
//! # Modules
//!
//! `spec` is what an attempt runs ([`LaunchSpec`]), `spool` the attempt directories
//! and their records, `executors` starts and adopts attempts ([`Executors`]),
//! `attempt` watches, stops and reaps one ([`Attempt`]), `shim_launcher` forks its
//! shim, `shim` supervises it on the node and `spawn` starts a process job; `output`
//! expands `--output`/`--error` patterns and creates and reads those files; `sagemaker`
//! gives a SageMaker training job its container contract (`/opt/ml`, the `SM_*`
//! variables); `signal` parses signal names and `error` holds [`ExecError`]. `oci`,
//! `image` and `cgroup` are the container runtime, the image cache and the cgroup
//! hierarchies.

mod as_user;
mod attempt;
mod cgroup;
mod error;
mod executors;
mod fsutil;
mod image;
mod layer;
pub mod lease;
pub mod ledger;
mod oci;
pub mod output;
pub mod policy;
mod procfs;
mod sagemaker;
mod shim;
mod shim_launcher;
mod signal;
mod spawn;
mod spec;
mod spool;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use as_user::ImageUser;
pub use attempt::{Attempt, CgroupDirs, KillMethod, StopOutcome};
pub use cgroup::{CgroupError, CgroupMode};
pub use error::ExecError;
pub use executors::Executors;
pub use image::{
    defaults as image_defaults, prepare as prepare_image, ImageError, ImagePolicy,
    Prepared as PreparedImage,
};
pub use layer::LayerError;
pub use output::OutputFile;
pub use policy::JobPolicy;
pub use sagemaker::{kept_sagemaker_output, sagemaker_env};
pub use shim_launcher::launcher_main;
pub use signal::signal_number;
pub use spec::{job_env, ArrayTask, AttemptNo, BoundGpu, LaunchSpec, Rendezvous};
pub use spool::{kept_logs, kept_output, sweep_kept_logs, ExecKind, ExitStatus};

/// Environment variable naming the `tranche-agent` binary whose hidden `shim-launcher`
/// subcommand forks the shims; unset, the running executable is used.
pub const AGENT_BIN_ENV: &str = "TRANCHE_AGENT_BIN";

/// Environment variable naming the OCI runtime binary; unset, `runc` is looked for in
/// `PATH` and the usual sbin/bin directories, then `crun`.
pub const OCI_RUNTIME_ENV: &str = "TRANCHE_OCI_RUNTIME";

/// `PATH` given to a job whose environment does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
