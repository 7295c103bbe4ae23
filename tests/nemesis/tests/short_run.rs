//! The 20-second nemesis run of the test command: real controllers and agents under
//! injected faults, judged by the checker.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::binaries;

#[test]
fn twenty_seconds_of_faults_lose_and_duplicate_nothing() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_tranche-nemesis"));
    let (tranched, agent) = binaries(&exe);
    let mut cmd = Command::new(&exe);
    cmd.args(["--duration", "20", "--json"])
        .env("TRANCHED", tranched)
        .env("TRANCHE_AGENT", agent)
        .env_remove("CARGO");
    if let Ok(seed) = std::env::var("TRANCHE_NEMESIS_SEED") {
        cmd.args(["--seed", &seed]);
    }
    let out = cmd.output().expect("run tranche-nemesis");
    let v = common::judged(
        &out,
        &[
            "lost",
            "duplicated",
            "gpu_overlaps",
            "stuck",
            "cancels_undone",
        ],
    );
    let n = |k: &str| common::count(&v, k);
    // The run did something worth judging: load, faults of several kinds, jobs on GPUs.
    assert!(n("faults") >= 12, "{v}");
    assert!(v["faults_by_kind"].as_object().unwrap().len() >= 3, "{v}");
    assert!(n("acked") >= 20, "{v}");
    assert!(n("gpu_intervals") >= 10, "{v}");
    // Ended jobs left the state during the run and were read back from history.
    assert!(n("archived") >= 1, "{v}");
    assert!(
        v["jobs_by_status"]["SUCCEEDED"].as_u64().unwrap_or(0) >= 5,
        "{v}"
    );
}
