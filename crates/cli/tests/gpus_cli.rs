//! `--gpus` as Slurm users read it: the job's total, split evenly over `--nodes`;
//! `--gpus-per-node` for each node's. A total that does not split, or both options,
//! is refused with the numbers before anything is sent.

mod common;

use serde_json::Value;

use common::{run, tranche, Dev};

/// A submit that the CLI refuses by itself: no config, no cluster.
fn refused(args: &[&str]) -> String {
    let mut argv = vec!["submit", "--share", "nlp"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--config", "/nonexistent/tranche.toml", "--", "true"]);
    let (code, _, err) = run(&argv);
    assert_eq!(code, 2, "{argv:?}: {err}");
    err
}

#[test]
fn a_total_that_does_not_split_and_both_options_are_refused() {
    let err = refused(&["--gpus", "10", "--nodes", "4"]);
    assert!(
        err.contains(
            "--gpus 10 does not split evenly over --nodes 4: give a multiple of 4, or \
             --gpus-per-node"
        ),
        "{err}"
    );
    let err = refused(&["--gpus", "8", "--gpus-per-node", "4", "--nodes", "2"]);
    assert!(
        err.contains("--gpus 8 and --gpus-per-node 4: give one"),
        "{err}"
    );
    let err = refused(&[]);
    assert!(
        err.contains("--gpus (in all) or --gpus-per-node is required"),
        "{err}"
    );
}

/// The request a held job was submitted with: (nodes, GPUs per node); of its first
/// task for an array.
fn request(config: &str, args: &[&str]) -> (u64, u64) {
    let mut argv = vec!["submit", "--share", "nlp", "--hold", "--parsable"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--", "true"]);
    submitted(config, &argv)
}

/// The request of the job `argv` (a `submit --parsable`) makes: (nodes, GPUs per node).
fn submitted(config: &str, argv: &[&str]) -> (u64, u64) {
    let out = tranche(config, argv);
    assert!(out.status.success(), "{argv:?}: {out:?}");
    let mut id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if argv.contains(&"--array") {
        id += "_0";
    }
    let out = tranche(config, &["show", &id, "--json"]);
    assert!(out.status.success(), "show {id}: {out:?}");
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &j["spec"]["request"];
    (
        r["nodes"].as_u64().unwrap(),
        r["gpus_per_node"].as_u64().unwrap(),
    )
}

#[test]
fn gpus_split_over_the_nodes_and_gpus_per_node_is_each_nodes() {
    let dev = Dev::start("tester");
    let c = dev.user.clone();
    assert_eq!(request(&c, &["--gpus", "2"]), (1, 2));
    assert_eq!(request(&c, &["--gpus", "8", "--nodes", "2"]), (2, 4));
    assert_eq!(
        request(&c, &["--gpus-per-node", "3", "--nodes", "2"]),
        (2, 3)
    );
    // Each task of an array is a job of that size.
    assert_eq!(
        request(&c, &["--gpus", "4", "--nodes", "2", "--array", "0-1"]),
        (2, 2)
    );
    // A script's directives read the same way.
    let script = dev.dir.join("gang.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#TRANCHE --share nlp --gpus 6 --nodes 2\ntrue\n",
    )
    .unwrap();
    let script = script.to_str().unwrap();
    assert_eq!(
        submitted(&c, &["submit", "--hold", "--parsable", script]),
        (2, 3)
    );
}
