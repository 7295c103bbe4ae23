//! The HTTPS server configuration of a controller's HTTP API, and the verifier of
//! client certificates it shares with bearer tokens.
//!
//! Unlike the QUIC ports, the HTTPS port lets a client connect without a certificate:
//! such a client must then present a bearer token (see [`crate::token`]). A client
//! that does present a certificate must present a good one: issued by the cluster CA,
//! within its validity and not revoked, or the handshake fails.
//!
//! The revocation list is read again whenever its file changes (looked at no more
//! than once a second), so `tranche certs revoke` plus a copy of `crl.pem` takes
//! effect on the HTTPS port, and on every token the revoked certificate issued,
//! without a restart.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::quic::{client_verifier, crls, provider, roots, server_name_checked};
use crate::{load_certs, load_key, TlsError, TlsFiles};

/// The ALPN protocol the HTTPS port speaks.
pub const HTTP_ALPN: &[u8] = b"http/1.1";

/// How often, at most, the revocation list's file is looked at for a change.
const CRL_RECHECK: Duration = Duration::from_secs(1);

/// A client-certificate verifier over the cluster CA and the current revocation list;
/// certificates are optional at the handshake (a bearer token may stand in).
pub struct CertVerifier {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

struct Current {
    verifier: Arc<dyn ClientCertVerifier>,
    crl_mtime: Option<SystemTime>,
    checked: Instant,
}

impl std::fmt::Debug for CertVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CertVerifier(CA {})", self.files.ca.display())
    }
}

fn crl_mtime(path: &Option<PathBuf>) -> Option<SystemTime> {
    path.as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .and_then(|m| m.modified().ok())
}

impl CertVerifier {
    /// A verifier for the CA and revocation list of `files`; fails as the QUIC server
    /// configuration does on a bad CA, a bad list, or a list that revokes `files.cert`.
    pub fn new(files: &TlsFiles) -> Result<Arc<CertVerifier>, TlsError> {
        let provider = provider();
        let verifier = Self::build(files, provider.clone())?;
        Ok(Arc::new(CertVerifier {
            files: files.clone(),
            provider,
            current: Mutex::new(Current {
                verifier,
                crl_mtime: crl_mtime(&files.crl),
                checked: Instant::now(),
            }),
        }))
    }

    fn build(
        files: &TlsFiles,
        provider: Arc<CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        // The same checks of the files as the QUIC port's, then the same verifier
        // with the certificate made optional.
        let own = load_certs(&files.cert)?;
        client_verifier(files, &own, provider.clone())?;
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots(files)?), provider)
            .with_crls(crls(files)?)
            .only_check_end_entity_revocation()
            .allow_unauthenticated()
            .build()
            .map_err(|e| TlsError::Quic {
                what: format!("client verifier for CA {}", files.ca.display()),
                detail: e.to_string(),
            })
    }

    /// The verifier in force, rebuilt first when the revocation list's file changed.
    /// A list that no longer reads keeps the previous verifier (and is logged).
    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        let mut cur = self.current.lock().unwrap();
        if cur.checked.elapsed() >= CRL_RECHECK {
            cur.checked = Instant::now();
            let m = crl_mtime(&self.files.crl);
            if m != cur.crl_mtime {
                match Self::build(&self.files, self.provider.clone()) {
                    Ok(v) => {
                        tracing::info!(
                            "revocation list changed: reloaded for the HTTPS port and tokens"
                        );
                        cur.verifier = v;
                        cur.crl_mtime = m;
                    }
                    Err(e) => tracing::warn!("revocation list changed but cannot be used: {e}"),
                }
            }
        }
        cur.verifier.clone()
    }

    /// Checks a certificate as the handshake does: chained to the CA with the
    /// clientAuth usage, valid at `now`, not revoked.
    pub fn check(&self, cert: &CertificateDer<'_>, now: UnixTime) -> Result<(), rustls::Error> {
        self.current()
            .verify_client_cert(cert, &[], now)
            .map(|_| ())
    }
}

impl ClientCertVerifier for CertVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        false
    }
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

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
    tls.alpn_protocols = vec![HTTP_ALPN.to_vec()];
    Ok(tls)
}
