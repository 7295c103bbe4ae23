//! The executors' error type.

use std::io;
use std::path::{Path, PathBuf};

use tranche_model::{GpuIndex, JobId};

use super::cgroup::CgroupError;
use super::image::ImageError;
use super::spec::AttemptNo;
use super::CgroupMode;

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
        reason: ImageError,
    },
    /// A SageMaker job gave no command and its image has no entrypoint to run.
    #[error("image `{image}` has no entrypoint; give ContainerEntrypoint")]
    NoEntrypoint {
        /// The image as given in the spec.
        image: String,
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
        index: GpuIndex,
        /// UUID of the GPU.
        uuid: String,
        /// What is wrong.
        reason: String,
    },
    /// The job could not be started.
    #[error("job {job} attempt {attempt}: cannot start `{command}` (image `{image}`): {reason}")]
    Launch {
        /// The job.
        job: JobId,
        /// The attempt.
        attempt: AttemptNo,
        /// The image.
        image: String,
        /// The command line.
        command: String,
        /// Why it could not be started.
        reason: String,
    },
    /// The attempt's shim ended without starting the job and without saying why (it
    /// could not write its launch error: a full spool, or it was killed). Nothing of
    /// the job ran and nothing it did caused it: the attempt is lost, not failed.
    #[error(
        "job {job} attempt {attempt}: the shim exited without starting the job or saying \
         why{}", if log.is_empty() { String::new() } else { format!(" (its log: {log})") }
    )]
    ShimGone {
        /// The job.
        job: JobId,
        /// The attempt.
        attempt: AttemptNo,
        /// The end of the shim's log, if it wrote any.
        log: String,
    },
    /// The attempt was started before on this node and not acknowledged.
    #[error(
        "job {job} attempt {attempt}: attempt directory `{}` already exists \
         (started before and not acknowledged)", dir.display()
    )]
    AttemptExists {
        /// The job.
        job: JobId,
        /// The attempt.
        attempt: AttemptNo,
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
        reason: CgroupError,
    },
    /// The attempt has not ended yet.
    #[error(
        "job {job} attempt {attempt} has not ended (no exit status yet); \
         stop it before acknowledging its exit"
    )]
    StillRunning {
        /// The job.
        job: JobId,
        /// The attempt.
        attempt: AttemptNo,
    },
}

impl ExecError {
    /// Where the node's own storage failed (no space or quota left, read-only, an I/O
    /// error), not the job or its spec, that error: the job may run on another node.
    pub fn node_fault(&self) -> Option<&io::Error> {
        match self {
            ExecError::Io { source, .. }
                if matches!(
                    source.raw_os_error(),
                    Some(nix::libc::ENOSPC | nix::libc::EDQUOT | nix::libc::EROFS | nix::libc::EIO)
                ) =>
            {
                Some(source)
            }
            _ => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>, path: &Path, source: io::Error) -> ExecError {
        ExecError::Io {
            what: what.into(),
            path: path.to_path_buf(),
            source,
        }
    }
}
