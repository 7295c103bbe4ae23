//! The shim: one per attempt, forked by the agent's shim launcher, in a session of its
//! own. It launches the job, reaps it and every descendant (it is their child
//! subreaper), and writes `exit.json` once no process of the job is left.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use nix::unistd::{Gid, Uid};
use tranche_model::{GpuIndex, JobId};

use super::ledger::{self, LedgerEntry};
use super::output::{self, As, Opened, OutputsRecord};
use super::spec::AttemptNo;
use super::spool::{files, LaunchRecord};
use super::DEFAULT_PATH;
use super::{
    fsutil, job_env, oci, procfs, sagemaker_env, spawn, ExecError, ExecKind, ExitStatus, LaunchSpec,
};
use super::{lease, signal_number, Attempt};

/// Why the shim could not start a job, or not record its end. The text is what
/// `launch_error` says and what the controller reports as the attempt's failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShimError {
    /// A file of the attempt directory could not be read or written.
    #[error(transparent)]
    Spool(#[from] ExecError),
    /// An operation on an open file failed.
    #[error("{0}")]
    Io(io::Error),
    /// A spool stream could not be given to the job's user.
    #[error("cannot give {name} to uid {uid}: {source}")]
    GiveStream {
        /// The stream's file in the attempt directory.
        name: String,
        /// The job's user.
        uid: u32,
        /// The underlying error.
        source: Errno,
    },
    /// An `--output`/`--error` file could not be created.
    #[error("cannot create the {name} file {}{as_whom}: {source}", path.display())]
    CreateOutput {
        /// The stream (`stdout`, `stderr`).
        name: String,
        /// The file.
        path: PathBuf,
        /// ` as user NAME (uid U)`, or empty for the agent's own account.
        as_whom: String,
        /// The underlying error.
        source: io::Error,
    },
    /// An output file just created could not be examined.
    #[error("{}: {source}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The job's cgroup could not be joined.
    #[error("cannot join the job's cgroup {}: {source}", path.display())]
    JoinCgroup {
        /// The cgroup's `cgroup.procs`.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// `/dev/null` could not be opened for the job's stdin.
    #[error("cannot open /dev/null: {source}")]
    DevNull {
        /// The underlying error.
        source: io::Error,
    },
    /// The job's command could not be run (as the agent's own account).
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The job's command could not be run as its user.
    #[error("cannot run `{command}` as uid {uid} (gid {gid}) in {cwd}: {source}")]
    SpawnAs {
        /// The program.
        command: String,
        /// The job's user.
        uid: u32,
        /// The job's group.
        gid: u32,
        /// The job's working directory.
        cwd: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A container's plan has no container id.
    #[error("plan.json has no container id")]
    NoContainerId,
    /// A container's plan names no runtime.
    #[error("plan.json names no OCI runtime")]
    NoRuntime,
    /// The OCI runtime could not be run.
    #[error("cannot run the OCI runtime `{runtime}`: {source}")]
    Runtime {
        /// The runtime's path.
        runtime: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The OCI runtime failed to start the container, as its log says.
    #[error("{0}")]
    RuntimeFailed(String),
    /// The OCI runtime ended before the container started, its log saying nothing.
    #[error(
        "the OCI runtime `{runtime}` ended ({status}) before the container started; see {}",
        stderr.display()
    )]
    NotStarted {
        /// The runtime's path.
        runtime: String,
        /// How the runtime ended.
        status: ExitStatus,
        /// The attempt's stderr file.
        stderr: PathBuf,
    },
}

fn log(dir: &Path, msg: &str) {
    eprintln!("{} tranche-shim {}: {msg}", fsutil::now_ms(), dir.display());
}

/// The shim's work, in the process the shim launcher forked for the attempt in `dir`
/// (see `shim_launcher`): it takes a session of its own, records itself in `shim.pid` (pid
/// and start time), and supervises the attempt described by the directory's
/// `spec.json` and `plan.json`. True where all of that was done. Must be called in a
/// single-threaded process.
pub(super) fn run_shim(dir: &Path) -> bool {
    // A session of its own: nothing the agent's session or terminal goes through (a
    // hang-up, a signal to its process group) reaches the job.
    if let Err(e) = nix::unistd::setsid() {
        log(dir, &format!("setsid: {e}"));
    }
    let pid = std::process::id() as i32;
    let start = procfs::stat(pid).map(|s| s.starttime).unwrap_or(0);
    if let Err(e) = fsutil::write_atomic(
        &dir.join(files::SHIM_PID),
        format!("{pid} {start}\n").as_bytes(),
    ) {
        log(dir, &format!("cannot record the shim's pid: {e}"));
        return false;
    }
    tick_every_second(dir);
    match supervise(dir) {
        Ok(()) => true,
        Err(e) => {
            log(dir, &e.to_string());
            false
        }
    }
}

/// Interrupts the shim's waits every second (SIGALRM, whose handler does nothing and
/// does not restart a wait), so that it looks at the agent's lease while its job runs.
/// A timer is not inherited by the job's processes, and exec resets the handler.
fn tick_every_second(dir: &Path) {
    extern "C" fn tick(_: libc::c_int) {}
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(SigHandler::Handler(tick), SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler does nothing, so it is async-signal-safe.
    if let Err(e) = unsafe { sigaction(Signal::SIGALRM, &act) } {
        log(
            dir,
            &format!("cannot handle SIGALRM ({e}): the agent's lease is not watched"),
        );
        return;
    }
    let second = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    let t = libc::itimerval {
        it_interval: second,
        it_value: second,
    };
    // SAFETY: `t` is a valid itimerval; the old value is not asked for.
    if unsafe { libc::setitimer(libc::ITIMER_REAL, &t, std::ptr::null_mut()) } != 0 {
        log(
            dir,
            &format!(
                "cannot set a timer ({}): the agent's lease is not watched",
                io::Error::last_os_error()
            ),
        );
    }
}

/// The fence below the agent: stops the job once the agent's [lease](super::lease)
/// has run out (the agent lost the controllers, or is frozen, stuck or gone), with
/// the job's checkpoint signal and, after [`lease::FENCE_GRACE`], SIGKILL, and marks
/// the attempt fenced.
struct Fence {
    attempt: Attempt,
    spool: PathBuf,
    boot: String,
    looked: Option<Instant>,
    /// When the job was signalled, once the lease ran out.
    since: Option<Instant>,
}

impl Fence {
    fn new(dir: &Path, spec: &LaunchSpec, plan: &LaunchRecord) -> Fence {
        Fence {
            attempt: Attempt::new(
                spec.job,
                spec.attempt,
                dir.to_path_buf(),
                spec.clone(),
                plan.clone(),
            ),
            spool: plan.spool_of(dir),
            boot: lease::boot_id(),
            looked: None,
            since: None,
        }
    }

    /// Looks at the lease (at most twice a second) and stops the job if it has run
    /// out: called between waits.
    fn check(&mut self) {
        if self
            .looked
            .is_some_and(|t| t.elapsed() < Duration::from_millis(500))
        {
            return;
        }
        self.looked = Some(Instant::now());
        let dir = self.attempt.dir().to_path_buf();
        match self.since {
            None => {
                let lease::Standing::RunOut { ago_ms } =
                    lease::standing(&self.spool, &self.boot, lease::boottime_ms())
                else {
                    return;
                };
                let name = self
                    .attempt
                    .spec()
                    .stop_signal
                    .as_deref()
                    .unwrap_or("SIGTERM");
                log(
                    &dir,
                    &format!(
                        "the agent's lease ran out {} ago: stopping the job ({name}, then \
                         SIGKILL after {} s)",
                        tranche_proto::text::duration_text(ago_ms),
                        lease::FENCE_GRACE.as_secs()
                    ),
                );
                if let Err(e) = self.attempt.mark_fenced() {
                    log(&dir, &format!("cannot mark the attempt fenced: {e}"));
                }
                let sig = signal_number(name).unwrap_or(libc::SIGTERM);
                if let Err(e) = self.attempt.signal(sig) {
                    log(&dir, &e.to_string());
                }
                self.since = Some(Instant::now());
            }
            Some(t) if t.elapsed() >= lease::FENCE_GRACE => {
                if let Err(e) = self.attempt.kill_all() {
                    log(&dir, &e.to_string());
                }
            }
            Some(_) => {}
        }
    }
}

/// Runs the job and records its end; `Err` only when not even that could be recorded.
fn supervise(dir: &Path) -> Result<(), ShimError> {
    let loaded = (|| -> Result<(LaunchSpec, LaunchRecord), ShimError> {
        let spec: LaunchSpec = fsutil::read_json(&dir.join(files::SPEC))?;
        let plan: LaunchRecord = fsutil::read_json(&dir.join(files::PLAN))?;
        Ok((spec, plan))
    })();
    let (spec, plan) = match loaded {
        Ok(x) => x,
        Err(e) => return record(dir, None, None, Err(e)),
    };
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        log(dir, &format!("cannot become child subreaper ({e}): daemonized processes of the job are not waited for"));
    }
    // The GPUs are taken before anything of the job can run.
    let ledger = (!spec.gpus.is_empty())
        .then(|| ledger::ledger_of(&plan.spool_of(dir)))
        .map(|path| {
            let gpus: Vec<GpuIndex> = spec.gpus.iter().map(|g| g.index).collect();
            (path, spec.job, spec.attempt, gpus)
        });
    if let Some((path, job, attempt, gpus)) = &ledger {
        let e = LedgerEntry::now(true, *job, *attempt, gpus.clone());
        if let Err(e) = ledger::append(path, &e) {
            log(
                dir,
                &format!("cannot write the GPU ledger {}: {e}", path.display()),
            );
        }
    }
    let outcome = (|| {
        let (stdout, stderr) = open_streams(dir, &spec)?;
        match plan.kind {
            ExecKind::Process => run_process(dir, &spec, &plan, stdout, stderr),
            ExecKind::Oci => run_oci(dir, &spec, &plan, stdout, stderr),
        }
    })();
    record(dir, Some(&plan), ledger, outcome)
}

/// The job's stdout and stderr: each the `--output`/`--error` file of the spec, created
/// with the job's credentials (recorded in `outputs.json` before the job starts), or
/// the spool's file, given to the job's user, who may read it on the node. A stream
/// whose file is the other's shares its descriptor, so a process job's two streams
/// interleave in the order written (runc copies a container's through a pipe each,
/// which keeps the order within each stream only).
fn open_streams(dir: &Path, spec: &LaunchSpec) -> Result<(File, File), ShimError> {
    let user = spec.user.map(|(uid, gid)| As {
        uid,
        gid,
        groups: &spec.groups,
    });
    // Members of a gang that name one file on a shared file system all append to it;
    // only rank 0 empties it first.
    let truncate = spec.rendezvous.as_ref().is_none_or(|r| r.rank == 0);
    let open = |name: &str, file: Option<&String>| -> Result<(File, Option<Opened>), ShimError> {
        let Some(path) = file else {
            let f = fsutil::open_append(&dir.join(name))?;
            if let Some((uid, gid)) = spec.user {
                nix::unistd::fchown(&f, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                    .map_err(|source| ShimError::GiveStream {
                        name: name.to_string(),
                        uid,
                        source,
                    })?;
            }
            return Ok((f, None));
        };
        let path = Path::new(path);
        let f =
            output::create_as(path, user, truncate).map_err(|source| ShimError::CreateOutput {
                name: name.to_string(),
                path: path.to_path_buf(),
                as_whom: as_whom(spec),
                source,
            })?;
        let job_uid = spec
            .user
            .map_or_else(|| nix::unistd::geteuid().as_raw(), |(uid, _)| uid);
        let opened = Opened::of(path, &f, job_uid).map_err(|source| ShimError::Output {
            path: path.to_path_buf(),
            source,
        })?;
        Ok((f, Some(opened)))
    };
    let (stdout, out_rec) = open(files::STDOUT, spec.stdout_file.as_ref())?;
    let (stderr, err_rec) = if spec.stderr_file.is_some() && spec.stderr_file == spec.stdout_file {
        let f = stdout.try_clone().map_err(ShimError::Io)?;
        (f, out_rec.clone())
    } else {
        open(files::STDERR, spec.stderr_file.as_ref())?
    };
    let record = OutputsRecord {
        stdout: out_rec,
        stderr: err_rec,
    };
    if record != OutputsRecord::default() {
        fsutil::write_json(&dir.join(files::OUTPUTS), &record)?;
    }
    Ok((stdout, stderr))
}

/// ` as user NAME (uid U)` for messages about a job's files, or `` when the job runs as
/// the agent's own account.
fn as_whom(spec: &LaunchSpec) -> String {
    match spec.user {
        Some((uid, _)) => match spec.env.get("USER") {
            Some(name) => format!(" as user {name} (uid {uid})"),
            None => format!(" as uid {uid}"),
        },
        None => String::new(),
    }
}

/// An attempt's GPU ledger file, job, attempt and GPU indices.
type LedgerNote = (std::path::PathBuf, JobId, AttemptNo, Vec<GpuIndex>);

/// Cleans up and records the outcome: `launch_error` (first, so that whoever sees
/// `exit.json` sees it too) for a job that could not be started, and `exit.json`.
fn record(
    dir: &Path,
    plan: Option<&LaunchRecord>,
    ledger: Option<LedgerNote>,
    outcome: Result<ExitStatus, ShimError>,
) -> Result<(), ShimError> {
    if let Some(plan) = plan {
        if plan.kind == ExecKind::Oci {
            oci::delete(plan);
        }
        if let Some(m) = &plan.rootfs_mount {
            oci::unmount(m);
        }
        // A container's cgroup goes with it. A process job's is empty by now (its
        // processes have been waited for) and is removed when the end is acknowledged
        // (`cleanup_attempt`), off the path that gives the GPUs back: removing a
        // cgroup waits behind other attempts' cgroups being made and removed.
        if plan.kind == ExecKind::Oci {
            if let Some(cg) = &plan.cgroup {
                if cg.exists() {
                    cg.remove();
                }
            }
        }
    }
    // The GPUs are given back after every process (and a container) is gone, and
    // before anything of the end is recorded (a launch error or the exit status, either
    // of which lets them be given to another job): also when that record cannot be
    // written (a full spool), so that the ledger never shows GPUs held by a shim that
    // is gone.
    if let Some((path, job, attempt, gpus)) = ledger {
        if let Err(e) = ledger::append(&path, &LedgerEntry::now(false, job, attempt, gpus)) {
            log(
                dir,
                &format!("cannot write the GPU ledger {}: {e}", path.display()),
            );
        }
    }
    let status = match outcome {
        Ok(st) => st,
        Err(msg) => {
            log(dir, &format!("launch failed: {msg}"));
            fsutil::write_atomic(
                &dir.join(files::LAUNCH_ERROR),
                format!("{msg}\n").as_bytes(),
            )?;
            ExitStatus {
                code: None,
                signal: None,
                at_ms: fsutil::now_ms(),
            }
        }
    };
    log(dir, &format!("job ended: {status}"));
    Ok(fsutil::write_json(&dir.join(files::EXIT), &status)?)
}

/// `(exit code, signal)` of a reaped process.
type CodeSignal = (Option<i32>, Option<i32>);

/// `waitpid(-1)`: the pid reaped and how it ended (`None` if it did not end), or
/// `Ok(None)` with `nohang` and nothing to reap.
fn wait_any(nohang: bool) -> Result<Option<(i32, Option<CodeSignal>)>, Errno> {
    let mut st: libc::c_int = 0;
    // SAFETY: `st` is a valid out-pointer.
    let r = unsafe { libc::waitpid(-1, &mut st, if nohang { libc::WNOHANG } else { 0 }) };
    if r < 0 {
        return Err(Errno::last());
    }
    if r == 0 {
        return Ok(None);
    }
    let decoded = if libc::WIFEXITED(st) {
        Some((Some(libc::WEXITSTATUS(st)), None))
    } else if libc::WIFSIGNALED(st) {
        Some((None, Some(libc::WTERMSIG(st))))
    } else {
        None
    };
    Ok(Some((r, decoded)))
}

fn status(code_signal: CodeSignal) -> ExitStatus {
    ExitStatus {
        code: code_signal.0,
        signal: code_signal.1,
        at_ms: fsutil::now_ms(),
    }
}

fn run_process(
    dir: &Path,
    spec: &LaunchSpec,
    plan: &LaunchRecord,
    stdout: File,
    stderr: File,
) -> Result<ExitStatus, ShimError> {
    let mut env = job_env(spec);
    env.extend(sagemaker_env(spec, Some(&plan.opt_ml_of(dir))));
    env.insert(
        "TRANCHE_CHECKPOINT_FILE".into(),
        plan.checkpoint_file_of(dir).to_string_lossy().into_owned(),
    );
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    let mut joins = Vec::new();
    match &plan.cgroup {
        Some(cg) => {
            for d in cg.dirs() {
                let p = d.join("cgroup.procs");
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map_err(|source| ShimError::JoinCgroup { path: p, source })?;
                joins.push(f);
            }
        }
        None => log(
            dir,
            "no cgroup for this job: every process of it is found by its process group and as a descendant of this shim",
        ),
    }
    let stdin = File::open("/dev/null").map_err(|source| ShimError::DevNull { source })?;
    let cwd = spec.cwd.as_deref().unwrap_or("/");
    let user = spec.user;
    let env: Vec<(String, String)> = env.into_iter().collect();
    let fds: Vec<i32> = joins.iter().map(|f| f.as_raw_fd()).collect();
    // With a user, the job enters its directory as that user, once it is one: a home
    // that only its owner may enter (on NFS with root squashed, not even root) works.
    let main = spawn::spawn(&spawn::Launch {
        argv: &spec.command,
        env: &env,
        stdin: stdin.as_raw_fd(),
        stdout: stdout.as_raw_fd(),
        stderr: stderr.as_raw_fd(),
        cgroup_procs: &fds,
        user,
        groups: &spec.groups,
        cwd,
        no_new_privs: plan.no_new_privs,
    })
    .map_err(|source| match user {
        Some((uid, gid)) => ShimError::SpawnAs {
            command: spec.command[0].clone(),
            uid,
            gid,
            cwd: cwd.to_string(),
            source,
        },
        None => ShimError::Spawn {
            command: spec.command[0].clone(),
            source,
        },
    })?;
    drop((joins, stdin, stdout, stderr));
    // The job runs now: whatever happens to the spool, the shim stays and waits for it
    // (an error here would leave it running unsupervised on GPUs given back).
    record_pid(dir, &format!("{main}\n"));
    log(dir, &format!("job running as pid {main}"));
    let mut main_status = None;
    let mut fence = Fence::new(dir, spec, plan);
    loop {
        fence.check();
        match wait_any(false) {
            Ok(Some((p, st))) => {
                if p == main {
                    main_status = st;
                }
            }
            Ok(None) | Err(Errno::EINTR) => {}
            Err(Errno::ECHILD) => {
                // No descendant left; with a cgroup, also wait for it to be empty.
                if cgroup_empty(plan) {
                    break;
                }
                sleep(Duration::from_millis(20));
            }
            Err(e) => {
                log(dir, &format!("waitpid: {e}"));
                sleep(Duration::from_millis(20));
            }
        }
    }
    Ok(status(main_status.unwrap_or((None, None))))
}

/// Records the running job's pid (`pid`); a spool that cannot take it (full, failing)
/// is logged, and the agent finds the job's processes by its cgroup or as the shim's
/// descendants.
fn record_pid(dir: &Path, text: &str) {
    if let Err(e) = fsutil::write_atomic(&dir.join(files::PID), text.as_bytes()) {
        log(dir, &format!("cannot record the job's pid: {e}"));
    }
}

/// True when the attempt has no cgroup, or no process is left in it.
fn cgroup_empty(plan: &LaunchRecord) -> bool {
    plan.cgroup.as_ref().is_none_or(|cg| cg.procs().is_empty())
}

fn run_oci(
    dir: &Path,
    spec: &LaunchSpec,
    plan: &LaunchRecord,
    stdout: File,
    stderr: File,
) -> Result<ExitStatus, ShimError> {
    let id = plan.container_id.clone().ok_or(ShimError::NoContainerId)?;
    let mut cmd = oci::runtime_cmd(plan).ok_or(ShimError::NoRuntime)?;
    cmd.arg("--log")
        .arg(dir.join(files::RUNTIME_LOG))
        .arg("--log-format")
        .arg("json")
        .arg("run")
        .arg("--bundle")
        .arg(dir.join(files::BUNDLE))
        .arg("--pid-file")
        .arg(dir.join(files::INIT_PID))
        .arg(&id)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let runtime = plan
        .runtime
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let child = cmd.spawn().map_err(|source| ShimError::Runtime {
        runtime: runtime.clone(),
        source,
    })?;
    let runc = child.id() as i32;
    let mut init: Option<i32> = None;
    let mut runc_status = None;
    let mut init_status = None;
    let mut runc_done = false;
    let mut fence = Fence::new(dir, spec, plan);
    loop {
        fence.check();
        if init.is_none() {
            if let Some(p) = fsutil::read_string(&dir.join(files::INIT_PID))
                .and_then(|t| t.trim().parse::<i32>().ok())
            {
                init = Some(p);
                record_pid(dir, &format!("{id}\n{p}\n"));
                log(dir, &format!("container {id} running, init pid {p}"));
            }
        }
        match wait_any(init.is_none() && !runc_done) {
            Ok(None) => sleep(Duration::from_millis(5)),
            Ok(Some((p, st))) => {
                if p == runc {
                    runc_status = st;
                    runc_done = true;
                } else if Some(p) == init {
                    // runc went away and the container's init was re-parented here.
                    init_status = st;
                }
            }
            Err(Errno::EINTR) => {}
            Err(Errno::ECHILD) => {
                if init.is_none() {
                    // One last look: a job may have come and gone between two polls.
                    if let Some(p) = fsutil::read_string(&dir.join(files::INIT_PID))
                        .and_then(|t| t.trim().parse::<i32>().ok())
                    {
                        init = Some(p);
                        let _ = fsutil::write_atomic(
                            &dir.join(files::PID),
                            format!("{id}\n{p}\n").as_bytes(),
                        );
                    }
                }
                if cgroup_empty(plan) || init.is_none() {
                    break;
                }
                sleep(Duration::from_millis(20));
            }
            Err(e) => {
                log(dir, &format!("waitpid: {e}"));
                sleep(Duration::from_millis(20));
            }
        }
    }
    if init.is_none() {
        return Err(match oci::runtime_error(dir) {
            Some(why) => ShimError::RuntimeFailed(why),
            None => ShimError::NotStarted {
                runtime,
                status: status(runc_status.unwrap_or((None, None))),
                stderr: dir.join(files::STDERR),
            },
        });
    }
    let st = match init_status {
        Some(s) => s,
        None => match runc_status {
            // runc reports a container killed by signal N as 128+N.
            Some((Some(c), None)) if c > 128 && c <= 128 + 64 => (None, Some(c - 128)),
            Some(s) => s,
            None => (None, None),
        },
    };
    Ok(status(st))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shim whose launch failed on a full spool cannot record the failure; it still
    /// gives the GPUs back in the ledger, so the ledger never shows them held by a
    /// shim that is gone.
    #[test]
    fn the_gpus_are_given_back_even_when_the_launch_error_cannot_be_written() {
        let tmp = tempfile::tempdir().unwrap();
        let path = ledger::ledger_of(tmp.path());
        let bind = LedgerEntry::now(true, JobId(7), AttemptNo(2), vec![GpuIndex(1)]);
        ledger::append(&path, &bind).unwrap();
        // An attempt directory that takes no file (as a full spool would not).
        let gone = tmp.path().join("no-such-attempt");
        let outcome = Err(ShimError::Io(io::Error::from_raw_os_error(libc::ENOSPC)));
        let note = (path, JobId(7), AttemptNo(2), vec![GpuIndex(1)]);
        assert!(record(&gone, None, Some(note), outcome).is_err());
        let (entries, bad) = ledger::read(tmp.path()).unwrap();
        assert_eq!(bad, 0);
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert!(!entries[1].bind, "{entries:?}");
        assert_eq!(
            (entries[1].job, entries[1].attempt),
            (JobId(7), AttemptNo(2))
        );
    }
}
