//! Who may call `/api/v1/`, in process over the controller's test rig: no credentials
//! and bad tokens are 401, a role refused a route is 403, a change must be JSON from
//! this site, and a body over the limit is refused; none of them changes anything.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use common::*;
use serde_json::json;
use tranche_http::MAX_BODY;
use tranche_tls::Role;

#[tokio::test]
async fn no_credentials_and_bad_tokens_are_401() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());

    // Health and the OpenAPI document need no credentials; everything else does.
    let r = get(&app, &Who::Nobody, "/api/v1/health").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["status"], json!("ok"));
    assert_eq!(r.json()["leader"], json!(1));
    let r = get(&app, &Who::Nobody, "/api/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["openapi"], json!("3.1.0"));
    for (method, path) in [
        (Method::GET, "/api/v1/jobs"),
        (Method::GET, "/api/v1/jobs/1"),
        (Method::POST, "/api/v1/jobs"),
        (Method::POST, "/api/v1/jobs/1/cancel"),
        (Method::GET, "/api/v1/whoami"),
        (Method::GET, "/api/v1/shares"),
    ] {
        let r = call(
            &app,
            &Who::Nobody,
            method.clone(),
            path,
            Some(b"{}".to_vec()),
        )
        .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNAUTHORIZED, "unauthenticated".into()),
            "{method} {path}: {}",
            r.text()
        );
        assert!(
            r.headers.contains_key(header::WWW_AUTHENTICATE),
            "{method} {path}"
        );
    }

    // A good token speaks for its certificate.
    let tok = h.token(Role::User, "carol");
    let r = get(&app, &Who::Token(tok.clone()), "/api/v1/whoami").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        (
            r.json()["name"].clone(),
            r.json()["role"].clone(),
            r.json()["via"].clone()
        ),
        (json!("carol"), json!("user"), json!("token"))
    );
    let r = get(&app, &user("alice"), "/api/v1/whoami").await;
    assert_eq!(r.json()["via"], json!("certificate"));

    // Forged, expired, foreign, or not a bearer token at all: 401.
    let mut forged = tok.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let d = h.dir.path();
    let carol = tranche_tls::TlsFiles::in_dir(d, Role::User, "carol");
    let now = tranche_controller::mailbox::wall_ms() / 1000;
    let old =
        tranche_tls::token::issue_token_at(&carol, Duration::from_secs(60), now - 3600).unwrap();
    let other = tempfile::tempdir().unwrap();
    tranche_tls::init_ca(other.path(), "other", false).unwrap();
    let stranger =
        tranche_tls::issue(other.path(), other.path(), Role::Admin, "admin", &[], 1).unwrap();
    let foreign = tranche_tls::token::issue_token(&stranger, Duration::from_secs(60)).unwrap();
    for (what, t, says) in [
        ("forged", forged, ""),
        ("expired", old, "expired"),
        ("of another CA", foreign, "CA"),
        ("empty", String::new(), ""),
    ] {
        let r = get(&app, &Who::Token(t), "/api/v1/whoami").await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNAUTHORIZED, "unauthenticated".into()),
            "a token {what}: {}",
            r.text()
        );
        assert!(
            r.message().contains(says),
            "a token {what}: {}",
            r.message()
        );
    }
    let req = Request::get("/api/v1/whoami")
        .header(header::AUTHORIZATION, "Basic YWxpY2U6eA==")
        .body(Body::empty())
        .unwrap();
    let r = send(&app, req).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.message().contains("Bearer"), "{}", r.message());
    // A token wins over the certificate of the connection.
    let mut req = Request::get("/api/v1/whoami").body(Body::empty()).unwrap();
    req.headers_mut()
        .insert(header::AUTHORIZATION, "Bearer nonsense".parse().unwrap());
    let r = send(&app, with_credentials(req, &user("alice"))).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "a bad token is not excused by a certificate"
    );
}

#[tokio::test]
async fn roles_are_refused_the_routes_they_may_not_use() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let (bob, ops, admin, agent) = (
        user("bob"),
        Who::Cert(Role::Operator, "ops"),
        Who::Cert(Role::Admin, "admin"),
        Who::Cert(Role::Agent, "n1"),
    );
    let policy = json!({"toml": "[[policies]]\nname = \"fifo\"\n\n[[policies]]\nname = \"fifo2\"\n", "dry_run": true});
    let before = h.rig.writes();
    for (who, method, path, body, why) in [
        (
            &bob,
            Method::POST,
            "/api/v1/policy",
            Some(policy.clone()),
            "only admins apply policy",
        ),
        (
            &ops,
            Method::POST,
            "/api/v1/policy",
            Some(policy.clone()),
            "only admins apply policy",
        ),
        (
            &bob,
            Method::POST,
            "/api/v1/nodes/n1/drain",
            Some(json!({"reason": "x"})),
            "users do not drain",
        ),
        (
            &bob,
            Method::POST,
            "/api/v1/nodes/n1/resume",
            Some(json!({})),
            "users do not resume",
        ),
        (
            &bob,
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"share": "private", "gpus": 1, "command": ["true"]})),
            "bob is not a member of private",
        ),
        (
            &bob,
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"share": "lend", "gpus": 1, "command": ["true"], "user": "alice"})),
            "a user submits only as itself",
        ),
        (
            &ops,
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"share": "lend", "gpus": 1, "command": ["true"]})),
            "operators do not submit",
        ),
        (
            &bob,
            Method::POST,
            "/api/v1/jobs/1/cancel",
            Some(json!({})),
            "bob may not cancel alice's job",
        ),
        (
            &agent,
            Method::GET,
            "/api/v1/jobs",
            None,
            "an agent may not list jobs",
        ),
        (
            &agent,
            Method::GET,
            "/api/v1/events",
            None,
            "an agent may not read the event stream",
        ),
    ] {
        let body = body.map(|b| b.to_string().into_bytes());
        let r = call(&app, who, method.clone(), path, body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::FORBIDDEN, "forbidden".into()),
            "{why}: {method} {path}: {}",
            r.text()
        );
        assert!(!r.message().is_empty(), "{why}: the refusal says why");
    }
    assert_eq!(h.rig.writes(), before, "a refused request reached the node");

    // Allowed: operators read the queue and nodes, agents the controllers, admins
    // apply policy.
    for path in [
        "/api/v1/shares",
        "/api/v1/queue",
        "/api/v1/nodes",
        "/api/v1/controllers",
    ] {
        let r = get(&app, &ops, path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.text());
    }
    let r = get(&app, &agent, "/api/v1/controllers").await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "an agent may read the controllers"
    );
    let r = get(&app, &bob, "/api/v1/shares").await;
    assert_eq!(r.json().as_array().unwrap().len(), 2, "{}", r.text());
    let r = post(&app, &admin, "/api/v1/policy", policy).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let actions: Vec<_> = r.json()["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["action"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(actions, ["unchanged", "create"]);
    assert_eq!(h.rig.writes(), before, "a dry run changed nothing");
}

#[tokio::test]
async fn changes_must_be_json_from_this_site() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let body = br#"{"share":"lend","gpus":1,"command":["true"]}"#;
    let req = Request::post("/api/v1/jobs")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(&body[..]))
        .unwrap();
    let r = send(&app, with_credentials(req, &user("alice"))).await;
    assert_eq!(
        (r.status, r.code(), r.field()),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type".into(),
            "Content-Type".into()
        ),
        "{}",
        r.text()
    );
    let req = Request::post("/api/v1/jobs")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::HOST, "c1.example:8443")
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::from(&body[..]))
        .unwrap();
    let r = send(&app, with_credentials(req, &user("alice"))).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
    assert!(r.message().contains("evil.example"), "{}", r.message());
    assert_eq!(r.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(h.rig.writes(), 0, "a refused change reached the node");

    // A path or method the API does not serve.
    let r = get(&app, &user("alice"), "/api/v1/nope").await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::NOT_FOUND, "not_found".into())
    );
    let r = call(&app, &user("alice"), Method::DELETE, "/api/v1/jobs", None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    // A JSON body just over the limit: a long string in a field that exists.
    let pad = "x".repeat(MAX_BODY);
    let big = json!({"share": "lend", "gpus": 1, "command": ["true", pad]}).to_string();
    assert!(big.len() > MAX_BODY);

    // Refused from its Content-Length, and from its bytes where none is given.
    let declared = Request::post("/api/v1/jobs")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, big.len())
        .body(Body::from(big.clone()))
        .unwrap();
    let chunks = futures_util::stream::iter(
        big.clone()
            .into_bytes()
            .chunks(64 * 1024)
            .map(|c| Ok::<_, std::io::Error>(axum::body::Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let streamed = Request::post("/api/v1/jobs")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(chunks))
        .unwrap();
    for (what, req) in [("declared", declared), ("streamed", streamed)] {
        let r = send(&app, with_credentials(req, &user("alice"))).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, "too_large".into()),
            "{what}: {}",
            r.text()
        );
        assert!(
            r.message().contains(&MAX_BODY.to_string()),
            "{}",
            r.message()
        );
    }
    assert_eq!(h.rig.writes(), 0, "an oversized submit reached the node");

    // Just under the limit is read (and refused for what it says, not its size).
    let pad = "x".repeat(MAX_BODY - 100);
    let fits = json!({"share": "lend", "gpus": 1, "command": ["true"], "name": pad});
    let r = post(&app, &user("alice"), "/api/v1/jobs", fits).await;
    assert_ne!(
        r.code(),
        "too_large",
        "{}",
        &r.text()[..200.min(r.text().len())]
    );
}
