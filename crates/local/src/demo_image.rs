//! The demo image of a local cluster (`tranche dev`): an OCI image layout made from the
//! machine's static busybox, with an entrypoint that follows SageMaker's `train`
//! convention, so that container jobs and the AWS examples run on a fresh machine
//! without a registry. And what a machine lacks for container jobs at all.

use std::io;
use std::path::{Path, PathBuf};

/// The entrypoint of the demo image. Run with `train` (a SageMaker job without a
/// command), it prints the contract it finds under `/opt/ml` and in `SM_*`, and writes
/// a model file; with `SLEEP_S` set it then sleeps, and checkpoints (exits 0) on
/// SIGTERM. Run with any other command line it runs that.
pub const ENTRYPOINT: &str = r#"#!/bin/sh
if [ "$1" != train ] && [ $# -gt 0 ]; then exec "$@"; fi
echo "args: $*"
echo "hyperparameters: $(cat /opt/ml/input/config/hyperparameters.json)"
echo "resourceconfig: $(cat /opt/ml/input/config/resourceconfig.json)"
echo "hosts: $SM_HOSTS current: $SM_CURRENT_HOST gpus: $SM_NUM_GPUS lr: $SM_HP_LR"
echo "model: $SM_MODEL_DIR"
echo trained > /opt/ml/model/model.txt
if [ -n "$SLEEP_S" ]; then
  trap 'echo checkpoint; exit 0' TERM
  sleep "$SLEEP_S" &
  wait
fi
"#;

/// Directories searched for programs besides `PATH` (as the agent searches them).
const SEARCH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

fn find(name: &str) -> impl Iterator<Item = PathBuf> + '_ {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .collect::<Vec<_>>()
        .into_iter()
        .chain(SEARCH.iter().map(PathBuf::from))
        .map(move |d| d.join(name))
        .filter(|p| p.is_file())
}

/// The OCI runtime the agents would use for container jobs (`runc`, else `crun`), if
/// this machine has one.
pub fn oci_runtime() -> Option<PathBuf> {
    find("runc").next().or_else(|| find("crun").next())
}

/// A statically linked busybox on this machine (one with no program interpreter, so
/// that it runs inside an image with nothing else), if there is one.
pub fn static_busybox() -> Option<PathBuf> {
    find("busybox").find(|p| is_static_elf(p).unwrap_or(false))
}

/// Whether `p` is a 64-bit little-endian ELF executable without a `PT_INTERP` header.
fn is_static_elf(p: &Path) -> io::Result<bool> {
    let b = std::fs::read(p)?;
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u32_at = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
    };
    // ELF magic, 64-bit, little-endian.
    if b.get(0..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Ok(false);
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return Ok(false);
    };
    const PT_INTERP: u32 = 3;
    for i in 0..phnum as usize {
        let at = phoff as usize + i * phentsize as usize;
        match u32_at(at) {
            Some(PT_INTERP) => return Ok(false),
            Some(_) => {}
            None => return Ok(false),
        }
    }
    Ok(true)
}

fn sha256_hex(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes a blob and returns its descriptor.
fn blob(layout: &Path, media_type: &str, data: &[u8]) -> io::Result<serde_json::Value> {
    let h = sha256_hex(data);
    std::fs::write(layout.join("blobs/sha256").join(&h), data)?;
    Ok(
        serde_json::json!({"mediaType": media_type, "digest": format!("sha256:{h}"), "size": data.len()}),
    )
}

/// The busybox applets an image needs at least, besides those `busybox --list` names.
const APPLETS: &[&str] = &["sh", "sleep", "echo", "cat", "env", "ls", "test"];

/// Makes the demo image at `layout` (an OCI image layout, replacing what is there):
/// `busybox` as `/bin/busybox` with a link per applet, and [`ENTRYPOINT`] as its
/// entrypoint.
pub fn make(layout: &Path, busybox: &Path) -> io::Result<()> {
    let listed = std::process::Command::new(busybox).arg("--list").output()?;
    let mut applets: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .filter(|a| *a != "busybox" && !a.contains('/'))
        .map(String::from)
        .collect();
    for a in APPLETS {
        if !applets.iter().any(|x| x == a) {
            applets.push(a.to_string());
        }
    }
    let mut t = tar::Builder::new(Vec::new());
    let header = |kind: tar::EntryType, mode: u32, size: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(1_700_000_000);
        h
    };
    for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "root", "opt"] {
        let mut h = header(tar::EntryType::Directory, 0o755, 0);
        t.append_data(&mut h, d, io::empty())?;
    }
    let bb = std::fs::read(busybox)?;
    let mut h = header(tar::EntryType::Regular, 0o755, bb.len() as u64);
    t.append_data(&mut h, "bin/busybox", &bb[..])?;
    for a in &applets {
        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
        t.append_link(&mut h, format!("bin/{a}"), "busybox")?;
    }
    let mut h = header(tar::EntryType::Regular, 0o755, ENTRYPOINT.len() as u64);
    t.append_data(&mut h, "entry.sh", ENTRYPOINT.as_bytes())?;
    let layer = t.into_inner()?;

    if layout.exists() {
        std::fs::remove_dir_all(layout)?;
    }
    std::fs::create_dir_all(layout.join("blobs/sha256"))?;
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    let l1 = blob(layout, "application/vnd.oci.image.layer.v1.tar", &layer)?;
    let config = serde_json::json!({
        "os": "linux",
        "architecture": "amd64",
        "config": {"Env": ["PATH=/bin"], "Entrypoint": ["/entry.sh"]},
        "rootfs": {"type": "layers", "diff_ids": [l1["digest"]]},
    });
    let cfg = blob(
        layout,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    )?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": cfg,
        "layers": [l1],
    });
    let m = blob(
        layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.to_string().as_bytes(),
    )?;
    std::fs::write(
        layout.join("index.json"),
        serde_json::json!({"schemaVersion": 2, "manifests": [m]}).to_string(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_executable_is_not_static_and_a_text_file_is_no_elf() {
        // This test's own binary links the C library dynamically.
        let me = std::env::current_exe().unwrap();
        assert!(!is_static_elf(&me).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("x");
        std::fs::write(&text, "#!/bin/sh\n").unwrap();
        assert!(!is_static_elf(&text).unwrap());
    }

    #[test]
    fn the_image_is_a_layout_whose_blobs_match_their_digests() {
        let Some(bb) = static_busybox() else {
            let ci = matches!(std::env::var("CI").as_deref(), Ok("true" | "1"));
            assert!(
                !(ci && nix::unistd::Uid::effective().is_root()),
                "no static busybox, and under CI as root scripts/test.sh installs busybox-static"
            );
            // Past the harness's capture: a skipped test still reads `ok`.
            use std::io::Write;
            let _ = std::io::stderr().write_all(
                b"SKIPPED the_image_is_a_layout_whose_blobs_match_their_digests: no static \
                  busybox. To run it: apt-get install busybox-static.\n",
            );
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let layout = dir.path().join("img");
        make(&layout, &bb).unwrap();
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(layout.join("index.json")).unwrap())
                .unwrap();
        let m = index["manifests"][0]["digest"].as_str().unwrap();
        let manifest = std::fs::read(layout.join("blobs/sha256").join(&m[7..])).unwrap();
        assert_eq!(sha256_hex(&manifest), m[7..]);
        let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
        let cfg = manifest["config"]["digest"].as_str().unwrap();
        let config: serde_json::Value = serde_json::from_slice(
            &std::fs::read(layout.join("blobs/sha256").join(&cfg[7..])).unwrap(),
        )
        .unwrap();
        assert_eq!(config["config"]["Entrypoint"][0], "/entry.sh");
        let layer = manifest["layers"][0]["digest"].as_str().unwrap();
        let bytes = std::fs::read(layout.join("blobs/sha256").join(&layer[7..])).unwrap();
        assert_eq!(sha256_hex(&bytes), layer[7..]);
        let mut names = Vec::new();
        for e in tar::Archive::new(&bytes[..]).entries().unwrap() {
            names.push(e.unwrap().path().unwrap().display().to_string());
        }
        for want in ["bin/busybox", "bin/sh", "bin/cat", "entry.sh"] {
            assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
        }
    }
}
