//! Container images: a rootfs directory used as is, or an OCI image layout (a directory
//! with `oci-layout`, `index.json` and `blobs/`) or a `.tar`/`.tar.gz` of one, unpacked
//! once per manifest digest into `<spool>/images/<algorithm>-<hex>/rootfs`.
//!
//! Unpacking verifies every blob's digest, then applies the layers in order. A layer
//! is read twice: first for its whiteouts (`.wh.NAME` deletes `NAME` of the layers
//! below, `.wh..wh..opq` empties its directory of them), which are applied, then for
//! its files. Paths are resolved inside the rootfs as if it were `/` (symlinks
//! included), so a layer can never write or delete outside it.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use sha2::Digest;

use super::fsutil;
use super::ExecError;

/// A rootfs ready for a container.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// The rootfs directory.
    pub path: PathBuf,
    /// It is the image cache's, shared by attempts: mount an overlay over it.
    pub shared: bool,
    /// The image configuration's `Env` (`K=V`).
    pub env: Vec<String>,
    /// The image configuration's `WorkingDir`.
    pub workdir: Option<String>,
    /// The image configuration's `Entrypoint` (none for a rootfs directory, or for a
    /// cache entry unpacked by an agent that did not record it).
    pub entrypoint: Option<Vec<String>>,
}

/// A list of strings in an image configuration (`Env`, `Entrypoint`); `None` where it
/// is absent or empty.
fn strings(v: &Value) -> Option<Vec<String>> {
    let list: Vec<String> = v
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    (!list.is_empty()).then_some(list)
}

const INDEX_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Resolves `image` into a rootfs, unpacking it into the cache under `images` if it is
/// an OCI image layout or archive not unpacked before.
pub(crate) fn prepare(images: &Path, image: &str) -> Result<Prepared, ExecError> {
    let err = |reason: String| ExecError::Image {
        image: image.to_string(),
        reason,
    };
    let p = Path::new(image);
    let meta = std::fs::metadata(p).map_err(|e| {
        err(format!(
            "{e}: expected \"host\", a rootfs directory, an OCI image layout directory, \
             or a .tar/.tar.gz of one"
        ))
    })?;
    let p = p
        .canonicalize()
        .map_err(|e| err(format!("resolving the path: {e}")))?;
    if meta.is_dir() {
        if p.join("index.json").is_file() {
            from_layout(images, &p).map_err(err)
        } else {
            Ok(Prepared {
                path: p,
                shared: false,
                env: Vec::new(),
                workdir: None,
                entrypoint: None,
            })
        }
    } else if meta.is_file() {
        from_archive(images, &p).map_err(err)
    } else {
        Err(err("neither a directory nor a file".into()))
    }
}

/// A content descriptor.
#[derive(Debug, Clone)]
struct Desc {
    media_type: String,
    digest: String,
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        a => a,
    }
}

/// Picks the manifest for this node from an index: the only one, or the one for
/// `linux/<arch>`.
fn choose(index: &Value, what: &str) -> Result<Desc, String> {
    let list = index["manifests"]
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| format!("{what}: no `manifests`"))?;
    let arch = host_arch();
    let fits = |m: &&Value| {
        let p = &m["platform"];
        let attestation = m["annotations"]["vnd.docker.reference.type"] == "attestation-manifest";
        !attestation
            && (p.is_null() || (p["os"] == "linux" && p["architecture"].as_str() == Some(arch)))
    };
    let m = list.iter().find(fits).ok_or_else(|| {
        let platforms: Vec<String> = list
            .iter()
            .map(|m| {
                format!(
                    "{}/{}",
                    m["platform"]["os"].as_str().unwrap_or("?"),
                    m["platform"]["architecture"].as_str().unwrap_or("?")
                )
            })
            .collect();
        format!(
            "{what}: no manifest for linux/{arch} (has {})",
            platforms.join(", ")
        )
    })?;
    Ok(Desc {
        media_type: m["mediaType"].as_str().unwrap_or("").to_string(),
        digest: m["digest"]
            .as_str()
            .ok_or_else(|| format!("{what}: a manifest entry has no `digest`"))?
            .to_string(),
    })
}

/// `(algorithm, hex)` of a digest, validated so it can name a file.
fn split_digest(digest: &str) -> Result<(&str, &str), String> {
    let (algo, hex) = digest
        .split_once(':')
        .ok_or_else(|| format!("digest `{digest}`: expected ALGORITHM:HEX"))?;
    let len = match algo {
        "sha256" => 64,
        "sha512" => 128,
        _ => return Err(format!("digest `{digest}`: unsupported algorithm `{algo}`")),
    };
    if hex.len() != len || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!("digest `{digest}`: not {len} lowercase hex digits"));
    }
    Ok((algo, hex))
}

fn cache_key(digest: &str) -> Result<String, String> {
    let (a, h) = split_digest(digest)?;
    Ok(format!("{a}-{h}"))
}

/// The path of a blob, checked against its digest.
fn blob(layout: &Path, digest: &str) -> Result<PathBuf, String> {
    let (algo, hex) = split_digest(digest)?;
    let path = layout.join("blobs").join(algo).join(hex);
    let mut f = File::open(&path).map_err(|e| format!("blob {digest}: {e}"))?;
    let mut buf = vec![0u8; 1 << 20];
    let actual = match algo {
        "sha256" => hash_all::<sha2::Sha256>(&mut f, &mut buf),
        _ => hash_all::<sha2::Sha512>(&mut f, &mut buf),
    }
    .map_err(|e| format!("reading blob {digest}: {e}"))?;
    if actual != hex {
        return Err(format!(
            "blob {digest} is corrupt: its content hashes to {algo}:{actual}"
        ));
    }
    Ok(path)
}

fn hash_all<D: Digest>(r: &mut impl Read, buf: &mut [u8]) -> io::Result<String> {
    let mut h = D::new();
    loop {
        let n = r.read(buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn read_json_blob(layout: &Path, digest: &str) -> Result<Value, String> {
    let path = blob(layout, digest)?;
    let text = std::fs::read(&path).map_err(|e| format!("blob {digest}: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("blob {digest}: not JSON: {e}"))
}

fn read_index(layout: &Path) -> Result<Value, String> {
    let path = layout.join("index.json");
    let text = std::fs::read(&path).map_err(|e| format!("index.json: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("index.json: not JSON: {e}"))
}

/// The image cache entry for an OCI image layout directory, built if missing.
fn from_layout(images: &Path, layout: &Path) -> Result<Prepared, String> {
    let index = read_index(layout)?;
    let top = choose(&index, "index.json")?;
    let key = cache_key(&top.digest)?;
    if let Some(p) = cached(images, &key) {
        return Ok(p);
    }
    build(images, layout, &top, &key)
}

/// A finished cache entry (a finished entry is renamed into place whole).
fn cached(images: &Path, key: &str) -> Option<Prepared> {
    let dir = images.join(key);
    let rootfs = dir.join("rootfs");
    if !rootfs.is_dir() {
        return None;
    }
    let meta: Value = fsutil::read_string(&dir.join("image.json"))
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    Some(Prepared {
        path: rootfs,
        shared: true,
        env: strings(&meta["env"]).unwrap_or_default(),
        workdir: meta["workdir"].as_str().map(str::to_string),
        entrypoint: strings(&meta["entrypoint"]),
    })
}

fn build(images: &Path, layout: &Path, top: &Desc, key: &str) -> Result<Prepared, String> {
    // Follow nested indexes down to the image manifest.
    let mut desc = top.clone();
    let mut manifest = read_json_blob(layout, &desc.digest)?;
    for _ in 0..4 {
        let is_index = INDEX_TYPES.contains(&desc.media_type.as_str())
            || manifest["mediaType"]
                .as_str()
                .is_some_and(|t| INDEX_TYPES.contains(&t))
            || (manifest["manifests"].is_array() && !manifest["layers"].is_array());
        if !is_index {
            break;
        }
        desc = choose(&manifest, &format!("index {}", desc.digest))?;
        manifest = read_json_blob(layout, &desc.digest)?;
    }
    let layers = manifest["layers"]
        .as_array()
        .ok_or_else(|| format!("manifest {}: no `layers`", desc.digest))?
        .clone();
    let (mut env, mut workdir, mut entrypoint) = (Vec::new(), None, None);
    if let Some(cd) = manifest["config"]["digest"].as_str() {
        let config = read_json_blob(layout, cd)?;
        env = strings(&config["config"]["Env"]).unwrap_or_default();
        entrypoint = strings(&config["config"]["Entrypoint"]);
        workdir = config["config"]["WorkingDir"]
            .as_str()
            .filter(|w| !w.is_empty())
            .map(str::to_string);
    }

    let tmp = images.join(format!(
        ".tmp-{key}-{}-{}",
        std::process::id(),
        fsutil::now_nanos()
    ));
    let rootfs = tmp.join("rootfs");
    let res = (|| -> Result<(), String> {
        std::fs::create_dir_all(&rootfs)
            .map_err(|e| format!("creating {}: {e}", rootfs.display()))?;
        let _ = std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755));
        for (i, l) in layers.iter().enumerate() {
            let digest = l["digest"]
                .as_str()
                .ok_or_else(|| format!("manifest {}: layer {i} has no digest", desc.digest))?;
            let path = blob(layout, digest)?;
            apply_layer(&rootfs, &path).map_err(|e| format!("layer {i} ({digest}): {e}"))?;
        }
        let meta = serde_json::json!({"manifest": desc.digest, "env": env, "workdir": workdir,
                                      "entrypoint": entrypoint});
        std::fs::write(tmp.join("image.json"), meta.to_string())
            .map_err(|e| format!("writing image.json: {e}"))?;
        Ok(())
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let dest = images.join(key);
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        let _ = std::fs::remove_dir_all(&tmp);
        if !dest.join("rootfs").is_dir() {
            return Err(format!(
                "moving the unpacked image to {}: {e}",
                dest.display()
            ));
        }
        // Another start unpacked the same image meanwhile: use theirs.
    }
    cached(images, key).ok_or_else(|| format!("{} vanished", dest.display()))
}

/// A reader of a file that may be gzip-compressed (detected by its magic bytes).
fn open_maybe_gz(path: &Path) -> Result<Box<dyn Read>, String> {
    let mut f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut magic = [0u8; 4];
    let n = f.read(&mut magic).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    if n >= 2 && magic[..2] == [0x1f, 0x8b] {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(
            f,
        ))))
    } else if n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
        Err("zstd-compressed layers are not supported (use gzip or none)".into())
    } else {
        Ok(Box::new(BufReader::new(f)))
    }
}

/// The image cache entry for an archive of an OCI image layout.
fn from_archive(images: &Path, file: &Path) -> Result<Prepared, String> {
    // Find index.json first: an image unpacked before needs nothing else.
    let mut index = None;
    let mut prefix = PathBuf::new();
    {
        let mut ar = tar::Archive::new(open_maybe_gz(file)?);
        for e in ar
            .entries()
            .map_err(|e| format!("reading the archive: {e}"))?
        {
            let mut e = e.map_err(|e| format!("reading the archive: {e}"))?;
            let path = e.path().map_err(|e| e.to_string())?.into_owned();
            let Some(rel) = clean(&path)? else { continue };
            if rel.file_name().is_some_and(|n| n == "index.json") && rel.components().count() <= 2 {
                let mut text = Vec::new();
                e.read_to_end(&mut text).map_err(|e| e.to_string())?;
                index = Some(
                    serde_json::from_slice::<Value>(&text)
                        .map_err(|e| format!("index.json: not JSON: {e}"))?,
                );
                prefix = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                break;
            }
        }
    }
    let index = index.ok_or("no index.json in the archive: not an OCI image layout")?;
    let top = choose(&index, "index.json")?;
    let key = cache_key(&top.digest)?;
    if let Some(p) = cached(images, &key) {
        return Ok(p);
    }
    let tmp = images.join(format!(
        ".tmp-layout-{}-{}",
        std::process::id(),
        fsutil::now_nanos()
    ));
    let res = (|| {
        std::fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        let mut ar = tar::Archive::new(open_maybe_gz(file)?);
        ar.unpack(&tmp)
            .map_err(|e| format!("unpacking the archive: {e}"))?;
        let layout = tmp.join(&prefix);
        build(images, &layout, &top, &key)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    res
}

/// A layer path made relative, without `.`; `None` for the root itself; `..` refused.
fn clean(p: &Path) -> Result<Option<PathBuf>, String> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("path `{}` leaves the rootfs", p.display()))
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Resolves `rel` inside `root` as if `root` were `/`: symlinks are followed (absolute
/// ones from `root`, `..` stops at `root`), except the last component's unless
/// `follow_last`; with `create`, missing directories are created.
pub(crate) fn resolve_in_root(
    root: &Path,
    rel: &Path,
    follow_last: bool,
    create: bool,
) -> io::Result<PathBuf> {
    let mut cur = root.to_path_buf();
    let mut todo: VecDeque<PathBuf> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            _ => None,
        })
        .collect();
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        if c.as_os_str() == ".." {
            if cur != root {
                cur.pop();
            }
            continue;
        }
        let next = cur.join(&c);
        let last = todo.is_empty();
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() && (!last || follow_last) => {
                hops += 1;
                if hops > 40 {
                    return Err(io::Error::other(format!(
                        "too many levels of symbolic links at {}",
                        next.display()
                    )));
                }
                let target = std::fs::read_link(&next)?;
                if target.is_absolute() {
                    cur = root.to_path_buf();
                }
                let mut front: VecDeque<PathBuf> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(PathBuf::from(n)),
                        Component::ParentDir => Some(PathBuf::from("..")),
                        _ => None,
                    })
                    .collect();
                front.extend(todo);
                todo = front;
            }
            Ok(_) => cur = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if create {
                    std::fs::create_dir(&next)?;
                    let _ = std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o755));
                }
                cur = next;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(cur)
}

/// Removes a file, symlink or directory tree (never following symlinks); absent is
/// fine.
fn remove_path(p: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

const WH_PREFIX: &str = ".wh.";
const WH_OPAQUE: &str = ".wh..wh..opq";

/// Applies one layer blob onto `root`.
pub(crate) fn apply_layer(root: &Path, blob: &Path) -> Result<(), String> {
    let as_root = nix::unistd::geteuid().is_root();
    // Pass 1: whiteouts, applied to what the layers below left.
    let mut whiteouts: Vec<(PathBuf, Option<String>)> = Vec::new();
    {
        let mut ar = tar::Archive::new(open_maybe_gz(blob)?);
        for e in ar.entries().map_err(|e| e.to_string())? {
            let e = e.map_err(|e| e.to_string())?;
            let path = e.path().map_err(|e| e.to_string())?.into_owned();
            let Some(rel) = clean(&path)? else { continue };
            let name = rel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
            if name == WH_OPAQUE {
                whiteouts.push((parent, None));
            } else if let Some(target) = name.strip_prefix(WH_PREFIX) {
                if !target.starts_with(".wh.") && !target.is_empty() {
                    whiteouts.push((parent, Some(target.to_string())));
                }
            }
        }
    }
    for (parent, name) in &whiteouts {
        let dir = resolve_in_root(root, parent, true, false).map_err(|e| e.to_string())?;
        let res = match name {
            Some(n) => remove_path(&dir.join(n)),
            None => match std::fs::read_dir(&dir) {
                Ok(rd) => rd.flatten().try_for_each(|c| remove_path(&c.path())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            },
        };
        res.map_err(|e| format!("whiteout in `{}`: {e}", parent.display()))?;
    }
    // Pass 2: the layer's files.
    let mut ar = tar::Archive::new(open_maybe_gz(blob)?);
    ar.set_preserve_permissions(true);
    ar.set_preserve_ownerships(as_root);
    ar.set_preserve_mtime(true);
    ar.set_unpack_xattrs(false);
    ar.set_overwrite(true);
    for e in ar.entries().map_err(|e| e.to_string())? {
        let mut e = e.map_err(|e| e.to_string())?;
        let path = e.path().map_err(|e| e.to_string())?.into_owned();
        let Some(rel) = clean(&path)? else { continue };
        let Some(name) = rel.file_name().map(|n| n.to_os_string()) else {
            continue;
        };
        if name.to_string_lossy().starts_with(WH_PREFIX) {
            continue;
        }
        let ctx = |err: &dyn std::fmt::Display| format!("`{}`: {err}", rel.display());
        let parent_rel = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        let parent = resolve_in_root(root, &parent_rel, true, true).map_err(|e| ctx(&e))?;
        if !parent.is_dir() {
            return Err(ctx(&"its parent is not a directory"));
        }
        let dst = parent.join(&name);
        use tar::EntryType as T;
        let kind = e.header().entry_type();
        match kind {
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => continue,
            T::Directory => {
                if let Ok(m) = std::fs::symlink_metadata(&dst) {
                    if !m.is_dir() {
                        std::fs::remove_file(&dst).map_err(|e| ctx(&e))?;
                    }
                }
                e.unpack(&dst).map_err(|e| ctx(&e))?;
            }
            T::Link => {
                let target = e
                    .link_name()
                    .map_err(|e| ctx(&e))?
                    .ok_or_else(|| ctx(&"hard link without a target"))?
                    .into_owned();
                let target_rel = clean(&target)?.ok_or_else(|| ctx(&"hard link to the root"))?;
                let src = resolve_in_root(root, &target_rel, false, false).map_err(|e| ctx(&e))?;
                if src == dst {
                    continue;
                }
                remove_path(&dst).map_err(|e| ctx(&e))?;
                std::fs::hard_link(&src, &dst)
                    .map_err(|e| ctx(&format!("hard link to `{}`: {e}", target.display())))?;
            }
            T::Char | T::Block | T::Fifo => {
                remove_path(&dst).map_err(|e| ctx(&e))?;
                special(&e, kind, &dst, as_root).map_err(|e| ctx(&e))?;
            }
            _ => {
                remove_path(&dst).map_err(|e| ctx(&e))?;
                e.unpack(&dst).map_err(|e| ctx(&e))?;
            }
        }
    }
    Ok(())
}

/// Creates a device node or FIFO; device nodes need root and are skipped without it
/// (the container's `/dev` is a fresh tmpfs anyway).
fn special<R: Read>(
    e: &tar::Entry<'_, R>,
    kind: tar::EntryType,
    dst: &Path,
    as_root: bool,
) -> io::Result<()> {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let h = e.header();
    let mode = Mode::from_bits_truncate(h.mode().unwrap_or(0o644) & 0o7777);
    let res = if kind == tar::EntryType::Fifo {
        nix::unistd::mkfifo(dst, mode)
    } else {
        if !as_root {
            return Ok(());
        }
        let major = u64::from(h.device_major()?.unwrap_or(0));
        let minor = u64::from(h.device_minor()?.unwrap_or(0));
        let flag = if kind == tar::EntryType::Char {
            SFlag::S_IFCHR
        } else {
            SFlag::S_IFBLK
        };
        mknod(dst, flag, mode, makedev(major, minor))
    };
    match res {
        Ok(()) => {}
        Err(nix::errno::Errno::EPERM) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    if as_root {
        let uid = h.uid().ok().map(|u| nix::unistd::Uid::from_raw(u as u32));
        let gid = h.gid().ok().map(|g| nix::unistd::Gid::from_raw(g as u32));
        let _ = nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            dst,
            uid,
            gid,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(1_700_000_000);
            match data {
                Some(d) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(d.len() as u64);
                    h.set_mode(0o644);
                    b.append_data(&mut h, path, *d).unwrap();
                }
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    b.append_data(&mut h, path, &[][..]).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn whiteouts_and_opaque_dirs() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        std::fs::create_dir(&root).unwrap();
        let l1 = t.path().join("l1");
        std::fs::write(
            &l1,
            layer(&[
                ("etc", None),
                ("etc/a", Some(b"a")),
                ("etc/b", Some(b"b")),
                ("opt", None),
                ("opt/x", Some(b"x")),
                ("opt/sub", None),
                ("opt/sub/y", Some(b"y")),
            ]),
        )
        .unwrap();
        apply_layer(&root, &l1).unwrap();
        // The opaque marker comes after the layer's own file in the same directory.
        let l2 = t.path().join("l2");
        std::fs::write(
            &l2,
            layer(&[
                ("etc/.wh.a", Some(b"")),
                ("opt/new", Some(b"n")),
                ("opt/.wh..wh..opq", Some(b"")),
                ("etc/c", Some(b"c")),
            ]),
        )
        .unwrap();
        apply_layer(&root, &l2).unwrap();
        assert!(!root.join("etc/a").exists());
        assert_eq!(std::fs::read(root.join("etc/b")).unwrap(), b"b");
        assert_eq!(std::fs::read(root.join("etc/c")).unwrap(), b"c");
        assert!(!root.join("opt/x").exists());
        assert!(!root.join("opt/sub").exists());
        assert_eq!(std::fs::read(root.join("opt/new")).unwrap(), b"n");
        assert!(!root.join("etc/.wh.a").exists());
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("rootfs");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("usr/lib")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim"), b"v").unwrap();
        // An absolute symlink points into the rootfs, not at the node's file system.
        std::os::unix::fs::symlink("/usr/lib", root.join("lib")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let got = resolve_in_root(&root, Path::new("lib/x"), true, false).unwrap();
        assert_eq!(got, root.join("usr/lib/x"));
        let got = resolve_in_root(&root, Path::new("escape/victim"), true, false).unwrap();
        assert!(got.starts_with(&root), "{}", got.display());
        let got = resolve_in_root(&root, Path::new("../../etc"), true, false).unwrap();
        assert_eq!(got, root.join("etc"));
        assert!(clean(Path::new("a/../../b")).is_err());
    }

    #[test]
    fn digests_are_checked() {
        assert!(split_digest("sha256:../../etc").is_err());
        assert!(split_digest("md5:abc").is_err());
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("blobs/sha256");
        std::fs::create_dir_all(&d).unwrap();
        let hex = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"; // "hello"
        std::fs::write(d.join(hex), b"hello").unwrap();
        assert!(blob(t.path(), &format!("sha256:{hex}")).is_ok());
        std::fs::write(d.join(hex), b"hellO").unwrap();
        let e = blob(t.path(), &format!("sha256:{hex}")).unwrap_err();
        assert!(e.contains("corrupt"), "{e}");
    }
}
