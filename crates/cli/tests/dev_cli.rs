//! `tranche dev`: a whole local cluster from one command, driven by the real CLI.

mod common;

use std::time::Duration;

use tranche_local::wait_until_blocking;

use common::{tranche, Dev};

#[test]
fn dev_starts_a_cluster_that_runs_jobs_and_ctrl_c_leaves_nothing() {
    let mut dev = Dev::start("tester");
    let config = dev.user.clone();
    let dir = dev.dir.clone();

    let out = tranche(
        &config,
        &[
            "submit",
            "--share",
            "nlp",
            "--gpus",
            "2",
            "--parsable",
            "--",
            "sh",
            "-c",
            "echo gpus=$CUDA_VISIBLE_DEVICES",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let job = wait_until_blocking("the job SUCCEEDED", Duration::from_secs(60), || {
        let out = tranche(&config, &["jobs", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let job = v
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"].as_u64() == id.parse().ok())
            .cloned()
            .unwrap();
        match job["state"] == "SUCCEEDED" {
            true => Ok(job),
            false => Err(job.to_string()),
        }
    })
    .unwrap();
    assert_eq!(job["user"], "tester");
    let out = tranche(&config, &["logs", &id]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "gpus=0,1\n",
        "{out:?}"
    );

    // --wait follows the job and exits with its code.
    let out = tranche(
        &config,
        &[
            "submit", "--share", "vision", "--gpus", "1", "--wait", "--", "sh", "-c", "exit 3",
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = tranche(
        &config,
        &[
            "submit", "--share", "vision", "--gpus", "1", "--wait", "--", "true",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // A batch script with #TRANCHE directives; the command line overrides them.
    let script = dir.join("train.sh");
    std::fs::write(&script, "#!/bin/sh\n#TRANCHE --share vision --gpus 1\n#TRANCHE --name fromscript\necho \"gpus=$CUDA_VISIBLE_DEVICES\"\n").unwrap();
    let out = tranche(
        &config,
        &[
            "submit",
            "--gpus",
            "2",
            "--parsable",
            "--wait",
            script.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let sid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = tranche(&config, &["logs", &sid]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "gpus=0,1\n",
        "{out:?}"
    );
    let out = tranche(&config, &["jobs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = v
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"].as_u64() == sid.parse().ok())
        .unwrap();
    assert_eq!(job["name"], "fromscript");
    assert_eq!(job["share"], "vision");
    let out = tranche(&config, &["submit", script.to_str().unwrap(), "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // A job still running when tranche dev stops is killed with its node.
    let mark = format!("dev-left-{}", std::process::id());
    let out = tranche(
        &config,
        &[
            "submit",
            "--share",
            "vision",
            "--gpus",
            "1",
            "--parsable",
            "--",
            "sh",
            "-c",
            &format!("sleep 300; echo {mark}"),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    wait_until_blocking("the long job runs", Duration::from_secs(30), || {
        match tranche_local::processes_matching(&mark).is_empty() {
            true => Err("not yet".to_string()),
            false => Ok(()),
        }
    })
    .unwrap();

    // Ctrl-C: everything stops and the temporary dir goes away.
    tranche_local::interrupt(dev.child.id());
    let status = wait_until_blocking("tranche dev stops", Duration::from_secs(30), || {
        match dev.child.try_wait().unwrap() {
            Some(st) => Ok(st),
            None => Err("still running".into()),
        }
    })
    .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!dir.exists(), "{} is left behind", dir.display());
    let left = tranche_local::processes_matching(dir.to_str().unwrap());
    assert!(left.is_empty(), "processes left running: {left:?}");
    let job = tranche_local::processes_matching(&mark);
    assert!(job.is_empty(), "the running job was left: {job:?}");
}
