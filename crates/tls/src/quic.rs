//! QUIC endpoint configurations with mutual TLS against the cluster CA.

use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, TransportConfig, VarInt};
use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, RootCertStore};
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use x509_parser::extensions::GeneralName;

use crate::{
    load_certs, load_crls, load_key, CertVerifier, QuicLimits, TlsError, TlsFiles, ALPN,
    CONTROLLER_SERVER_NAME,
};

/// A connection with no traffic (keep-alives included) for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Each end sends a keep-alive after this long without traffic, so a healthy but quiet
/// connection never reaches [`IDLE_TIMEOUT`].
pub const KEEP_ALIVE: Duration = Duration::from_secs(2);
/// How many bidirectional (and, separately, unidirectional) streams a peer may have
/// open at once on one connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// The rustls crypto provider Tranche uses: *ring*, always passed explicitly so that
/// no process-wide default is needed or consulted.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The transport settings of servers and clients: idle timeout, keep-alive, and how
/// many streams of each kind the peer may have open at once. A server's clients open
/// streams (requests; a peer controller's Raft messages), so a server allows
/// [`MAX_CONCURRENT_STREAMS`]; no server opens a stream on a connection a client made,
/// so a client allows none.
/// QUIC sets up the state of every stream a peer may open when the connection opens:
/// a client allowing 1,024 of each kind spent 3,072 table inserts on each
/// connection, a `tranche` command's one connection included.
pub(crate) fn base_transport(bidi: u32, uni: u32) -> TransportConfig {
    let mut t = TransportConfig::default();
    t.max_idle_timeout(Some(
        IdleTimeout::try_from(IDLE_TIMEOUT).expect("10 s is a valid idle timeout"),
    ));
    t.keep_alive_interval(Some(KEEP_ALIVE));
    t.max_concurrent_bidi_streams(VarInt::from_u32(bidi));
    t.max_concurrent_uni_streams(VarInt::from_u32(uni));
    t
}

/// The kind of stream a server's clients open: requests are bidirectional (commands
/// and reads at a controller's client port, a job's output read at an agent's log
/// port), a peer controller's Raft messages unidirectional.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientStreams {
    /// Bidirectional streams: a request and its answer.
    Bidi,
    /// Unidirectional streams: one message each.
    Uni,
}

/// Lets the server's clients open streams of the one kind they use and none of the
/// other, which then costs nothing per connection, with the receive windows of
/// `limits`. Request ports (bidirectional) start every connection at
/// [`QuicLimits::client_streams`]; [`Gate::admit`](crate::Gate::admit) raises an
/// agent's or controller's to [`QuicLimits::service_streams`]. The peer port
/// (unidirectional, controllers only) allows [`MAX_CONCURRENT_STREAMS`].
pub fn only_client_streams(
    config: &mut quinn::ServerConfig,
    kind: ClientStreams,
    limits: &QuicLimits,
) {
    let (bidi, uni) = match kind {
        ClientStreams::Bidi => (limits.client_streams, 0),
        ClientStreams::Uni => (0, MAX_CONCURRENT_STREAMS),
    };
    config.transport_config(limits.transport(bidi, uni));
}

pub(crate) fn roots(files: &TlsFiles) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(&files.ca)? {
        roots.add(cert).map_err(|e| TlsError::Rustls {
            what: format!("CA certificate {}", files.ca.display()),
            source: e,
        })?;
    }
    Ok(roots)
}

/// The revocation lists named by `files.crl` (none when it is absent).
pub(crate) fn crls(
    files: &TlsFiles,
) -> Result<Vec<CertificateRevocationListDer<'static>>, TlsError> {
    match &files.crl {
        Some(path) => load_crls(path),
        None => Ok(Vec::new()),
    }
}

fn bad_crl(files: &TlsFiles, detail: String) -> TlsError {
    TlsError::BadFile {
        what: "revocation list",
        path: files.crl.clone().unwrap_or_default(),
        detail,
    }
}

/// The verifier of clients' certificates: chained to the CA, clientAuth, within their
/// validity, and not revoked by a CA-issued list in `files.crl`.
///
/// With a revocation list, this process's own certificate is checked against it
/// first, so that a list from another CA (which would refuse every peer), a damaged
/// one, or one that revokes this very process is refused up front with a message
/// that says so.
pub(crate) fn client_verifier(
    files: &TlsFiles,
    own: &[CertificateDer<'static>],
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let crls = crls(files)?;
    let checked = !crls.is_empty();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(files)?), provider)
        .with_crls(crls)
        .only_check_end_entity_revocation()
        .build()
        .map_err(|e| match e {
            rustls::server::VerifierBuilderError::InvalidCrl(e) => bad_crl(files, format!("{e:?}")),
            e => TlsError::Quic {
                what: format!("client verifier for CA {}", files.ca.display()),
                detail: e.to_string(),
            },
        })?;
    if checked {
        match verifier.verify_client_cert(&own[0], &own[1..], UnixTime::now()) {
            Err(rustls::Error::InvalidCertificate(CertificateError::Revoked)) => {
                return Err(TlsError::BadFile {
                    what: "certificate",
                    path: files.cert.clone(),
                    detail: format!(
                        "it is revoked by the revocation list {}",
                        files.crl.clone().unwrap_or_default().display()
                    ),
                })
            }
            Err(rustls::Error::InvalidCertificate(CertificateError::UnknownRevocationStatus)) => {
                return Err(bad_crl(
                    files,
                    format!("it was not issued by the CA {}", files.ca.display()),
                ))
            }
            Err(rustls::Error::InvalidCertRevocationList(e)) => {
                return Err(bad_crl(
                    files,
                    format!(
                        "it does not verify with the CA {}: {e:?}",
                        files.ca.display()
                    ),
                ))
            }
            // Anything else wrong with this process's certificate shows in its
            // handshakes, as it does without a revocation list.
            _ => {}
        }
    }
    Ok(verifier)
}

fn what(files: &TlsFiles) -> String {
    format!(
        "certificate {}, key {}, CA {}",
        files.cert.display(),
        files.key.display(),
        files.ca.display()
    )
}

/// The QUIC server configuration of a Tranche controller.
///
/// The server presents `files.cert` (which must be a controller certificate, i.e.
/// carry the DNS name [`CONTROLLER_SERVER_NAME`]) and requires every client to present
/// a certificate chained to `files.ca` with the clientAuth usage, within its validity
/// period and not revoked by `files.crl`: a client without a certificate, or with one
/// from another CA, expired, not yet valid or revoked, fails the handshake. Read the client's
/// identity with [`peer_identity`](crate::peer_identity). ALPN is [`ALPN`]; idle
/// timeout [`IDLE_TIMEOUT`], keep-alive [`KEEP_ALIVE`], up to
/// [`MAX_CONCURRENT_STREAMS`] concurrent streams of each kind.
///
/// The revocation list is read again when its file changes (see [`CertVerifier`]).
pub fn server_config(files: &TlsFiles) -> Result<quinn::ServerConfig, TlsError> {
    server_config_with(files, &*CertVerifier::new(files)?)
}

/// [`server_config`] over a verifier the caller keeps, to close connections whose
/// peer it refuses later ([`CertVerifier::close_when_refused`]) and to share one
/// revocation list between ports.
pub fn server_config_with(
    files: &TlsFiles,
    verifier: &CertVerifier,
) -> Result<quinn::ServerConfig, TlsError> {
    let certs = load_certs(&files.cert)?;
    server_name_checked(files, &certs[0])?;
    let key = load_key(&files.key)?;
    let provider = provider();
    let verifier = verifier.required();
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Rustls {
            what: "TLS 1.3".into(),
            source: e,
        })?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Rustls {
            what: what(files),
            source: e,
        })?;
    no_resumption(&mut tls);
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicServerConfig::try_from(tls).map_err(|e| TlsError::Quic {
        what: what(files),
        detail: e.to_string(),
    })?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(
        QuicLimits::default().transport(MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS),
    );
    Ok(config)
}

/// The QUIC client configuration of any Tranche process that connects to a
/// controller (another controller, an agent, the `tranche` CLI).
///
/// The client presents `files.cert` and accepts only a server whose certificate chains
/// to `files.ca`, is within its validity period, is not revoked by `files.crl`, and is
/// valid for the server name it is dialled with: [`CONTROLLER_SERVER_NAME`] for a
/// controller, whatever its address (so an agent's or a user's certificate cannot pose
/// as a controller). ALPN and transport settings are those of
/// [`server_config`].
///
/// The revocation list is read again when its file changes (see [`CertVerifier`]).
pub fn client_config(files: &TlsFiles) -> Result<quinn::ClientConfig, TlsError> {
    let certs = load_certs(&files.cert)?;
    let key = load_key(&files.key)?;
    let verifier = CertVerifier::new(files)?.server();
    let mut tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| TlsError::Rustls {
            what: "TLS 1.3".into(),
            source: e,
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(certs, key)
        .map_err(|e| TlsError::Rustls {
            what: what(files),
            source: e,
        })?;
    // A resumed session would skip the check of the server's certificate against
    // the current revocation list.
    tls.resumption = rustls::client::Resumption::disabled();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(|e| TlsError::Quic {
        what: what(files),
        detail: e.to_string(),
    })?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(base_transport(0, 0)));
    Ok(config)
}

/// No session tickets and no session cache: a resumed session would skip the check
/// of the client's certificate, so a certificate revoked since its first handshake
/// would still get in. Every handshake is a full one.
pub(crate) fn no_resumption(tls: &mut rustls::ServerConfig) {
    tls.send_tls13_tickets = 0;
    tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
}

/// A server certificate no client would accept is refused up front, with a message
/// that says why, rather than as a handshake failure on every client.
pub(crate) fn server_name_checked(files: &TlsFiles, der: &[u8]) -> Result<(), TlsError> {
    let bad = |detail: String| TlsError::BadFile {
        what: "server certificate",
        path: files.cert.clone(),
        detail,
    };
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| bad(format!("cannot parse it: {e}")))?;
    let has_name = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .is_some_and(|ext| {
            ext.value
                .general_names
                .iter()
                .any(|gn| matches!(gn, GeneralName::DNSName(n)
                    if n.eq_ignore_ascii_case(CONTROLLER_SERVER_NAME) || n.ends_with(".agent.tranche")))
        });
    if has_name {
        Ok(())
    } else {
        Err(bad(format!(
            "it lacks the DNS name {CONTROLLER_SERVER_NAME} (or an agent's \
             <node>.agent.tranche): only controller and agent certificates can serve"
        )))
    }
}
