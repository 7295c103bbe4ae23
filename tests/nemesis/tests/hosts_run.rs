//! The 60-second nemesis run on the test bed, part of the test command: controllers and
//! agents on hosts of their own under network partitions, one-way drops, kills and
//! pauses, judged by the checker, and nothing of the bed left afterwards.
//!
//! It needs root, `ip` and `nft`. Without them it says NOT RUN on stderr and passes,
//! except under `CI=true`, where it fails.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

#[test]
fn sixty_seconds_of_partitions_on_hosts_lose_and_duplicate_nothing() {
    if !common::can_run("sixty_seconds_of_partitions_on_hosts_lose_and_duplicate_nothing") {
        return;
    }
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_tranche-nemesis"));
    let (tranched, agent) = common::binaries(&exe);
    let mut cmd = Command::new(&exe);
    cmd.args(["--hosts", "--duration", "60", "--json"])
        .env("TRANCHED", tranched)
        .env("TRANCHE_AGENT", agent)
        .env_remove("CARGO")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Ok(seed) = std::env::var("TRANCHE_NEMESIS_SEED") {
        cmd.args(["--seed", &seed]);
    }
    let child = cmd.spawn().expect("run tranche-nemesis");
    let tag = format!("trb-{}", child.id());
    let out = child.wait_with_output().unwrap();
    let v = common::judged(
        &out,
        &[
            "lost",
            "duplicated",
            "gpu_overlaps",
            "job_overlaps",
            "fence_late",
            "stuck",
            "failed",
            "cancels_undone",
        ],
    );
    let n = |k: &str| common::count(&v, k);
    // Every delay was applied and healed (its rules and queue gone).
    assert_eq!(v["delay"]["errors"], 0, "{v}");
    // Only a failed run keeps its directory; this one passed, so nothing is left.
    assert_eq!(common::settle(&tag), Vec::<String>::new());
    // The run did something worth judging: load, network faults of several kinds,
    // jobs on GPUs.
    assert!(n("faults") >= 20, "{v}");
    let kinds = v["faults_by_kind"].as_object().unwrap();
    let network = [
        "partition_leader",
        "partition_minority",
        "partition_bridge",
        "drop_one_way",
        "lossy_links",
        "delay",
        "cut_agent",
        "agent_minority",
    ];
    let seen = network.iter().filter(|k| kinds.contains_key(**k)).count();
    assert!(seen >= 3, "{seen} kinds of network fault: {v}");
    assert!(n("acked") >= 50, "{v}");
    assert!(n("gpu_intervals") >= 20, "{v}");
    assert!(
        v["jobs_by_status"]["SUCCEEDED"].as_u64().unwrap_or(0) >= 10,
        "{v}"
    );
}
