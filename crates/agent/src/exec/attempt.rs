//! One attempt on this node once started: watching it (its processes, its exit),
//! signalling and stopping it within its grace period, and reaping it (undoing what
//! outlives its processes, acknowledging its exit).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use tranche_model::JobId;

use super::output::OutputFile;
use super::spec::AttemptNo;
use super::spool::{
    cgroup_name, files, kept_logs, kept_outputs_record, read_exit, read_outputs, read_pid_file,
    read_shim_pid, remove_attempt_dir, shim_alive, ExecKind, ExitStatus, LaunchRecord,
};
use super::{fsutil, oci, procfs, sagemaker, ExecError, LaunchSpec};

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

/// One attempt of a job on this node, started by
/// [`Executors::start`](super::Executors::start) or found again by
/// [`Executors::adopt`](super::Executors::adopt). Dropping it changes nothing: the job
/// keeps running under its shim.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub(super) job: JobId,
    pub(super) attempt: AttemptNo,
    pub(super) dir: PathBuf,
    pub(super) spec: LaunchSpec,
    pub(super) plan: LaunchRecord,
    /// How it ended, once seen: an end is final, so it is read from the spool once.
    pub(super) exited: OnceLock<ExitStatus>,
}

impl Attempt {
    pub(super) fn new(
        job: JobId,
        attempt: AttemptNo,
        dir: PathBuf,
        spec: LaunchSpec,
        plan: LaunchRecord,
    ) -> Attempt {
        Attempt {
            job,
            attempt,
            dir,
            spec,
            plan,
            exited: OnceLock::new(),
        }
    }

    /// The job's id.
    pub fn job(&self) -> JobId {
        self.job
    }

    /// The attempt number.
    pub fn attempt(&self) -> AttemptNo {
        self.attempt
    }

    /// The attempt's cgroup name, below `tranche/` in each hierarchy used.
    pub fn cgroup_name(&self) -> String {
        cgroup_name(&self.plan.spool_of(&self.dir), self.job, self.attempt)
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
    /// When the job last touched its checkpoint file (`TRANCHE_CHECKPOINT_FILE`), as
    /// the file's modification time; `None` while it has not. The file is not followed
    /// if the job made it a link.
    pub fn checkpoint_touched(&self) -> Option<std::time::SystemTime> {
        std::fs::symlink_metadata(self.plan.checkpoint_file_of(&self.dir))
            .and_then(|m| m.modified())
            .ok()
    }

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

    /// The job's stdout and stderr files: its `--output`/`--error` files where it has
    /// them, else the attempt directory's.
    pub fn log_paths(&self) -> (PathBuf, PathBuf) {
        let at = |file: &Option<String>, spooled| {
            file.as_ref()
                .map_or_else(|| self.dir.join(spooled), PathBuf::from)
        };
        (
            at(&self.spec.stdout_file, files::STDOUT),
            at(&self.spec.stderr_file, files::STDERR),
        )
    }

    /// Where the log port reads the job's stdout (or stderr) while the attempt is not
    /// acknowledged: the file the shim gave the job for it (see [`OutputFile::open`]
    /// for how one outside the spool is read), or `None` for an `--output`/`--error`
    /// file not created (yet, or ever: the attempt failed to start).
    pub fn output(&self, stderr: bool) -> Option<OutputFile> {
        let named = if stderr {
            &self.spec.stderr_file
        } else {
            &self.spec.stdout_file
        };
        if named.is_none() {
            let (out, err) = (self.dir.join(files::STDOUT), self.dir.join(files::STDERR));
            return Some(OutputFile::spool(if stderr { err } else { out }));
        }
        read_outputs(&self.dir.join(files::OUTPUTS))
            .and_then(|r| r.stream(stderr))
            .map(OutputFile::outside)
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
        if let Some(st) = self.exited.get() {
            return Some(*st);
        }
        let st = self.look_for_exit()?;
        Some(*self.exited.get_or_init(|| st))
    }

    /// A pidfd of the attempt's shim, readable once the shim has gone: the shim records
    /// the job's end before it exits, so the end can be waited for rather than looked
    /// for. `None` where the shim is gone already (or the kernel has no pidfds).
    pub fn shim_pidfd(&self) -> Option<std::os::fd::OwnedFd> {
        let (pid, start) = read_shim_pid(&self.dir)?;
        let fd = procfs::pidfd_open(pid)?;
        // The pid is the shim's while its start time is; checked once the descriptor
        // holds the process, so that a pid reused meanwhile is not watched instead.
        procfs::alive(pid, Some(start)).then_some(fd)
    }

    /// How the attempt ended, where that is known already (read before): no file is
    /// read.
    pub fn known_exit(&self) -> Option<ExitStatus> {
        self.exited.get().copied()
    }

    fn look_for_exit(&self) -> Option<ExitStatus> {
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

    /// Marks the attempt as stopped by a fence, so that its end is reported as fenced
    /// (requeued, not failed), also by an agent restarted before it was reported.
    pub fn mark_fenced(&self) -> std::io::Result<()> {
        std::fs::write(self.dir.join(files::FENCED), "")
    }

    /// True once a fence has stopped the attempt ([`Attempt::mark_fenced`]).
    pub fn fenced(&self) -> bool {
        self.dir.join(files::FENCED).exists()
    }

    /// How long the job has run, on the node's boot clock (which setting the wall
    /// clock does not move): since its first process started, or where that one is
    /// gone, since its shim did. `None` once neither is left.
    pub fn running_for(&self) -> Option<Duration> {
        let job = read_pid_file(&self.dir)
            .and_then(|(_, p)| p)
            .and_then(|p| procfs::age(p, None));
        job.or_else(|| read_shim_pid(&self.dir).and_then(|(p, st)| procfs::age(p, Some(st))))
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
    /// [`Executors::adopt`](super::Executors::adopt) no longer returns it. Fails while
    /// the attempt has not ended (its exit status is not there yet).
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
        let spool = &self.plan.spool_of(&self.dir);
        // So does the record of its files elsewhere, which the log port reads them by.
        let (out, err) = (self.dir.join(files::STDOUT), self.dir.join(files::STDERR));
        let (kept_out, kept_err) = kept_logs(spool, self.job, self.attempt);
        if let Some(logs) = kept_out.parent() {
            if let Err(e) = fsutil::private_dir(logs) {
                tracing::warn!("{e}");
            }
        }
        let outputs = (
            self.dir.join(files::OUTPUTS),
            kept_outputs_record(spool, self.job, self.attempt),
        );
        for (from, to) in [(out, kept_out), (err, kept_err), outputs] {
            if from.exists() {
                if let Err(e) = fsutil::move_path(&from, &to) {
                    tracing::warn!("cannot keep {}: {e}", from.display());
                }
            }
        }
        self.keep_sagemaker_output(spool);
        remove_work_dir(&self.plan);
        remove_attempt_dir(parent, &self.dir);
        Ok(())
    }

    /// Moves the SageMaker tree's `model/` and `output/` to the spool (see
    /// [`sagemaker::keep`]); once moved, a later call finds nothing to move.
    fn keep_sagemaker_output(&self, spool: &Path) {
        let owner = self
            .spec
            .user
            .map_or_else(|| nix::unistd::geteuid().as_raw(), |(uid, _)| uid);
        let base = match &self.plan.work {
            Some(w) => w.parent().unwrap_or(Path::new("/")),
            None => &self.dir,
        };
        let opt_ml = self.plan.opt_ml_of(&self.dir);
        sagemaker::keep(base, &opt_ml, owner, spool, self.job, self.attempt);
    }

    /// For a SageMaker job that exited 0 with an output directory, on the first node
    /// of its gang: keeps its `model/` in the spool, then writes `model.tar.gz` of it
    /// into the output directory (see [`sagemaker::deliver_model`]), before its exit
    /// is reported. `Ok(None)`: nothing to deliver.
    pub fn deliver_model(&self) -> Result<Option<PathBuf>, String> {
        let Some(out) = sagemaker::model_destination(&self.spec) else {
            return Ok(None);
        };
        if self.exit().and_then(|st| st.code) != Some(0) {
            return Ok(None);
        }
        let spool = self.plan.spool_of(&self.dir);
        self.keep_sagemaker_output(&spool);
        let kept = sagemaker::kept_sagemaker_output(&spool, self.job, self.attempt);
        sagemaker::deliver_model(&kept.join("model"), &out).map(Some)
    }
}

/// Removes a process job's own directory outside the spool (see
/// [`LaunchRecord::work`]), whatever its user left in it.
pub(super) fn remove_work_dir(plan: &LaunchRecord) {
    if let Some(w) = &plan.work {
        match std::fs::remove_dir_all(w) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("removing {}: {e}", w.display()),
        }
    }
}

/// Undoes what may outlive the job's processes: a process job's cgroup, once empty,
/// even while the shim is still on its way out (the shim leaves it, see
/// `shim::record`); a container's runtime state, overlay mount and cgroup once its
/// shim, which undoes them while it lives, is gone.
pub(super) fn cleanup_attempt(dir: &Path, plan: &LaunchRecord) {
    let remove_cgroup = || {
        if let Some(cg) = &plan.cgroup {
            cg.remove_if_empty();
        }
    };
    match plan.kind {
        ExecKind::Process => remove_cgroup(),
        ExecKind::Oci => {
            if shim_alive(dir) {
                return;
            }
            oci::delete_stale(plan);
            if let Some(m) = &plan.rootfs_mount {
                oci::unmount(m);
            }
            remove_cgroup();
        }
    }
}
