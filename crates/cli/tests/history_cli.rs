//! Ended jobs after they leave the controllers' state: `tranche dev --job-hot-s 1`
//! runs real jobs on its agents' fake GPUs, the leader moves them to the history store
//! a second after they end, and every surface still reads them: `tranche show`,
//! `explain`, `logs`, `jobs --history` (paged), the HTTPS API (`/api/v1/jobs/{id}`,
//! `/api/v1/history`), with another user seeing the same redacted record as for a job
//! still in the state, and submits that depend on them.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use tranche_local::wait_until_blocking;

use common::{tranche, Dev};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{out:?}");
    text(&out.stdout)
}

fn submit(config: &str, args: &[&str]) -> u64 {
    let mut all = vec!["submit", "--share", "nlp", "--gpus", "1", "--parsable"];
    all.extend_from_slice(args);
    ok(tranche(config, &all)).trim().parse().unwrap()
}

/// The value of `key = "..."` in a client config.
fn config_value(config: &str, key: &str) -> String {
    let t = std::fs::read_to_string(config).unwrap();
    t.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("{key} in {t}"))
        .to_string()
}

/// A GET on the HTTPS API with `config`'s certificate: the status and the JSON body.
fn get(config: &str, path: &str) -> (u16, Value) {
    let t = std::fs::read_to_string(config).unwrap();
    let url = t
        .split('"')
        .find(|s| s.starts_with("https://"))
        .unwrap_or_else(|| panic!("no https URL in {t}"));
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "--cacert"])
        .arg(config_value(config, "ca"))
        .arg("--cert")
        .arg(config_value(config, "cert"))
        .arg("--key")
        .arg(config_value(config, "key"))
        .arg(format!("{url}{path}"))
        .output()
        .expect("curl runs");
    let body = text(&out.stdout);
    let (json, code) = body.rsplit_once('\n').unwrap_or_else(|| panic!("{out:?}"));
    let v = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    (code.parse().unwrap(), v)
}

/// A client config for user `name`, beside `config` (another user's).
fn other_user(dev: &Dev, config: &str, name: &str) -> String {
    let certs = dev.dir.join("certs");
    let c = certs.to_str().unwrap();
    ok(tranche(
        config,
        &[
            "certs", "issue", "--role", "user", "--name", name, "--dir", c,
        ],
    ));
    let cert = config_value(config, "cert");
    let me = Path::new(&cert)
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let t = std::fs::read_to_string(config)
        .unwrap()
        .replace(&me, &format!("user-{name}"));
    let path = dev.dir.join(format!("user-{name}.toml"));
    std::fs::write(&path, t).unwrap();
    path.display().to_string()
}

fn hot_ids(config: &str) -> Vec<u64> {
    let v: Value = serde_json::from_str(&ok(tranche(config, &["jobs", "--json"]))).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_u64())
        .collect()
}

#[test]
fn forgotten_jobs_are_read_back_from_history_on_every_surface() {
    let dev = Dev::start_with("alice", &["--job-hot-s", "1"]);
    let alice = dev.user.clone();
    let bob = other_user(&dev, &alice, "bob");

    let good = submit(
        &alice,
        &[
            "--env",
            "SECRET=s3cr3t",
            "--",
            "sh",
            "-c",
            "echo out-of-good",
        ],
    );
    let good_s = good.to_string();
    wait_until_blocking("the first job ends", Duration::from_secs(60), || {
        let s = ok(tranche(&alice, &["show", &good_s]));
        if s.contains("SUCCEEDED") {
            Ok(())
        } else {
            Err(s)
        }
    })
    .unwrap();
    let bad = submit(&alice, &["--", "sh", "-c", "exit 3"]);
    let bad_s = bad.to_string();
    // Both end, then leave the state: the job list no longer has them.
    wait_until_blocking("both jobs leave the state", Duration::from_secs(60), || {
        let hot = hot_ids(&alice);
        if hot.contains(&good) || hot.contains(&bad) {
            Err(format!("still in the state: {hot:?}"))
        } else {
            Ok(())
        }
    })
    .unwrap();

    // tranche show / explain read the history, and say so.
    let s = ok(tranche(&alice, &["show", &good_s]));
    assert!(s.contains("SUCCEEDED") && s.contains("archived"), "{s}");
    let s = ok(tranche(&alice, &["show", &bad_s]));
    assert!(
        s.contains("FAILED") && s.contains("exited 3") && s.contains("archived"),
        "{s}"
    );
    let v: Value =
        serde_json::from_str(&ok(tranche(&alice, &["show", "--json", &good_s]))).unwrap();
    assert_eq!(v["archived"], true, "{v}");
    assert_eq!(v["spec"]["env"]["SECRET"], "s3cr3t", "{v}");
    ok(tranche(&alice, &["explain", &good_s]));
    // Another user sees the same redacted record as for a job in the state.
    let v: Value = serde_json::from_str(&ok(tranche(&bob, &["show", "--json", &good_s]))).unwrap();
    assert!(!v.to_string().contains("s3cr3t"), "{v}");
    assert!(v["hidden"].as_array().is_some_and(|h| !h.is_empty()), "{v}");

    // tranche jobs --history: newest end first, the failed one's exit code, paged.
    let s = ok(tranche(&alice, &["jobs", "--history", "--user", "alice"]));
    let lines: Vec<&str> = s.lines().collect();
    assert!(
        lines[0]
            .split_whitespace()
            .eq(["JOBID", "NAME", "USER", "SHARE", "STATE", "ENDED", "ELAPSED", "EXIT"]),
        "{s}"
    );
    let rows: Vec<Vec<&str>> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{s}");
    assert_eq!(
        (rows[0][0], rows[0][4], *rows[0].last().unwrap()),
        (bad_s.as_str(), "FAILED", "3"),
        "{s}"
    );
    assert_eq!(
        (rows[1][0], rows[1][4], *rows[1].last().unwrap()),
        (good_s.as_str(), "SUCCEEDED", "0"),
        "{s}"
    );
    let v: Value = serde_json::from_str(&ok(tranche(
        &alice,
        &[
            "jobs",
            "--history",
            "--json",
            "--state",
            "FAILED",
            "--since",
            "1h",
        ],
    )))
    .unwrap();
    let ids: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [bad], "{v}");
    assert_eq!(
        (v[0]["exit_code"].as_i64(), v[0]["archived"].as_bool()),
        (Some(3), Some(true))
    );
    // Where and for how long its last attempt ran.
    assert_eq!(v[0]["nodes"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(v[0]["elapsed_ms"].as_u64().is_some(), "{v}");
    let out = tranche(
        &alice,
        &["jobs", "--history", "--user", "alice", "--limit", "1"],
    );
    let page = ok(out.clone());
    assert_eq!(page.lines().count(), 2, "{page}");
    let hint = text(&out.stderr);
    let cursor = hint
        .split_whitespace()
        .skip_while(|w| *w != "--before")
        .nth(1)
        .unwrap_or_else(|| panic!("no cursor in {hint}"));
    let next = ok(tranche(
        &alice,
        &[
            "jobs",
            "--history",
            "--user",
            "alice",
            "--limit",
            "1",
            "--before",
            cursor,
        ],
    ));
    assert!(
        next.lines()
            .nth(1)
            .unwrap()
            .trim_start()
            .starts_with(&good_s),
        "{next}"
    );
    let out = tranche(&alice, &["jobs", "--history", "--state", "RUNNING"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        text(&out.stderr).contains("--state RUNNING: RUNNING has not ended"),
        "{out:?}"
    );

    // The HTTPS API: the job, and the history with its cursor; bad parameters named.
    let (code, v) = get(&alice, &format!("/api/v1/jobs/{good}"));
    assert_eq!(
        (code, &v["status"], &v["archived"]),
        (200, &"SUCCEEDED".into(), &true.into()),
        "{v}"
    );
    assert_eq!(v["spec"]["env"]["SECRET"], "s3cr3t", "{v}");
    let (code, v) = get(&bob, &format!("/api/v1/jobs/{good}"));
    assert_eq!(code, 200, "{v}");
    assert!(
        !v.to_string().contains("s3cr3t") && !v["hidden"].as_array().unwrap().is_empty(),
        "{v}"
    );
    let (code, v) = get(&bob, "/api/v1/history?user=alice&limit=1");
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["jobs"][0]["job"]["id"].as_u64(), Some(bad), "{v}");
    assert_eq!(v["jobs"][0]["exit_code"], 3, "{v}");
    assert_eq!(v["jobs"][0]["archived"], true, "{v}");
    let next = v["next"]
        .as_str()
        .unwrap_or_else(|| panic!("no next: {v}"))
        .to_string();
    let (_, v) = get(
        &bob,
        &format!("/api/v1/history?user=alice&limit=1&before={next}"),
    );
    assert_eq!(v["jobs"][0]["job"]["id"].as_u64(), Some(good), "{v}");
    assert!(!v.to_string().contains("s3cr3t"), "{v}");
    let (_, v) = get(&alice, "/api/v1/history?state=SUCCEEDED&user=alice");
    let ids: Vec<u64> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job"]["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [good], "{v}");
    for (q, field) in [
        ("limit=0", "limit"),
        ("state=RUNNING", "state"),
        ("before=nope", "before"),
        ("since=yesterday", "since"),
    ] {
        let (code, v) = get(&alice, &format!("/api/v1/history?{q}"));
        assert_eq!(
            (code, v["error"]["field"].as_str()),
            (400, Some(field)),
            "{q}: {v}"
        );
    }

    // A job's output stays on its node: read while the agent keeps it, then a clear
    // error once its spool no longer has it.
    assert_eq!(ok(tranche(&alice, &["logs", &good_s])), "out-of-good\n");
    for spool in std::fs::read_dir(&dev.dir).unwrap().flatten() {
        if spool.file_name().to_string_lossy().starts_with("spool-") {
            for f in std::fs::read_dir(spool.path().join("logs"))
                .into_iter()
                .flatten()
                .flatten()
            {
                if f.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{good}."))
                {
                    std::fs::remove_file(f.path()).unwrap();
                }
            }
        }
    }
    let out = tranche(&alice, &["logs", &good_s]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let e = text(&out.stderr);
    assert!(
        e.contains(&format!("job {good} SUCCEEDED"))
            && e.contains("its output is no longer on node"),
        "{e}"
    );

    // Dependencies on forgotten jobs: met (afterok on the SUCCEEDED one) is accepted,
    // never met (afterok on the FAILED one) is refused, naming the job.
    let dep = format!("afterok:{good}");
    let after_good = submit(&alice, &["--dependency", &dep, "--", "true"]);
    assert!(after_good > bad);
    let dep = format!("afterok:{bad}");
    let out = tranche(
        &alice,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "1",
            "--dependency",
            &dep,
            "--",
            "true",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let e = text(&out.stderr);
    assert!(e.contains(&format!("job {bad} ended FAILED")), "{e}");

    // The dashboard's preemptions of a job that has left the state: nlp borrows
    // vision's idle A100s, vision takes them back, then every job is cancelled.
    let sleeper = |share: &str, prio: &str| -> u64 {
        let out = tranche(
            &alice,
            &[
                "submit",
                "--share",
                share,
                "--gpus",
                "4",
                "--unit",
                "a100",
                "--priority",
                prio,
                "--time",
                "1h",
                "--parsable",
                "--",
                "sleep",
                "600",
            ],
        );
        ok(out).trim().parse().unwrap()
    };
    let running = |id: u64| {
        wait_until_blocking("a job RUNNING", Duration::from_secs(60), || {
            let s = ok(tranche(&alice, &["show", &id.to_string()]));
            if s.lines().next().is_some_and(|l| l.ends_with("RUNNING")) {
                Ok(())
            } else {
                Err(s)
            }
        })
        .unwrap()
    };
    let nlp = [sleeper("nlp", "0"), sleeper("nlp", "0")];
    nlp.iter().for_each(|id| running(*id));
    let owner = sleeper("vision", "10");
    running(owner);
    let ids: Vec<String> = [nlp[0], nlp[1], owner].iter().map(u64::to_string).collect();
    let mut cancel = vec!["cancel"];
    cancel.extend(ids.iter().map(String::as_str));
    ok(tranche(&alice, &cancel));
    wait_until_blocking("the three leave the state", Duration::from_secs(60), || {
        let hot = hot_ids(&alice);
        match hot.iter().any(|id| nlp.contains(id) || *id == owner) {
            true => Err(format!("still in the state: {hot:?}")),
            false => Ok(()),
        }
    })
    .unwrap();
    let preempted: Vec<u64> = nlp
        .into_iter()
        .filter(|id| {
            let v: Value =
                serde_json::from_str(&ok(tranche(&alice, &["show", "--json", &id.to_string()])))
                    .unwrap();
            v["preemptions"].as_u64() > Some(0)
        })
        .collect();
    assert_eq!(preempted.len(), 1, "{nlp:?}");
    let (code, v) = get(&alice, &format!("/api/v1/preemptions?job={}", preempted[0]));
    assert_eq!(code, 200, "{v}");
    let p = &v["preemptions"][0];
    assert_eq!(
        (p["kind"].as_str(), p["victim"]["id"].as_u64()),
        (Some("reclaim"), Some(preempted[0])),
        "{v}"
    );
}
