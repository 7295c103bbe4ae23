//! The HTTPS API against a real 3-controller cluster on 127.0.0.1: each role's allowed
//! and refused calls, a follower forwarding writes, bad bodies refused with the field
//! named and nothing changed, tokens (good, expired, forged, revoked), a certificate
//! of another CA, and the event stream resumed on another controller.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tranche_local::rig::{self, now_s, rt, serial};
use tranche_local::{demo, wait_until, LocalCluster};
use tranche_tls::{revoke, RevokeTarget, Role, TlsFiles};

/// The binary these tests run.
const TRANCHED: &str = env!("CARGO_BIN_EXE_tranched");

/// How a test client authenticates.
#[derive(Clone)]
enum Auth {
    None,
    Cert(TlsFiles),
    Token(String),
}

/// A minimal HTTPS client: one connection per request, the cluster CA as the only
/// root, the controllers' TLS name.
#[derive(Clone)]
struct Http {
    ca: std::path::PathBuf,
}

struct Reply {
    status: u16,
    headers: hyper::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
    fn field(&self) -> String {
        self.json()["error"]["field"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

impl Http {
    fn tls(&self, auth: &Auth) -> rustls::ClientConfig {
        let cert = match auth {
            Auth::Cert(f) => Some(f),
            _ => None,
        };
        rig::https_client_config(&self.ca, cert)
    }

    /// Sends one request; `Err` when the connection or handshake fails.
    async fn send(
        &self,
        addr: &str,
        auth: &Auth,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Result<Reply, String> {
        let tls = rig::https_connect(addr, Arc::new(self.tls(auth)))
            .await
            .map_err(|e| e.to_string())?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "controller.tranche");
        if let Auth::Token(t) = auth {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .unwrap();
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes()
            .to_vec();
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// Declares a 2 MiB submit body, sends its first bytes, and returns the raw answer.
    async fn oversize(&self, addr: &str, auth: &Auth) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tls = rig::https_connect(addr, Arc::new(self.tls(auth)))
            .await
            .unwrap();
        let head = format!(
            "POST /api/v1/jobs HTTP/1.1\r\nhost: controller.tranche\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{{\"share\": \"lend\", ",
            2 << 20
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&out).contains("}}") {
            match tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn get(&self, addr: &str, auth: &Auth, path: &str) -> Reply {
        self.send(addr, auth, "GET", path, None, &[]).await.unwrap()
    }

    async fn post(&self, addr: &str, auth: &Auth, path: &str, body: Value) -> Reply {
        self.send(
            addr,
            auth,
            "POST",
            path,
            Some(body.to_string().into_bytes()),
            &[],
        )
        .await
        .unwrap()
    }
}

fn http_addrs(c: &LocalCluster) -> Vec<String> {
    c.controllers
        .iter()
        .map(|c| c.http_addr.clone().expect("http_addr"))
        .collect()
}

/// Starts three controllers with a revocation list in every controller's config;
/// returns the cluster and its HTTPS addresses.
fn start(dir: &std::path::Path) -> (LocalCluster, Vec<String>) {
    let mut c = LocalCluster::create(dir, 3, rig::options(TRANCHED, "")).unwrap();
    rig::add_crl(&c);
    c.start_all().unwrap();
    let addrs = http_addrs(&c);
    (c, addrs)
}

fn submit_body(share: &str) -> Value {
    json!({"share": share, "gpus": 1, "command": ["true"]})
}

#[test]
fn roles_forwarding_bad_bodies_and_tokens() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (mut c, addrs) = start(dir.path());
    let alice = Auth::Cert(c.issue(Role::User, "alice").unwrap());
    let bob = Auth::Cert(c.issue(Role::User, "bob").unwrap());
    let ops = Auth::Cert(c.issue(Role::Operator, "ops").unwrap());
    let admin = Auth::Cert(c.issue(Role::Admin, "admin").unwrap());
    let agent = Auth::Cert(c.issue(Role::Agent, "n1").unwrap());
    let carol_files = c.issue(Role::User, "carol").unwrap();
    let http = Http {
        ca: c.certs.join("ca.pem"),
    };
    rt().block_on(async {
        let (client, leader) = rig::leader(&mut c, Duration::from_secs(20)).await;
        rig::apply(&client, demo::objects()).await;
        let lead = addrs[leader].clone();
        let follower = addrs[(leader + 1) % 3].clone();

        // Health and the document need no credentials; everything else does.
        let h = http.get(&follower, &Auth::None, "/api/v1/health").await;
        assert_eq!(h.status, 200, "{}", String::from_utf8_lossy(&h.body));
        assert_eq!(h.json()["leader"], json!(c.controllers[leader].member.id));
        let doc = http.get(&follower, &Auth::None, "/api/v1/openapi.json").await;
        assert_eq!(doc.status, 200);
        assert_eq!(doc.json()["openapi"], json!("3.1.0"));
        let r = http.get(&follower, &Auth::None, "/api/v1/jobs").await;
        assert_eq!((r.status, r.code()), (401, "unauthenticated".into()));
        assert!(r.headers.contains_key("www-authenticate"));

        // A user submits through a follower (forwarded to the leader), into a share it
        // belongs to, as itself.
        let r = http.post(&follower, &alice, "/api/v1/jobs", submit_body("private")).await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let job = r.json()["id"].as_u64().unwrap();
        for a in &addrs {
            let r = http.get(a, &alice, &format!("/api/v1/jobs/{job}")).await;
            assert_eq!(r.status, 200, "controller {a}");
            assert_eq!(r.json()["spec"]["user"], json!("alice"));
            assert_eq!(r.json()["spec"]["queue"], json!("q"), "the queue defaults from the share");
        }
        // Idempotency: the same client token returns the same job.
        let mut b = submit_body("lend");
        b["client_token"] = json!("tok-1");
        let first = http.post(&follower, &alice, "/api/v1/jobs", b.clone()).await;
        let again = http.post(&lead, &alice, "/api/v1/jobs", b).await;
        assert_eq!((first.status, again.status), (201, 200));
        assert_eq!(first.json()["id"], again.json()["id"]);
        assert_eq!(again.json()["existing"], json!(true));

        // Refusals by role, each changing nothing.
        let count = |r: Reply| r.json()["jobs"].as_array().unwrap().len();
        let before = count(http.get(&lead, &admin, "/api/v1/jobs?limit=1000").await);
        let r = http.post(&lead, &bob, "/api/v1/jobs", submit_body("private")).await;
        assert_eq!((r.status, r.code()), (403, "forbidden".into()), "bob is not a member of private");
        let mut as_alice = submit_body("lend");
        as_alice["user"] = json!("alice");
        let r = http.post(&lead, &bob, "/api/v1/jobs", as_alice).await;
        assert_eq!(r.status, 403, "a user submits only as itself");
        let r = http.post(&lead, &ops, "/api/v1/jobs", submit_body("lend")).await;
        assert_eq!(r.status, 403, "operators do not submit");
        let r = http.post(&lead, &bob, &format!("/api/v1/jobs/{job}/cancel"), json!({})).await;
        assert_eq!(r.status, 403, "bob may not cancel alice's job");
        let r = http.get(&lead, &agent, "/api/v1/jobs").await;
        assert_eq!(r.status, 403, "an agent may not list jobs");
        let r = http.get(&lead, &agent, "/api/v1/events").await;
        assert_eq!(r.status, 403, "an agent may not read the event stream");
        let r = http.get(&lead, &agent, &format!("/api/v1/jobs/{job}")).await;
        assert_eq!(r.status, 403, "an agent reads only jobs placed on its node");
        let r = http.get(&lead, &agent, "/api/v1/controllers").await;
        assert_eq!(r.status, 200, "an agent may read the controllers");
        let r = http
            .post(&lead, &bob, "/api/v1/nodes/n1/drain", json!({"reason": "x"}))
            .await;
        assert_eq!(r.status, 403, "users do not drain");
        let r = http
            .post(&lead, &ops, "/api/v1/policy", json!({"toml": "", "dry_run": true}))
            .await;
        assert_eq!(r.status, 403, "only admins apply policy");
        assert_eq!(count(http.get(&lead, &admin, "/api/v1/jobs?limit=1000").await), before);

        // Allowed: operators read and change the queue and nodes; admins apply policy.
        for path in ["/api/v1/shares", "/api/v1/queue", "/api/v1/nodes", "/api/v1/controllers"] {
            let r = http.get(&follower, &ops, path).await;
            assert_eq!(r.status, 200, "{path}: {}", String::from_utf8_lossy(&r.body));
        }
        let r = http.get(&follower, &bob, "/api/v1/shares").await;
        assert_eq!(r.json().as_array().unwrap().len(), 4);
        let r = http
            .send(&lead, &ops, "PATCH", &format!("/api/v1/jobs/{job}"), Some(br#"{"priority": 7}"#.to_vec()), &[])
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["spec"]["priority"], json!(7));
        let r = http.get(&lead, &alice, &format!("/api/v1/jobs/{job}/explain")).await;
        assert_eq!(r.status, 200);
        assert!(!r.json()["lines"].as_array().unwrap().is_empty());
        let policy = "[[policies]]\nname = \"fifo\"\n\n[[policies]]\nname = \"fifo2\"\n";
        let r = http
            .post(&follower, &admin, "/api/v1/policy", json!({"toml": policy, "dry_run": true}))
            .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let actions: Vec<_> = r.json()["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["action"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(actions, ["unchanged", "create"]);
        let objs = client.read(tranche_proto::Query::Objects, false).await.unwrap();
        match objs {
            tranche_proto::Response::Objects(o) => assert_eq!(o.policies.len(), 1, "a dry run changed nothing"),
            other => panic!("{other:?}"),
        }
        let r = http.post(&lead, &alice, &format!("/api/v1/jobs/{job}/cancel"), json!({})).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["status"], json!("CANCELLED"));
        // A share that does not exist, with or without a queue named (found by fuzzing:
        // the queue given and the unit to default once panicked).
        for body in [
            json!({"share": "nope", "gpus": 1, "command": ["true"]}),
            json!({"share": "nope", "queue": "q", "gpus": 1, "command": ["true"]}),
        ] {
            let r = http.post(&follower, &alice, "/api/v1/jobs", body).await;
            assert_eq!((r.status, r.field()), (404, "share".into()), "{}", r.json());
        }
        // An array: one submit, a job per task, named 42_7 in paths; held and
        // released by its owner only.
        let mut arr = submit_body("lend");
        arr["array"] = json!("0-2");
        let r = http.post(&follower, &alice, "/api/v1/jobs", arr).await;
        assert_eq!(r.status, 201, "{}", r.json());
        let a = r.json()["id"].as_u64().unwrap();
        let r = http.get(&lead, &alice, &format!("/api/v1/jobs?array={a}")).await;
        let ids: Vec<u64> = r.json()["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, [a, a + 1, a + 2]);
        let r = http.get(&lead, &alice, &format!("/api/v1/jobs/{a}_2")).await;
        assert_eq!((r.status, r.json()["id"].as_u64()), (200, Some(a + 2)));
        assert_eq!(r.json()["job"], json!(format!("{a}_2")));
        assert_eq!(r.json()["array"]["index"], json!(2));
        let r = http.post(&lead, &bob, &format!("/api/v1/jobs/{a}/hold"), json!({})).await;
        assert_eq!(r.status, 403, "bob may not hold alice's array");
        let r = http.post(&lead, &alice, &format!("/api/v1/jobs/{a}/hold"), json!({})).await;
        assert_eq!(r.status, 200, "{}", r.json());
        let r = http.get(&lead, &alice, &format!("/api/v1/jobs/{a}_1")).await;
        assert_eq!((r.json()["status"].as_str(), r.json()["held"].as_bool()), (Some("PENDING"), Some(true)));
        let r = http.post(&lead, &alice, &format!("/api/v1/jobs/{a}_1/release"), json!({})).await;
        assert_eq!(r.json()["status"], json!("RUNNABLE"), "{}", r.json());
        let r = http.get(&lead, &alice, &format!("/api/v1/jobs/{a}_0")).await;
        assert_eq!(r.json()["held"], json!(true), "releasing one task leaves the others held");
        let mut dep = submit_body("lend");
        dep["dependency"] = json!(format!("afterok:{a}_0"));
        let r = http.post(&follower, &alice, "/api/v1/jobs", dep).await;
        let d = r.json()["id"].as_u64().unwrap();
        let r = http.get(&lead, &alice, &format!("/api/v1/jobs/{d}")).await;
        assert_eq!(r.json()["status"], json!("PENDING"));
        assert_eq!(r.json()["waiting_for"], json!([format!("afterok:{a}")]));
        let r = http.get(&lead, &alice, "/api/v1/jobs/99999").await;
        assert_eq!((r.status, r.code()), (404, "not_found".into()));

        // Bad bodies: 400 naming the field, nothing changed.
        let before = count(http.get(&lead, &admin, "/api/v1/jobs?limit=1000").await);
        let bad = |body: &[u8]| body.to_vec();
        for (body, code, field) in [
            (bad(b"{\"share\": "), "bad_request", ""),
            (bad(br#"{"share":"lend","gpus":1,"command":["true"],"bogus":1}"#), "invalid", "bogus"),
            (bad(br#"{"share":"lend","gpus":"two","command":["true"]}"#), "invalid", "gpus"),
            (bad(br#"{"share":"lend","gpus":1}"#), "invalid", "command"),
            (bad(br#"{"share":"lend","gpus":1,"command":["true"],"checkpoint":{"signal":"SIGTERM","x":1}}"#), "invalid", "checkpoint.x"),
            (bad(br#"{"share":"lend","gpus":1,"command":["true"],"priority":12000}"#), "invalid", "priority"),
            (bad(br#"{"share":"lend","gpus":1,"command":["true"]} trailing"#), "bad_request", ""),
        ] {
            let r = http.send(&follower, &alice, "POST", "/api/v1/jobs", Some(body.clone()), &[]).await.unwrap();
            assert_eq!(
                (r.status, r.code(), r.field()),
                (400, code.to_string(), field.to_string()),
                "{}: {}",
                String::from_utf8_lossy(&body),
                String::from_utf8_lossy(&r.body)
            );
        }
        // A body over 1 MiB is refused from its Content-Length, before it is read: the
        // answer comes while the client is still sending.
        let answer = http.oversize(&follower, &alice).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("\"too_large\""), "{answer}");
        let r = http.get(&lead, &alice, "/api/v1/jobs?limit=0").await;
        assert_eq!((r.status, r.field()), (400, "limit".into()));
        let r = http.get(&lead, &alice, "/api/v1/jobs?state=DONE").await;
        assert_eq!((r.status, r.field()), (400, "state".into()));
        let r = http.get(&lead, &alice, "/api/v1/jobs?color=red").await;
        assert_eq!(r.status, 400, "unknown query parameters are refused");
        assert_eq!(count(http.get(&lead, &admin, "/api/v1/jobs?limit=1000").await), before);

        // Tokens: a good one speaks for its certificate; expired, forged, refused.
        let tok = tranche_tls::token::issue_token(&carol_files, Duration::from_secs(600)).unwrap();
        let carol = Auth::Token(tok.clone());
        let r = http.get(&follower, &carol, "/api/v1/whoami").await;
        assert_eq!(r.json()["name"], json!("carol"));
        assert_eq!(r.json()["via"], json!("token"));
        let r = http.post(&follower, &carol, "/api/v1/jobs", submit_body("lend")).await;
        assert_eq!(r.status, 201);
        let r = http.post(&follower, &carol, "/api/v1/jobs", submit_body("private")).await;
        assert_eq!(r.status, 403, "a token has its certificate's rights, no more");
        let old = tranche_tls::token::issue_token_at(&carol_files, Duration::from_secs(60), now_s() - 3600).unwrap();
        let r = http.get(&follower, &Auth::Token(old), "/api/v1/whoami").await;
        assert_eq!(r.status, 401);
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("expired"));
        let mut forged = tok.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == 'A' { 'B' } else { 'A' });
        let r = http.get(&follower, &Auth::Token(forged), "/api/v1/whoami").await;
        assert_eq!(r.status, 401);
        // An agent's certificate issues no tokens.
        let n1 = c.issue(Role::Agent, "n2").unwrap();
        assert!(tranche_tls::token::issue_token(&n1, Duration::from_secs(60)).is_err());

        // A certificate of another CA fails the handshake.
        let other = dir.path().join("other-ca");
        tranche_tls::init_ca(&other, "other", false).unwrap();
        let stranger = tranche_tls::issue(&other, &other, Role::Admin, "admin", &[], 1).unwrap();
        let r = http.send(&lead, &Auth::Cert(stranger.clone()), "GET", "/api/v1/whoami", None, &[]).await;
        assert!(r.is_err(), "a foreign certificate was accepted");
        // A token made with a foreign certificate is refused too.
        let foreign = tranche_tls::token::issue_token(&stranger, Duration::from_secs(60)).unwrap();
        let r = http.get(&lead, &Auth::Token(foreign), "/api/v1/whoami").await;
        assert_eq!(r.status, 401);
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("CA"), "{}", r.json());

        // Revoking carol's certificate ends her token and her certificate on the port.
        revoke(&c.certs, &RevokeTarget::Cert(carol_files.cert.clone())).unwrap();
        wait_until("the revoked certificate's token is refused", Duration::from_secs(10), async || {
            let r = http.get(&follower, &carol, "/api/v1/whoami").await;
            if r.status == 401 { Ok(()) } else { Err(format!("{}", r.status)) }
        })
        .await
        .unwrap();
        let r = http.get(&follower, &carol, "/api/v1/whoami").await;
        assert!(r.json()["error"]["message"].as_str().unwrap().contains("revoked"), "{}", r.json());
        let r = http.send(&follower, &Auth::Cert(carol_files.clone()), "GET", "/api/v1/whoami", None, &[]).await;
        assert!(r.is_err(), "a revoked certificate was accepted at the handshake");
        // Others are unaffected.
        assert_eq!(http.get(&follower, &alice, "/api/v1/whoami").await.status, 200);
    });
    for i in 0..c.controllers.len() {
        c.stop(i);
    }
}

/// Reads a server-sent event stream until `done` says so or the time runs out; returns
/// (event kind, data, id) triples.
async fn read_events(
    http: &Http,
    addr: &str,
    auth: &Auth,
    path: &str,
    last_id: Option<u64>,
    until: impl Fn(&[(String, Value, Option<u64>)]) -> bool,
) -> Vec<(String, Value, Option<u64>)> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let conn = tokio_rustls::TlsConnector::from(Arc::new(http.tls(auth)));
    let name = rustls_pki_types::ServerName::try_from("controller.tranche").unwrap();
    let tls = conn.connect(name, tcp).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .uri(path)
        .header("host", "controller.tranche");
    if let Auth::Token(t) = auth {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(id) = last_id {
        req = req.header("last-event-id", id.to_string());
    }
    let resp = send
        .send_request(req.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut text = String::new();
    let mut out: Vec<(String, Value, Option<u64>)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !until(&out) {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .unwrap_or_else(|_| panic!("events so far: {out:?}"))
            .unwrap()
            .unwrap();
        if let Ok(d) = frame.into_data() {
            text += std::str::from_utf8(&d).unwrap();
        }
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let (mut kind, mut data, mut id) = (String::new(), Value::Null, None);
            for line in block.lines() {
                if let Some(k) = line.strip_prefix("event: ") {
                    kind = k.into();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                } else if let Some(i) = line.strip_prefix("id: ") {
                    id = Some(i.parse().unwrap());
                }
            }
            if !kind.is_empty() {
                out.push((kind, data, id));
            }
        }
    }
    out
}

#[test]
fn events_stream_job_transitions_and_resume_on_another_controller() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (mut c, addrs) = start(dir.path());
    let alice_files = c.issue(Role::User, "alice").unwrap();
    let alice = Auth::Token(
        tranche_tls::token::issue_token(&alice_files, Duration::from_secs(600)).unwrap(),
    );
    let http = Http {
        ca: c.certs.join("ca.pem"),
    };
    rt().block_on(async {
        let (client, leader) = rig::leader(&mut c, Duration::from_secs(20)).await;
        rig::apply(&client, demo::objects()).await;
        let first = addrs[(leader + 1) % 3].clone();
        let second = addrs[(leader + 2) % 3].clone();
        let r = http.get(&first, &alice, "/api/v1/health").await;
        let start = r.json()["applied"].as_u64().unwrap();
        // No agents: a submitted job waits RUNNABLE; the cancel ends it.
        let r = http
            .post(
                &first,
                &alice,
                "/api/v1/jobs",
                json!({"share": "lend", "gpus": 1, "command": ["true"]}),
            )
            .await;
        assert_eq!(r.status, 201);
        let job = r.json()["id"].as_u64().unwrap();
        let path = format!("/api/v1/events?after={start}&job={job}");
        let got = read_events(&http, &first, &alice, &path, None, |e| {
            e.iter().any(|(_, d, _)| d["to"] == json!("RUNNABLE"))
        })
        .await;
        let runnable = got
            .iter()
            .find(|(_, d, _)| d["to"] == json!("RUNNABLE"))
            .unwrap();
        assert_eq!(runnable.1["from"], json!("SUBMITTED"));
        assert_eq!(runnable.1["job"], json!(job));
        let seen = got
            .iter()
            .filter_map(|(_, _, id)| *id)
            .max()
            .expect("an id");
        assert_eq!(seen, runnable.1["index"].as_u64().unwrap());

        // The first controller goes away; the cancel happens meanwhile; the stream
        // resumes on another controller from the last id, with nothing repeated.
        let first_i = (leader + 1) % 3;
        c.kill(first_i);
        let r = http
            .post(
                &second,
                &alice,
                &format!("/api/v1/jobs/{job}/cancel"),
                json!({"reason": "enough"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let path = format!("/api/v1/events?job={job}");
        let more = read_events(&http, &second, &alice, &path, Some(seen), |e| {
            e.iter().any(|(_, d, _)| d["to"] == json!("CANCELLED"))
        })
        .await;
        assert!(
            more.iter()
                .all(|(k, d, _)| k == "job" && d["index"].as_u64().unwrap() > seen),
            "{more:?}"
        );
        let cancelled = more
            .iter()
            .find(|(_, d, _)| d["to"] == json!("CANCELLED"))
            .unwrap();
        assert_eq!(cancelled.1["from"], json!("RUNNABLE"));
        assert!(
            cancelled.1["reason"].as_str().unwrap().contains("enough"),
            "{:?}",
            cancelled.1
        );
        // An index older than any this controller has gets a reset first.
        let r = read_events(
            &http,
            &second,
            &alice,
            "/api/v1/events?after=0",
            None,
            |e| !e.is_empty(),
        )
        .await;
        assert_eq!(r[0].0, "reset", "{r:?}");
    });
    for i in 0..c.controllers.len() {
        c.stop(i);
    }
}
