//! `tranche sim` and `tranche bench replay` as a user runs them, on the shipped tiny
//! trace (tests/traces/tiny: worked out by hand in its policy file).

mod common;

use common::run as tranche;
use std::path::PathBuf;

fn tiny(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/traces/tiny")
        .join(file)
        .display()
        .to_string()
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tranche-sim-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn sim_prints_the_table_and_the_comparison() {
    let (trace, policy) = (tiny("jobs.csv"), tiny("policy.toml"));
    let (code, out, err) = tranche(&["sim", "--trace", &trace, "--policy", &policy, "--compare"]);
    assert_eq!(code, 0, "{err}");
    // 4×1 + 2×5 + 2×2 + 4×10 = 58 GPU-seconds of 4 GPUs × 18 s.
    assert!(
        out.contains("3 jobs (3 succeeded, 0 failed) on 4 GPUs over 18 s"),
        "{out}"
    );
    assert!(out.contains("utilization 80.6% over the makespan"), "{out}");
    assert!(out.contains("wait: mean 1 s, p50 0 s, p99 3 s"), "{out}");
    assert!(
        out.contains("static partition (every share RESERVE)"),
        "{out}"
    );
    assert!(out.contains("pooled FIFO (one share, no quotas)"), "{out}");
    // j1 can never have 4 GPUs of a RESERVE share of 2.
    assert!(out.contains("1 jobs never started"), "{out}");
    assert!(err.contains("simulated 3 jobs"), "{err}");
}

#[test]
fn sim_json_and_report_dir() {
    let (trace, policy) = (tiny("jobs.csv"), tiny("policy.toml"));
    let dir = temp("report");
    let d = dir.display().to_string();
    let (code, out, err) = tranche(&[
        "sim", "--trace", &trace, "--policy", &policy, "--json", "--report", &d,
    ]);
    assert_eq!(code, 0, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let f = &j["runs"][0]["figures"];
    assert_eq!(f["jobs"], 3);
    assert_eq!(f["makespan_ms"], 18_000);
    assert_eq!(f["preempted_attempts"], 1);
    assert_eq!(f["shares"][1]["name"], "b");
    for file in [
        "index.html",
        "figures.json",
        "policy-usage.svg",
        "policy-usage.png",
        "policy-waits.png",
        "policy-queue.svg",
        "policy-preemptions.svg",
    ] {
        assert!(dir.join(file).exists(), "{file} missing: {err}");
    }
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains("<img src=\"policy-usage.svg\""), "{html}");
    assert!(html.contains("<td>b</td><td>2</td><td>LEND</td>"), "{html}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_row_names_its_line_and_column() {
    let dir = temp("bad");
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "submit_s,share,gpus,duration_s\n0,a,1,5\n2,a,1,soon\n",
    )
    .unwrap();
    let (code, _, err) = tranche(&[
        "sim",
        "--trace",
        bad.to_str().unwrap(),
        "--policy",
        &tiny("policy.toml"),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("line 3, column duration_s: must be seconds"),
        "{err}"
    );
    let (code, _, err) = tranche(&[
        "sim",
        "--trace",
        &tiny("jobs.csv"),
        "--policy",
        &tiny("policy.toml"),
        "--columns",
        "share=tenant",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("\"tenant\" is not a trace field"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The tiny trace on real daemons: the same story as in the simulator, give or take
/// the daemons' own delays (which are not asserted: they depend on the machine).
#[test]
fn a_short_replay_on_real_daemons() {
    let (code, out, err) = tranche(&[
        "bench",
        "replay",
        "--trace",
        &tiny("jobs.csv"),
        "--policy",
        &tiny("policy.toml"),
        "--json",
    ]);
    assert!(code == 0 || code == 1, "the replay did not run: {err}");
    let j: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let (real, sim) = (&j["replay"], &j["sim"]);
    assert_eq!(real["jobs"], 3);
    assert_eq!(real["succeeded"], 3, "{out}");
    // j1 was reclaimed for j2 once, as in the simulator.
    assert_eq!(real["preempted_attempts"], 1, "{out}");
    assert_eq!(sim["preempted_attempts"], 1);
    // j3 waits for b's room: 3 s in the simulator, no less for real.
    let b_max_wait = real["shares"][1]["wait"]["max"].as_u64().unwrap();
    assert!(b_max_wait >= 2_900, "{out}");
    let makespan = real["makespan_ms"].as_u64().unwrap();
    assert!((18_000..25_000).contains(&makespan), "{out}");
    assert_eq!(j["agreement"].as_array().unwrap().len(), 3);
}
