//! A tenant's hostile image: OCI layouts, archives and rootfs directories built to
//! give their owner root on the node, poison the shared image cache, read files that
//! are not theirs, hang the agent or fill its disk. Each is prepared by the agent's
//! image code for a real account made with `useradd` (removed when the test ends), as
//! the agent does before a container starts, and each attack must be refused.
//!
//! These tests need root and `useradd`; without them each says so through
//! `exec_common::not_run` and returns, or fails under CI as root.

mod exec_common;

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use exec_common::*;
use serde_json::json;
use sha2::{Digest, Sha256};
use tranche_agent::exec::{prepare_image, ImagePolicy, ImageUser, PreparedImage};

fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// A header for `path` of `kind`, owned by `uid`, with `mode`.
fn header(kind: tar::EntryType, mode: u32, uid: u64, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(uid);
    h.set_gid(uid);
    h.set_mtime(1_700_000_000);
    h
}

fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, uid: u64, data: &[u8]) {
    let mut h = header(tar::EntryType::Regular, mode, uid, data.len() as u64);
    b.append_data(&mut h, path, data).unwrap();
}

fn dir(b: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, uid: u64) {
    let mut h = header(tar::EntryType::Directory, mode, uid, 0);
    b.append_data(&mut h, path, &[][..]).unwrap();
}

fn device(b: &mut tar::Builder<Vec<u8>>, path: &str, kind: tar::EntryType, major: u32, minor: u32) {
    let mut h = header(kind, 0o666, 0, 0);
    h.set_device_major(major).unwrap();
    h.set_device_minor(minor).unwrap();
    b.append_data(&mut h, path, &[][..]).unwrap();
}

/// A layer holding one file `path` with `data`.
fn one_file_layer(path: &str, data: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    file(&mut b, path, 0o644, 0, data);
    b.into_inner().unwrap()
}

/// An OCI image layout in `dir` (made, owned by `owner`) whose single manifest lists
/// `layers`; returns the layout and the manifest's digest. `layers` are written as
/// blobs, except where `write_layer` is false (the test puts something else there).
struct Layout {
    path: PathBuf,
    manifest: String,
    layer_hex: Vec<String>,
}

fn layout(dir: &Path, layers: &[Vec<u8>], write_layers: bool) -> Layout {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let put = |b: &[u8]| -> String {
        let hex = sha256_hex(b);
        std::fs::write(blobs.join(&hex), b).unwrap();
        hex
    };
    let mut descs = Vec::new();
    let mut layer_hex = Vec::new();
    for l in layers {
        let hex = sha256_hex(l);
        if write_layers {
            put(l);
        }
        descs.push(
            json!({"mediaType": "application/vnd.oci.image.layer.v1.tar",
                          "digest": format!("sha256:{hex}"), "size": l.len()}),
        );
        layer_hex.push(hex);
    }
    let config = json!({"os": "linux", "config": {"Env": ["PATH=/bin"]}}).to_string();
    let c = put(config.as_bytes());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": format!("sha256:{c}"), "size": config.len()},
        "layers": descs,
    })
    .to_string();
    let m = put(manifest.as_bytes());
    write_index(dir, &format!("sha256:{m}"), manifest.len());
    Layout {
        path: dir.to_path_buf(),
        manifest: format!("sha256:{m}"),
        layer_hex,
    }
}

fn write_index(dir: &Path, digest: &str, size: usize) {
    let index = json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size}
    ]});
    std::fs::write(dir.join("index.json"), index.to_string()).unwrap();
}

/// `chown -R` to the account.
fn give(path: &Path, acct: &TestAccount) {
    let out = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", acct.uid, acct.gid)])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn who(acct: &TestAccount) -> ImageUser {
    ImageUser {
        uid: acct.uid,
        gid: acct.gid,
        groups: acct.groups.clone(),
    }
}

/// A test's account and its working directory (in its home, its own), and a spool.
struct Setup {
    _accounts: TestAccounts,
    acct: TestAccount,
    work: PathBuf,
    spool: tempfile::TempDir,
}

impl Setup {
    fn new(test: &str) -> Option<Setup> {
        if lacks_accounts(test, Need::Root) {
            return None;
        }
        let mut accounts = TestAccounts::new();
        let acct = accounts.user("img", &[], true);
        let work = acct.home.join("work");
        std::fs::create_dir_all(&work).unwrap();
        give(&acct.home, &acct);
        Some(Setup {
            _accounts: accounts,
            acct,
            work,
            spool: tempfile::tempdir().unwrap(),
        })
    }

    fn images(&self) -> PathBuf {
        self.spool.path().join("images")
    }

    /// Prepares `image` for the account, with `policy`.
    fn prepare_with(&self, image: &Path, policy: &ImagePolicy) -> Result<PreparedImage, String> {
        prepare_image(
            &self.images(),
            policy,
            image.to_str().unwrap(),
            Some(&who(&self.acct)),
        )
        .map_err(|e| e.to_string())
    }

    fn prepare(&self, image: &Path) -> Result<PreparedImage, String> {
        self.prepare_with(image, &ImagePolicy::default())
    }

    /// Every path under the image cache, for what may not be there.
    fn cache_tree(&self) -> Vec<(PathBuf, std::fs::Metadata)> {
        Setup::tree_of(&self.images())
    }

    /// Every path under `dir`, not following symlinks.
    fn tree_of(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                let m = std::fs::symlink_metadata(e.path()).unwrap();
                if m.is_dir() {
                    todo.push(e.path());
                }
                out.push((e.path(), m));
            }
        }
        out
    }
}

/// Runs `f` on a thread; `None` if it has not returned within `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn c1_setuid_bits_device_nodes_and_owners_never_leave_a_users_layer() {
    let test = "c1_setuid_bits_device_nodes_and_owners_never_leave_a_users_layer";
    let Some(s) = Setup::new(test) else { return };
    // The review's layout: a setuid-root shell, a raw-disk node, a character device, and
    // files the header gives to other host accounts.
    let mut b = tar::Builder::new(Vec::new());
    file(&mut b, "rootsh", 0o4755, 0, b"#!/bin/sh\nid\n");
    file(&mut b, "sgid", 0o2775, 0, b"x");
    dir(&mut b, "opt", 0o6777, 1000);
    file(&mut b, "opt/python", 0o775, 1000, b"py");
    dir(&mut b, "tmp", 0o1777, 0);
    device(&mut b, "disk", tar::EntryType::Block, 8, 0);
    device(&mut b, "rng", tar::EntryType::Char, 10, 183);
    device(&mut b, "fifo", tar::EntryType::Fifo, 0, 0);
    let l = layout(&s.work, &[b.into_inner().unwrap()], true);
    give(&s.work, &s.acct);

    let p = s.prepare(&l.path).expect("the image itself is a valid one");
    let root = &p.path;
    assert!(root.starts_with(s.images()), "{}", root.display());
    for name in ["disk", "rng", "fifo"] {
        assert!(
            std::fs::symlink_metadata(root.join(name)).is_err(),
            "{name} was created from the layer"
        );
    }
    for (name, mode) in [
        ("rootsh", 0o755),
        ("sgid", 0o775),
        ("opt", 0o777),
        ("opt/python", 0o775),
        ("tmp", 0o1777),
    ] {
        let m = std::fs::symlink_metadata(root.join(name)).unwrap();
        assert_eq!(
            m.mode() & 0o7777,
            mode,
            "{name}: mode {:o}",
            m.mode() & 0o7777
        );
        assert_eq!((m.uid(), m.gid()), (0, 0), "{name} is not root's");
    }
    // Nothing in the cache is a special file, setid, another account's, or writable by
    // others but the image's own sticky /tmp and its (root-owned) 0777 /opt.
    for (path, m) in s.cache_tree() {
        use std::os::unix::fs::FileTypeExt;
        let t = m.file_type();
        assert!(
            !(t.is_block_device() || t.is_char_device() || t.is_fifo() || t.is_socket()),
            "{} is a special file",
            path.display()
        );
        assert_eq!(m.mode() & 0o6000, 0, "{} is setid", path.display());
        assert_eq!(m.uid(), 0, "{} is not root's", path.display());
    }
    let images = std::fs::metadata(s.images()).unwrap();
    assert_eq!(images.mode() & 0o777, 0o700, "the cache is open to others");
    let entry = std::fs::metadata(root.parent().unwrap()).unwrap();
    assert_eq!(
        entry.mode() & 0o022,
        0,
        "the cache entry is writable by others"
    );
}

/// A FIFO at `path` whose writer serves `first` to the first reader, then, before that
/// reader sees the end, renames a regular file holding `then` over `path`: whoever
/// hashes the blob from one open and reads it again from another gets `then` the
/// second time.
fn fifo_then_file(path: &Path, first: Vec<u8>, then: Vec<u8>) -> Arc<AtomicBool> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let evil = path.with_extension("next");
    std::fs::write(&evil, then).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (path, stop2) = (path.to_path_buf(), stop.clone());
    std::thread::spawn(move || {
        use std::os::unix::fs::OpenOptionsExt;
        while !stop2.load(Ordering::Relaxed) {
            // Non-blocking: ENXIO until a reader opens it.
            match std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open(&path)
            {
                Ok(mut f) => {
                    let flags = nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETFL).unwrap();
                    let flags = nix::fcntl::OFlag::from_bits_truncate(flags)
                        & !nix::fcntl::OFlag::O_NONBLOCK;
                    nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
                    let _ = f.write_all(&first);
                    let _ = std::fs::rename(&evil, &path);
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    });
    stop
}

#[test]
fn h1_a_blob_swapped_after_its_hash_is_never_read_again() {
    let test = "h1_a_blob_swapped_after_its_hash_is_never_read_again";
    let Some(s) = Setup::new(test) else { return };
    let good = one_file_layer("app", b"genuine\n");
    let evil = one_file_layer("app", b"evil\n");
    let l = layout(&s.work, std::slice::from_ref(&good), false);
    let blob = l.path.join("blobs/sha256").join(&l.layer_hex[0]);
    let stop = fifo_then_file(&blob, good, evil);
    give(&s.work, &s.acct);
    let images = s.images();
    let (path, w) = (l.path.clone(), who(&s.acct));
    let got = within(Duration::from_secs(20), move || {
        prepare_image(
            &images,
            &ImagePolicy::default(),
            path.to_str().unwrap(),
            Some(&w),
        )
        .map_err(|e| e.to_string())
    });
    stop.store(true, Ordering::Relaxed);
    let got = got.expect("preparing the image hung on the FIFO");
    let e = got.map(|p| std::fs::read_to_string(p.path.join("app")).unwrap_or_default());
    let e = e.expect_err("a FIFO blob was used (its content was unpacked)");
    assert!(e.contains("is a FIFO") && e.contains("regular file"), "{e}");
    assert!(e.contains(&l.layer_hex[0]), "the error names the blob: {e}");
}

#[test]
fn h1_a_claimed_digest_does_not_hit_the_cache() {
    let test = "h1_a_claimed_digest_does_not_hit_the_cache";
    let Some(s) = Setup::new(test) else { return };
    // Root (another tenant) prepares a private image: it is in the cache.
    let private = tempfile::tempdir().unwrap();
    let genuine = layout(
        private.path(),
        &[one_file_layer("secret", b"theirs\n")],
        true,
    );
    prepare_image(
        &s.images(),
        &ImagePolicy::default(),
        genuine.path.to_str().unwrap(),
        None,
    )
    .unwrap();
    // The attacker's layout only claims that digest: its manifest blob is missing, then
    // present with other bytes.
    let mine = s.work.join("claim");
    std::fs::create_dir_all(mine.join("blobs/sha256")).unwrap();
    write_index(&mine, &genuine.manifest, 100);
    give(&s.work, &s.acct);
    let e = s
        .prepare(&mine)
        .map(|p| p.path)
        .expect_err("the claimed digest hit the cache");
    assert!(e.contains(&genuine.manifest), "{e}");
    let hex = genuine.manifest.trim_start_matches("sha256:");
    std::fs::write(mine.join("blobs/sha256").join(hex), b"{\"layers\":[]}").unwrap();
    give(&s.work, &s.acct);
    let e = s
        .prepare(&mine)
        .map(|p| p.path)
        .expect_err("a wrong manifest hit the cache");
    assert!(e.contains("corrupt"), "{e}");
}

#[test]
fn h1_an_archive_with_a_symlinked_blob_is_not_followed() {
    let test = "h1_an_archive_with_a_symlinked_blob_is_not_followed";
    let Some(s) = Setup::new(test) else { return };
    // A layer only root can read, and an archive whose blob is a symlink to it.
    let hidden = tempfile::tempdir().unwrap();
    let layer = one_file_layer("stolen", b"root's\n");
    let target = hidden.path().join("layer.tar");
    std::fs::write(&target, &layer).unwrap();
    let built = s.work.join("built");
    let l = layout(&built, &[layer], false);
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    for name in ["oci-layout", "index.json"] {
        b.append_path_with_name(built.join(name), name).unwrap();
    }
    for e in std::fs::read_dir(built.join("blobs/sha256"))
        .unwrap()
        .flatten()
    {
        let name = format!("blobs/sha256/{}", e.file_name().to_string_lossy());
        b.append_path_with_name(e.path(), name).unwrap();
    }
    let mut h = header(tar::EntryType::Symlink, 0o777, 0, 0);
    b.append_link(&mut h, format!("blobs/sha256/{}", l.layer_hex[0]), &target)
        .unwrap();
    let archive = s.work.join("image.tar");
    std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
    give(&s.work, &s.acct);
    let e = s
        .prepare(&archive)
        .map(|p| p.path)
        .expect_err("the symlinked blob was read");
    assert!(e.contains("not in the archive"), "{e}");
}

#[test]
fn m1_an_image_the_user_cannot_read_is_refused() {
    let test = "m1_an_image_the_user_cannot_read_is_refused";
    let Some(s) = Setup::new(test) else { return };
    // Root's layout and rootfs directory, in a directory only root can enter.
    let hidden = tempfile::tempdir().unwrap();
    std::fs::set_permissions(hidden.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let l = layout(
        &hidden.path().join("layout"),
        &[one_file_layer("f", b"x")],
        true,
    );
    let rootfs = hidden.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    for image in [&l.path, &rootfs] {
        let e = s
            .prepare(image)
            .map(|p| p.path)
            .expect_err("root's image was used");
        assert!(
            e.contains("Permission denied") && e.contains("can read"),
            "{e}"
        );
    }
    // Its blobs are no oracle either: a symlink to root's layer is refused.
    let secret = hidden.path().join("layer");
    let layer = one_file_layer("stolen", b"root's\n");
    std::fs::write(&secret, &layer).unwrap();
    let mine = layout(&s.work.join("oracle"), &[layer], false);
    std::os::unix::fs::symlink(
        &secret,
        mine.path.join("blobs/sha256").join(&mine.layer_hex[0]),
    )
    .unwrap();
    give(&s.work, &s.acct);
    let e = s
        .prepare(&mine.path)
        .map(|p| p.path)
        .expect_err("a symlinked blob was read");
    assert!(e.contains("symbolic link"), "{e}");
}

#[test]
fn m1_a_fifo_index_or_blob_does_not_hang_the_agent() {
    let test = "m1_a_fifo_index_or_blob_does_not_hang_the_agent";
    let Some(s) = Setup::new(test) else { return };
    let fifo_index = s.work.join("fifo-index");
    std::fs::create_dir_all(&fifo_index).unwrap();
    nix::unistd::mkfifo(
        &fifo_index.join("index.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let fifo_blob = layout(
        &s.work.join("fifo-blob"),
        &[one_file_layer("f", b"x")],
        false,
    );
    let blob = fifo_blob
        .path
        .join("blobs/sha256")
        .join(&fifo_blob.layer_hex[0]);
    nix::unistd::mkfifo(&blob, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let fifo_image = s.work.join("image.fifo");
    nix::unistd::mkfifo(&fifo_image, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    give(&s.work, &s.acct);
    for (image, fifo) in [
        (fifo_index.clone(), fifo_index.join("index.json")),
        (fifo_blob.path.clone(), blob),
        (fifo_image.clone(), fifo_image.clone()),
    ] {
        let (images, w, path) = (s.images(), who(&s.acct), image.clone());
        let got = within(Duration::from_secs(10), move || {
            prepare_image(
                &images,
                &ImagePolicy::default(),
                path.to_str().unwrap(),
                Some(&w),
            )
            .map(|p| p.path)
            .map_err(|e| e.to_string())
        });
        if got.is_none() {
            // Unblock the stuck reader, then fail.
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
            panic!("preparing {} hung on a FIFO", image.display());
        }
        let e = got.unwrap().expect_err("a FIFO was read as an image");
        assert!(e.contains("FIFO"), "{e}");
    }
}

#[test]
fn m1_a_rootfs_directory_is_copied_unless_under_an_admin_root() {
    let test = "m1_a_rootfs_directory_is_copied_unless_under_an_admin_root";
    let Some(s) = Setup::new(test) else { return };
    let rootfs = s.work.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::write(rootfs.join("bin/tool"), b"tool").unwrap();
    std::fs::set_permissions(
        rootfs.join("bin/tool"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    nix::unistd::mkfifo(
        &rootfs.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    give(&s.work, &s.acct);
    let p = s
        .prepare(&rootfs)
        .expect("a user's rootfs directory is copied");
    assert!(
        p.path.starts_with(s.images()),
        "used in place: {}",
        p.path.display()
    );
    assert!(p.shared);
    let tool = std::fs::symlink_metadata(p.path.join("bin/tool")).unwrap();
    assert_eq!((tool.uid(), tool.mode() & 0o7777), (0, 0o755));
    assert_eq!(std::fs::read(p.path.join("bin/tool")).unwrap(), b"tool");
    assert!(std::fs::symlink_metadata(p.path.join("pipe")).is_err());
    // The same directory again: the same entry.
    assert_eq!(s.prepare(&rootfs).unwrap().path, p.path);
    // Under a root the admin configured: used as it is.
    let policy = ImagePolicy {
        roots: vec![s.work.clone()],
        ..ImagePolicy::default()
    };
    let p = s.prepare_with(&rootfs, &policy).unwrap();
    assert_eq!(p.path, rootfs.canonicalize().unwrap());
    assert!(!p.shared);
}

#[test]
fn m1_a_decompression_bomb_stops_at_the_limits() {
    let test = "m1_a_decompression_bomb_stops_at_the_limits";
    let Some(s) = Setup::new(test) else { return };
    // 64 MiB of zeros in one file, gzip-compressed to a few tens of KiB.
    let mut b = tar::Builder::new(Vec::new());
    let zeros = vec![0u8; 64 << 20];
    file(&mut b, "zeros", 0o644, 0, &zeros);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&b.into_inner().unwrap()).unwrap();
    let bomb = gz.finish().unwrap();
    let l = layout(&s.work.join("bomb"), &[bomb], true);
    // And a layer of many small files.
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..200 {
        file(&mut b, &format!("f{i}"), 0o644, 0, b"");
    }
    let many = layout(&s.work.join("many"), &[b.into_inner().unwrap()], true);
    give(&s.work, &s.acct);
    let policy = ImagePolicy {
        max_unpacked_bytes: 8 << 20,
        max_entries: 100,
        ..ImagePolicy::default()
    };
    let e = s
        .prepare_with(&l.path, &policy)
        .map(|p| p.path)
        .expect_err("the bomb unpacked");
    assert!(e.contains("images.max_unpacked_mb = 8 MiB"), "{e}");
    let e = s
        .prepare_with(&many.path, &policy)
        .map(|p| p.path)
        .expect_err("200 files unpacked");
    assert!(e.contains("images.max_entries = 100"), "{e}");
    let small = ImagePolicy {
        max_blob_bytes: 1024,
        ..ImagePolicy::default()
    };
    let e = s
        .prepare_with(&l.path, &small)
        .map(|p| p.path)
        .expect_err("a large blob was staged");
    assert!(
        e.contains("images.max_blob_mb = 0 MiB") || e.contains("images.max_blob_mb"),
        "{e}"
    );
    // Nothing of them is left in the cache.
    assert!(
        s.cache_tree().iter().all(|(p, _)| !p.ends_with("zeros")),
        "a partial image was left"
    );
}

#[test]
fn l7_whiteouts_of_dot_and_dotdot_are_refused() {
    let test = "l7_whiteouts_of_dot_and_dotdot_are_refused";
    let Some(s) = Setup::new(test) else { return };
    for name in ["sub/.wh..", "sub/.wh...", ".wh.."] {
        let mut b = tar::Builder::new(Vec::new());
        dir(&mut b, "sub", 0o755, 0);
        file(&mut b, "sub/keep", 0o644, 0, b"k");
        let first = b.into_inner().unwrap();
        let mut b = tar::Builder::new(Vec::new());
        file(&mut b, name, 0o644, 0, b"");
        let dir = s.work.join(name.replace('/', "_"));
        let l = layout(&dir, &[first, b.into_inner().unwrap()], true);
        give(&s.work, &s.acct);
        let e = s
            .prepare(&l.path)
            .map(|p| p.path)
            .expect_err("the whiteout was applied");
        assert!(e.contains("must name a file"), "{name}: {e}");
    }
}

#[test]
fn c1_a_container_of_a_hostile_image_runs_without_setuid_files_or_devices() {
    let test = "c1_a_container_of_a_hostile_image_runs_without_setuid_files_or_devices";
    if lacks_accounts(test, Need::Containers) {
        return;
    }
    init();
    let Some(s) = Setup::new(test) else { return };
    // The busybox rootfs as a first layer, then the review's hostile layer: busybox
    // setuid-root as `/rootsh`, a raw-disk node, a character device.
    let base = busybox_rootfs(&s.work);
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(".", &base).unwrap();
    let first = b.into_inner().unwrap();
    let bb = std::fs::read(base.join("bin/busybox")).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    file(&mut b, "rootsh", 0o4755, 0, &bb);
    device(&mut b, "disk", tar::EntryType::Block, 8, 0);
    device(&mut b, "rng", tar::EntryType::Char, 10, 183);
    let l = layout(
        &s.work.join("evil"),
        &[first, b.into_inner().unwrap()],
        true,
    );
    give(&s.work, &s.acct);
    let ex = tranche_agent::exec::Executors::new(&s.spool.path().join("spool")).unwrap();
    let cache = s.spool.path().join("spool/images");
    let mode = std::fs::metadata(&cache).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "the image cache is open to the node's jobs");
    let mut job = spec(
        l.path.to_str().unwrap(),
        &[
            "sh",
            "-c",
            "stat -c '%A %u %g' /rootsh; \
             if [ -e /disk ] || [ -e /rng ]; then echo DEVICES; else echo none; fi; id -u",
        ],
    );
    job.user = Some((s.acct.uid, s.acct.gid));
    job.groups = s.acct.groups.clone();
    let a = ex.start(&job).unwrap();
    wait_exit(&a, Duration::from_secs(30));
    let out = stdout(&a);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"-rwxr-xr-x 0 0"),
        "{out}\n{}",
        stderr(&a)
    );
    assert!(
        out.contains("\nnone\n"),
        "a device node is in the container: {out}"
    );
    assert_eq!(
        lines.last(),
        Some(&s.acct.uid.to_string().as_str()),
        "{out}"
    );
    // And in the cache, where a host job might look for them.
    for (p, m) in Setup::tree_of(&cache) {
        assert_eq!(m.mode() & 0o6000, 0, "{} is setid", p.display());
        assert!(
            !p.ends_with("disk") && !p.ends_with("rng"),
            "{}",
            p.display()
        );
    }
    let _ = a.acknowledge();
}
