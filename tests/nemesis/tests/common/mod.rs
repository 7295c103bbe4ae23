//! What the nemesis's tests share (each test binary uses part of it).
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `tranched` and `tranche-agent` beside the nemesis binary `exe`, built first when
/// this package's tests run alone.
pub fn binaries(exe: &Path) -> (PathBuf, PathBuf) {
    let dir = exe.parent().unwrap();
    let (c, a) = (dir.join("tranched"), dir.join("tranche-agent"));
    if !c.exists() || !a.exists() {
        let cargo = option_env!("CARGO").unwrap_or("cargo");
        let st = Command::new(cargo)
            .args(["build", "-p", "tranched", "--bin", "tranched"])
            .args(["-p", "tranche-agent", "--bin", "tranche-agent"])
            .status()
            .expect("cargo build");
        assert!(st.success(), "building tranched and tranche-agent failed");
    }
    (c, a)
}

/// Why the bed cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("not root".into());
    }
    for tool in ["ip", "nft"] {
        let ok = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !ok {
            return Some(format!("`{tool}` is missing (iproute2, nftables)"));
        }
    }
    // Root may still be refused network namespaces (a container without
    // CAP_SYS_ADMIN): try one.
    let netns = Command::new("unshare")
        .args(["--net", "true"])
        .stderr(Stdio::null())
        .status();
    if let Ok(st) = netns {
        if !st.success() {
            return Some("this machine refuses network namespaces (unshare --net)".into());
        }
    }
    None
}

/// True when the test can run; otherwise says NOT RUN (and fails under CI=true).
pub fn can_run(test: &str) -> bool {
    let Some(why) = unavailable() else {
        return true;
    };
    not_run(
        test,
        &format!("the test bed needs root, ip, nft and network namespaces: {why}"),
    );
    false
}

/// Says that `test` did not run and why (a failure under CI=true).
pub fn not_run(test: &str, why: &str) {
    let msg = format!("NOT RUN: {test}: {why}");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg} (CI=true)");
    }
    // Straight to stderr, past the harness's capture of `eprintln!`: the test still
    // reads `ok`, so this line is what shows it did not run.
    let _ = std::io::stderr().write_all(format!("\n*** {msg} ***\n\n").as_bytes());
}

/// What of run `tag` is still there: namespaces, processes, mounts, its directory.
pub fn left(tag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let prefix = format!("{tag}-");
    if let Ok(d) = std::fs::read_dir("/run/netns") {
        for e in d.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(&prefix) {
                out.push(format!("namespace {n}"));
            }
        }
    }
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let line = String::from_utf8_lossy(&c).replace('\0', " ");
            if line.contains(&format!("/{prefix}")) || line.contains(&format!(" {prefix}")) {
                out.push(format!(
                    "process {}: {line}",
                    e.file_name().to_string_lossy()
                ));
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    // The controllers' disks (a namespace is a mount too, under /run/netns: counted
    // above).
    let disks = mounts.lines().filter_map(|l| l.strip_prefix("tmpfs "));
    for point in disks.filter_map(|l| l.split(' ').next()) {
        if point.contains(&format!("/{prefix}")) {
            out.push(format!("mount {point}"));
        }
    }
    for e in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            out.push(format!("directory {}", e.path().display()));
        }
    }
    out
}

/// Waits (up to 10 s) for nothing of `tag` to be left; returns what still is.
pub fn settle(tag: &str) -> Vec<String> {
    for _ in 0..100 {
        if left(tag).is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    left(tag)
}

/// The summary a run printed on stdout, checked: it exited 0, passed, converged, and
/// each of `zero` is 0.
pub fn judged(out: &std::process::Output, zero: &[&str]) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tranche-nemesis failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["passed"], true, "{v}");
    assert_eq!(v["converged"], true, "{v}");
    for k in zero {
        assert_eq!(count(&v, k), 0, "{k}: {v}");
    }
    v
}

/// A count in a run's summary.
pub fn count(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}
