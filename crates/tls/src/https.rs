//! The HTTPS server configuration of a controller's HTTP API, and the verifier of
//! client certificates it shares with bearer tokens.
//!
//! Unlike the QUIC ports, the HTTPS port lets a client connect without a certificate:
//! such a client must then present a bearer token (see [`crate::token`]). A client
//! that does present a certificate must present a good one: issued by the cluster CA,
//! within its validity and not revoked, or the handshake fails.
//!
//! The revocation list is read again whenever its file changes (see
//! [`CertVerifier`]), so `tranche certs revoke` plus a copy of `crl.pem` takes effect
//! on the HTTPS port, and on every token the revoked certificate issued, without a
//! restart.

use std::sync::Arc;

use crate::quic::{no_resumption, provider, server_name_checked};
pub use crate::revocation::CertVerifier;
use crate::{load_certs, load_key, TlsError, TlsFiles};

/// The ALPN protocol the HTTPS port speaks.
pub const HTTP_ALPN: &[u8] = b"http/1.1";

/// The rustls server configuration of the HTTPS port: TLS 1.3 and 1.2, the
/// controller's certificate, client certificates optional but verified by `verifier`
/// when given, ALPN `http/1.1`.
pub fn https_server_config(
    files: &TlsFiles,
    verifier: Arc<CertVerifier>,
) -> Result<rustls::ServerConfig, TlsError> {
    let certs = load_certs(&files.cert)?;
    server_name_checked(files, &certs[0])?;
    let key = load_key(&files.key)?;
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls {
            what: "TLS versions".into(),
            source: e,
        })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Rustls {
            what: format!(
                "certificate {}, key {}",
                files.cert.display(),
                files.key.display()
            ),
            source: e,
        })?;
    no_resumption(&mut tls);
    tls.alpn_protocols = vec![HTTP_ALPN.to_vec()];
    Ok(tls)
}
