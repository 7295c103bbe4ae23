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

pub use tranche_client::unexpected_text;
