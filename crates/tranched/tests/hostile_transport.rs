//! Hostile tenants against the transports of a real `tranched` on 127.0.0.1: a revoked
//! certificate over QUIC (no restart), a flood of QUIC streams and stalled frames,
//! too many connections, a slow AWS request body, an event stream that outlives its
//! token, and the metrics port and data dir a default setup exposes.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tranche_local::rig::{self, https_connect as connect, rt, serial};
use tranche_local::{wait_until, LocalCluster};
use tranche_proto::{frame, ApiError, ClientRequest, Query, Response, MAX_CLIENT_FRAME};
use tranche_tls::{revoke, RevokeTarget, Role, TlsFiles};

/// The binary these tests run.
const TRANCHED: &str = env!("CARGO_BIN_EXE_tranched");

/// Takes the one-cluster-at-a-time lock and starts a cluster as [`start`] does.
fn setup(
    extra: &str,
) -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    LocalCluster,
) {
    let g = serial();
    let dir = tempfile::tempdir().unwrap();
    let c = start(dir.path(), extra);
    (g, dir, c)
}

/// One controller with a revocation list in its config from the start (a spare
/// certificate revoked), `extra` added to its config, started.
fn start(dir: &std::path::Path, extra: &str) -> LocalCluster {
    let mut c = create(dir, extra);
    c.start_all().unwrap();
    c
}

/// [`start`]'s controller, not started yet.
fn create(dir: &std::path::Path, extra: &str) -> LocalCluster {
    let c = LocalCluster::create(dir, 1, rig::options(TRANCHED, extra)).unwrap();
    rig::add_crl(&c);
    c
}

/// An admin client once a leader is elected.
async fn leader(c: &mut LocalCluster) -> tranche_client::Client {
    rig::leader(c, Duration::from_secs(20)).await.0
}

/// A raw QUIC connection to the controller's client port as `files`.
async fn raw(ep: &quinn::Endpoint, c: &LocalCluster, files: &TlsFiles) -> quinn::Connection {
    let cfg = tranche_tls::client_config(files).unwrap();
    ep.connect_with(
        cfg,
        c.client_addrs()[0],
        tranche_tls::CONTROLLER_SERVER_NAME,
    )
    .unwrap()
    .await
    .unwrap()
}

fn endpoint() -> quinn::Endpoint {
    quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap()
}

/// A status read over its own stream of `conn`.
async fn status(conn: &quinn::Connection) -> Result<Response, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let req = ClientRequest::Read {
        query: Query::Controllers,
        stale: true,
    };
    frame::write(&mut send, &req)
        .await
        .map_err(|e| e.to_string())?;
    let _ = send.finish();
    frame::read::<Response, _>(&mut recv, MAX_CLIENT_FRAME)
        .await
        .map_err(|e| e.to_string())
}

/// The error text of an `Unavailable` answer on `recv`.
async fn unavailable(recv: &mut quinn::RecvStream) -> String {
    match tokio::time::timeout(
        Duration::from_secs(60),
        frame::read::<Response, _>(recv, MAX_CLIENT_FRAME),
    )
    .await
    {
        Ok(Ok(Response::Error(ApiError::Unavailable(m)))) => m,
        other => panic!("expected a refusal naming a limit, got {other:?}"),
    }
}

#[test]
fn m6_revoked_user_is_refused_over_quic_and_its_open_connection_closed() {
    let (_g, _dir, mut c) = setup("");
    let alice = c.issue(Role::User, "alice").unwrap();
    let bob = c.issue(Role::User, "bob").unwrap();
    rt().block_on(async {
        leader(&mut c).await;
        let ep = endpoint();
        let conn = raw(&ep, &c, &alice).await;
        assert!(matches!(status(&conn).await, Ok(Response::Controllers(_))));
        let bobs = raw(&ep, &c, &bob).await;

        // Revoke alice; the controller keeps running and is never restarted.
        revoke(&c.certs, &RevokeTarget::Cert(alice.cert.clone())).unwrap();

        // Her open connection is closed, saying why.
        let why = tokio::time::timeout(Duration::from_secs(20), conn.closed())
            .await
            .expect("a revoked user's open connection is closed");
        match &why {
            quinn::ConnectionError::ApplicationClosed(a) => {
                assert_eq!(
                    u64::from(a.error_code),
                    u64::from(tranche_tls::CLOSE_CERT_REFUSED)
                );
                assert!(
                    String::from_utf8_lossy(&a.reason).contains("revoked"),
                    "{why}"
                );
            }
            other => panic!("closed otherwise: {other}"),
        }
        // A new connection of hers is refused at the handshake.
        let cfg = tranche_tls::client_config(&alice).unwrap();
        let again = ep
            .connect_with(
                cfg,
                c.client_addrs()[0],
                tranche_tls::CONTROLLER_SERVER_NAME,
            )
            .unwrap()
            .await;
        let refused = match again {
            Err(e) => e.to_string(),
            Ok(conn) => match status(&conn).await {
                Ok(r) => panic!("a revoked user was answered: {r:?}"),
                Err(_) => conn.closed().await.to_string(),
            },
        };
        assert!(
            refused.contains("revoked") || refused.contains("certificate"),
            "{refused}"
        );
        // Bob, on the connection he already had, is still answered.
        assert!(matches!(status(&bobs).await, Ok(Response::Controllers(_))));
    });
}

#[test]
fn m4_stream_flood_and_stalled_frames_hit_the_limits_and_others_are_answered() {
    let (_g, _dir, mut c) = setup("");
    let mallory = c.issue(Role::User, "mallory").unwrap();
    let bob = c.issue(Role::User, "bob").unwrap();
    let big = (MAX_CLIENT_FRAME as u32).to_be_bytes();
    rt().block_on(async {
        let admin = leader(&mut c).await;
        let ep = endpoint();
        let conn = raw(&ep, &c, &mallory).await;
        // Five streams each declare a 16 MiB frame, send one byte, and stall. Four of
        // them hold the connection's whole budget of request bytes (64 MiB); the
        // fifth to be read is refused at once, naming the limit, its body unread.
        let (tx, mut answers) = tokio::sync::mpsc::unbounded_channel();
        let mut stalled = Vec::new();
        for _ in 0..5 {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(&big).await.unwrap();
            send.write_all(&[0]).await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(unavailable(&mut recv).await);
            });
            stalled.push(send);
        }
        let first = tokio::time::timeout(Duration::from_secs(10), answers.recv())
            .await
            .expect("one of five 16 MiB frames is refused at once")
            .unwrap();
        assert!(first.contains("connection_request_mib = 64"), "{first}");
        // More streams, half a length each, until the connection has no credit left
        // for another (limits.client_streams = 64 for a user; it was 1024).
        let mut opened = 5;
        let mut halves = Vec::new();
        for _ in 0..200 {
            match tokio::time::timeout(Duration::from_secs(3), conn.open_bi()).await {
                Ok(s) => {
                    let (mut send, recv) = s.unwrap();
                    send.write_all(&[0, 0]).await.unwrap();
                    halves.push((send, recv));
                    opened += 1;
                }
                Err(_) => break,
            }
        }
        // 64 at once, plus the refused one when its credit came back in time.
        assert!(
            (64..=65).contains(&opened),
            "{opened} streams were opened at once by one user"
        );
        // Another user is answered meanwhile, and so is the admin.
        let bobs = raw(&ep, &c, &bob).await;
        assert!(matches!(status(&bobs).await, Ok(Response::Controllers(_))));
        assert!(admin.read(Query::Controllers, true).await.is_ok());
        // Every stalled frame is cut at the frame deadline (30 s), naming it.
        for _ in 0..4 {
            let cut = tokio::time::timeout(Duration::from_secs(60), answers.recv())
                .await
                .expect("a stalled frame is cut")
                .unwrap();
            assert!(cut.contains("frame_timeout_s = 30"), "{cut}");
        }
        for (_, recv) in &mut halves {
            let cut = unavailable(recv).await;
            assert!(cut.contains("frame_timeout_s = 30"), "{cut}");
        }
        // Once the client lets go of the cut streams, their credit comes back and a
        // new request on the same connection is answered.
        drop(stalled);
        drop(halves);
        let again = tokio::time::timeout(Duration::from_secs(30), status(&conn)).await;
        assert!(
            matches!(again, Ok(Ok(Response::Controllers(_)))),
            "{again:?}"
        );
    });
}

#[test]
fn m4_connections_per_identity_are_capped() {
    let (_g, _dir, mut c) = setup("");
    let mallory = c.issue(Role::User, "mallory").unwrap();
    let bob = c.issue(Role::User, "bob").unwrap();
    rt().block_on(async {
        leader(&mut c).await;
        let ep = endpoint();
        let mut open = Vec::new();
        for _ in 0..64 {
            open.push(raw(&ep, &c, &mallory).await);
        }
        let cfg = tranche_tls::client_config(&mallory).unwrap();
        let extra = ep
            .connect_with(
                cfg,
                c.client_addrs()[0],
                tranche_tls::CONTROLLER_SERVER_NAME,
            )
            .unwrap()
            .await;
        let why = match extra {
            Err(e) => e,
            Ok(conn) => tokio::time::timeout(Duration::from_secs(10), conn.closed())
                .await
                .expect("the 65th connection of one identity is closed"),
        };
        match &why {
            quinn::ConnectionError::ApplicationClosed(a) => {
                assert_eq!(
                    u64::from(a.error_code),
                    u64::from(tranche_tls::CLOSE_TOO_MANY)
                );
                let reason = String::from_utf8_lossy(&a.reason);
                assert!(reason.contains("connections_per_identity = 64"), "{reason}");
            }
            other => panic!("closed otherwise: {other}"),
        }
        // The first 64 still work, and another identity is not affected.
        assert!(matches!(
            status(&open[63]).await,
            Ok(Response::Controllers(_))
        ));
        let bobs = raw(&ep, &c, &bob).await;
        assert!(matches!(status(&bobs).await, Ok(Response::Controllers(_))));
    });
}

// ---- HTTPS ----------------------------------------------------------------------------

/// The client TLS configuration of an HTTPS connection as `auth` (or none).
fn tls(ca: &std::path::Path, auth: Option<&TlsFiles>) -> Arc<rustls::ClientConfig> {
    Arc::new(rig::https_client_config(ca, auth))
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// What the server sends until `enough` says so, it closes, or `wait` passes.
async fn read_all(tls: &mut Tls, wait: Duration, enough: impl Fn(&str) -> bool) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    while !enough(&String::from_utf8_lossy(&out)) {
        match tokio::time::timeout_at(deadline, tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The date and the `X-Amz-Date` stamp of now, e.g. `20261207` and `20261207T041500Z`.
fn amz_now() -> (String, String) {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y%m%dT%H%M%SZ"])
        .output()
        .expect("date(1)");
    let stamp = String::from_utf8(out.stdout).unwrap().trim().to_string();
    (stamp[..8].to_string(), stamp)
}

/// A key secret file (0600, 48 bytes) in `dir`, as the `[aws]` table that names it.
fn aws_table(dir: &std::path::Path) -> String {
    let secret = dir.join("key-secret");
    std::fs::write(&secret, [7u8; 48]).unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    format!("[aws]\nkey_secret_file = \"{}\"\n", secret.display())
}

#[test]
fn m7_slow_aws_bodies_are_cut_and_https_connections_capped() {
    let dir = tempfile::tempdir().unwrap();
    let (_g, _cluster_dir, mut c) = setup(&aws_table(dir.path()));
    let addr = c.controllers[0].http_addr.clone().unwrap();
    let ca = c.certs.join("ca.pem");
    rt().block_on(async {
        use tokio::io::AsyncWriteExt;
        let admin = leader(&mut c).await;
        let key = rig::access_key(&admin, "alice", tranche_model::KeyRole::User)
            .await
            .0
            .id;
        let head = |auth: &str| {
            let (_, stamp) = amz_now();
            format!(
                "POST /v1/listservicejobs HTTP/1.1\r\nhost: controller.tranche\r\n\
                 content-type: application/json\r\ncontent-length: 1048576\r\n\
                 x-amz-date: {stamp}\r\n{auth}\r\n{{\"jobQueue\":"
            )
        };
        // Without a signature: refused before a byte of the body is read.
        let mut tls1 = connect(&addr, tls(&ca, None)).await.unwrap();
        tls1.write_all(head("").as_bytes()).await.unwrap();
        let answer = read_all(&mut tls1, Duration::from_secs(10), |s| s.contains('}')).await;
        assert!(
            answer.starts_with("HTTP/1.1 403") && answer.contains("MissingAuthenticationToken"),
            "an unsigned request waited for its body: {answer:?}"
        );
        // With a live key's header (the signature cannot be checked before the body):
        // the body must arrive within http.body_timeout_s (30 s by default).
        let (date, _) = amz_now();
        let auth = format!(
            "authorization: AWS4-HMAC-SHA256 Credential={key}/{date}/us-west-2/batch/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, Signature={}\r\n",
            "0".repeat(64)
        );
        let mut tls2 = connect(&addr, tls(&ca, None)).await.unwrap();
        tls2.write_all(head(&auth).as_bytes()).await.unwrap();
        // The same for the API's JSON bodies, from a user's certificate, meanwhile.
        let alice = c.issue(Role::User, "alice").unwrap();
        let mut tls3 = connect(&addr, tls(&ca, Some(&alice))).await.unwrap();
        tls3.write_all(
            b"POST /api/v1/jobs HTTP/1.1\r\nhost: controller.tranche\r\n\
              content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"share\":",
        )
        .await
        .unwrap();
        let (answer, api_answer) = tokio::join!(
            read_all(&mut tls2, Duration::from_secs(60), |s| s.contains('}')),
            read_all(&mut tls3, Duration::from_secs(60), |s| s.contains('}')),
        );
        assert!(
            answer.starts_with("HTTP/1.1 408") && answer.contains("body_timeout_s = 30"),
            "a slow body was not cut: {answer:?}"
        );
        assert!(
            api_answer.starts_with("HTTP/1.1 408") && api_answer.contains("http.body_timeout_s"),
            "a slow API body was not cut: {api_answer:?}"
        );
        // Connections from one address are capped (http.connections_per_ip = 256).
        let mut held = Vec::new();
        for i in 0..256 {
            match connect(&addr, tls(&ca, None)).await {
                Ok(t) => held.push(t),
                Err(e) => panic!("connection {i} refused below the cap: {e}"),
            }
        }
        let over = connect(&addr, tls(&ca, None)).await;
        assert!(
            over.is_err(),
            "a 257th connection from one address was accepted"
        );
        drop(held);
    });
}

#[test]
fn m6_event_stream_ends_when_its_token_expires() {
    use tokio::io::AsyncWriteExt;
    let (_g, _dir, mut c) = setup("");
    let alice = c.issue(Role::User, "alice").unwrap();
    let addr = c.controllers[0].http_addr.clone().unwrap();
    let ca = c.certs.join("ca.pem");
    rt().block_on(async {
        leader(&mut c).await;
        let token = tranche_tls::token::issue_token(&alice, Duration::from_secs(3)).unwrap();
        let mut s = connect(&addr, tls(&ca, None)).await.unwrap();
        let req = format!(
            "GET /api/v1/events HTTP/1.1\r\nhost: controller.tranche\r\n\
             authorization: Bearer {token}\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        // Without the check the stream runs on (a keep-alive every 15 s) forever.
        let got = read_all(&mut s, Duration::from_secs(25), |s| {
            s.contains("event: end") && s.ends_with("\n\n")
        })
        .await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(
            got.contains("event: end") && got.contains("expired"),
            "the stream outlived its token: {got:?}"
        );
    });
}

#[test]
fn l8_metrics_port_is_on_loopback_by_default() {
    let _g = serial();
    let _dir = tempfile::tempdir().unwrap();
    let mut c = create(_dir.path(), "");
    let addr: std::net::SocketAddr = c.reserve_tcp().unwrap().parse().unwrap();
    let port = addr.port();
    // A bare port: the default form of metrics_addr.
    c.prepend_config(0, &format!("metrics_addr = \"{port}\""))
        .unwrap();
    c.start_all().unwrap();
    rt().block_on(async {
        leader(&mut c).await;
        let body = wait_until("metrics served", Duration::from_secs(10), async || {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .map_err(|e| e.to_string())?;
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
                .await
                .map_err(|e| e.to_string())?;
            let mut out = String::new();
            s.read_to_string(&mut out)
                .await
                .map_err(|e| e.to_string())?;
            Ok(out)
        })
        .await
        .unwrap();
        assert!(body.contains("200"), "{body}");
    });
    // The listening socket is bound to 127.0.0.1, not to every interface.
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap()
        + &std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    let listening: Vec<&str> = tcp
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[3] == "0A" && f[1].ends_with(&format!(":{port:04X}"))
        })
        .collect();
    assert_eq!(listening.len(), 1, "{listening:?}");
    assert!(
        listening[0]
            .split_whitespace()
            .nth(1)
            .unwrap()
            .starts_with("0100007F:"),
        "{listening:?}"
    );
}

#[test]
fn l9_controller_data_dir_is_private() {
    let (_g, _dir, mut c) = setup("");
    rt().block_on(async {
        leader(&mut c).await;
    });
    // The data dir (the Raft log holds every job's env) is the controller's alone.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&c.controllers[0].data_dir)
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "data dir mode {:o}", mode & 0o777);
}

#[test]
fn m7_idle_kept_alive_https_connection_is_closed() {
    use tokio::io::AsyncWriteExt;
    let (_g, _dir, mut c) = setup("[http]\nidle_timeout_s = 2\n");
    let addr = c.controllers[0].http_addr.clone().unwrap();
    let ca = c.certs.join("ca.pem");
    rt().block_on(async {
        leader(&mut c).await;
        let mut s = connect(&addr, tls(&ca, None)).await.unwrap();
        s.write_all(b"GET /api/v1/jobs HTTP/1.1\r\nhost: controller.tranche\r\n\r\n")
            .await
            .unwrap();
        // One answer, then nothing either way: the server closes the connection
        // (read_all returns at the close, long before its 20 s).
        let start = std::time::Instant::now();
        let got = read_all(&mut s, Duration::from_secs(20), |_| false).await;
        assert!(got.starts_with("HTTP/1.1 401"), "{got}");
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "an idle kept-alive connection stayed open"
        );
    });
}

#[test]
fn m6_revoked_certificate_is_refused_on_a_kept_alive_https_connection() {
    use tokio::io::AsyncWriteExt;
    let (_g, _dir, mut c) = setup("");
    let alice = c.issue(Role::User, "alice").unwrap();
    let addr = c.controllers[0].http_addr.clone().unwrap();
    let ca = c.certs.join("ca.pem");
    rt().block_on(async {
        leader(&mut c).await;
        let mut s = connect(&addr, tls(&ca, Some(&alice))).await.unwrap();
        let req = b"GET /api/v1/whoami HTTP/1.1\r\nhost: controller.tranche\r\n\r\n";
        s.write_all(req).await.unwrap();
        let first = read_all(&mut s, Duration::from_secs(10), |t| t.contains('}')).await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        revoke(&c.certs, &RevokeTarget::Cert(alice.cert.clone())).unwrap();
        tokio::time::sleep(tranche_tls::CRL_RECHECK + Duration::from_millis(500)).await;
        // The same connection, opened before the revocation, asks again.
        s.write_all(req).await.unwrap();
        let second = read_all(&mut s, Duration::from_secs(10), |t| t.contains('}')).await;
        assert!(
            second.starts_with("HTTP/1.1 401") && second.contains("revoked"),
            "a revoked certificate's kept-alive connection was answered: {second}"
        );
    });
}

/// A POST of `body` to `path` signed with access key `id` and `secret`, as raw HTTP/1.1.
fn signed_post(path: &str, body: &str, id: &str, secret: &str) -> String {
    use tranche_aws::sigv4;
    let (_, stamp) = amz_now();
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("host", "controller.tranche".parse().unwrap());
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("x-amz-date", stamp.parse().unwrap());
    let req = sigv4::SignedRequest {
        method: "POST",
        path,
        query: "",
        headers: &headers,
        body: body.as_bytes(),
    };
    let auth = sigv4::authorization(
        &req,
        id,
        secret,
        "us-west-2",
        &["content-type", "host", "x-amz-date"],
    );
    format!(
        "POST {path} HTTP/1.1\r\nhost: controller.tranche\r\ncontent-type: application/json\r\n\
         x-amz-date: {stamp}\r\nauthorization: {auth}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn m6_access_key_of_a_revoked_certificate_signs_nothing_and_keys_expire() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let (_g, _cluster_dir, mut c) = setup(&aws_table(dir.path()));
    let alice = c.issue(Role::User, "alice").unwrap();
    let addr = c.controllers[0].http_addr.clone().unwrap();
    let ca = c.certs.join("ca.pem");
    rt().block_on(async {
        leader(&mut c).await;
        // Alice issues her own key with her certificate.
        let mine = tranche_client::Client::new(c.client_addrs(), &alice).unwrap();
        let (key, secret) = rig::access_key(&mine, "alice", tranche_model::KeyRole::User).await;
        // It expires, 90 days from now by default.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let day = 86_400_000;
        let expires = key.expires_at.expect("an issued key expires");
        assert!(
            expires > now + 89 * day && expires <= now + 90 * day + day,
            "{expires}"
        );
        let ask = || signed_post("/v1/describeserviceenvironments", "{}", &key.id, &secret);
        let mut s = connect(&addr, tls(&ca, None)).await.unwrap();
        s.write_all(ask().as_bytes()).await.unwrap();
        let before = read_all(&mut s, Duration::from_secs(10), |t| t.contains('}')).await;
        assert!(before.starts_with("HTTP/1.1 200"), "{before}");

        revoke(&c.certs, &RevokeTarget::Cert(alice.cert.clone())).unwrap();
        tokio::time::sleep(tranche_tls::CRL_RECHECK + Duration::from_millis(500)).await;
        let mut s = connect(&addr, tls(&ca, None)).await.unwrap();
        s.write_all(ask().as_bytes()).await.unwrap();
        let after = read_all(&mut s, Duration::from_secs(10), |t| t.contains('}')).await;
        assert!(
            after.starts_with("HTTP/1.1 403") && after.contains("revoked"),
            "the key of a revoked certificate still signs: {after}"
        );
    });
}
