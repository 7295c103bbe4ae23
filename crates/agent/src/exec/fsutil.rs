//! Small file helpers: atomic writes, JSON files, clocks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::ExecError;

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Nanoseconds since the Unix epoch (for unique temporary names).
pub(crate) fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The `T` attribute of chattr(1) (`FS_TOPDIR_FL` in linux/fs.h).
const FS_TOPDIR_FL: nix::libc::c_int = 0x0002_0000;

/// Marks directory `dir` as the top of a directory hierarchy for ext4's inode
/// allocator (the `T` attribute of chattr(1)), so that the directories made in it are
/// spread over the file system's block groups, each with its files, rather than
/// gathered in the group of `dir`. Where the file system has no journal, each new
/// inode is looked for past every inode of its group deleted in the last half minute
/// or so; with every attempt's files in one group, that search grew with the rate of
/// attempts and took a sixth of a busy node's CPU. Best effort: other file systems
/// and failures leave the directory as it is.
pub(crate) fn spread_subdirectories(dir: &Path) {
    use std::os::fd::AsRawFd;
    let Ok(f) = File::open(dir) else {
        return;
    };
    let mut flags: nix::libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS and FS_IOC_SETFLAGS read and write one int through the
    // pointer, which points at a live local.
    unsafe {
        if nix::libc::ioctl(f.as_raw_fd(), nix::libc::FS_IOC_GETFLAGS, &mut flags) != 0
            || flags & FS_TOPDIR_FL != 0
        {
            return;
        }
        flags |= FS_TOPDIR_FL;
        let _ = nix::libc::ioctl(f.as_raw_fd(), nix::libc::FS_IOC_SETFLAGS, &flags);
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// renamed over `path`. A reader (the agent, a shim, an agent started after a crash)
/// sees the old file or the new one, never a part.
///
/// Not fsynced: the spool's records have to outlive the agent's and the shims'
/// processes (the page cache does), not the node. A node that crashes runs no job
/// afterwards, the controllers requeue its attempts once it is DOWN, and the agent that
/// comes back settles an attempt whose records did not reach the disk as lost (see
/// [`Executors::adopt`](super::Executors::adopt)). Each fsync would be a disk write on
/// an attempt's start or end, a dozen per attempt; the GPU ledger, an audit record, is
/// the one file of the spool that is synced.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExecError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        now_nanos()
    ));
    let res = (|| -> io::Result<()> {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    res.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        ExecError::io("writing", path, e)
    })
}

/// Writes `value` as pretty JSON, atomically.
pub(crate) fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), ExecError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| ExecError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("cannot encode: {e}"),
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Reads and parses a JSON file.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ExecError> {
    let text = std::fs::read_to_string(path).map_err(|e| ExecError::io("reading", path, e))?;
    serde_json::from_str(&text).map_err(|e| ExecError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("not valid JSON for this file: {e}"),
    })
}

/// The file's content, if it exists and is readable.
pub(crate) fn read_string(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Moves a file or a directory tree from `from` to `to`: a rename, or, where the two
/// are on different file systems (an `attempts_dir` on a tmpfs), a copy followed by the
/// removal of `from`. Symbolic links are copied as links; `to`'s parent must exist.
pub(crate) fn move_path(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            copy_tree(from, to)?;
            if std::fs::symlink_metadata(from)?.is_dir() {
                std::fs::remove_dir_all(from)
            } else {
                std::fs::remove_file(from)
            }
        }
        other => other,
    }
}

/// Copies `from` to `to` (which must not exist), keeping permissions and owners.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(from)?;
    if meta.file_type().is_symlink() {
        return std::os::unix::fs::symlink(std::fs::read_link(from)?, to);
    }
    if meta.is_dir() {
        std::fs::create_dir(to)?;
        for ent in std::fs::read_dir(from)? {
            let ent = ent?;
            copy_tree(&ent.path(), &to.join(ent.file_name()))?;
        }
        std::fs::set_permissions(to, meta.permissions())?;
    } else {
        std::fs::copy(from, to)?;
    }
    // The job's user keeps its files; where the agent may not give them away (not
    // root), they stay the agent's.
    let _ = std::os::unix::fs::lchown(to, Some(meta.uid()), Some(meta.gid()));
    Ok(())
}

/// Opens a file for appending, creating it if needed.
pub(crate) fn open_append(path: &Path) -> Result<File, ExecError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| ExecError::io("opening", path, e))
}

/// The last `max` bytes of a file, for error messages (`"(empty)"` when there are
/// none).
pub(crate) fn tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = File::open(path) else {
        return format!("(no {})", path.display());
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > max {
        let _ = f.seek(SeekFrom::Start(len - max));
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let s = String::from_utf8_lossy(&buf).trim().to_string();
    if s.is_empty() {
        "(empty)".to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A tree moves whole, across file systems too: from `/dev/shm` (a tmpfs) to the
    /// temporary directory where this machine has it, else within one.
    #[test]
    fn a_tree_moves_whole() {
        let shm = Path::new("/dev/shm");
        let src = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .unwrap();
        let dst = tempfile::tempdir().unwrap();
        let from = src.path().join("model");
        std::fs::create_dir_all(from.join("sub")).unwrap();
        std::fs::write(from.join("weights.bin"), b"0123").unwrap();
        std::fs::write(from.join("sub/config.json"), b"{}").unwrap();
        std::os::unix::fs::symlink("weights.bin", from.join("latest")).unwrap();
        let to = dst.path().join("model");
        move_path(&from, &to).unwrap();
        assert!(!from.exists());
        assert_eq!(std::fs::read(to.join("weights.bin")).unwrap(), b"0123");
        assert_eq!(std::fs::read(to.join("sub/config.json")).unwrap(), b"{}");
        assert_eq!(
            std::fs::read_link(to.join("latest")).unwrap(),
            Path::new("weights.bin")
        );
        let file = src.path().join("stdout");
        std::fs::write(&file, b"out\n").unwrap();
        move_path(&file, &dst.path().join("stdout")).unwrap();
        assert!(!file.exists());
        assert_eq!(std::fs::read(dst.path().join("stdout")).unwrap(), b"out\n");
    }

    /// The directory's inode flags, where its file system has them.
    fn flags(dir: &Path) -> Option<nix::libc::c_int> {
        let f = File::open(dir).ok()?;
        let mut flags: nix::libc::c_int = 0;
        // SAFETY: FS_IOC_GETFLAGS writes one int through a pointer to a live local.
        let rc = unsafe { nix::libc::ioctl(f.as_raw_fd(), nix::libc::FS_IOC_GETFLAGS, &mut flags) };
        (rc == 0).then_some(flags)
    }

    #[test]
    fn the_attempts_directory_spreads_its_subdirectories() {
        let t = tempfile::tempdir().unwrap();
        let Some(before) = flags(t.path()) else {
            eprintln!(
                "SKIPPED: {} has no inode flags (not ext2/3/4 or similar)",
                t.path().display()
            );
            return;
        };
        assert_eq!(before & FS_TOPDIR_FL, 0, "a fresh directory is not marked");
        let _ex = crate::exec::Executors::new(t.path()).unwrap();
        let attempts = t.path().join("attempts");
        let marked = flags(&attempts).unwrap();
        assert_eq!(
            marked & FS_TOPDIR_FL,
            FS_TOPDIR_FL,
            "the attempts directory"
        );
        assert_eq!(
            flags(t.path()).unwrap(),
            before,
            "the spool itself is left alone"
        );
        // Marking it again (an agent restarting on its spool) changes nothing.
        spread_subdirectories(&attempts);
        assert_eq!(flags(&attempts).unwrap(), marked);
    }
}
