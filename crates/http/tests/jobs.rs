//! The job routes of `/api/v1/`, in process over the controller's test rig: submit,
//! list, show (its owner sees everything, another user the summary: rule H3 of
//! `docs/operations/security.md`), cancel, and bad input refused with the field and
//! the rule, changing nothing.

mod common;

use axum::http::{Method, StatusCode};
use common::*;
use serde_json::{json, Value};
use tranche_tls::Role;

fn submit_body(share: &str) -> Value {
    json!({"share": share, "gpus": 1, "command": ["true"]})
}

fn ids(page: &Value) -> Vec<u64> {
    page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_job_is_submitted_listed_shown_and_cancelled() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let (alice, bob) = (user("alice"), user("bob"));

    let mut body = submit_body("private");
    body["env"] = json!({"HF_TOKEN": "secret"});
    body["cwd"] = json!("/home/alice");
    body["client_token"] = json!("tok-1");
    let r = post(&app, &alice, "/api/v1/jobs", body.clone()).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    assert_eq!(r.json(), json!({"id": 2, "existing": false}));
    // The same client token: the same job, answered 200.
    let again = post(&app, &alice, "/api/v1/jobs", body).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text());
    assert_eq!(again.json(), json!({"id": 2, "existing": true}));

    // Its owner sees everything; the queue and unit default from the share.
    let r = get(&app, &alice, "/api/v1/jobs/2").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let j = r.json();
    assert_eq!((j["id"].clone(), j["job"].clone()), (json!(2), json!("2")));
    assert_eq!(j["spec"]["user"], json!("alice"));
    assert_eq!(j["spec"]["share"], json!("private"));
    assert_eq!(
        j["spec"]["queue"],
        json!("q"),
        "the queue defaults from the share"
    );
    assert_eq!(
        j["spec"]["unit"],
        json!("h100"),
        "the unit defaults from the share"
    );
    assert_eq!(j["spec"]["env"], json!({"HF_TOKEN": "secret"}));
    assert_eq!(j["spec"]["command"], json!(["true"]));
    assert_eq!(j["spec"]["cwd"], json!("/home/alice"));
    assert_eq!(j["hidden"], json!([]));
    assert_eq!(j["archived"], json!(false));
    for key in ["status", "submitted_at", "attempts", "transitions", "held"] {
        assert!(j.get(key).is_some(), "a job view has `{key}`: {j}");
    }

    // Another user reads the summary: no env, command or working directory (H3).
    let r = get(&app, &bob, "/api/v1/jobs/2").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let s = r.json();
    assert_eq!(s["spec"]["env"], json!({}), "bob reads alice's env: {s}");
    assert_eq!(s["spec"]["command"], json!([]));
    assert_eq!(s["spec"]["cwd"], Value::Null);
    let hidden: Vec<&str> = s["hidden"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        hidden.contains(&"env") && hidden.contains(&"command"),
        "{hidden:?}"
    );
    assert_eq!(
        (
            &s["id"],
            &s["spec"]["user"],
            &s["spec"]["share"],
            &s["status"]
        ),
        (
            &j["id"],
            &j["spec"]["user"],
            &j["spec"]["share"],
            &j["status"]
        ),
        "the summary keeps who, where and the state"
    );
    // An operator sees everything of it.
    let r = get(&app, &Who::Cert(Role::Operator, "ops"), "/api/v1/jobs/2").await;
    assert_eq!(r.json()["spec"]["env"], json!({"HF_TOKEN": "secret"}));

    // Lists carry summaries, lowest ids first, paged.
    let r = get(&app, &bob, "/api/v1/jobs").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let page = r.json();
    assert_eq!(ids(&page), [1, 2]);
    assert_eq!(page["next_after"], Value::Null);
    let first = &page["jobs"][1];
    for key in [
        "id", "name", "queue", "share", "user", "status", "gpus", "unit",
    ] {
        assert!(first.get(key).is_some(), "a summary has `{key}`: {first}");
    }
    assert!(first.get("env").is_none() && first.get("spec").is_none());
    let r = get(&app, &alice, "/api/v1/jobs?limit=1").await;
    assert_eq!(
        (ids(&r.json()), r.json()["next_after"].clone()),
        (vec![1], json!(1))
    );
    let r = get(&app, &alice, "/api/v1/jobs?limit=1&after=1").await;
    assert_eq!(ids(&r.json()), [2]);
    let r = get(&app, &alice, "/api/v1/jobs?share=private").await;
    assert_eq!(ids(&r.json()), [2]);
    let r = get(
        &app,
        &alice,
        "/api/v1/jobs?state=SCHEDULED,STARTING,RUNNING",
    )
    .await;
    assert_eq!(ids(&r.json()), [1], "job 1 is placed, job 2 waits");

    // Another user may not cancel it; its owner may.
    let before = h.rig.writes();
    let r = post(&app, &bob, "/api/v1/jobs/2/cancel", json!({})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::FORBIDDEN, "forbidden".into())
    );
    assert_eq!(h.rig.writes(), before, "a refused cancel reached the node");
    let r = post(
        &app,
        &alice,
        "/api/v1/jobs/2/cancel",
        json!({"reason": "done"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["status"], json!("CANCELLED"));
    assert_eq!(r.json()["id"], json!(2));
    let r = get(&app, &alice, "/api/v1/jobs?state=CANCELLED").await;
    assert_eq!(ids(&r.json()), [2]);

    let r = get(&app, &alice, "/api/v1/jobs/99999").await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::NOT_FOUND, "not_found".into())
    );
}

#[tokio::test]
async fn bad_input_is_refused_naming_the_field_and_changes_nothing() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let alice = user("alice");
    let before = h.rig.writes();
    for (body, code, field) in [
        ("{\"share\": ", "bad_request", ""),
        (
            r#"{"share":"lend","gpus":1,"command":["true"],"bogus":1}"#,
            "invalid",
            "bogus",
        ),
        (
            r#"{"share":"lend","gpus":"two","command":["true"]}"#,
            "invalid",
            "gpus",
        ),
        (r#"{"share":"lend","gpus":1}"#, "invalid", "command"),
        // The job's GPUs in all must split over its nodes; one of the two counts.
        (
            r#"{"share":"lend","gpus":10,"nodes":4,"command":["true"]}"#,
            "invalid",
            "gpus",
        ),
        (
            r#"{"share":"lend","gpus":8,"gpus_per_node":4,"nodes":2,"command":["true"]}"#,
            "invalid",
            "gpus_per_node",
        ),
        (r#"{"share":"lend","command":["true"]}"#, "invalid", "gpus"),
        (
            r#"{"share":"lend","gpus":1,"command":["true"],"checkpoint":{"signal":"SIGTERM","x":1}}"#,
            "invalid",
            "checkpoint.x",
        ),
        (
            r#"{"share":"lend","gpus":1,"command":["true"],"priority":12000}"#,
            "invalid",
            "priority",
        ),
        (
            r#"{"share":"lend","gpus":1,"command":["true"]} trailing"#,
            "bad_request",
            "",
        ),
        ("", "bad_request", ""),
    ] {
        let r = call(
            &app,
            &alice,
            Method::POST,
            "/api/v1/jobs",
            Some(body.as_bytes().to_vec()),
        )
        .await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (StatusCode::BAD_REQUEST, code.to_string(), field.to_string()),
            "{}: {}",
            body,
            r.text()
        );
        if code == "invalid" {
            assert!(
                r.message().starts_with(&format!("invalid `{field}`: ")),
                "the message names the field and the rule: {}",
                r.message()
            );
        }
    }
    // A share that does not exist, with or without a queue named.
    for body in [
        json!({"share": "nope", "gpus": 1, "command": ["true"]}),
        json!({"share": "nope", "queue": "q", "gpus": 1, "command": ["true"]}),
    ] {
        let r = post(&app, &alice, "/api/v1/jobs", body).await;
        assert_eq!(
            (r.status, r.field()),
            (StatusCode::NOT_FOUND, "share".into()),
            "{}",
            r.text()
        );
    }
    // Query strings and paths.
    for (path, field) in [
        ("/api/v1/jobs?limit=0", "limit"),
        ("/api/v1/jobs?limit=1001", "limit"),
        ("/api/v1/jobs?state=DONE", "state"),
        ("/api/v1/jobs?limit=many", "limit"),
        ("/api/v1/jobs/abc", "id"),
    ] {
        let r = get(&app, &alice, path).await;
        assert_eq!(
            (r.status, r.code(), r.field()),
            (StatusCode::BAD_REQUEST, "invalid".into(), field.into()),
            "{path}: {}",
            r.text()
        );
    }
    let r = get(&app, &alice, "/api/v1/jobs?color=red").await;
    assert_eq!(
        r.status,
        StatusCode::BAD_REQUEST,
        "unknown query parameters are refused"
    );
    let r = call(
        &app,
        &Who::Cert(Role::Operator, "ops"),
        Method::PATCH,
        "/api/v1/jobs/1",
        Some(br#"{"priority": 10000}"#.to_vec()),
    )
    .await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::BAD_REQUEST, "priority".into()),
        "{}",
        r.text()
    );
    let r = post(
        &app,
        &Who::Cert(Role::Operator, "ops"),
        "/api/v1/nodes/n1/drain",
        json!({"reason": " "}),
    )
    .await;
    assert_eq!(
        (r.status, r.field()),
        (StatusCode::BAD_REQUEST, "reason".into())
    );
    assert_eq!(h.rig.writes(), before, "a refused request reached the node");
    let r = get(&app, &alice, "/api/v1/jobs").await;
    assert_eq!(ids(&r.json()), [1], "no job was added");
}

#[tokio::test]
async fn a_priority_change_and_a_hold_answer_with_the_job() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let alice = user("alice");
    let r = post(&app, &alice, "/api/v1/jobs", submit_body("lend")).await;
    let id = r.json()["id"].as_u64().unwrap();
    let r = call(
        &app,
        &Who::Cert(Role::Operator, "ops"),
        Method::PATCH,
        &format!("/api/v1/jobs/{id}"),
        Some(br#"{"priority": 7}"#.to_vec()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["spec"]["priority"], json!(7));
    let r = post(
        &app,
        &user("bob"),
        &format!("/api/v1/jobs/{id}/hold"),
        json!({}),
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "bob may not hold alice's job"
    );
    let r = post(&app, &alice, &format!("/api/v1/jobs/{id}/hold"), json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        (r.json()["status"].clone(), r.json()["held"].clone()),
        (json!("PENDING"), json!(true))
    );
    let r = post(
        &app,
        &alice,
        &format!("/api/v1/jobs/{id}/release"),
        json!({}),
    )
    .await;
    assert_eq!(r.json()["held"], json!(false), "{}", r.text());
}

#[tokio::test]
async fn submit_fields_reach_the_job() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let alice = user("alice");
    let body = json!({
        "share": "lend", "gpus": 1, "command": ["true"], "name": "fields", "priority": 5,
        "env": {"A": "1"}, "time_limit_s": 7200,
        "checkpoint": {"signal": "SIGUSR1", "grace_s": 120}, "tags": {"team": "x"},
        "preemption_retries": 2, "retry_attempts": 3, "unit": "h100",
    });
    let r = post(&app, &alice, "/api/v1/jobs", body).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let id = r.json()["id"].as_u64().unwrap();
    let spec = get(&app, &alice, &format!("/api/v1/jobs/{id}"))
        .await
        .json()["spec"]
        .clone();
    assert_eq!(spec["name"], json!("fields"));
    assert_eq!(spec["priority"], json!(5));
    assert_eq!(spec["env"], json!({"A": "1"}));
    assert_eq!(spec["time_limit_s"], json!(7200));
    assert_eq!(
        spec["checkpoint"],
        json!({"signal": "SIGUSR1", "grace_s": 120})
    );
    assert_eq!(spec["tags"], json!({"team": "x"}));
    assert_eq!(
        (&spec["preemption_retries"], &spec["retry_attempts"]),
        (&json!(2), &json!(3))
    );
    assert_eq!(
        (&spec["unit"], &spec["gpus_per_node"], &spec["queue"]),
        (&json!("h100"), &json!(1), &json!("q"))
    );
    // The command reached the node task as the submit of this spec, as alice.
    let last = h.rig.written.lock().unwrap().last().cloned();
    match last {
        Some(tranche_state::Command::Submit(s)) => {
            assert_eq!((s.user.as_str(), s.name.as_str()), ("alice", "fields"))
        }
        other => panic!("{other:?}"),
    }
}

/// `gpus` is the job's GPUs in all, as Slurm's `--gpus`: 2 over 2 nodes is 1 on each
/// (the rig's nodes have one GPU); `gpus_per_node` is each node's.
#[tokio::test]
async fn gpus_is_the_jobs_total_and_gpus_per_node_each_nodes() {
    let h = Harness::new(demo());
    let app = h.router(axum::Router::new());
    let alice = user("alice");
    for (body, per_node) in [
        (
            json!({"share": "lend", "gpus": 2, "nodes": 2, "command": ["true"]}),
            1,
        ),
        (
            json!({"share": "lend", "gpus_per_node": 1, "nodes": 2, "command": ["true"]}),
            1,
        ),
    ] {
        let r = post(&app, &alice, "/api/v1/jobs", body.clone()).await;
        assert_eq!(r.status, StatusCode::CREATED, "{body}: {}", r.text());
        let id = r.json()["id"].as_u64().unwrap();
        let j = get(&app, &alice, &format!("/api/v1/jobs/{id}"))
            .await
            .json();
        assert_eq!(j["spec"]["gpus_per_node"], json!(per_node), "{body}: {j}");
        assert_eq!(j["spec"]["nodes"], json!(2), "{body}: {j}");
    }
}
