//! Mutual TLS over real QUIC on 127.0.0.1: who gets in, who is refused, and why.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::{ConnectionError, Endpoint, TransportErrorCode};
use std::time::SystemTime;
use tokio::sync::mpsc;
use tokio::time::timeout;

use tranche_tls::{
    agent_server_name, client_config, init_ca, issue, issue_valid_between, load_certs,
    peer_identity, revoke, server_config, Identity, RevokeTarget, Role, TlsFiles, ALPN,
    CONTROLLER_SERVER_NAME,
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

const DAY: Duration = Duration::from_secs(86_400);

/// Cluster a's certificate for `role` and `name`, valid only from `from` to `to`.
fn a_between(pki: &Pki, role: Role, name: &str, from: SystemTime, to: SystemTime) -> TlsFiles {
    issue_valid_between(pki.a.path(), pki.a.path(), role, name, from, to).unwrap()
}

/// Revokes a certificate of cluster a; returns the revocation list.
fn revoke_a(pki: &Pki, files: &TlsFiles) -> std::path::PathBuf {
    revoke(pki.a.path(), &RevokeTarget::Cert(files.cert.clone()))
        .unwrap()
        .crl
}

/// The server refuses this client: the client sees the server close with TLS alert
/// `alert`, and the server's handshake error contains `why`.
async fn assert_client_refused(server: &TlsFiles, client: &TlsFiles, alert: u8, why: &str) {
    let (_server, addr, mut seen) = start_server(server);
    let config = client_config(client).unwrap();
    let client_err = try_client(&client_endpoint(), config, addr, CONTROLLER_SERVER_NAME)
        .await
        .expect("the client is refused");
    assert!(
        matches!(&client_err, ConnectionError::ConnectionClosed(c) if c.error_code == TransportErrorCode::crypto(alert)),
        "{client_err:?}"
    );
    assert!(client_err.to_string().contains(why), "client: {client_err}");
    let server_err = next_seen(&mut seen).await.unwrap_err();
    assert!(server_err.contains(why), "server: {server_err}");
}

/// This client refuses the server, dialled as `name`, with TLS alert `alert` and a
/// reason containing `why`.
async fn assert_server_refused(
    server: &TlsFiles,
    client: &TlsFiles,
    name: &str,
    alert: u8,
    why: &str,
) {
    let (_server, addr, mut seen) = start_server(server);
    let config = client_config(client).unwrap();
    let client_err = try_client(&client_endpoint(), config, addr, name)
        .await
        .expect("the client refuses the server");
    let ConnectionError::TransportError(te) = &client_err else {
        panic!("expected the client's own TLS error, got {client_err:?}");
    };
    assert_eq!(te.code, TransportErrorCode::crypto(alert), "{te}");
    assert!(te.reason.contains(why), "{te}");
    assert!(
        next_seen(&mut seen).await.is_err(),
        "the server sees the handshake fail"
    );
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused() {
    let pki = Pki::new();
    let now = SystemTime::now();
    let old = a_between(&pki, Role::User, "old", now - 3 * DAY, now - DAY);
    // TLS alert 45, certificate_expired.
    assert_client_refused(
        &pki.a(Role::Controller, "c1"),
        &old,
        45,
        "certificate expired",
    )
    .await;
}

#[tokio::test]
async fn a_client_certificate_not_valid_yet_is_refused() {
    let pki = Pki::new();
    let now = SystemTime::now();
    let early = a_between(&pki, Role::Admin, "early", now + DAY, now + 3 * DAY);
    assert_client_refused(&pki.a(Role::Controller, "c1"), &early, 45, "not valid yet").await;
}

#[tokio::test]
async fn an_expired_or_not_yet_valid_server_certificate_is_refused() {
    let pki = Pki::new();
    let now = SystemTime::now();
    let alice = pki.a(Role::User, "alice");
    let old = a_between(&pki, Role::Controller, "old", now - 3 * DAY, now - DAY);
    assert_server_refused(
        &old,
        &alice,
        CONTROLLER_SERVER_NAME,
        45,
        "certificate expired",
    )
    .await;
    let early = a_between(&pki, Role::Controller, "early", now + DAY, now + 3 * DAY);
    assert_server_refused(&early, &alice, CONTROLLER_SERVER_NAME, 45, "not valid yet").await;
}

#[tokio::test]
async fn a_revoked_client_certificate_is_refused_and_others_still_connect() {
    let pki = Pki::new();
    let bob = issue(pki.a.path(), pki.a.path(), Role::User, "bob", &[], 30).unwrap();
    let crl = revoke_a(&pki, &bob);
    let server = TlsFiles {
        crl: Some(crl.clone()),
        ..pki.a(Role::Controller, "c1")
    };
    // TLS alert 44, certificate_revoked.
    assert_client_refused(&server, &bob, 44, "Revoked").await;

    // Alice is not listed: she gets in (with or without the list on her side).
    let (_server, addr, mut seen) = start_server(&server);
    for crl in [None, Some(crl)] {
        let alice = TlsFiles {
            crl,
            ..pki.a(Role::User, "alice")
        };
        let err = try_client(
            &client_endpoint(),
            client_config(&alice).unwrap(),
            addr,
            CONTROLLER_SERVER_NAME,
        )
        .await;
        assert!(err.is_none(), "{err:?}");
        assert_eq!(next_seen(&mut seen).await.unwrap().name, "alice");
    }
}

#[tokio::test]
async fn a_revoked_server_certificate_is_refused() {
    let pki = Pki::new();
    let localhost = vec!["127.0.0.1".to_string()];
    let c2 = issue(
        pki.a.path(),
        pki.a.path(),
        Role::Controller,
        "c2",
        &localhost,
        30,
    )
    .unwrap();
    let crl = revoke_a(&pki, &c2);
    let alice = TlsFiles {
        crl: Some(crl),
        ..pki.a(Role::User, "alice")
    };
    assert_server_refused(&c2, &alice, CONTROLLER_SERVER_NAME, 44, "Revoked").await;
}

#[tokio::test]
async fn a_certificate_of_another_role_cannot_serve_as_a_controller_or_another_agent() {
    let pki = Pki::new();
    let n1 = issue(pki.a.path(), pki.a.path(), Role::Agent, "n1", &[], 30).unwrap();
    let alice = pki.a(Role::User, "alice");
    // An agent's certificate serves its own log port, not the controllers' name...
    assert_server_refused(
        &n1,
        &alice,
        CONTROLLER_SERVER_NAME,
        42,
        "not valid for name",
    )
    .await;
    // ...nor another node's.
    assert_server_refused(
        &n1,
        &alice,
        &agent_server_name("n2"),
        42,
        "not valid for name",
    )
    .await;
    let (_server, addr, _seen) = start_server(&n1);
    let ok = try_client(
        &client_endpoint(),
        client_config(&alice).unwrap(),
        addr,
        &agent_server_name("n1"),
    )
    .await;
    assert!(ok.is_none(), "{ok:?}");
}

#[test]
fn a_revocation_list_that_cannot_work_is_refused_up_front() {
    let pki = Pki::new();
    let bob = issue(pki.a.path(), pki.a.path(), Role::User, "bob", &[], 30).unwrap();
    let crl = revoke_a(&pki, &bob);

    // A process whose own certificate is listed does not start.
    let revoked_self = TlsFiles {
        crl: Some(crl.clone()),
        ..bob.clone()
    };
    let err = client_config(&revoked_self).unwrap_err().to_string();
    assert!(
        err.contains("user-bob.pem") && err.contains("revoked"),
        "{err}"
    );

    // Another CA's list would refuse every peer.
    let mallory = issue(pki.b.path(), pki.b.path(), Role::User, "mallory2", &[], 30).unwrap();
    let foreign = revoke(pki.b.path(), &RevokeTarget::Cert(mallory.cert))
        .unwrap()
        .crl;
    let server = TlsFiles {
        crl: Some(foreign),
        ..pki.a(Role::Controller, "c1")
    };
    let err = server_config(&server).unwrap_err().to_string();
    assert!(
        err.contains("revocation list") && err.contains("not issued by the CA"),
        "{err}"
    );

    // A file without a list, and a missing file, are named.
    let alice = pki.a(Role::User, "alice");
    let not_a_crl = TlsFiles {
        crl: Some(alice.cert.clone()),
        ..alice.clone()
    };
    let err = client_config(&not_a_crl).unwrap_err().to_string();
    assert!(
        err.contains("user-alice.pem") && err.contains("X509 CRL"),
        "{err}"
    );
    let missing = TlsFiles {
        crl: Some(pki.a.path().join("nope.pem")),
        ..alice
    };
    let err = client_config(&missing).unwrap_err().to_string();
    assert!(err.contains("nope.pem"), "{err}");
}
