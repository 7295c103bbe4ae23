//! Arrays, dependencies and holds on `tranche dev`, through the real CLI: the `%`
//! limit holds on real daemons, `afterok` chains run in order, a dependency that can
//! never be satisfied cancels with its reason, and held jobs wait for `release`.

mod common;

use std::time::Duration;

use serde_json::Value;
use tranche_local::wait_until_blocking;

use common::{ok, tranche, Dev};

fn show(config: &str, job: &str) -> Value {
    serde_json::from_str(&ok(config, &["show", job, "--json"])).unwrap()
}

fn status(config: &str, job: &str) -> String {
    show(config, job)["status"].as_str().unwrap().to_string()
}

fn wait_status(config: &str, job: &str, want: &str) -> Value {
    wait_until_blocking(
        &format!("job {job} {want}"),
        Duration::from_secs(90),
        || {
            let j = show(config, job);
            if j["status"] == want {
                Ok(j)
            } else {
                Err(j["status"].to_string())
            }
        },
    )
    .unwrap()
}

/// (placed, ended) of a job's only attempt, in controller time.
fn span(j: &Value) -> (u64, u64) {
    let a = &j["attempts"][0];
    (
        a["scheduled_at"].as_u64().unwrap(),
        a["ended_at"].as_u64().unwrap(),
    )
}

#[test]
fn arrays_dependencies_and_holds_on_a_dev_cluster() {
    let dev = Dev::start("tester");
    let c = dev.user.clone();

    // An array of 40 tasks, at most 10 at once, on a cluster with room for far more.
    let a = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "--array",
            "0-39%10",
            "--parsable",
            "--",
            "sleep",
            "0.5",
        ],
    );
    let table = ok(&c, &["jobs", "--array", &a]);
    assert!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with(&format!("{a}_[")) && l.contains("%10]")),
        "waiting tasks fold into one row:\n{table}"
    );
    let first: u64 = a.parse().unwrap();
    let tasks: Vec<String> = (0..40).map(|i| format!("{a}_{i}")).collect();
    wait_until_blocking("every task ended", Duration::from_secs(120), || {
        let v: Value = serde_json::from_str(&ok(&c, &["jobs", "--array", &a, "--json"])).unwrap();
        let left = v
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["state"] != "SUCCEEDED")
            .count();
        if left == 0 {
            Ok(())
        } else {
            Err(format!("{left} left"))
        }
    })
    .unwrap();
    // Sweep over the tasks' holdings: an end at the same instant as a start comes first.
    let mut edges = vec![];
    for (i, t) in tasks.iter().enumerate() {
        let j = show(&c, t);
        assert_eq!(j["id"].as_u64(), Some(first + i as u64), "{t}");
        let (s, e) = span(&j);
        edges.push((s, 1i32));
        edges.push((e, -1));
    }
    edges.sort();
    let (mut now, mut most) = (0, 0);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    assert!(most <= 10, "{most} tasks held GPUs at once");
    assert!(most >= 2, "the tasks ran one by one ({most} at once)");

    // preprocess → train → evaluate, each afterok on the one before.
    let pre = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "--parsable",
            "--",
            "sleep",
            "0.3",
        ],
    );
    let dep = format!("afterok:{pre}");
    let train = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "-d",
            &dep,
            "--parsable",
            "--",
            "true",
        ],
    );
    let dep = format!("afterok:{train}");
    let eval = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "-d",
            &dep,
            "--parsable",
            "--",
            "true",
        ],
    );
    let j = show(&c, &train);
    let waiting = j["pending_reason"].to_string();
    assert!(waiting.contains(&pre), "train waits for {pre}: {waiting}");
    let e = wait_status(&c, &eval, "SUCCEEDED");
    let (t, p) = (show(&c, &train), show(&c, &pre));
    assert!(
        span(&p).1 <= span(&t).0,
        "train started before preprocess ended"
    );
    assert!(
        span(&t).1 <= span(&e).0,
        "evaluate started before train ended"
    );

    // afterok on a job that fails: cancelled, with the reason.
    let bad = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "--parsable",
            "--",
            "sh",
            "-c",
            "exit 1",
        ],
    );
    let dep = format!("afterok:{bad}");
    let never = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "-d",
            &dep,
            "--parsable",
            "--",
            "true",
        ],
    );
    wait_status(&c, &bad, "FAILED");
    let n = wait_status(&c, &never, "CANCELLED");
    let last = n["transitions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["reason"], format!("dependency job {bad} FAILED"));
    assert!(n["attempts"].as_array().unwrap().is_empty(), "it never ran");

    // A dependency on a job that does not exist is refused, and names the job.
    let out = tranche(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "-d",
            "afterok:999999",
            "--",
            "true",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("dependency") && err.contains("999999") && err.contains("does not exist"),
        "{err}"
    );

    // Held at submit: PENDING until released, then it runs.
    let held = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "--hold",
            "--parsable",
            "--",
            "true",
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(status(&c, &held), "PENDING");
    let line = ok(&c, &["jobs", "--format", "id,state,reason"]);
    assert!(
        line.lines()
            .any(|l| l.trim_start().starts_with(&held) && l.contains("held")),
        "{line}"
    );
    ok(&c, &["release", &held]);
    wait_status(&c, &held, "SUCCEEDED");

    // Cancelling an array's id cancels every task that has not ended.
    let b = ok(
        &c,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "--array",
            "0-5",
            "--hold",
            "--parsable",
            "--",
            "true",
        ],
    );
    ok(&c, &["release", &format!("{b}_2")]);
    wait_status(&c, &format!("{b}_2"), "SUCCEEDED");
    ok(&c, &["cancel", &b]);
    for i in [0, 1, 3, 4, 5] {
        assert_eq!(status(&c, &format!("{b}_{i}")), "CANCELLED", "{b}_{i}");
    }
    assert_eq!(status(&c, &format!("{b}_2")), "SUCCEEDED");
}
