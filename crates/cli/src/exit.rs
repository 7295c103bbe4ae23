//! How a client command ends: its failure as a [`CliError`], printed as a one-line
//! message on stderr with an exit status its kind chooses, and the one-thread runtime
//! the command's requests run on.
//!
//! Exit status: 0 done, 1 refused or not found (the message says why), 2 bad usage or
//! no usable cluster config; `submit --wait` ends with its job's own exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use tranche_client::ClientError;
use tranche_proto::{ApiError, Response};

use crate::client_cfg::ConfigError;

/// Why a command failed. The kind chooses the exit status ([`CliError::code`]); the
/// text is the one-line message.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line asks for something this command cannot do: a bad or missing
    /// option, an option's value in a form it does not take.
    #[error("{0}")]
    Usage(String),
    /// A file named on the command line cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No usable cluster config.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The request got no answer: no controller reachable, the connection or the
    /// handshake failed, or the cluster refused it (the client's own words).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The cluster refused the request.
    #[error(transparent)]
    Refused(#[from] ApiError),
    /// The cluster refused some of several writes: each refusal, with what it was about.
    #[error("{}", .0.join("; "))]
    RefusedEach(Vec<String>),
    /// A file of writes stopped at a refusal: the object refused, and what was written
    /// before it.
    #[error("{object}: {source} (stopped here; {before})")]
    Stopped {
        object: String,
        source: Box<ApiError>,
        before: String,
    },
    /// A rule the cluster would refuse, found before anything was sent.
    #[error("{0}")]
    Conflict(String),
    /// What the command names is not there: an attempt of a job, a node it ran on, a
    /// share, a log port, an ended job's output.
    #[error("{0}")]
    NotFound(String),
    /// An answer of a kind the request does not expect.
    #[error("{0}")]
    Unexpected(String),
    /// A job (or an array's tasks) followed to its end did not succeed; `code` is its
    /// exit code (the highest of the tasks'; 1 when there is none).
    #[error("{text}")]
    JobFailed { code: u8, text: String },
}

impl CliError {
    /// The exit status for this failure.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Io { .. } | CliError::Config(_) => 2,
            CliError::JobFailed { code, .. } => *code,
            CliError::Client(_)
            | CliError::Refused(_)
            | CliError::RefusedEach(_)
            | CliError::Stopped { .. }
            | CliError::Conflict(_)
            | CliError::NotFound(_)
            | CliError::Unexpected(_) => 1,
        }
    }

    /// Prints `tranche WHAT: MESSAGE` on stderr; the exit status.
    pub fn report(&self, what: &str) -> ExitCode {
        eprintln!("tranche {what}: {self}");
        ExitCode::from(self.code())
    }
}

pub fn usage(m: impl Into<String>) -> CliError {
    CliError::Usage(m.into())
}

pub fn failed(e: ClientError) -> CliError {
    CliError::Client(e)
}

/// A command's end: 0, or its failure printed (see [`CliError::report`]).
pub fn finish(what: &str, r: Result<(), CliError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(what),
    }
}

/// Runs a command's requests to completion; a failure is printed as
/// `tranche WHAT: MESSAGE` and becomes the exit status.
pub fn run<F: std::future::Future<Output = Result<(), CliError>>>(what: &str, f: F) -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    finish(what, rt.block_on(f))
}

/// A command's failure on an answer of a kind its request does not expect (an error
/// answer is the cluster's refusal).
pub fn unexpected(r: &Response) -> CliError {
    match r {
        Response::Error(e) => CliError::Refused(e.clone()),
        other => CliError::Unexpected(unexpected_text(other)),
    }
}

pub use tranche_client::unexpected_text;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_chooses_the_exit_status() {
        let u = usage("--limit 0: must be 1 to 1000");
        assert!(matches!(u, CliError::Usage(_)));
        assert_eq!(u.code(), 2);
        assert_eq!(u.to_string(), "--limit 0: must be 1 to 1000");
        assert_eq!(CliError::Config(ConfigError::Missing).code(), 2);
        let refused = CliError::from(ApiError::NotFound("job 7".into()));
        assert_eq!(refused.code(), 1);
        assert_eq!(
            refused.to_string(),
            ApiError::NotFound("job 7".into()).to_string()
        );
        let ended = CliError::JobFailed {
            code: 3,
            text: "job 7 FAILED with exit code 3".into(),
        };
        assert_eq!(ended.code(), 3);
        assert_eq!(
            CliError::RefusedEach(vec!["job 1: a".into(), "job 2: b".into()]).to_string(),
            "job 1: a; job 2: b"
        );
    }

    #[test]
    fn an_error_answer_is_a_refusal() {
        let e = ApiError::NotFound("job 9".into());
        assert!(matches!(
            unexpected(&Response::Error(e.clone())),
            CliError::Refused(r) if r == e
        ));
        assert_eq!(
            unexpected(&Response::Error(e.clone())).to_string(),
            unexpected_text(&Response::Error(e))
        );
    }
}
