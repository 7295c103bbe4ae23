//! The dependency rules of `docs/architecture.md`'s code map, checked on the workspace's
//! manifests: each crate may depend (for its library and binaries, not its tests) only on
//! the workspace crates its rule names, and the pure core never on an async runtime, a
//! network stack or storage.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Each workspace package and the workspace packages it may depend on. A package that is
/// not listed here fails the test: a new crate gets its rule when it is added.
const MAY_USE: &[(&str, &[&str])] = &[
    ("tranche-model", &[]),
    ("tranche-state", &["tranche-model"]),
    ("tranche-sched", &["tranche-model", "tranche-state"]),
    (
        "tranche-sim",
        &["tranche-model", "tranche-state", "tranche-sched"],
    ),
    ("tranche-proto", &["tranche-model"]),
    ("tranche-tls", &[]),
    ("tranche-raftlog", &[]),
    ("tranche-daemon-kit", &["tranche-tls"]),
    (
        "tranche-client",
        &["tranche-model", "tranche-proto", "tranche-tls"],
    ),
    (
        "tranche-controller",
        &[
            "tranche-model",
            "tranche-state",
            "tranche-sched",
            "tranche-proto",
            "tranche-tls",
            "tranche-raftlog",
            "tranche-daemon-kit",
        ],
    ),
    (
        "tranche-http",
        &[
            "tranche-model",
            "tranche-state",
            "tranche-proto",
            "tranche-tls",
            "tranche-client",
            "tranche-daemon-kit",
            "tranche-controller",
        ],
    ),
    (
        "tranche-aws",
        &[
            "tranche-model",
            "tranche-state",
            "tranche-proto",
            "tranche-tls",
            "tranche-controller",
            "tranche-http",
        ],
    ),
    (
        "tranched",
        &[
            "tranche-controller",
            "tranche-http",
            "tranche-aws",
            "tranche-daemon-kit",
            "tranche-tls",
            "tranche-model",
        ],
    ),
    (
        "tranche-agent",
        &[
            "tranche-model",
            "tranche-proto",
            "tranche-tls",
            "tranche-client",
            "tranche-daemon-kit",
        ],
    ),
    (
        "tranche-local",
        &[
            "tranche-model",
            "tranche-proto",
            "tranche-tls",
            "tranche-client",
        ],
    ),
    (
        "tranche-bench",
        &[
            "tranche-model",
            "tranche-state",
            "tranche-sched",
            "tranche-sim",
            "tranche-proto",
            "tranche-tls",
            "tranche-client",
            "tranche-local",
        ],
    ),
    (
        "tranche-cli",
        &[
            "tranche-model",
            "tranche-state",
            "tranche-sched",
            "tranche-sim",
            "tranche-proto",
            "tranche-tls",
            "tranche-client",
            "tranche-local",
            "tranche-bench",
        ],
    ),
    (
        "tranche-fuzzing",
        &[
            "tranche-model",
            "tranche-state",
            "tranche-sched",
            "tranche-sim",
            "tranche-proto",
            "tranche-tls",
            "tranche-raftlog",
            "tranche-controller",
            "tranche-agent",
        ],
    ),
    (
        "tranche-nemesis",
        &[
            "tranche-model",
            "tranche-state",
            "tranche-proto",
            "tranche-tls",
            "tranche-client",
            "tranche-local",
            // Its checker reads the agents' GPU ledgers.
            "tranche-agent",
        ],
    ),
    ("tranche-architecture-tests", &[]),
];

/// Edges the rules forbid that the tree still has, each with what removes it. The test
/// fails when one of them is gone, so that this list only shrinks.
const NOT_YET: &[(&str, &str, &str)] = &[];

/// The pure core: time is an argument, and nothing here does I/O.
const PURE: &[&str] = &["tranche-model", "tranche-state", "tranche-sched"];

/// Crates that bring an async runtime, a network stack, storage or the OS's calls.
const IMPURE: &[&str] = &[
    "tokio",
    "quinn",
    "rustls",
    "redb",
    "raft",
    "nix",
    "libc",
    "axum",
    "hyper",
    "tiny_http",
    "nvml-wrapper",
    "tracing-subscriber",
    "rand",
];

/// Each workspace package's normal and build dependencies (not dev-dependencies).
fn workspace_deps() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let mut deps = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("package name").to_string();
        let mine: BTreeSet<String> = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .map(|d| d["name"].as_str().expect("dependency name").to_string())
            .collect();
        deps.insert(name, mine);
    }
    deps
}

#[test]
fn every_crate_depends_only_on_what_its_rule_allows() {
    let rules: BTreeMap<&str, &[&str]> = MAY_USE.iter().copied().collect();
    let deps = workspace_deps();
    let ours: BTreeSet<&str> = deps.keys().map(String::as_str).collect();
    let mut wrong = Vec::new();
    for (pkg, used) in &deps {
        let Some(allowed) = rules.get(pkg.as_str()) else {
            wrong.push(format!(
                "{pkg} has no rule: add it to MAY_USE and to docs/architecture.md"
            ));
            continue;
        };
        for d in used.iter().filter(|d| ours.contains(d.as_str())) {
            let excepted = NOT_YET.iter().any(|(p, e, _)| p == pkg && e == d);
            if !allowed.contains(&d.as_str()) && !excepted {
                wrong.push(format!("{pkg} must not depend on {d}"));
            }
        }
    }
    for (pkg, dep, until) in NOT_YET {
        if !deps.get(*pkg).is_some_and(|u| u.contains(*dep)) {
            wrong.push(format!(
                "{pkg} no longer depends on {dep} ({until}): remove it from NOT_YET"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "dependency rules broken:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_pure_core_uses_no_runtime_network_or_storage() {
    let deps = workspace_deps();
    let mut wrong = Vec::new();
    for pkg in PURE {
        let used = deps
            .get(*pkg)
            .unwrap_or_else(|| panic!("{pkg} is not in the workspace"));
        for d in used.iter().filter(|d| IMPURE.contains(&d.as_str())) {
            wrong.push(format!("{pkg} must not depend on {d}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "the pure core is not pure:\n{}",
        wrong.join("\n")
    );
}

/// The rule table itself: a rule may only name crates that have rules, and no crate
/// may use itself, so a typo cannot quietly allow anything.
#[test]
fn the_rules_name_only_known_crates() {
    let known: BTreeSet<&str> = MAY_USE.iter().map(|(n, _)| *n).collect();
    for (pkg, allowed) in MAY_USE {
        for a in *allowed {
            assert!(known.contains(a), "{pkg}'s rule names unknown {a}");
            assert_ne!(pkg, a, "{pkg} names itself");
        }
    }
}
