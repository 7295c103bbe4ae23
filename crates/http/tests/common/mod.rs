//! What the in-process tests of the HTTP API (and of the AWS endpoint, which serves on
//! its router) share: a cluster CA in a temporary directory, the [`Api`] over the
//! controller crate's test rig (a service whose writes are applied directly to an
//! in-memory state: see `tranche_controller::testing`), and requests sent to the
//! router with `tower::ServiceExt::oneshot`, as a client certificate's holder or
//! with a bearer token. No daemon starts and no port is bound.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tower::ServiceExt;
use tranche_controller::testing::Rig;
use tranche_http::{Api, Peer};
use tranche_state::State;
use tranche_tls::{CertVerifier, Identity, Role, TlsFiles};

/// The controller's API over a test rig, with a CA to issue credentials from.
pub struct Harness {
    pub rig: Rig,
    pub api: Arc<Api>,
    pub dir: tempfile::TempDir,
}

impl Harness {
    /// The API over a rig on `state`, with a fresh CA and controller `c1`'s
    /// certificate. Call within a tokio runtime.
    pub fn new(state: State) -> Harness {
        Harness::with_rig(Rig::new(state))
    }

    pub fn with_rig(rig: Rig) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        tranche_tls::init_ca(d, "test", false).unwrap();
        let local = vec!["127.0.0.1".to_string()];
        tranche_tls::issue(d, d, Role::Controller, "c1", &local, 30).unwrap();
        let tls = TlsFiles::in_dir(d, Role::Controller, "c1");
        let certs = CertVerifier::new(&tls).unwrap();
        let api = Api::new(
            rig.service.clone(),
            rig.shared.clone(),
            certs,
            tls,
            "127.0.0.1:1".parse().unwrap(),
        );
        Harness { rig, api, dir }
    }

    /// The API's router with `extra` merged in (the AWS endpoint's routes, say).
    pub fn router(&self, extra: Router<Arc<Api>>) -> Router {
        tranche_http::router(self.api.clone(), extra)
    }

    /// A bearer token for a certificate of `role` and `name` issued by this CA.
    pub fn token(&self, role: Role, name: &str) -> String {
        let d = self.dir.path();
        let files = tranche_tls::issue(d, d, role, name, &[], 1).unwrap();
        tranche_tls::token::issue_token(&files, Duration::from_secs(600)).unwrap()
    }
}

/// The controller crate's demo state (objects, node `n1`, job 1 of `alice` placed),
/// made now: the rig applies writes at the wall clock's time.
pub fn demo() -> State {
    tranche_controller::testing::demo_state_at(tranche_controller::mailbox::wall_ms())
}

/// Who sends a request.
#[derive(Clone, Debug)]
pub enum Who {
    /// No credentials at all.
    Nobody,
    /// The holder of a client certificate of the cluster with this identity (what the
    /// server puts in a request's extensions after the TLS handshake).
    Cert(Role, &'static str),
    /// `Authorization: Bearer <token>`.
    Token(String),
}

pub fn user(name: &'static str) -> Who {
    Who::Cert(Role::User, name)
}

/// An answer: status, headers and body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The API error's `code`.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .into()
    }

    /// The API error's `field` (empty where it names none).
    pub fn field(&self) -> String {
        self.json()["error"]["field"]
            .as_str()
            .unwrap_or_default()
            .into()
    }

    pub fn message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .into()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `req` as sent by `who`.
pub fn with_credentials(mut req: Request<Body>, who: &Who) -> Request<Body> {
    match who {
        Who::Nobody => {}
        Who::Cert(role, name) => {
            req.extensions_mut().insert(Peer {
                cert: Some(Identity {
                    role: *role,
                    name: (*name).into(),
                }),
                der: None,
                addr: "127.0.0.1:50000".parse().unwrap(),
            });
        }
        Who::Token(t) => {
            req.headers_mut().insert(
                header::AUTHORIZATION,
                format!("Bearer {t}").parse().unwrap(),
            );
        }
    }
    req
}

/// Sends `req` to `app` and reads the whole answer.
pub async fn send(app: &Router, req: Request<Body>) -> Reply {
    let r = app.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    let body = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

/// A request of `method` to `path` by `who`, with `body` as JSON (sent with
/// `Content-Type: application/json`, as the API wants of every change).
pub async fn call(
    app: &Router,
    who: &Who,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> Reply {
    let mut b = Request::builder().method(method.clone()).uri(path);
    if method != Method::GET {
        b = b.header(header::CONTENT_TYPE, "application/json");
    }
    let req = b
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
        .unwrap();
    send(app, with_credentials(req, who)).await
}

pub async fn get(app: &Router, who: &Who, path: &str) -> Reply {
    call(app, who, Method::GET, path, None).await
}

pub async fn post(app: &Router, who: &Who, path: &str, body: Value) -> Reply {
    call(
        app,
        who,
        Method::POST,
        path,
        Some(body.to_string().into_bytes()),
    )
    .await
}
