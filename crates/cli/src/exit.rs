//! How a client command ends: its failure as an exit status and a one-line message on
//! stderr, and the one-thread runtime the command's requests run on.
//!
//! Exit status: 0 done, 1 refused or not found (the message says why), 2 bad usage or
//! no usable cluster config.

use std::process::ExitCode;

use tranche_client::ClientError;
use tranche_proto::Response;

/// A failed command: its exit status and its message.
pub type Fail = (u8, String);

pub fn usage(m: impl Into<String>) -> Fail {
    (2, m.into())
}

pub fn failed(e: ClientError) -> Fail {
    (1, e.to_string())
}

/// Runs a command's requests to completion; a failure is printed as
/// `tranche WHAT: MESSAGE` and becomes the exit status.
pub fn run<F: std::future::Future<Output = Result<(), Fail>>>(what: &str, f: F) -> ExitCode {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(f) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("tranche {what}: {msg}");
            ExitCode::from(code)
        }
    }
}

/// A command's failure on an answer of a kind its request does not expect.
pub fn unexpected(r: &Response) -> Fail {
    (1, unexpected_text(r))
}

/// What an answer of a kind the request does not expect says to the user.
pub fn unexpected_text(r: &Response) -> String {
    match r {
        Response::Error(e) => e.to_string(),
        other => format!(
            "the controller answered with {} where this request expects another kind of \
             answer (are this CLI and the controllers of one release?)",
            other.kind()
        ),
    }
}
