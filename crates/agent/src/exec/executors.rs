//! The executors of one node: the spool and runtime set-up, starting an attempt (its
//! plan, cgroup or container bundle, and shim), and adopting the attempts an earlier
//! agent process left running.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::attempt::{cleanup_attempt, remove_work_dir, Attempt};
use super::cgroup::{self, Cgroups};
use super::policy::JobPolicy;
use super::shim_launcher::{Launched, Launcher};
use super::spec::validate;
use super::spool::{
    attempt_name, cgroup_name, container_id, files, parse_attempt_name, remove_attempt_dir,
    shim_alive, ExecKind, LaunchRecord,
};
use super::{
    fsutil, image, oci, procfs, sagemaker, CgroupMode, ExecError, LaunchSpec, AGENT_BIN_ENV,
};
use nix::libc;

/// How long [`Executors::start`] waits for the shim to report the job running.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a shim the launcher did not answer for may take to record `shim.pid`
/// before the attempt is taken as not started.
const UNANSWERED_GRACE: Duration = Duration::from_secs(5);

/// The longest the start loop waits on its [`StartWatch`] between looks at the
/// attempt's files, in case a record arrived in a way the watch does not see.
const WATCH_LOOK: Duration = Duration::from_millis(50);

/// Wakes the start loop when a record is renamed into the attempt's directory (each is
/// written by a rename: [`fsutil::write_atomic`]) or when the shim ends, so that the
/// loop looks at the files once per such event instead of every few milliseconds (an
/// open, two stats and a read of `/proc` each time, thousands of times a second on a
/// node starting many short jobs). Where the kernel gives no inotify instance (its
/// per-user limit, `fs.inotify.max_user_instances`, is shared by every agent and tool
/// of the user), or the launcher gave no shim pid, the loop polls as it did.
struct StartWatch {
    inotify: OwnedFd,
    /// The shim's pidfd, until it has fired (a pidfd stays readable).
    shim: Option<OwnedFd>,
}

impl StartWatch {
    fn new(dir: &Path, pid: i32) -> Option<StartWatch> {
        let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: inotify_init1 takes flags and returns a new descriptor, or -1.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a descriptor the kernel just returned, owned by nothing else.
        let inotify = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let wd = unsafe {
            libc::inotify_add_watch(inotify.as_raw_fd(), path.as_ptr(), libc::IN_MOVED_TO)
        };
        (wd >= 0).then(|| StartWatch {
            inotify,
            shim: procfs::pidfd_open(pid),
        })
    }

    /// Waits up to `timeout` for a rename into the directory or the shim's end.
    fn wait(&mut self, timeout: Duration) {
        let pollfd = |fd: i32| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [
            pollfd(self.inotify.as_raw_fd()),
            pollfd(self.shim.as_ref().map_or(-1, |f| f.as_raw_fd())),
        ];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: two pollfd entries of this array; poll skips a negative descriptor.
        if unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) } <= 0 {
            return;
        }
        if fds[0].revents != 0 {
            let mut buf = [0u8; 4096];
            // SAFETY: reads into this buffer, at most its length; the descriptor does not
            // block. Events left unread wake the next wait at once.
            unsafe { libc::read(fds[0].fd, buf.as_mut_ptr().cast(), buf.len()) };
        }
        if fds[1].revents != 0 {
            self.shim = None;
        }
    }
}

/// The binary shims run from: `$TRANCHE_AGENT_BIN`, else the running executable.
fn shim_binary() -> Result<PathBuf, LauncherError> {
    match std::env::var_os(AGENT_BIN_ENV) {
        Some(b) if !b.is_empty() => Ok(PathBuf::from(b)),
        _ => std::env::current_exe().map_err(|source| LauncherError::NoBinary { source }),
    }
}

/// Why the shim launcher was not asked for an attempt's shim (the `reason` of
/// [`ExecError::Launch`]).
#[derive(Debug, thiserror::Error)]
enum LauncherError {
    /// The agent's own binary, which the launcher runs, cannot be found.
    #[error("cannot locate the tranche-agent binary: {source}")]
    NoBinary {
        /// The underlying error.
        source: io::Error,
    },
    /// The launcher could not be started.
    #[error(
        "cannot run the shim launcher `{} shim-launcher` (set {AGENT_BIN_ENV}?): {source}",
        bin.display()
    )]
    Start {
        /// The binary it was started from.
        bin: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Neither the launcher there was nor a fresh one took the request.
    #[error("the shim launcher did not take the request: {last}")]
    NotTaken {
        /// The last launcher's error.
        last: io::Error,
    },
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
/// Where a spool records the directory its attempts are kept in.
const ATTEMPTS_DIR_RECORD: &str = "attempts-dir";

/// The directories other than `attempts` that this spool's attempts were kept in
/// before (the default `<spool>/attempts` and the one last recorded), where they still
/// exist; records `attempts` as the current one.
fn moved_attempts(spool: &Path, attempts: &Path) -> Result<Vec<PathBuf>, ExecError> {
    let record = spool.join(ATTEMPTS_DIR_RECORD);
    let mut earlier = vec![spool.join("attempts")];
    if let Some(text) = fsutil::read_string(&record) {
        earlier.push(PathBuf::from(text.trim_end_matches('\n')));
    }
    earlier.retain(|d| d != attempts && d.is_dir());
    earlier.dedup();
    let current = format!("{}\n", attempts.display());
    if fsutil::read_string(&record).as_deref() != Some(current.as_str()) {
        fsutil::write_atomic(&record, current.as_bytes())?;
    }
    Ok(earlier)
}

#[derive(Debug)]
pub struct Executors {
    spool: PathBuf,
    attempts: PathBuf,
    /// Directories this spool's attempts were kept in before `attempts`, still there.
    earlier: Vec<PathBuf>,
    images: PathBuf,
    image_policy: image::ImagePolicy,
    runtime: Option<PathBuf>,
    runtime_root: PathBuf,
    cgroups: Cgroups,
    /// The shim launcher, started on the first attempt (see `shim_launcher`).
    launcher: Mutex<Option<Launcher>>,
    policy: JobPolicy,
}

/// Warns where the file system of `dir` lets a setuid file or a device node take
/// effect (not mounted `nosuid,nodev`): the spool holds files of the jobs' images.
fn check_mount_flags(dir: &Path) {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(st) => {
            use nix::sys::statvfs::FsFlags;
            let flags = st.flags();
            let missing: Vec<&str> = [(FsFlags::ST_NOSUID, "nosuid"), (FsFlags::ST_NODEV, "nodev")]
                .into_iter()
                .filter(|(f, _)| !flags.contains(*f))
                .map(|(_, n)| n)
                .collect();
            if !missing.is_empty() {
                tracing::warn!(
                    "the spool {} is on a file system mounted without {}: a setuid file or a \
                     device node there would take effect. Bind-mount it onto itself with \
                     those options, e.g. in /etc/fstab: `{} {} none bind,nosuid,nodev 0 0`",
                    dir.display(),
                    missing.join(","),
                    dir.display(),
                    dir.display()
                );
            }
        }
        Err(e) => tracing::warn!("cannot read the mount flags of {}: {e}", dir.display()),
    }
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
        Executors::open(spool, None, mode)
    }

    /// Executors as [`Executors::with_cgroups`], keeping the attempts' directories in
    /// `attempts` (created if missing) rather than `<spool>/attempts`: the agent's
    /// `attempts_dir`, e.g. on a tmpfs. The output kept after an attempt, the GPU ledger
    /// and the images stay in the spool.
    pub fn open(
        spool: &Path,
        attempts: Option<&Path>,
        mode: CgroupMode,
    ) -> Result<Executors, ExecError> {
        let absolute = |p: &Path| -> Result<PathBuf, ExecError> {
            if p.is_absolute() {
                Ok(p.to_path_buf())
            } else {
                Ok(std::env::current_dir()
                    .map_err(|e| ExecError::io("reading the current directory", p, e))?
                    .join(p))
            }
        };
        let spool = absolute(spool)?;
        let attempts = match attempts {
            Some(a) => absolute(a)?,
            None => spool.join("attempts"),
        };
        let images = spool.join("images");
        let runtime_root = spool.join("runc");
        // Every job's environment and output is in there: only root enters.
        for d in [
            &spool,
            &attempts,
            &images,
            &runtime_root,
            &spool.join("logs"),
            &spool.join("sagemaker"),
        ] {
            fsutil::private_dir(d)?;
        }
        check_mount_flags(&spool);
        fsutil::spread_subdirectories(&attempts);
        let earlier = moved_attempts(&spool, &attempts)?;
        let runtime = oci::find_runtime();
        let cgroups =
            Cgroups::detect(mode).map_err(|reason| ExecError::Cgroups { mode, reason })?;
        if cgroups.track().is_none() {
            tracing::warn!(
                "no writable cgroup hierarchy: process jobs are tracked by process group and \
                 shim descendants, and their cpu/memory limits are not enforced"
            );
        } else if !cgroups.confines_devices() {
            tracing::warn!(
                "no writable cgroup v1 devices hierarchy: process jobs can open every GPU of \
                 the node (containers are confined by their runtime); run GPU jobs in \
                 containers on this node"
            );
        }
        Ok(Executors {
            spool,
            attempts,
            earlier,
            images,
            image_policy: image::ImagePolicy::default(),
            runtime,
            runtime_root,
            cgroups,
            launcher: Mutex::new(None),
            policy: JobPolicy::default(),
        })
    }

    /// These executors with the node's rules for jobs (the agent config's).
    pub fn with_policy(mut self, policy: JobPolicy) -> Executors {
        self.policy = policy;
        self
    }

    /// The directory process jobs' own directories are made in (see
    /// [`JobPolicy::work_dir`]).
    pub fn work_dir(&self) -> PathBuf {
        self.policy.work_dir.clone().unwrap_or_else(|| {
            let mut name = self.spool.file_name().unwrap_or_default().to_os_string();
            name.push(".work");
            self.spool.with_file_name(name)
        })
    }

    /// Makes the process job's own directory `work` (see [`LaunchRecord::work`]) in
    /// [`Executors::work_dir`], which is root's and 0711: its users enter their own
    /// directory there, and list nothing.
    fn make_work_dir(&self, work: &Path) -> Result<(), ExecError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let root = self.work_dir();
        fsutil::private_dir(&root)?;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| ExecError::io("creating directory", &root, e))?;
        // A directory of this name is left by an attempt of the same name cleared
        // before its record was written; it is removed (a link the job made there is
        // removed, not followed).
        match std::fs::remove_dir_all(work) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(ExecError::io("removing a leftover directory", work, e)),
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(work)
            .map_err(|e| ExecError::io("creating directory", work, e))
    }

    /// These executors, with `policy`'s image roots and limits.
    pub fn with_image_policy(mut self, policy: image::ImagePolicy) -> Executors {
        self.image_policy = policy;
        self
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

    /// Whether the spool and the attempts' directory take a new file now: where one does
    /// not because of the node's storage, that error (see [`ExecError::node_fault`]).
    fn storage_fault(&self) -> Option<ExecError> {
        for dir in [&self.spool, &self.attempts] {
            let probe = dir.join(".write-probe");
            let r = std::fs::write(&probe, b"x");
            let _ = std::fs::remove_file(&probe);
            if let Err(e) = r {
                let e = ExecError::io("writing", &probe, e);
                if e.node_fault().is_some() {
                    return Some(e);
                }
            }
        }
        None
    }

    /// `e`, or where it is not the node's storage's own error but the storage takes no
    /// new file now, that error: a start that failed where nothing could say why (the
    /// image's unpacking, the shim's own writes, which it may not live to report) is the
    /// node's fault then.
    fn or_storage_fault(&self, e: ExecError) -> ExecError {
        match e.node_fault() {
            Some(_) => e,
            None => self.storage_fault().unwrap_or(e),
        }
    }

    /// Starts an attempt: `image = "host"` with the process executor, anything else
    /// with the OCI executor. Returns once the job's process is running (or has
    /// already ended); on failure nothing of the attempt is left behind and the error
    /// names the image and command, or the node's storage where that failed (see
    /// [`ExecError::node_fault`]).
    ///
    /// A SageMaker job (see [`sagemaker_env`](super::sagemaker_env)) gets its `opt-ml/`
    /// tree; given no command, it runs its image's entrypoint with `train`, and is not
    /// started where the image has none.
    pub fn start(&self, spec: &LaunchSpec) -> Result<Attempt, ExecError> {
        validate(spec)?;
        sagemaker::check(spec)?;
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
                let who = spec.user.map(|(uid, gid)| super::ImageUser {
                    uid,
                    gid,
                    groups: spec.groups.clone(),
                });
                let rootfs =
                    image::prepare(&self.images, &self.image_policy, &spec.image, who.as_ref())
                        .map_err(|e| self.or_storage_fault(e))?;
                let devices = oci::gpu_devices(spec, &self.policy.device_dir)?;
                Some((runtime, rootfs, devices))
            }
        };
        let resolved;
        let spec = if spec.command.is_empty() {
            let entrypoint = prepared.as_ref().and_then(|p| p.1.entrypoint.as_deref());
            resolved = LaunchSpec {
                command: sagemaker::command(spec, entrypoint)?,
                ..spec.clone()
            };
            &resolved
        } else {
            spec
        };
        let made = {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&dir)
        };
        match made {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(exists()),
            Err(e) => return Err(ExecError::io("creating attempt directory", &dir, e)),
        }
        let mut plan = LaunchRecord {
            kind,
            cgroup: None,
            runtime: None,
            runtime_root: None,
            container_id: None,
            rootfs_mount: None,
            spool: Some(self.spool.clone()),
            no_new_privs: kind == ExecKind::Process && self.policy.no_new_privs(&spec.share),
            work: (kind == ExecKind::Process).then(|| self.work_dir().join(&name)),
        };
        match self.launch(spec, &dir, &mut plan, prepared) {
            Ok(()) => Ok(Attempt::new(
                spec.job,
                spec.attempt,
                dir,
                spec.clone(),
                plan,
            )),
            Err(e) => {
                // The node's storage is looked at before the cleanup below gives back
                // the space this attempt took: a shim that could not write on a full
                // spool is then seen for what it is.
                let e = self.or_storage_fault(e);
                // Whatever did start (a job slower to come up than the start timeout)
                // is killed; a shim that reported the failure finishes its cleanup.
                let partial = Attempt::new(
                    spec.job,
                    spec.attempt,
                    dir.clone(),
                    spec.clone(),
                    plan.clone(),
                );
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
                remove_work_dir(&plan);
                remove_attempt_dir(&self.attempts, &dir);
                Err(e)
            }
        }
    }

    fn launch(
        &self,
        spec: &LaunchSpec,
        dir: &Path,
        plan: &mut LaunchRecord,
        prepared: Option<(PathBuf, image::Prepared, Vec<oci::Device>)>,
    ) -> Result<(), ExecError> {
        fsutil::write_json(&dir.join(files::SPEC), spec)?;
        if let Some(work) = &plan.work {
            self.make_work_dir(work)?;
        }
        sagemaker::write_tree(spec, &plan.opt_ml_of(dir), prepared.is_none())?;
        if let (Some(work), Some((uid, gid))) = (&plan.work, spec.user) {
            std::os::unix::fs::lchown(work, Some(uid), Some(gid))
                .map_err(|e| ExecError::io("giving the job's user", work, e))?;
        }
        let limits = self.policy.limits(spec);
        match prepared {
            None => {
                let cg_name = cgroup_name(&self.spool, spec.job, spec.attempt);
                if let Some(cg) = self.cgroups.plan_for(&cg_name, limits) {
                    if (limits.memory_mb > 0 && cg.memory.is_none())
                        || (limits.cpus > 0 && cg.cpu.is_none())
                    {
                        tracing::warn!(
                            "job {} attempt {}: no writable memory or cpu cgroup, its limits \
                             are not all enforced ({})",
                            spec.job,
                            spec.attempt,
                            self.cgroups.describe()
                        );
                    }
                    let devices = self.policy.allowed_devices(spec);
                    match cg.create(limits, &devices) {
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
                } else if limits.cpus > 0 || limits.memory_mb > 0 {
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
                        // Never the cache itself: what one container changed there
                        // every later container of the image would run.
                        Err(e) => {
                            return Err(ExecError::Launch {
                                job: spec.job,
                                attempt: spec.attempt,
                                image: spec.image.clone(),
                                command: spec.command_line(),
                                reason: format!(
                                    "cannot mount an overlay over the cached image rootfs {} \
                                     ({e}); the container is not run on the shared cache \
                                     itself. The node needs overlayfs (modprobe overlay) on \
                                     the spool's file system",
                                    rootfs.path.display()
                                ),
                            })
                        }
                    }
                } else {
                    rootfs.path.clone()
                };
                oci::make_checkpoint_dir(spec, dir)?;
                let config = oci::config(
                    spec,
                    dir,
                    &root,
                    &rootfs,
                    &devices,
                    &cgroup::runtime_path(&cg_name),
                    limits,
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
        let log_path = dir.join(files::SHIM_LOG);
        // The shim, as the launcher forked it; with no answer from the launcher it may
        // or may not have been, and is looked for in `shim.pid` for a while.
        let shim = match self
            .ask_launcher(dir)
            .map_err(|e| launch_err(e.to_string()))?
        {
            Launched::Forked { pid, start } => Some((pid, start)),
            Launched::NotForked => {
                return Err(launch_err(
                    fsutil::read_string(&dir.join(files::LAUNCH_ERROR))
                        .map(|m| m.trim().to_string())
                        .unwrap_or_else(|| "the shim launcher could not fork".into()),
                ))
            }
            Launched::Unanswered(e) => {
                tracing::warn!(
                    "job {} attempt {}: the shim launcher did not answer ({e}); waiting for \
                     the shim to show up",
                    spec.job,
                    spec.attempt
                );
                None
            }
        };
        let since = Instant::now();
        let alive = || match shim {
            Some((pid, start)) => procfs::alive(pid, Some(start)),
            None => shim_alive(dir) || since.elapsed() < UNANSWERED_GRACE,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let mut nap = Duration::from_millis(1);
        // Set up before the first look, so that no record written after it is missed.
        let mut watch = shim.and_then(|(pid, _)| StartWatch::new(dir, pid));
        loop {
            if let Some(msg) = fsutil::read_string(&dir.join(files::LAUNCH_ERROR)) {
                return Err(launch_err(msg.trim().to_string()));
            }
            if dir.join(files::PID).exists() || dir.join(files::EXIT).exists() {
                return Ok(());
            }
            if !alive() {
                // Re-check: the shim may have written its files just before exiting.
                if let Some(msg) = fsutil::read_string(&dir.join(files::LAUNCH_ERROR)) {
                    return Err(launch_err(msg.trim().to_string()));
                }
                if dir.join(files::PID).exists() || dir.join(files::EXIT).exists() {
                    return Ok(());
                }
                return Err(ExecError::ShimGone {
                    job: spec.job,
                    attempt: spec.attempt,
                    log: fsutil::tail(&log_path, 2000).trim().to_string(),
                });
            }
            if Instant::now() >= deadline {
                return Err(launch_err(format!(
                    "the job was not running after {} s",
                    START_TIMEOUT.as_secs()
                )));
            }
            match watch.as_mut() {
                Some(w) => {
                    w.wait(WATCH_LOOK.min(deadline.saturating_duration_since(Instant::now())))
                }
                None => {
                    sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(20));
                }
            }
        }
    }

    /// Asks the shim launcher for the shim of the attempt in `dir`, starting the
    /// launcher first where there is none or the one there was has gone (a request it
    /// did not take forked nothing, so it is sent to a fresh one once). Only the
    /// sending holds the lock; the answer is waited for without it.
    fn ask_launcher(&self, dir: &Path) -> Result<Launched, LauncherError> {
        let sent = {
            let mut launcher = self.launcher.lock().unwrap_or_else(|e| e.into_inner());
            let mut last = None;
            let mut sent = None;
            for _ in 0..2 {
                if launcher.as_ref().is_none_or(|l| l.gone()) {
                    *launcher = None;
                    let bin = shim_binary()?;
                    let l = Launcher::start(&bin, &self.spool)
                        .map_err(|source| LauncherError::Start { bin, source })?;
                    *launcher = Some(l);
                }
                match launcher.as_mut().expect("started above").send(dir) {
                    Ok(s) => {
                        sent = Some(s);
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            sent.ok_or_else(|| LauncherError::NotTaken {
                last: last.unwrap_or_else(|| io::Error::other("")),
            })?
        };
        Ok(sent.answer())
    }

    /// Every attempt in the spool that has not been acknowledged: running ones, and
    /// ended ones whose exit the controller has not acknowledged yet, ordered by job
    /// and attempt. An attempt whose shim and processes are all gone without an
    /// `exit.json` (the node lost the shim) is given an exit with neither code nor
    /// signal. Meant for agent start-up, before new attempts are started.
    ///
    /// The attempts of the directories this spool's agents kept them in before (another
    /// `attempts_dir`, see [`Executors::open`]) are adopted as well, where they are still
    /// there: a restart that moves the attempts' directory leaves no running job behind.
    pub fn adopt(&self) -> Result<Vec<Attempt>, ExecError> {
        let mut out = Vec::new();
        self.adopt_in(&self.attempts, &mut out)?;
        for d in &self.earlier {
            if let Err(e) = self.adopt_in(d, &mut out) {
                tracing::warn!("{e}");
            }
        }
        out.sort_by_key(|a| (a.job, a.attempt));
        Ok(out)
    }

    fn adopt_in(&self, attempts: &Path, out: &mut Vec<Attempt>) -> Result<(), ExecError> {
        let rd = std::fs::read_dir(attempts)
            .map_err(|e| ExecError::io("listing attempts", attempts, e))?;
        for ent in rd {
            let ent = ent.map_err(|e| ExecError::io("listing attempts", attempts, e))?;
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
                Err(e) if !shim_alive(&path) => {
                    // Nothing ran it: the agent stopped before it wrote the spec, or the
                    // node crashed before the spec reached the disk. The controllers
                    // still place the attempt here (it is started again) or have
                    // requeued it (the node was DOWN).
                    tracing::warn!(
                        "removing attempt directory {}, which no shim runs: {e}",
                        path.display()
                    );
                    remove_attempt_dir(attempts, &path);
                    continue;
                }
                Err(e) => {
                    tracing::warn!("skipping attempt directory {}: {e}", path.display());
                    continue;
                }
            };
            let plan: LaunchRecord = match fsutil::read_json(&path.join(files::PLAN)) {
                Ok(p) => p,
                Err(_) => {
                    // The agent died before it started the shim: the job never ran.
                    let plan = LaunchRecord {
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
                        spool: Some(self.spool.clone()),
                        no_new_privs: false,
                        work: None,
                    };
                    fsutil::write_json(&path.join(files::PLAN), &plan)?;
                    plan
                }
            };
            let a = Attempt::new(job, attempt, path, spec, plan);
            a.exit(); // settles lost attempts
            out.push(a);
        }
        Ok(())
    }
}
