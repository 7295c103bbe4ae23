//! The OpenAPI document against the router: every `/api/v1/` route the router
//! declares (read from the routers' sources, so a route added without its document
//! entry fails here) is in the document with its methods, and every operation the
//! document lists is served (not the API's "no such path" or "method not allowed").

mod common;

use std::collections::BTreeSet;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::Value;
use tranche_tls::Role;

/// The routers that serve `/api/v1/` (the dashboard's page and assets under `/ui/` are
/// not API operations, nor is the document's own route).
const ROUTERS: [(&str, &str); 2] = [
    ("routes.rs", include_str!("../src/routes.rs")),
    ("dash.rs", include_str!("../src/dash.rs")),
];

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// `(path, method)` of every `.route("/api/v1/…", get(…).post(…))` in `source`.
fn declared(source: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for line in source.lines() {
        let Some(rest) = line.trim().strip_prefix(".route(\"") else {
            continue;
        };
        let (path, handlers) = rest.split_once('"').unwrap();
        assert!(path.starts_with("/api/v1/"), "{line}");
        let mut found = false;
        for m in METHODS {
            let call = format!("{m}(");
            let mut at = 0;
            while let Some(i) = handlers[at..].find(&call) {
                let start = at + i;
                let before = handlers[..start].chars().last();
                if matches!(before, None | Some(' ') | Some('.') | Some(',') | Some('(')) {
                    out.insert((path.to_string(), m.to_string()));
                    found = true;
                }
                at = start + call.len();
            }
        }
        assert!(found, "a route with no method read: {line}");
    }
    out
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in METHODS {
            if item.get(m).is_some() {
                out.insert((path.clone(), m.to_string()));
            }
        }
    }
    out
}

#[tokio::test]
async fn the_document_lists_every_route_the_router_serves() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let r = get(&app, &Who::Nobody, "/api/v1/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "application/json");
    let doc = r.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let listed = documented(&doc);

    let mut served = BTreeSet::new();
    for (file, source) in ROUTERS {
        let d = declared(source);
        assert!(d.len() >= 6, "{file}: too few routes read: {d:?}");
        served.extend(d);
    }
    let missing: Vec<_> = served.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "served but not in the document: {missing:?}"
    );
    let extra: Vec<_> = listed.difference(&served).collect();
    assert!(
        extra.is_empty(),
        "in the document but not read from the routers: {extra:?}"
    );

    // Every documented operation is served: an admin's request to it is answered by
    // its handler, not by the router's fallbacks.
    let admin = Who::Cert(Role::Admin, "admin");
    for (path, method) in &listed {
        let concrete = path.replace("{id}", "1").replace("{name}", "n1");
        let method: Method = method.to_uppercase().parse().unwrap();
        if concrete.ends_with("/events") || concrete.ends_with("/logs") {
            // Long responses: their routes are checked without reading them.
            continue;
        }
        let r = call(
            &app,
            &admin,
            method.clone(),
            &concrete,
            Some(b"{}".to_vec()),
        )
        .await;
        assert_ne!(
            r.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {concrete}: {}",
            r.text()
        );
        if r.status == StatusCode::NOT_FOUND {
            assert_ne!(
                r.message(),
                "no such API path; see /api/v1/openapi.json",
                "{method} {concrete} is documented but not served"
            );
        }
    }

    // Every operation declares its errors in the one error shape.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (m, op) in item.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{m} {path} has no success answer"
            );
        }
    }
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
}

#[test]
fn the_route_reader_reads_methods() {
    let src = "        .route(\"/api/v1/jobs\", get(list_jobs).post(submit))\n\
               .route(\"/api/v1/jobs/{id}/logs\", get(super::logs::logs))\n";
    let d = declared(src);
    let want: BTreeSet<(String, String)> = [
        ("/api/v1/jobs", "get"),
        ("/api/v1/jobs", "post"),
        ("/api/v1/jobs/{id}/logs", "get"),
    ]
    .into_iter()
    .map(|(p, m)| (p.to_string(), m.to_string()))
    .collect();
    assert_eq!(d, want);
}
