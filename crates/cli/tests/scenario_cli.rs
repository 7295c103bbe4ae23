//! The `tranche scenario run` command as a user runs it: its exit status and output.

mod common;

use common::run as tranche;
use std::path::PathBuf;

fn reclaim() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios/reclaim.toml")
}

#[test]
fn a_passing_scenario_exits_0_with_a_timeline_and_summary() {
    let (code, out, _) = tranche(&["scenario", "run", reclaim().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("borrower  RUNNING -> RUNNABLE"), "{out}");
    assert!(out.contains("8 of 8 expectations held"), "{out}");
}

#[test]
fn json_output_is_one_object_per_line_ending_with_the_summary() {
    let (code, out, _) = tranche(&["scenario", "run", "--json", reclaim().to_str().unwrap()]);
    assert_eq!(code, 0);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let first = &lines[0];
    for key in ["t", "job", "from", "to", "nodes", "reason"] {
        assert!(first.get(key).is_some(), "transition lacks {key}: {first}");
    }
    let summary = lines.last().unwrap();
    assert_eq!(summary["passed"], true);
    assert_eq!(summary["failed_expectations"], 0);
}

#[test]
fn a_failed_expectation_exits_1_and_an_invalid_file_exits_2() {
    let dir = std::env::temp_dir().join(format!("tranche-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(reclaim()).unwrap();
    let wrong = dir.join("wrong.toml");
    std::fs::write(
        &wrong,
        text.replace("state = \"SUCCEEDED\"", "state = \"FAILED\""),
    )
    .unwrap();
    let (code, out, _) = tranche(&["scenario", "run", wrong.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL t=705s job lender state: expected FAILED, found SUCCEEDED"),
        "{out}"
    );
    let invalid = dir.join("invalid.toml");
    std::fs::write(
        &invalid,
        text.replace("gpus = 8\n", "gpus = 8\ngpu_type = \"x\"\n"),
    )
    .unwrap();
    let (code, _, err) = tranche(&["scenario", "run", invalid.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("unknown field `gpu_type`") && err.contains("line"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
