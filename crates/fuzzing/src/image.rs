//! The agent's reader of users' container images: OCI image layouts and archives of
//! them, unpacked into an image cache in a temporary directory.
//!
//! Digests are checked before anything is unpacked, so mutated bytes would rarely get
//! past them; the target therefore builds the layout around the input, with the
//! digests right. The first byte chooses what the rest is:
//!
//! * 0: layers (tar streams, maybe gzip), split at [`LAYER_SEP`];
//! * 1: `index.json`, beside the blobs of a valid image;
//! * 2: a manifest, stored as a blob and named by `index.json`, beside those blobs;
//! * 3: an archive (`.tar`/`.tar.gz`) of a layout.
//!
//! Whatever the input, the reader must not panic, must not write, delete or create
//! anything outside its cache, and must not create a device node, FIFO or socket, or
//! a setuid or setgid file.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde_json::json;
use sha2::{Digest, Sha256};
use tranche_agent::exec::{prepare_image, ImagePolicy};

/// Separates layers in an input of kind 0.
pub const LAYER_SEP: &[u8] = b"\n--tranche-layer--\n";

fn hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// Writes `bytes` as a blob of `layout`; returns its descriptor.
fn put(layout: &Path, media_type: &str, bytes: &[u8]) -> serde_json::Value {
    let h = hex(bytes);
    std::fs::write(layout.join("blobs/sha256").join(&h), bytes).expect("writes a blob");
    json!({"mediaType": media_type, "digest": format!("sha256:{h}"), "size": bytes.len()})
}

/// A manifest of `layers` (written as blobs of `layout`, with a config); its bytes.
fn manifest(layout: &Path, layers: &[&[u8]]) -> Vec<u8> {
    let descs: Vec<_> = layers
        .iter()
        .map(|l| put(layout, "application/vnd.oci.image.layer.v1.tar", l))
        .collect();
    let config = json!({"os": "linux", "config": {"Env": ["A=1"], "Entrypoint": ["/bin/sh"]}});
    let c = put(
        layout,
        "application/vnd.oci.image.config.v1+json",
        config.to_string().as_bytes(),
    );
    json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": c, "layers": descs})
    .to_string()
    .into_bytes()
}

fn index(layout: &Path, manifest: &[u8]) {
    let m = put(
        layout,
        "application/vnd.oci.image.manifest.v1+json",
        manifest,
    );
    std::fs::write(
        layout.join("index.json"),
        json!({"schemaVersion": 2, "manifests": [m]}).to_string(),
    )
    .expect("writes index.json");
}

/// A header of `kind`, `mode` and `size`, owned by root.
fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    h
}

/// A small valid layer: a directory, a file, a symlink.
pub fn sample_layer() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = header(tar::EntryType::Directory, 0o755, 0);
    b.append_data(&mut h, "etc", &[][..]).expect("appends");
    let mut h = header(tar::EntryType::Regular, 0o644, 3);
    b.append_data(&mut h, "etc/os", &b"ok\n"[..])
        .expect("appends");
    let mut h = header(tar::EntryType::Symlink, 0o777, 0);
    b.append_link(&mut h, "os", "/etc/os").expect("appends");
    b.into_inner().expect("finishes")
}

/// Every path under `dir` (not following symlinks) with its metadata.
fn tree(dir: &Path) -> BTreeMap<PathBuf, std::fs::Metadata> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.is_dir() {
                todo.push(e.path());
            }
            out.insert(e.path(), m);
        }
    }
    out
}

/// The fuzz target's body.
pub fn image_layout(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let layout = tmp.path().join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).expect("makes the layout");
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("writes oci-layout");
    let mut image = layout.clone();
    match kind % 4 {
        0 => {
            let layers: Vec<&[u8]> = split(rest, LAYER_SEP);
            let m = manifest(&layout, &layers);
            index(&layout, &m);
        }
        1 => {
            // The manifest as a blob too, so that an index naming it gets further.
            let m = manifest(&layout, &[&sample_layer()]);
            put(&layout, "application/vnd.oci.image.manifest.v1+json", &m);
            std::fs::write(layout.join("index.json"), rest).expect("writes index.json");
        }
        2 => {
            manifest(&layout, &[&sample_layer()]);
            index(&layout, rest);
        }
        _ => {
            image = tmp.path().join("image.tar");
            std::fs::write(&image, rest).expect("writes the archive");
        }
    }
    // A file outside the cache the reader must leave alone.
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).expect("makes a directory");
    std::fs::write(outside.join("victim"), b"v").expect("writes a file");
    let images = tmp.path().join("spool/images");
    std::fs::create_dir_all(&images).expect("makes the cache");
    let before: BTreeMap<PathBuf, (u64, u32, i64)> = tree(tmp.path())
        .into_iter()
        .filter(|(p, _)| !p.starts_with(&images))
        .map(|(p, m)| (p, (m.len(), m.mode(), m.mtime())))
        .collect();
    let policy = ImagePolicy {
        roots: Vec::new(),
        max_blob_bytes: 8 << 20,
        max_image_bytes: 16 << 20,
        max_unpacked_bytes: 16 << 20,
        max_entries: 10_000,
    };
    let _ = prepare_image(&images, &policy, image.to_str().expect("UTF-8"), None);
    let after = tree(tmp.path());
    for (p, m) in &after {
        let t = m.file_type();
        if p.starts_with(&images) {
            assert!(
                !(t.is_block_device() || t.is_char_device() || t.is_fifo() || t.is_socket()),
                "a special file was created: {}",
                p.display()
            );
            assert_eq!(m.mode() & 0o6000, 0, "a setid file: {}", p.display());
        } else {
            let was = before.get(p);
            assert!(was.is_some(), "created outside the cache: {}", p.display());
            assert_eq!(
                was.copied(),
                Some((m.len(), m.mode(), m.mtime())),
                "changed outside the cache: {}",
                p.display()
            );
        }
    }
    for p in before.keys() {
        assert!(
            after.contains_key(p),
            "deleted outside the cache: {}",
            p.display()
        );
    }
}

fn split<'a>(mut b: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    while let Some(i) = b.windows(sep.len()).position(|w| w == sep) {
        out.push(&b[..i]);
        b = &b[i + sep.len()..];
    }
    out.push(b);
    out
}

/// A layer of setuid, setgid and device entries and a FIFO; with `escapes`, also
/// paths and links that leave the root and whiteouts of `.`/`..`.
fn hostile_layer(escapes: bool) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |kind: tar::EntryType, path: &str, mode: u32, link: Option<&str>, data: &[u8]| {
        let mut h = header(kind, mode, data.len() as u64);
        if matches!(kind, tar::EntryType::Block | tar::EntryType::Char) {
            h.set_device_major(8).expect("sets");
            h.set_device_minor(0).expect("sets");
        }
        if let Some(l) = link {
            h.set_link_name_literal(l).expect("sets");
        }
        // `path` may hold `..`, which `append_data` refuses: set it raw.
        let name = path.as_bytes();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_cksum();
        b.append(&h, data).expect("appends");
    };
    use tar::EntryType as T;
    add(T::Regular, "rootsh", 0o4755, None, b"#!/bin/sh\n");
    add(T::Directory, "d", 0o6777, None, b"");
    add(T::Block, "disk", 0o666, None, b"");
    add(T::Char, "d/mem", 0o666, None, b"");
    add(T::Fifo, "fifo", 0o666, None, b"");
    add(T::Symlink, "abs", 0o777, Some("/"), b"");
    add(T::Regular, "abs/d/new", 0o2755, None, b"x");
    add(T::Regular, "d/.wh..wh..opq", 0o644, None, b"");
    if escapes {
        add(T::Symlink, "up", 0o777, Some("../../../outside"), b"");
        add(T::Symlink, "loop", 0o777, Some("loop/x"), b"");
        add(T::Regular, "up/victim", 0o644, None, b"overwritten");
        add(T::Regular, "abs/../outside/new", 0o644, None, b"x");
        add(T::Link, "hard2", 0o644, Some("up/victim"), b"");
        add(T::Regular, ".wh.up", 0o644, None, b"");
        add(T::Regular, "d/.wh..", 0o644, None, b"");
        add(T::Link, "hard", 0o644, Some("../outside/victim"), b"");
        add(T::Regular, "../escape", 0o644, None, b"x");
    }
    b.into_inner().expect("finishes")
}

/// Seeds: hostile layers (setuid, devices, FIFOs, `..`, absolute and looping symlinks,
/// hard links out of the root, whiteouts of `.`/`..`, an opaque directory), an index
/// and a manifest of each shape, and an archive of a layout.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    // What a valid image may hold but must not keep (setid bits, devices, a FIFO), and
    // what no valid image holds (paths and links out of the root, whiteouts of `..`).
    let kept_out = hostile_layer(false);
    let hostile = hostile_layer(true);
    let mut valid = vec![0u8];
    valid.extend(&kept_out);
    out.push(valid);
    let mut first = vec![0u8];
    first.extend(sample_layer());
    first.extend(LAYER_SEP);
    first.extend(&hostile);
    out.push(first);
    let mut gz = flate2::write::GzEncoder::new(vec![0u8], flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &hostile).expect("compresses");
    // The kind byte (0: layers), then the gzip stream.
    out.push(gz.finish().expect("compresses"));
    let tmp = tempfile::tempdir().expect("a temporary directory");
    std::fs::create_dir_all(tmp.path().join("blobs/sha256")).expect("makes the layout");
    let m = manifest(tmp.path(), &[&sample_layer()]);
    let mh = hex(&m);
    let mut idx = vec![1u8];
    idx.extend(
        json!({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json",
             "digest": format!("sha256:{mh}"), "size": m.len(),
             "platform": {"os": "linux", "architecture": "amd64"}}]})
        .to_string()
        .into_bytes(),
    );
    out.push(idx);
    let mut man = vec![2u8];
    man.extend(&m);
    out.push(man);
    // An archive of a whole layout.
    index(tmp.path(), &m);
    let mut b = tar::Builder::new(Vec::new());
    b.append_dir_all(".", tmp.path()).expect("archives");
    let mut ar = vec![3u8];
    ar.extend(b.into_inner().expect("finishes"));
    out.push(ar);
    out
}
