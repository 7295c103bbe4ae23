//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong with Tranche's certificates and TLS setup.
///
/// Every message names the file or field concerned and what is wrong with it, so that
/// the `tranche` CLI and the daemons can print it as it is.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read, written or created.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "read certificate" or "write CA key".
        action: String,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A PEM file could be read but its contents are not what was expected.
    #[error("invalid {what} {}: {detail}", path.display())]
    BadFile {
        /// What the file should hold, e.g. "certificate" or "private key".
        what: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },

    /// `init_ca` was asked to replace an existing cluster CA without `force`.
    #[error(
        "refusing to overwrite {}: the cluster CA already exists (use --force to replace it; \
         every certificate the old CA issued stops being trusted)",
        path.display()
    )]
    AlreadyExists {
        /// The file that already exists.
        path: PathBuf,
    },

    /// An argument (role, name, host, validity, cluster) breaks its rule.
    #[error("invalid {field} {value:?}: {rule}")]
    InvalidField {
        /// The argument's name: "role", "name", "host", "valid_days", "cluster".
        field: &'static str,
        /// The value given.
        value: String,
        /// The rule it breaks.
        rule: String,
    },

    /// A certificate could not be parsed, or does not carry a Tranche identity.
    #[error("{0}")]
    Certificate(String),

    /// rcgen failed to generate a key or sign a certificate.
    #[error("cannot generate {what}: {source}")]
    Generate {
        /// What was being generated, e.g. "the CA certificate".
        what: String,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },

    /// rustls rejected the certificate, key or settings.
    #[error("invalid TLS setup ({what}): {source}")]
    Rustls {
        /// What was being set up, naming the files.
        what: String,
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },

    /// The QUIC configuration could not be built (a verifier or cipher-suite problem).
    #[error("invalid QUIC setup ({what}): {detail}")]
    Quic {
        /// What was being set up, naming the files.
        what: String,
        /// What went wrong.
        detail: String,
    },

    /// The connection's peer presented no certificate (or not an X.509 one).
    #[error("the peer presented no certificate")]
    NoPeerCertificate,
}

impl TlsError {
    pub(crate) fn io(
        action: impl Into<String>,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        TlsError::Io {
            action: action.into(),
            path: path.into(),
            source,
        }
    }

    pub(crate) fn field(
        field: &'static str,
        value: impl Into<String>,
        rule: impl Into<String>,
    ) -> Self {
        TlsError::InvalidField {
            field,
            value: value.into(),
            rule: rule.into(),
        }
    }
}
