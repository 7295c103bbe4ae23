//! The certificate verifiers of every port and client, over the cluster CA and the
//! revocation list as it is *now*.
//!
//! The list's file (`[tls] crl`) is looked at no more than once a second, at a
//! handshake or by a background poll, and read again when its modification time,
//! length or inode changes. Every port uses the same verifier: the HTTPS port (client certificates
//! optional, bearer tokens checked against it), the QUIC ports (controllers' client
//! and peer ports, agents' log ports; certificates required), and the QUIC clients'
//! check of the server they dial. So `tranche certs revoke` plus a copy of `crl.pem`
//! takes effect everywhere without a restart, and [`CertVerifier::close_when_refused`]
//! ends a live QUIC connection whose peer's certificate stops verifying.
//!
//! A list that no longer reads (damaged, from another CA, revoking this process's own
//! certificate) is logged and the previous one stays in force.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::sync::watch;

use crate::quic::{client_verifier, crls, provider, roots};
use crate::{load_certs, TlsError, TlsFiles};

/// How often, at most, the revocation list's file is looked at for a change.
pub const CRL_RECHECK: Duration = Duration::from_secs(1);

/// How often a live connection's peer certificate is checked again even when the list
/// did not change (it may have expired).
const EXPIRY_RECHECK: Duration = Duration::from_secs(60);

/// The QUIC application close code of a connection whose peer's certificate was
/// revoked (or expired) while it was open.
pub const CLOSE_CERT_REFUSED: u32 = 4;

/// A client-certificate verifier over the cluster CA and the current revocation list.
/// [`CertVerifier::new`] makes certificates optional at the handshake (the HTTPS port,
/// where a bearer token may stand in); [`CertVerifier::required`] shares the same list
/// and requires one (the QUIC ports). [`CertVerifier::server`] checks servers with it.
pub struct CertVerifier {
    inner: Arc<Reloading>,
    mandatory: bool,
}

struct Reloading {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
    /// Counts the reloads, so that live connections check their peer again.
    changes: watch::Sender<u64>,
    polling: std::sync::Once,
}

/// The client and server verifiers and the revoked serials of one reading of the list.
type Verifiers = (
    Arc<dyn ClientCertVerifier>,
    Arc<WebPkiServerVerifier>,
    Arc<HashSet<String>>,
);

struct Current {
    client: Arc<dyn ClientCertVerifier>,
    server: Arc<WebPkiServerVerifier>,
    /// The serials the list revokes (lower-case hex), for what certificates issued
    /// (access keys).
    revoked: Arc<HashSet<String>>,
    crl_stamp: Option<CrlStamp>,
    checked: Instant,
}

impl std::fmt::Debug for CertVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CertVerifier(CA {})", self.inner.files.ca.display())
    }
}

/// What tells one version of the list's file from the next: its modification time
/// (kept by the kernel to a few milliseconds only), its length (every revocation adds
/// an entry) and its inode (a copy renamed into place).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CrlStamp {
    modified: Option<SystemTime>,
    len: u64,
    ino: u64,
}

fn crl_stamp(path: &Option<PathBuf>) -> Option<CrlStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path.as_ref()?).ok()?;
    Some(CrlStamp {
        modified: m.modified().ok(),
        len: m.len(),
        ino: m.ino(),
    })
}

impl Reloading {
    fn build(files: &TlsFiles, provider: Arc<CryptoProvider>) -> Result<Verifiers, TlsError> {
        // The checks of the files (the CA, the list, this process's own certificate
        // not revoked), then the verifiers with the certificate made optional: the
        // wrapper says whether a port requires one.
        let own = load_certs(&files.cert)?;
        client_verifier(files, &own, provider.clone())?;
        let failed = |side: &str, e: String| TlsError::Quic {
            what: format!("{side} verifier for CA {}", files.ca.display()),
            detail: e,
        };
        let client =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots(files)?), provider.clone())
                .with_crls(crls(files)?)
                .only_check_end_entity_revocation()
                .allow_unauthenticated()
                .build()
                .map_err(|e| failed("client", e.to_string()))?;
        let server = WebPkiServerVerifier::builder_with_provider(Arc::new(roots(files)?), provider)
            .with_crls(crls(files)?)
            .only_check_end_entity_revocation()
            .build()
            .map_err(|e| failed("server", e.to_string()))?;
        Ok((
            client,
            server,
            Arc::new(crate::crl::revoked_serials(&crls(files)?)),
        ))
    }

    /// The verifiers in force, rebuilt first when the revocation list's file changed.
    fn current(&self) -> Verifiers {
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if cur.checked.elapsed() >= CRL_RECHECK {
            cur.checked = Instant::now();
            let m = crl_stamp(&self.files.crl);
            if m != cur.crl_stamp {
                match Self::build(&self.files, self.provider.clone()) {
                    Ok((client, server, revoked)) => {
                        tracing::info!(
                            crl = %self.files.crl.clone().unwrap_or_default().display(),
                            "revocation list changed: reloaded for every port"
                        );
                        cur.client = client;
                        cur.server = server;
                        cur.revoked = revoked;
                        cur.crl_stamp = m;
                        self.changes.send_modify(|n| *n += 1);
                    }
                    Err(e) => tracing::warn!("revocation list changed but cannot be used: {e}"),
                }
            }
        }
        (cur.client.clone(), cur.server.clone(), cur.revoked.clone())
    }

    /// Looks at the list every [`CRL_RECHECK`] while anything holds this verifier, so
    /// that a revocation reaches live connections without waiting for a handshake.
    fn poll(self: &Arc<Self>) {
        if self.files.crl.is_none() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.polling.call_once(|| {
            let weak: Weak<Reloading> = Arc::downgrade(self);
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(CRL_RECHECK).await;
                    match weak.upgrade() {
                        Some(r) => {
                            r.current();
                        }
                        None => return,
                    }
                }
            });
        });
    }
}

impl CertVerifier {
    /// A verifier for the CA and revocation list of `files`, client certificates
    /// optional; fails on a bad CA, a bad list, or a list that revokes `files.cert`.
    pub fn new(files: &TlsFiles) -> Result<Arc<CertVerifier>, TlsError> {
        let provider = provider();
        let (client, server, revoked) = Reloading::build(files, provider.clone())?;
        Ok(Arc::new(CertVerifier {
            inner: Arc::new(Reloading {
                files: files.clone(),
                provider,
                current: Mutex::new(Current {
                    client,
                    server,
                    revoked,
                    crl_stamp: crl_stamp(&files.crl),
                    checked: Instant::now(),
                }),
                changes: watch::channel(0).0,
                polling: std::sync::Once::new(),
            }),
            mandatory: false,
        }))
    }

    /// The same verifier (the same list, reloaded together), with a client
    /// certificate required at the handshake: the QUIC ports'.
    pub fn required(&self) -> Arc<CertVerifier> {
        Arc::new(CertVerifier {
            inner: self.inner.clone(),
            mandatory: true,
        })
    }

    /// A verifier of the servers a QUIC client dials, over the same list.
    pub fn server(&self) -> Arc<dyn ServerCertVerifier> {
        Arc::new(ServerVerifier(self.inner.clone()))
    }

    /// Checks a certificate as the handshake does: chained to the CA with the
    /// clientAuth usage, valid at `now`, not revoked.
    pub fn check(&self, cert: &CertificateDer<'_>, now: UnixTime) -> Result<(), rustls::Error> {
        self.inner
            .current()
            .0
            .verify_client_cert(cert, &[], now)
            .map(|_| ())
    }

    /// Whether the current list revokes the certificate of serial `serial` (hex as
    /// [`Revocation::serial`](crate::Revocation) prints it; case and leading zeros
    /// do not matter).
    pub fn revokes_serial(&self, serial: &str) -> bool {
        let s = serial.trim().to_ascii_lowercase().replace(':', "");
        let s = s.trim_start_matches("0x").trim_start_matches('0');
        self.inner
            .current()
            .2
            .contains(if s.is_empty() { "0" } else { s })
    }

    /// Watches `conn` until it ends: when the revocation list changes (and once a
    /// minute, for expiry), its peer's certificate is checked again, and a refused one
    /// closes the connection with [`CLOSE_CERT_REFUSED`] and a reason that says why.
    /// Needs a tokio runtime; does nothing without one.
    pub fn close_when_refused(&self, conn: &quinn::Connection) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(leaf) = conn
            .peer_identity()
            .and_then(|a| a.downcast::<Vec<CertificateDer<'static>>>().ok())
            .and_then(|c| c.first().cloned())
        else {
            return;
        };
        self.inner.poll();
        let inner = self.inner.clone();
        let conn = conn.clone();
        let mut changes = inner.changes.subscribe();
        rt.spawn(async move {
            loop {
                tokio::select! {
                    _ = conn.closed() => return,
                    r = changes.changed() => if r.is_err() { return },
                    _ = tokio::time::sleep(EXPIRY_RECHECK) => {}
                }
                let verdict = inner
                    .current()
                    .0
                    .verify_client_cert(&leaf, &[], UnixTime::now());
                if let Err(e) = verdict {
                    let who = crate::identity_of_cert(&leaf)
                        .map(|i| i.to_string())
                        .unwrap_or_else(|_| "a peer".into());
                    let why = match e {
                        rustls::Error::InvalidCertificate(rustls::CertificateError::Revoked) => {
                            "its certificate was revoked".to_string()
                        }
                        rustls::Error::InvalidCertificate(rustls::CertificateError::Expired) => {
                            "its certificate expired".to_string()
                        }
                        e => format!("its certificate no longer verifies: {e}"),
                    };
                    tracing::info!(peer = %conn.remote_address(), "closing {who}'s connection: {why}");
                    conn.close(CLOSE_CERT_REFUSED.into(), format!("closed: {why}").as_bytes());
                    return;
                }
            }
        });
    }
}

impl ClientCertVerifier for CertVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
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
        self.inner
            .current()
            .0
            .verify_client_cert(end_entity, intermediates, now)
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .current()
            .0
            .verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner
            .current()
            .0
            .verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner
            .provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The server side of [`CertVerifier`]: what a QUIC client checks of the server.
struct ServerVerifier(Arc<Reloading>);

impl std::fmt::Debug for ServerVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServerVerifier(CA {})", self.0.files.ca.display())
    }
}

impl ServerCertVerifier for ServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.0.current().1.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .current()
            .1
            .verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0
            .current()
            .1
            .verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0
            .provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
