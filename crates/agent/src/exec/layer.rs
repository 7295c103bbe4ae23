//! Applying an image layer (a tar stream, maybe gzip-compressed) onto a rootfs being
//! built in the image cache.
//!
//! A layer is a user's file, so nothing of it is trusted:
//!
//! * Paths are resolved inside the rootfs as if it were `/` (symlinks included, `..`
//!   refused), so a layer can never write or delete outside it.
//! * Only directories, regular files, symbolic links and hard links (to a file of the
//!   rootfs) are created. Device nodes, FIFOs and sockets are skipped: the container's
//!   `/dev` is a fresh tmpfs, and a node in the cache would be one more way to the
//!   host's devices.
//! * Every file belongs to the agent (root), whatever owner the tar header names, and
//!   its mode is kept within `0o777` (`0o1777` for a directory): no setuid or setgid
//!   bit ever comes out of a layer. This is what a runtime without user namespaces
//!   must do for an untrusted image: an owner kept from the header is a host account
//!   (uid 1000 of the image is whoever has uid 1000 on the node, who could then rewrite
//!   a shared image), and a setuid-root file is root for whoever can reach it.
//! * The unpacked bytes and the entries of an image are capped ([`Budget`]), so a
//!   decompression bomb stops with an error rather than filling the disk.
//!
//! Whiteouts (`.wh.NAME` deletes `NAME` of the layers below, `.wh..wh..opq` empties its
//! directory of them) are read in a first pass over the layer and applied before its
//! files; a whiteout of `.`, `..` or an empty name is refused.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::libc;

/// Why a layer could not be applied. Messages name the entry and the rule.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The unpacked bytes passed `images.max_unpacked_mb`.
    #[error(
        "the image unpacks to more than images.max_unpacked_mb = {max_mb} MiB (a decompression \
         bomb, or raise the limit in the agent's configuration)"
    )]
    TooBig {
        /// The limit, in MiB.
        max_mb: u64,
    },
    /// The entries passed `images.max_entries`.
    #[error("the image has more than images.max_entries = {max} files")]
    TooManyEntries {
        /// The limit.
        max: u64,
    },
    /// The layer is compressed with zstd.
    #[error("zstd-compressed layers are not supported (use gzip or none)")]
    Zstd,
    /// An entry's path has a `..` that leaves the rootfs.
    #[error("path `{}` leaves the rootfs", path.display())]
    LeavesRoot {
        /// The path as the layer names it.
        path: PathBuf,
    },
    /// A whiteout names `.`, `..` or nothing.
    #[error("whiteout `{name}`: a whiteout must name a file (not `.`, `..` or nothing)")]
    BadWhiteout {
        /// The whiteout's file name.
        name: String,
    },
    /// A whiteout could not be applied.
    #[error("whiteout in `{}`: {source}", parent.display())]
    Whiteout {
        /// The directory of the whiteout, in the layer.
        parent: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The layer file itself cannot be opened.
    #[error("{}: {source}", path.display())]
    Open {
        /// The layer file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Reading the layer's stream failed (a broken tar or gzip stream, or the cap on
    /// the decompressed bytes).
    #[error("{0}")]
    Read(io::Error),
    /// An entry could not be created.
    #[error("`{}`: {source}", rel.display())]
    Entry {
        /// The entry's path in the rootfs.
        rel: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// An entry's content could not be copied.
    #[error("`{}`: {source}", rel.display())]
    Content {
        /// The entry's path in the rootfs.
        rel: PathBuf,
        /// What went wrong.
        source: Box<LayerError>,
    },
    /// An entry whose parent, as the layers below left it, is not a directory.
    #[error("`{}`: its parent is not a directory", rel.display())]
    ParentNotDir {
        /// The entry's path in the rootfs.
        rel: PathBuf,
    },
    /// A link entry names no target.
    #[error("`{}`: {link} without a target", rel.display())]
    NoTarget {
        /// The entry's path in the rootfs.
        rel: PathBuf,
        /// `symbolic link` or `hard link`.
        link: &'static str,
    },
    /// A hard link to the rootfs itself.
    #[error("`{}`: hard link to the root", rel.display())]
    LinkToRoot {
        /// The entry's path in the rootfs.
        rel: PathBuf,
    },
    /// A hard link to something no layer could have created.
    #[error(
        "`{}`: hard link to `{}`, which is not a file of the image",
        rel.display(),
        target.display()
    )]
    LinkNotFile {
        /// The entry's path in the rootfs.
        rel: PathBuf,
        /// The link's target, as the layer names it.
        target: PathBuf,
    },
    /// A hard link could not be made.
    #[error("`{}`: hard link to `{}`: {source}", rel.display(), target.display())]
    Link {
        /// The entry's path in the rootfs.
        rel: PathBuf,
        /// The link's target, as the layer names it.
        target: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// What is left of an image's unpacking limits; shared by its layers. Each pass over a
/// layer's decompressed stream is capped at what is left, and the files' content
/// (holes of sparse files included) is spent from it.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    /// Bytes of content still allowed.
    pub bytes_left: u64,
    /// Entries still allowed.
    pub entries_left: u64,
    /// The limits as configured, for messages: (bytes, entries).
    pub limits: (u64, u64),
}

impl Budget {
    pub(crate) fn new(max_bytes: u64, max_entries: u64) -> Budget {
        Budget {
            bytes_left: max_bytes,
            entries_left: max_entries,
            limits: (max_bytes, max_entries),
        }
    }

    fn too_big(&self) -> LayerError {
        LayerError::TooBig {
            max_mb: self.limits.0 >> 20,
        }
    }

    fn spend(&mut self, n: u64) -> Result<(), LayerError> {
        if n > self.bytes_left {
            self.bytes_left = 0;
            return Err(self.too_big());
        }
        self.bytes_left -= n;
        Ok(())
    }

    fn entry(&mut self) -> Result<(), LayerError> {
        if self.entries_left == 0 {
            return Err(LayerError::TooManyEntries { max: self.limits.1 });
        }
        self.entries_left -= 1;
        Ok(())
    }
}

/// A reader that fails once more than `left` bytes came through it.
struct Capped<R> {
    inner: R,
    left: u64,
    what: String,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            return Err(io::Error::other(self.what.clone()));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A reader of a layer file that may be gzip-compressed (detected by its magic bytes),
/// failing past `cap` decompressed bytes with `what`.
pub(crate) fn open_maybe_gz(
    mut f: File,
    cap: u64,
    what: String,
) -> Result<Box<dyn Read>, LayerError> {
    let mut magic = [0u8; 4];
    let mut n = 0;
    while n < 4 {
        match f.read(&mut magic[n..]).map_err(LayerError::Read)? {
            0 => break,
            k => n += k,
        }
    }
    f.seek(SeekFrom::Start(0)).map_err(LayerError::Read)?;
    let inner: Box<dyn Read> = if n >= 2 && magic[..2] == [0x1f, 0x8b] {
        Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(f)))
    } else if n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
        return Err(LayerError::Zstd);
    } else {
        Box::new(BufReader::new(f))
    };
    Ok(Box::new(Capped {
        inner,
        left: cap,
        what,
    }))
}

/// A layer path made relative, without `.`; `None` for the root itself; `..` refused.
pub(crate) fn clean(p: &Path) -> Result<Option<PathBuf>, LayerError> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(LayerError::LeavesRoot {
                    path: p.to_path_buf(),
                })
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Resolves `rel` inside `root` as if `root` were `/`: symlinks are followed (absolute
/// ones from `root`, `..` stops at `root`), except the last component's unless
/// `follow_last`; with `create`, missing directories are created (mode 0755).
pub(crate) fn resolve_in_root(
    root: &Path,
    rel: &Path,
    follow_last: bool,
    create: bool,
) -> io::Result<PathBuf> {
    let parts = |p: &Path| -> VecDeque<PathBuf> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(PathBuf::from(n)),
                Component::ParentDir => Some(PathBuf::from("..")),
                _ => None,
            })
            .collect()
    };
    let mut cur = root.to_path_buf();
    let mut todo = parts(rel);
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
                let mut front = parts(&target);
                front.extend(todo);
                todo = front;
            }
            Ok(_) => cur = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if create {
                    std::fs::create_dir(&next)?;
                    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o755))?;
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

/// The whiteout an entry named `name` is: `Ok(None)` for none, `Ok(Some(None))` for
/// an opaque directory, `Ok(Some(Some(target)))` to delete `target`.
fn whiteout(name: &str) -> Result<Option<Option<String>>, LayerError> {
    if name == WH_OPAQUE {
        return Ok(Some(None));
    }
    let Some(target) = name.strip_prefix(WH_PREFIX) else {
        return Ok(None);
    };
    if target.is_empty() || target == "." || target == ".." {
        return Err(LayerError::BadWhiteout {
            name: name.to_string(),
        });
    }
    if target.starts_with(WH_PREFIX) {
        // `.wh..wh.*` names other than the opaque marker are AUFS metadata.
        return Ok(None);
    }
    Ok(Some(Some(target.to_string())))
}

/// Applies one layer (a regular file in the agent's staging area) onto `root`,
/// spending `budget`.
pub(crate) fn apply_layer(root: &Path, blob: &Path, budget: &mut Budget) -> Result<(), LayerError> {
    let open = |budget: &Budget| {
        let f = File::open(blob).map_err(|source| LayerError::Open {
            path: blob.to_path_buf(),
            source,
        })?;
        open_maybe_gz(f, budget.bytes_left, budget.too_big().to_string())
    };
    // Pass 1: whiteouts, applied to what the layers below left.
    let mut whiteouts: Vec<(PathBuf, Option<String>)> = Vec::new();
    {
        let mut ar = tar::Archive::new(open(budget)?);
        let mut count = budget.clone();
        for e in ar.entries().map_err(LayerError::Read)? {
            let e = e.map_err(LayerError::Read)?;
            count.entry()?;
            let path = e.path().map_err(LayerError::Read)?.into_owned();
            let Some(rel) = clean(&path)? else { continue };
            let name = rel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(w) = whiteout(&name)? {
                let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                whiteouts.push((parent, w));
            }
        }
    }
    for (parent, name) in &whiteouts {
        let dir = resolve_in_root(root, parent, true, false).map_err(LayerError::Read)?;
        let res = match name {
            Some(n) => remove_path(&dir.join(n)),
            None => match std::fs::read_dir(&dir) {
                Ok(rd) => rd.flatten().try_for_each(|c| remove_path(&c.path())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            },
        };
        res.map_err(|source| LayerError::Whiteout {
            parent: parent.clone(),
            source,
        })?;
    }
    // Pass 2: the layer's files.
    let mut ar = tar::Archive::new(open(budget)?);
    for e in ar.entries().map_err(LayerError::Read)? {
        let mut e = e.map_err(LayerError::Read)?;
        budget.entry()?;
        let path = e.path().map_err(LayerError::Read)?.into_owned();
        let Some(rel) = clean(&path)? else { continue };
        let Some(name) = rel.file_name().map(|n| n.to_os_string()) else {
            continue;
        };
        if name.to_string_lossy().starts_with(WH_PREFIX) {
            continue;
        }
        let ctx = |source: io::Error| LayerError::Entry {
            rel: rel.clone(),
            source,
        };
        use tar::EntryType as T;
        let kind = e.header().entry_type();
        if !matches!(
            kind,
            T::Directory | T::Regular | T::Continuous | T::GNUSparse | T::Symlink | T::Link
        ) {
            // Devices, FIFOs, sockets and unknown types: never created.
            continue;
        }
        let parent_rel = rel.parent().map(Path::to_path_buf).unwrap_or_default();
        let parent = resolve_in_root(root, &parent_rel, true, true).map_err(ctx)?;
        if !std::fs::symlink_metadata(&parent).is_ok_and(|m| m.is_dir()) {
            return Err(LayerError::ParentNotDir { rel });
        }
        let dst = parent.join(&name);
        let mode = e.header().mode().map_err(ctx)?;
        match kind {
            T::Directory => {
                match std::fs::symlink_metadata(&dst) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        remove_path(&dst).map_err(ctx)?;
                        std::fs::create_dir(&dst).map_err(ctx)?;
                    }
                    Err(_) => std::fs::create_dir(&dst).map_err(ctx)?,
                }
                std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode & 0o1777))
                    .map_err(ctx)?;
            }
            T::Symlink => {
                let target = e
                    .link_name()
                    .map_err(ctx)?
                    .ok_or_else(|| LayerError::NoTarget {
                        rel: rel.clone(),
                        link: "symbolic link",
                    })?
                    .into_owned();
                remove_path(&dst).map_err(ctx)?;
                std::os::unix::fs::symlink(&target, &dst).map_err(ctx)?;
            }
            T::Link => {
                let target = e
                    .link_name()
                    .map_err(ctx)?
                    .ok_or_else(|| LayerError::NoTarget {
                        rel: rel.clone(),
                        link: "hard link",
                    })?
                    .into_owned();
                let target_rel =
                    clean(&target)?.ok_or_else(|| LayerError::LinkToRoot { rel: rel.clone() })?;
                let src = resolve_in_root(root, &target_rel, false, false).map_err(ctx)?;
                if src == dst {
                    continue;
                }
                // Only to what a layer could create: a file or a symlink of the rootfs.
                if !std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_file() || m.is_symlink()) {
                    return Err(LayerError::LinkNotFile { rel, target });
                }
                remove_path(&dst).map_err(ctx)?;
                std::fs::hard_link(&src, &dst).map_err(|source| LayerError::Link {
                    rel: rel.clone(),
                    target,
                    source,
                })?;
            }
            _ => {
                remove_path(&dst).map_err(ctx)?;
                let mut f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(&dst)
                    .map_err(ctx)?;
                copy_counted(&mut e, &mut f, budget).map_err(|e| LayerError::Content {
                    rel: rel.clone(),
                    source: Box::new(e),
                })?;
                f.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))
                    .map_err(ctx)?;
                if let Ok(t) = e.header().mtime() {
                    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
                    let _ = f.set_modified(t);
                }
            }
        }
    }
    Ok(())
}

/// Copies an entry's content (holes of a sparse entry included), spending `budget`.
fn copy_counted(r: &mut impl Read, w: &mut File, budget: &mut Budget) -> Result<(), LayerError> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = r.read(&mut buf).map_err(LayerError::Read)?;
        if n == 0 {
            return Ok(());
        }
        budget.spend(n as u64)?;
        w.write_all(&buf[..n]).map_err(LayerError::Read)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_whiteouts_are_refused() {
        for n in [".wh.", ".wh..", ".wh..."] {
            let e = whiteout(n).unwrap_err();
            assert!(
                matches!(&e, LayerError::BadWhiteout { name } if name == n),
                "{e}"
            );
            assert!(e.to_string().contains("must name a file"), "{e}");
        }
        assert_eq!(whiteout(".wh..wh..opq").unwrap(), Some(None));
        assert_eq!(whiteout(".wh.a").unwrap(), Some(Some("a".into())));
        assert_eq!(whiteout(".wh..wh.aufs").unwrap(), None);
        assert_eq!(whiteout("a").unwrap(), None);
    }
}
