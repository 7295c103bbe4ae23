//! What the nemesis's tests share.

use std::path::{Path, PathBuf};
use std::process::Command;

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
