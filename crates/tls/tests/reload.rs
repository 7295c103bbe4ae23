//! The revocation list is read again while QUIC servers and clients run: a revoked
//! peer is refused at its next handshake and its open connection is closed, with no
//! configuration rebuilt.

use std::net::SocketAddr;
use std::time::Duration;

use quinn::{ConnectionError, Endpoint};
use tokio::time::timeout;
use tranche_tls::{
    client_config, init_ca, issue, revoke, server_config_with, CertVerifier, RevokeTarget, Role,
    TlsFiles, CLOSE_CERT_REFUSED, CONTROLLER_SERVER_NAME,
};

const LIMIT: Duration = Duration::from_secs(10);

fn pki(dir: &std::path::Path) -> (TlsFiles, TlsFiles) {
    init_ca(dir, "a", false).unwrap();
    let localhost = vec!["127.0.0.1".to_string()];
    issue(dir, dir, Role::Controller, "c1", &localhost, 30).unwrap();
    issue(dir, dir, Role::User, "alice", &[], 30).unwrap();
    let spare = issue(dir, dir, Role::User, "spare", &[], 30).unwrap();
    let crl = revoke(dir, &RevokeTarget::Cert(spare.cert)).unwrap().crl;
    let with_crl = |role, name| TlsFiles {
        crl: Some(crl.clone()),
        ..TlsFiles::in_dir(dir, role, name)
    };
    (
        with_crl(Role::Controller, "c1"),
        with_crl(Role::User, "alice"),
    )
}

/// A server that keeps every connection open, watched by its verifier.
fn serve(files: &TlsFiles) -> (Endpoint, SocketAddr) {
    let certs = CertVerifier::new(files).unwrap();
    let ep = Endpoint::server(
        server_config_with(files, &certs).unwrap(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap();
    let addr = ep.local_addr().unwrap();
    let accept = ep.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accept.accept().await {
            let certs = certs.clone();
            tokio::spawn(async move {
                if let Ok(conn) = incoming.await {
                    certs.close_when_refused(&conn);
                    conn.closed().await;
                }
            });
        }
    });
    (ep, addr)
}

/// Connects and waits for the server's side too (a refused client certificate may
/// show only once the server has read it): `Err` with the reason when refused.
async fn connect(
    ep: &Endpoint,
    cfg: quinn::ClientConfig,
    addr: SocketAddr,
) -> Result<quinn::Connection, String> {
    let conn = timeout(
        LIMIT,
        ep.connect_with(cfg, addr, CONTROLLER_SERVER_NAME).unwrap(),
    )
    .await
    .expect("handshake in time")
    .map_err(|e| e.to_string())?;
    match timeout(Duration::from_millis(500), conn.closed()).await {
        Ok(e) => Err(e.to_string()),
        Err(_) => Ok(conn),
    }
}

#[tokio::test]
async fn m6_quic_server_rereads_the_crl_and_closes_a_revoked_peers_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (c1, alice) = pki(dir.path());
    let (_server, addr) = serve(&c1);
    let client = Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    let cfg = client_config(&alice).unwrap();
    let conn = connect(&client, cfg.clone(), addr)
        .await
        .expect("alice connects");

    revoke(dir.path(), &RevokeTarget::Cert(alice.cert.clone())).unwrap();
    let why = timeout(LIMIT, conn.closed())
        .await
        .expect("the revoked peer's open connection is closed");
    match &why {
        ConnectionError::ApplicationClosed(a) => {
            assert_eq!(u64::from(a.error_code), u64::from(CLOSE_CERT_REFUSED));
            assert!(
                String::from_utf8_lossy(&a.reason).contains("revoked"),
                "{why}"
            );
        }
        other => panic!("closed otherwise: {other}"),
    }
    // The same server configuration refuses her next handshake.
    let again = connect(&client, cfg, addr).await;
    assert!(again.is_err(), "a revoked client connected again");
}

#[tokio::test]
async fn m6_quic_client_rereads_the_crl_and_refuses_a_revoked_server() {
    let dir = tempfile::tempdir().unwrap();
    let (c1, alice) = pki(dir.path());
    let (_server, addr) = serve(&c1);
    let client = Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    // One client configuration, built once, as a long-running agent holds it.
    let cfg = client_config(&alice).unwrap();
    connect(&client, cfg.clone(), addr)
        .await
        .expect("the server is accepted");

    revoke(dir.path(), &RevokeTarget::Cert(c1.cert.clone())).unwrap();
    tokio::time::sleep(tranche_tls::CRL_RECHECK + Duration::from_millis(200)).await;
    let refused = connect(&client, cfg, addr)
        .await
        .expect_err("a revoked server is refused by a running client");
    assert!(refused.to_lowercase().contains("revoked"), "{refused}");
}

#[tokio::test]
async fn m6_revoked_serials_are_known_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (c1, alice) = pki(dir.path());
    let certs = CertVerifier::new(&c1).unwrap();
    let der = tranche_tls::load_certs(&alice.cert).unwrap();
    let serial = tranche_tls::serial_of_cert(&der[0]).unwrap();
    assert!(!certs.revokes_serial(&serial));
    let r = revoke(dir.path(), &RevokeTarget::Cert(alice.cert.clone())).unwrap();
    assert_eq!(r.serial, serial);
    tokio::time::sleep(tranche_tls::CRL_RECHECK + Duration::from_millis(200)).await;
    assert!(certs.revokes_serial(&serial.to_uppercase()));
}
