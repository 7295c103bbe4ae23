//! What can keep a local cluster from being made, started or waited on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Why a local cluster's step failed. Each text names the file, port, program or wait
/// concerned.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A file or directory of the cluster (config, log, certificate dir) could not be
    /// read, written or created.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// An operating-system call on a socket or descriptor the cluster holds.
    #[error(transparent)]
    Os(std::io::Error),
    /// A port could not be bound (`proto` is UDP or TCP).
    #[error("cannot bind {proto} {addr}: {source}")]
    Port {
        proto: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A TCP port handed to a stopped process could not be bound again for its restart.
    #[error("cannot bind TCP {addr} again for a restart: {source}")]
    Rebind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A daemon could not be started.
    #[error("cannot start {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    /// A wait ran out: what was awaited, for how long, and what was seen last.
    #[error("{what}: not within {after:?}; last seen: {last}")]
    Timeout {
        what: String,
        after: Duration,
        last: String,
    },
    /// The CA, a certificate or a client's TLS files.
    #[error(transparent)]
    Tls(#[from] tranche_tls::TlsError),
    /// A client could not be made of the cluster's files.
    #[error(transparent)]
    Client(#[from] tranche_client::ClientError),
    /// Reopening a cluster needs the fixed ports it was made with.
    #[error("reopen: the cluster's base_port is needed to know its addresses")]
    NoBasePort,
    /// The account running this process has no name, so jobs cannot run as it.
    #[error(
        "this process runs as uid {uid}, which has no account name (no entry in the \
         account database), so the local cluster's agents cannot run jobs as it"
    )]
    NoAccountName { uid: u32 },
    /// The account database could not be read.
    #[error("cannot look up the account of uid {uid}: {}", .source.desc())]
    Account { uid: u32, source: nix::errno::Errno },
}

impl LocalError {
    /// A file's error, with the file.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> LocalError {
        let path = path.into();
        move |source| LocalError::Io { path, source }
    }
}

/// The text, for callers that report failures as text (benchmarks, tests,
/// `tranche dev`).
impl From<LocalError> for String {
    fn from(e: LocalError) -> String {
        e.to_string()
    }
}
