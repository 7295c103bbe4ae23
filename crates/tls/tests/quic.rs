//! Mutual TLS over real QUIC on 127.0.0.1: who gets in, who is refused, and why.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{ConnectionError, Endpoint, TransportErrorCode};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tranche_tls::{
    client_config, init_ca, issue, load_certs, peer_identity, server_config, Identity, Role,
    TlsFiles, ALPN, CONTROLLER_SERVER_NAME,
};

const LIMIT: Duration = Duration::from_secs(10);

/// What the server saw of one incoming connection: the client's identity, or the
/// handshake error.
type Seen = Result<Identity, String>;

/// Two clusters' CAs: `a` with controller `c1`, user `alice`; `b` with controller
/// `evil` and user `mallory`.
struct Pki {
    a: tempfile::TempDir,
    b: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        init_ca(a.path(), "a", false).unwrap();
        init_ca(b.path(), "b", false).unwrap();
        let localhost = vec!["127.0.0.1".to_string()];
        issue(a.path(), a.path(), Role::Controller, "c1", &localhost, 30).unwrap();
        issue(a.path(), a.path(), Role::User, "alice", &[], 30).unwrap();
        issue(b.path(), b.path(), Role::Controller, "evil", &localhost, 30).unwrap();
        issue(b.path(), b.path(), Role::User, "mallory", &[], 30).unwrap();
        Pki { a, b }
    }
    fn a(&self, role: Role, name: &str) -> TlsFiles {
        TlsFiles::in_dir(self.a.path(), role, name)
    }
    fn b(&self, role: Role, name: &str) -> TlsFiles {
        TlsFiles::in_dir(self.b.path(), role, name)
    }
}

/// A server on 127.0.0.1 that reports every incoming connection's outcome and, on a
/// successful one, answers one bidirectional stream with "pong".
fn start_server(files: &TlsFiles) -> (Endpoint, SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let config = server_config(files).unwrap();
    let endpoint = Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let ep = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                match incoming.await {
                    Ok(conn) => {
                        let _ = tx.send(peer_identity(&conn).map_err(|e| e.to_string()));
                        if let Ok((mut send, mut recv)) = conn.accept_bi().await {
                            let got = recv.read_to_end(64).await.unwrap_or_default();
                            if got == b"ping" {
                                let _ = send.write_all(b"pong").await;
                                let _ = send.finish();
                            }
                        }
                        conn.closed().await;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                    }
                }
            });
        }
    });
    (endpoint, addr, rx)
}

fn client_endpoint() -> Endpoint {
    Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap()
}

/// Connects and, when the client's side of the handshake completes, does one
/// request/response exchange; returns the connection error seen by the client, if any.
/// (In TLS 1.3 the client may finish its handshake before the server has checked the
/// client's certificate, so a refusal can surface on the first stream instead.)
async fn try_client(
    endpoint: &Endpoint,
    config: quinn::ClientConfig,
    addr: SocketAddr,
    name: &str,
) -> Option<ConnectionError> {
    let connecting = endpoint.connect_with(config, addr, name).unwrap();
    let conn = match timeout(LIMIT, connecting)
        .await
        .expect("handshake finishes in time")
    {
        Ok(conn) => conn,
        Err(e) => return Some(e),
    };
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.ok()?;
        send.write_all(b"ping").await.ok()?;
        let _ = send.finish();
        let got = recv.read_to_end(64).await.ok()?;
        (got == b"pong").then_some(())
    };
    match timeout(LIMIT, exchange)
        .await
        .expect("exchange finishes in time")
    {
        Some(()) => None,
        None => Some(
            timeout(LIMIT, conn.closed())
                .await
                .expect("connection closes in time"),
        ),
    }
}

async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    timeout(LIMIT, rx.recv())
        .await
        .expect("server reports in time")
        .expect("server alive")
}

#[tokio::test]
async fn a_user_from_the_cluster_ca_connects_and_is_identified() {
    let pki = Pki::new();
    let (_server, addr, mut seen) = start_server(&pki.a(Role::Controller, "c1"));
    let client = client_endpoint();
    let config = client_config(&pki.a(Role::User, "alice")).unwrap();
    let conn = timeout(
        LIMIT,
        client
            .connect_with(config, addr, CONTROLLER_SERVER_NAME)
            .unwrap(),
    )
    .await
    .unwrap()
    .expect("handshake succeeds");
    assert_eq!(
        peer_identity(&conn).unwrap(),
        Identity {
            role: Role::Controller,
            name: "c1".into()
        },
        "the client sees the controller"
    );
    let hd = conn
        .handshake_data()
        .unwrap()
        .downcast::<quinn::crypto::rustls::HandshakeData>()
        .unwrap();
    assert_eq!(hd.protocol.as_deref(), Some(ALPN));
    assert_eq!(
        next_seen(&mut seen).await.unwrap(),
        Identity {
            role: Role::User,
            name: "alice".into()
        },
        "the server sees alice"
    );
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(b"ping").await.unwrap();
    send.finish().unwrap();
    assert_eq!(recv.read_to_end(64).await.unwrap(), b"pong");
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let pki = Pki::new();
    let (_server, addr, mut seen) = start_server(&pki.a(Role::Controller, "c1"));

    let mut roots = rustls::RootCertStore::empty();
    for c in load_certs(&pki.a.path().join("ca.pem")).unwrap() {
        roots.add(c).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let config = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap(),
    ));

    let client_err = try_client(&client_endpoint(), config, addr, CONTROLLER_SERVER_NAME)
        .await
        .expect("the client is refused");
    // The server closes the connection with TLS alert 116, certificate_required.
    assert!(
        matches!(&client_err, ConnectionError::ConnectionClosed(c) if c.error_code == TransportErrorCode::crypto(116)),
        "{client_err:?}"
    );
    assert!(
        client_err.to_string().contains("peer sent no certificates"),
        "{client_err}"
    );
    let server_err = next_seen(&mut seen).await.unwrap_err();
    assert!(
        server_err.contains("peer sent no certificates"),
        "server: {server_err}"
    );
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    let pki = Pki::new();
    let (_server, addr, mut seen) = start_server(&pki.a(Role::Controller, "c1"));
    // Trusts cluster a's CA (so it accepts the server), but its own certificate is b's.
    let mallory = TlsFiles {
        ca: pki.a.path().join("ca.pem"),
        ..pki.b(Role::User, "mallory")
    };
    let config = client_config(&mallory).unwrap();

    let client_err = try_client(&client_endpoint(), config, addr, CONTROLLER_SERVER_NAME)
        .await
        .expect("the client is refused");
    // The server closes the connection with TLS alert 48, unknown_ca.
    assert!(
        matches!(&client_err, ConnectionError::ConnectionClosed(c) if c.error_code == TransportErrorCode::crypto(48)),
        "{client_err:?}"
    );
    assert!(
        client_err.to_string().contains("UnknownIssuer"),
        "{client_err}"
    );
    let server_err = next_seen(&mut seen).await.unwrap_err();
    assert!(server_err.contains("UnknownIssuer"), "server: {server_err}");
}

#[tokio::test]
async fn a_client_that_trusts_another_ca_refuses_the_server() {
    let pki = Pki::new();
    let (_server, addr, mut seen) = start_server(&pki.a(Role::Controller, "c1"));
    let config = client_config(&pki.b(Role::User, "mallory")).unwrap();

    let client_err = try_client(&client_endpoint(), config, addr, CONTROLLER_SERVER_NAME)
        .await
        .expect("the client refuses the server");
    let ConnectionError::TransportError(te) = &client_err else {
        panic!("expected the client's own TLS error, got {client_err:?}");
    };
    assert_eq!(te.code, TransportErrorCode::crypto(48), "{te}");
    assert!(te.reason.contains("UnknownIssuer"), "{te}");
    assert!(
        next_seen(&mut seen).await.is_err(),
        "the server sees the handshake fail"
    );
}

#[tokio::test]
async fn the_server_is_verified_under_the_controller_name_only() {
    let pki = Pki::new();
    let (_server, addr, _seen) = start_server(&pki.a(Role::Controller, "c1"));
    let config = client_config(&pki.a(Role::User, "alice")).unwrap();
    let client_err = try_client(&client_endpoint(), config, addr, "some.other.name")
        .await
        .expect("the client refuses the server");
    let ConnectionError::TransportError(te) = &client_err else {
        panic!("expected the client's own TLS error, got {client_err:?}");
    };
    assert!(te.reason.contains("not valid for name"), "{te}");
}

#[test]
fn only_controller_and_agent_certificates_can_serve() {
    let pki = Pki::new();
    let err = server_config(&pki.a(Role::User, "alice"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("user-alice.pem") && err.contains(CONTROLLER_SERVER_NAME),
        "{err}"
    );
    let agent = issue(pki.a.path(), pki.a.path(), Role::Agent, "n1", &[], 30).unwrap();
    assert!(server_config(&agent).is_ok());
}

#[test]
fn a_key_that_does_not_match_the_certificate_is_refused() {
    let pki = Pki::new();
    let files = TlsFiles {
        key: pki.a.path().join("user-alice.key"),
        ..pki.a(Role::Controller, "c1")
    };
    let err = server_config(&files).unwrap_err().to_string();
    assert!(
        err.contains("controller-c1.pem") && err.contains("user-alice.key"),
        "{err}"
    );
}
