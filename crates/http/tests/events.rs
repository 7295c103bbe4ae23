//! The event stream and the dashboard's JSON, in process over the controller's test
//! rig (whose writes record their events as a controller's do): a job's transitions
//! arrive as server-sent `job` events, filtered by job, resumed after an index; the
//! GPU map shows what holds each GPU.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use common::*;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tranche_tls::Role;

/// An open event stream: its frames, read as they come.
struct Stream(axum::body::BodyDataStream);

impl Stream {
    async fn open(app: &axum::Router, who: &Who, query: &str) -> Stream {
        let req = Request::get(format!("/api/v1/events{query}"))
            .body(Body::empty())
            .unwrap();
        let r = tower::ServiceExt::oneshot(app.clone(), with_credentials(req, who))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "text/event-stream");
        Stream(r.into_body().into_data_stream())
    }

    /// The `job` events' data up to the first frame that has `n` of them in all.
    async fn jobs(&mut self, n: usize) -> Vec<Value> {
        let mut out = vec![];
        while out.len() < n {
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.0.next())
                .await
                .expect("an event within 10 s")
                .expect("the stream goes on")
                .unwrap();
            let text = String::from_utf8(chunk.to_vec()).unwrap();
            for frame in text.split("\n\n") {
                let mut lines = frame.lines();
                if lines.next() != Some("event: job") {
                    continue;
                }
                let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
                out.push(serde_json::from_str(data).unwrap());
            }
        }
        out
    }
}

#[tokio::test]
async fn a_jobs_transitions_arrive_as_events() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let alice = user("alice");
    let mut all = Stream::open(&app, &user("bob"), "?after=0&types=job").await;

    let body = json!({"share": "lend", "gpus": 1, "command": ["true"], "env": {"K": "v"}});
    let r = post(&app, &alice, "/api/v1/jobs", body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let id = r.json()["id"].as_u64().unwrap();
    let r = post(
        &app,
        &alice,
        &format!("/api/v1/jobs/{id}/cancel"),
        json!({}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    // Another user reads the summary of each transition: who, where, to what.
    let seen = all.jobs(2).await;
    let last = seen.last().unwrap();
    assert_eq!(last["job"], json!(id));
    assert_eq!(
        (
            last["user"].clone(),
            last["share"].clone(),
            last["to"].clone()
        ),
        (json!("alice"), json!("lend"), json!("CANCELLED"))
    );
    for e in &seen {
        assert_eq!(e["job"], json!(id), "{e}");
        assert!(e.get("env").is_none() && e.get("spec").is_none(), "{e}");
        for k in ["index", "share", "user", "to", "at"] {
            assert!(e.get(k).is_some(), "an event has `{k}`: {e}");
        }
    }
    // Resumed after the first: the rest only; filtered by job.
    let first = seen[0]["index"].as_u64().unwrap();
    let mut rest = Stream::open(&app, &alice, &format!("?after={first}&job={id}")).await;
    let again = rest.jobs(1).await;
    assert_eq!(again[0]["to"], json!("CANCELLED"));
    assert!(again[0]["index"].as_u64().unwrap() > first);
}

#[tokio::test]
async fn the_gpu_map_shows_what_holds_each_gpu() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let r = get(&app, &Who::Cert(Role::Operator, "ops"), "/api/v1/gpus").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let nodes = r.json();
    assert_eq!(nodes.as_array().unwrap().len(), 1, "{nodes}");
    assert_eq!(nodes[0]["name"], json!("n1"));
    let g = &nodes[0]["gpus"][0];
    assert_eq!(
        (
            g["state"].clone(),
            g["job"].clone(),
            g["user"].clone(),
            g["unit"].clone()
        ),
        (json!("used"), json!(1), json!("alice"), json!("h100"))
    );
    let r = get(&app, &Who::Nobody, "/api/v1/gpus").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
