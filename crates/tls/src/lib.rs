//! Tranche's certificates and its QUIC mutual-TLS configuration.
//!
//! Every connection in a Tranche cluster (controller to controller, agent to
//! controller, CLI to controller) is QUIC with mutual TLS. Both ends present a
//! certificate issued by the cluster's own CA, and the certificate says who its holder
//! is: a [`Role`] and a name, carried as the URI subject-alternative name
//! `tranche://<role>/<name>` and read back as an [`Identity`].
//!
//! - [`init_ca`] creates the CA (`ca.pem`, `ca.key`); [`issue`] signs a certificate for
//!   a role and name; [`revoke`] adds a certificate to the CA's revocation list
//!   (`crl.pem`). The `tranche certs init`, `issue` and `revoke` commands call them.
//! - [`server_config`] and [`client_config`] build quinn configurations from a
//!   [`TlsFiles`]; clients connect with the server name [`CONTROLLER_SERVER_NAME`].
//! - [`peer_identity`] tells a server who is on the other end of a connection.
//!
//! - [`keys`]: the cluster's access keys, their ids and the secrets derived from the
//!   cluster's key secret file.
//! - [`https_server_config`] builds the HTTPS API's configuration (client
//!   certificates optional, a bearer token from [`token`] standing in).
//!
//! Both ends of every connection refuse a peer whose certificate is expired, not yet
//! valid, issued by another CA, or listed in the revocation list named by
//! [`TlsFiles::crl`]. The list is read again when its file changes, and a server's
//! live connections whose peer it now revokes are closed ([`CertVerifier`]);
//! [`Gate`] holds what one peer may cost a QUIC server ([`QuicLimits`]).
//!
//! The *ring* crypto provider is always passed explicitly; no process-wide rustls
//! default is installed or needed.

#![warn(missing_docs)]

mod certs;
mod crl;
mod error;
mod https;
mod identity;
pub mod keys;
mod limits;
mod quic;
mod revocation;
pub mod token;

pub use certs::{
    init_ca, issue, issue_valid_between, load_certs, load_key, TlsFiles, CA_CERT_FILE, CA_KEY_FILE,
    CA_VALID_DAYS,
};
pub use crl::{load_crls, revoke, serial_of_cert, Revocation, RevokeTarget, CRL_FILE};
pub use error::TlsError;
pub use https::{https_server_config, CertVerifier, HTTP_ALPN};
pub use identity::{identity_of_cert, peer_identity, validate_name, Identity, Role};
pub use limits::{listen_addr, Admitted, Gate, QuicLimits, Reserved, CLOSE_TOO_MANY};
pub use quic::{
    client_config, only_client_streams, server_config, server_config_with, ClientStreams,
    IDLE_TIMEOUT, KEEP_ALIVE, MAX_CONCURRENT_STREAMS,
};
pub use revocation::{CLOSE_CERT_REFUSED, CRL_RECHECK};

/// The TLS server name every controller certificate carries and every client verifies,
/// whatever address it dials: `controller.tranche`.
pub const CONTROLLER_SERVER_NAME: &str = "controller.tranche";

/// The TLS server name an agent's certificate carries and clients verify when they
/// fetch a job's output from that node: `<node>.agent.tranche`.
pub fn agent_server_name(node: &str) -> String {
    format!("{node}.agent.tranche")
}

/// The ALPN protocol of Tranche's wire protocol, version 1: `tranche/1`.
pub const ALPN: &[u8] = b"tranche/1";
