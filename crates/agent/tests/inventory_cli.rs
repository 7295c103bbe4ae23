//! `tranche-agent inventory`, run as a process.

use std::process::Command;

fn agent(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tranche-agent"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fake_inventory_lists_the_declared_gpus() {
    let (code, out, err) = agent(&[
        "inventory",
        "--backend",
        "fake",
        "--fake",
        "2 x h100, 1 x a100",
        "--node",
        "n7",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["backend"], "fake");
    let gpus = v["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 3);
    assert_eq!(gpus[2]["unit"], "a100");
    assert_eq!(gpus[2]["gpu"]["uuid"], "GPU-fake-n7-2");
}

/// Without an NVIDIA driver (as on CI), the nvml backend refuses with the fix and the
/// fake backend named; it never reports an empty node. Where a driver is present the
/// test checks the opposite: the inventory lists the GPUs NVML reports.
#[test]
fn nvml_without_a_driver_says_how_to_fix_it() {
    let (code, out, err) = agent(&["inventory", "--backend", "nvml"]);
    let has_driver = std::path::Path::new("/proc/driver/nvidia/version").exists();
    if has_driver {
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("backend nvml"), "{out}");
    } else {
        assert_eq!(code, 2, "{out}");
        assert!(err.contains("libnvidia-ml.so.1"), "{err}");
        assert!(err.contains("nvidia-smi"), "{err}");
        assert!(err.contains("fake"), "{err}");
        assert!(out.is_empty(), "{out}");
    }
}

#[test]
fn a_bad_fake_spec_is_refused_naming_the_rule() {
    let (code, _, err) = agent(&["inventory", "--backend", "fake", "--fake", "eight h100"]);
    assert_eq!(code, 2);
    assert!(err.contains("COUNT x UNIT"), "{err}");
}
