//! The CLI's leader cache on `tranche dev`: a submit remembers the leader, and a cache
//! that names a follower, a controller not in the config, or holds garbage changes
//! nothing but the time the submit takes.

mod common;

use common::{cache_dir, tranche, Dev};

/// The client addresses in a cluster config, and the leader's (from `tranche
/// controllers`).
fn addresses(config: &str) -> (Vec<String>, String) {
    let cfg: toml::Value = toml::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    let addrs = cfg["controllers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let out = tranche(config, &["controllers"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let leader = text
        .lines()
        .find_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.get(4) == Some(&"leader")).then(|| cols[3].to_string())
        })
        .unwrap_or_else(|| panic!("no leader in:\n{text}"));
    (addrs, leader)
}

fn submit(config: &str) {
    let out = tranche(
        config,
        &["submit", "--share", "nlp", "--gpus", "1", "--", "true"],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("Submitted job "),
        "{out:?}"
    );
}

#[test]
fn a_submit_remembers_the_leader_and_a_bad_cache_is_harmless() {
    let dev = Dev::start("lee");
    let (addrs, leader) = addresses(&dev.user);
    let mut key = addrs.clone();
    key.sort();
    let key = key.join(",");
    let file = cache_dir(&dev.user).join("tranche").join("leaders");
    let remembered = || std::fs::read_to_string(&file).unwrap_or_default();
    let leader_line = format!("{key} {leader}\n");

    // No cache yet: the submit goes wherever, and remembers the leader.
    assert!(!file.exists());
    submit(&dev.user);
    assert_eq!(remembered(), leader_line);

    let follower = addrs.iter().find(|a| **a != leader).unwrap();
    for (what, text) in [
        ("a follower", format!("{key} {follower}\n")),
        (
            "no controller of the config",
            format!("{key} 127.0.0.1:9\n"),
        ),
        ("garbage", "\u{0}garbage\n\n  \n".to_string()),
        ("a truncated line", key.clone()),
    ] {
        std::fs::write(&file, text).unwrap();
        submit(&dev.user);
        assert_eq!(remembered(), leader_line, "after a cache naming {what}");
    }
    let out = tranche(&dev.user, &["jobs", "--me", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        jobs.as_array().unwrap().len(),
        5,
        "one job per submit: {jobs}"
    );
}
