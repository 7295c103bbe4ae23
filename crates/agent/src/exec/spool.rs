//! The spool: the on-disk layout of the attempts (`<spool>/attempts/<job>.<attempt>/`
//! and the files in it, `<spool>/logs/` for acknowledged attempts' output and the
//! records of their output files elsewhere), the records kept there (`plan.json`,
//! `exit.json`, `pid`, `shim.pid`, `outputs.json`), and the names derived from an
//! attempt (directory, cgroup, container id).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tranche_model::JobId;

use super::cgroup::CgroupPlan;
use super::output::{OutputFile, OutputsRecord};
use super::spec::AttemptNo;
use super::{fsutil, procfs};

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

/// What the agent decided for an attempt (stored as `plan.json`); read by the shim and by a
/// re-adopting agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LaunchRecord {
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
    /// The spool the attempt belongs to (its kept output, the GPU ledger). Absent in
    /// records of agents that kept every attempt in `<spool>/attempts`, whose spool is
    /// the attempt directory's grandparent.
    #[serde(default)]
    pub spool: Option<PathBuf>,
    /// A process job runs with `PR_SET_NO_NEW_PRIVS` (see `JobPolicy`).
    #[serde(default)]
    pub no_new_privs: bool,
    /// A process job's own directory on the node, outside the spool and owned by its
    /// user (`<work_dir>/<job>.<attempt>`), holding its checkpoint file and its
    /// SageMaker `opt-ml/`; `None`: both are in the attempt directory (containers,
    /// which are given them by bind mounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<PathBuf>,
}

/// The directory, in a container's attempt directory, that holds its checkpoint file
/// and is mounted at [`CONTAINER_CHECKPOINT_DIR`].
pub(super) const CHECKPOINT_DIR: &str = "checkpoint";
/// Where a container finds its checkpoint directory.
pub(super) const CONTAINER_CHECKPOINT_DIR: &str = "/run/tranche";
/// The checkpoint file's name: the job touches it after each checkpoint it saves.
pub(super) const CHECKPOINT_FILE: &str = "checkpoint";

impl LaunchRecord {
    /// The attempt's checkpoint file on the node (see `TRANCHE_CHECKPOINT_FILE`).
    pub fn checkpoint_file_of(&self, dir: &Path) -> PathBuf {
        match &self.work {
            Some(w) => w.join(CHECKPOINT_FILE),
            None => dir.join(CHECKPOINT_DIR).join(CHECKPOINT_FILE),
        }
    }

    /// Where the attempt in `dir` has its SageMaker `opt-ml/` tree.
    pub fn opt_ml_of(&self, dir: &Path) -> PathBuf {
        self.work
            .as_deref()
            .unwrap_or(dir)
            .join(super::sagemaker::OPT_ML)
    }

    /// The spool of the attempt whose directory is `dir`.
    pub fn spool_of(&self, dir: &Path) -> PathBuf {
        match &self.spool {
            Some(s) => s.clone(),
            None => {
                let attempts = dir.parent().unwrap_or(Path::new("/"));
                attempts.parent().unwrap_or(attempts).to_path_buf()
            }
        }
    }
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
    /// The job's output files outside the spool (`--output`/`--error`), as given to it.
    pub const OUTPUTS: &str = "outputs.json";
    pub const SHIM_LOG: &str = "shim.log";
    pub const RUNTIME_LOG: &str = "runtime.log";
    pub const INIT_PID: &str = "init.pid";
    pub const BUNDLE: &str = "bundle";
    /// Left by a fence (the agent's, or the shim's when the agent's lease ran out) in
    /// each attempt it stops, so that the exit is reported as fenced, also by an agent
    /// restarted before it was reported.
    pub const FENCED: &str = "fenced";
}

/// Where an acknowledged attempt's stdout and stderr are kept:
/// `<spool>/logs/<job>.<attempt>.stdout` and `.stderr`.
pub fn kept_logs(spool: &Path, job: JobId, attempt: AttemptNo) -> (PathBuf, PathBuf) {
    let logs = spool.join("logs");
    (
        logs.join(format!("{job}.{attempt}.stdout")),
        logs.join(format!("{job}.{attempt}.stderr")),
    )
}

/// Removes the kept output (`<spool>/logs`) last written before `before`; how many
/// files it removed. Files of attempts still running are never there: an attempt's
/// output moves into `logs` only once its end has been reported.
pub fn sweep_kept_logs(spool: &Path, before: std::time::SystemTime) -> usize {
    let Ok(rd) = std::fs::read_dir(spool.join("logs")) else {
        return 0;
    };
    let mut n = 0;
    for ent in rd.flatten() {
        let old = ent
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .is_some_and(|t| t < before);
        if old && std::fs::remove_file(ent.path()).is_ok() {
            n += 1;
        }
    }
    n
}

/// Where an acknowledged attempt's record of its output files outside the spool is
/// kept: `<spool>/logs/<job>.<attempt>.outputs.json`.
pub(super) fn kept_outputs_record(spool: &Path, job: JobId, attempt: AttemptNo) -> PathBuf {
    spool
        .join("logs")
        .join(format!("{job}.{attempt}.{}", files::OUTPUTS))
}

/// Where one stream of an acknowledged attempt's output is read from: the file outside
/// the spool the job wrote it to (`--output`/`--error`), else the one kept in
/// `<spool>/logs`; `None` when neither is there (the attempt has not ended and been
/// acknowledged on this node, or never ran here).
pub fn kept_output(
    spool: &Path,
    job: JobId,
    attempt: AttemptNo,
    stderr: bool,
) -> Option<OutputFile> {
    let record = kept_outputs_record(spool, job, attempt);
    if let Some(opened) = read_outputs(&record).and_then(|r| r.stream(stderr)) {
        return Some(OutputFile::outside(opened));
    }
    let (out, err) = kept_logs(spool, job, attempt);
    let path = if stderr { err } else { out };
    path.exists().then(|| OutputFile::spool(path))
}

/// An `outputs.json`, if there is a readable one.
pub(super) fn read_outputs(path: &Path) -> Option<OutputsRecord> {
    read_record(path)
}

pub(super) fn read_exit(path: &Path) -> Option<ExitStatus> {
    read_record(path)
}

/// A JSON record the shim writes, if it is there; one that does not parse is warned
/// about and taken as absent.
fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let text = fsutil::read_string(path)?;
    match serde_json::from_str(&text) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!("{}: {e}", path.display());
            None
        }
    }
}

/// `pid`: (first line, the pid on the first or second line).
pub(super) fn read_pid_file(dir: &Path) -> Option<(String, Option<i32>)> {
    let text = fsutil::read_string(&dir.join(files::PID))?;
    let mut lines = text.lines();
    let first = lines.next()?.trim().to_string();
    let pid = first
        .parse()
        .ok()
        .or_else(|| lines.next().and_then(|l| l.trim().parse().ok()));
    Some((first, pid))
}

pub(super) fn read_shim_pid(dir: &Path) -> Option<(i32, u64)> {
    let text = fsutil::read_string(&dir.join(files::SHIM_PID))?;
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

pub(super) fn shim_alive(dir: &Path) -> bool {
    match read_shim_pid(dir) {
        Some((pid, start)) => procfs::alive(pid, Some(start)),
        None => false,
    }
}

/// Removes an attempt directory: renamed first, so that an interrupted removal is never
/// mistaken for an attempt.
pub(super) fn remove_attempt_dir(attempts: &Path, dir: &Path) {
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

/// The attempt's cgroup name, below `tranche/` in each hierarchy:
/// `<spool>-<job>.<attempt>`, where `<spool>` is 8 hex digits of a hash of the agent's
/// spool path. Job ids are unique only within a cluster, so agents of different clusters
/// on one host (a development cluster beside a test run) must not share cgroups: one's
/// leftover cleanup would kill the other's job.
pub(super) fn cgroup_name(spool: &Path, job: JobId, attempt: AttemptNo) -> String {
    let scope = tranche_proto::fnv1a(spool.as_os_str().as_encoded_bytes()) as u32;
    format!("{scope:08x}-{}", attempt_name(job, attempt))
}

pub(super) fn attempt_name(job: JobId, attempt: AttemptNo) -> String {
    format!("{job}.{attempt}")
}

pub(super) fn container_id(job: JobId, attempt: AttemptNo) -> String {
    format!("tranche-{job}-{attempt}")
}

pub(super) fn parse_attempt_name(name: &str) -> Option<(JobId, AttemptNo)> {
    let (j, a) = name.split_once('.')?;
    if j.is_empty() || a.is_empty() || !j.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !a.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((JobId(j.parse().ok()?), AttemptNo(a.parse().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_output_is_swept_by_the_age_of_its_last_write() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let now = std::time::SystemTime::now();
        let day = std::time::Duration::from_secs(86_400);
        for (name, age_days) in [("1.1.stdout", 40), ("1.1.stderr", 40), ("2.1.stdout", 2)] {
            let f = std::fs::File::create(logs.join(name)).unwrap();
            f.set_modified(now - day * age_days).unwrap();
        }
        assert_eq!(sweep_kept_logs(dir.path(), now - day * 30), 2);
        let left: Vec<_> = std::fs::read_dir(&logs)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, vec!["2.1.stdout".to_string()]);
        // No logs directory: nothing to do.
        assert_eq!(sweep_kept_logs(&dir.path().join("none"), now), 0);
    }

    #[test]
    fn attempt_names() {
        assert_eq!(parse_attempt_name("12.3"), Some((JobId(12), AttemptNo(3))));
        assert_eq!(parse_attempt_name(".acked-12.3-5"), None);
        assert_eq!(parse_attempt_name("12"), None);
        assert_eq!(parse_attempt_name("a.3"), None);
    }
}
