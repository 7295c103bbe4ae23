//! Small file helpers: atomic writes, JSON files, clocks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
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

/// Creates directory `dir` (and its missing parents) mode 0700, or, where it exists,
/// makes it 0700 and, when the agent is root, owned by root: the spool's directories
/// hold every job's environment and output, which no other account may read. A path
/// that exists but is no directory is an error (the admin's symbolic link to one is
/// followed).
pub(crate) fn private_dir(dir: &Path) -> Result<(), ExecError> {
    let err = |e| ExecError::io("creating spool directory", dir, e);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err)?;
    let m = std::fs::metadata(dir).map_err(err)?;
    if !m.is_dir() {
        return Err(err(io::Error::other("not a directory")));
    }
    if nix::unistd::geteuid().is_root() && (m.uid() != 0 || m.gid() != 0) {
        std::os::unix::fs::chown(dir, Some(0), Some(0)).map_err(err)?;
    }
    if m.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// renamed over `path`; mode 0600 (the records hold the job's environment). A reader (the agent, a shim, an agent started after a crash)
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
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
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
/// For a tree that only root can reach (an attempt directory); a tree its job's user
/// can change goes through [`move_beneath`].
pub(crate) fn move_path(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            let parent = from.parent().unwrap_or(Path::new("/"));
            let name = from
                .file_name()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
            let dir = open_dir_at(None, parent.as_os_str(), None)?;
            copy_at(&dir, name, to, None)?;
            if std::fs::symlink_metadata(from)?.is_dir() {
                std::fs::remove_dir_all(from)
            } else {
                std::fs::remove_file(from)
            }
        }
        other => other,
    }
}

/// Moves `base/rel` to `to` where everything below `base` (a directory only root may
/// change) belongs to a job's user, who may still be changing it from another job:
/// every component of `rel` is opened without following a symbolic link and must be
/// owned by `owner`; the rename (or, across file systems, the copy) works from the
/// directory so opened, never from a path looked up again. A copy takes only what
/// `owner` owns (see [`copy_at`]). The source of a copy is left in place: the caller
/// removes the job's directory.
pub(crate) fn move_beneath(base: &Path, rel: &Path, to: &Path, owner: u32) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut dir = open_dir_at(None, base.as_os_str(), None)?;
    for c in rel.parent().unwrap_or(Path::new("")).components() {
        let std::path::Component::Normal(c) = c else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "only plain names below the base",
            ));
        };
        dir = open_dir_at(Some(&dir), c, Some(owner))?;
    }
    let cname = std::ffi::CString::new(name.as_bytes())?;
    let cto = std::ffi::CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: a directory descriptor we hold and two NUL-terminated names.
    let r = unsafe {
        nix::libc::renameat(
            dir.as_raw_fd(),
            cname.as_ptr(),
            nix::libc::AT_FDCWD,
            cto.as_ptr(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(nix::libc::EXDEV) {
        return Err(e);
    }
    copy_at(&dir, name, to, Some(owner))
}

/// `fstat` of an open descriptor.
fn fstat(fd: &OwnedFd) -> io::Result<nix::libc::stat> {
    // SAFETY: stat is plain data, filled by fstat on a descriptor we hold.
    let mut st: nix::libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { nix::libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Opens `name` in `dir` (or the path `name` itself without `dir`) without following a
/// symbolic link at its end (`ELOOP` for one), without blocking (a FIFO), as no
/// controlling terminal.
fn open_nofollow(dir: Option<&OwnedFd>, name: &std::ffi::OsStr, flags: i32) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(name.as_bytes())?;
    let at = dir.map_or(nix::libc::AT_FDCWD, |d| d.as_raw_fd());
    let f = nix::libc::O_RDONLY
        | nix::libc::O_CLOEXEC
        | nix::libc::O_NONBLOCK
        | nix::libc::O_NOCTTY
        | flags
        | if dir.is_some() {
            nix::libc::O_NOFOLLOW
        } else {
            0
        };
    // SAFETY: a NUL-terminated name; the descriptor returned is owned below.
    let fd = unsafe { nix::libc::openat(at, c.as_ptr(), f) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the directory `name` in `dir` (see [`open_nofollow`]); with `owner`, refuses
/// one that `owner` does not own.
fn open_dir_at(
    dir: Option<&OwnedFd>,
    name: &std::ffi::OsStr,
    owner: Option<u32>,
) -> io::Result<OwnedFd> {
    let fd = open_nofollow(dir, name, nix::libc::O_DIRECTORY)?;
    if let Some(o) = owner {
        let st = fstat(&fd)?;
        if st.st_uid != o {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} is owned by uid {}, not by the job's uid {o}",
                    name.to_string_lossy(),
                    st.st_uid
                ),
            ));
        }
    }
    Ok(fd)
}

/// The names in the open directory `dir` (`.` and `..` left out).
fn entries(dir: &OwnedFd) -> io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: dup of a descriptor we hold; fdopendir owns the copy, closedir closes it.
    let dup = unsafe { nix::libc::fcntl(dir.as_raw_fd(), nix::libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    let d = unsafe { nix::libc::fdopendir(dup) };
    if d.is_null() {
        let e = io::Error::last_os_error();
        unsafe { nix::libc::close(dup) };
        return Err(e);
    }
    let mut out = Vec::new();
    loop {
        // SAFETY: a stream fdopendir returned; each entry is read before the next call.
        let ent = unsafe { nix::libc::readdir(d) };
        if ent.is_null() {
            break;
        }
        let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
        let b = name.to_bytes();
        if b != b"." && b != b".." {
            out.push(std::ffi::OsStr::from_bytes(b).to_os_string());
        }
    }
    // SAFETY: the stream, closed once.
    unsafe { nix::libc::closedir(d) };
    Ok(out)
}

/// Copies `name` in the open directory `dir` to `to` (which must not exist), keeping
/// modes (less setuid/setgid) and owners as the opened files have them. Nothing is
/// looked up by path on the source side: each entry is opened relative to its
/// directory's descriptor without following a symbolic link, and what the descriptor
/// turns out to be (`fstat`) decides: a directory is copied, a regular file is copied,
/// a symbolic link is copied as a link; anything else (a FIFO, a device, a socket) is
/// left out. With `owner`, so is anything `owner` does not own: whatever the tree's
/// user swaps in meanwhile, root never reads a file that user could not.
fn copy_at(dir: &OwnedFd, name: &std::ffi::OsStr, to: &Path, owner: Option<u32>) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let fd = match open_nofollow(Some(dir), name, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            let c = std::ffi::CString::new(name.as_bytes())?;
            // SAFETY: stat filled by fstatat on a name in a directory we hold.
            let mut st: nix::libc::stat = unsafe { std::mem::zeroed() };
            if unsafe {
                nix::libc::fstatat(
                    dir.as_raw_fd(),
                    c.as_ptr(),
                    &mut st,
                    nix::libc::AT_SYMLINK_NOFOLLOW,
                )
            } != 0
            {
                return Err(io::Error::last_os_error());
            }
            if owner.is_some_and(|o| o != st.st_uid) {
                return Ok(());
            }
            let mut buf = vec![0u8; 4096];
            // SAFETY: reads at most the buffer's length into it.
            let n = unsafe {
                nix::libc::readlinkat(
                    dir.as_raw_fd(),
                    c.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            buf.truncate(n as usize);
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&buf), to)?;
            let _ = std::os::unix::fs::lchown(to, Some(st.st_uid), Some(st.st_gid));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let st = fstat(&fd)?;
    if owner.is_some_and(|o| o != st.st_uid) {
        tracing::warn!(
            "not copying {}: owned by uid {}, not by the job's user",
            to.display(),
            st.st_uid
        );
        return Ok(());
    }
    let mode = st.st_mode & 0o1777;
    match st.st_mode & nix::libc::S_IFMT {
        nix::libc::S_IFDIR => {
            std::fs::DirBuilder::new().mode(0o700).create(to)?;
            for ent in entries(&fd)? {
                copy_at(&fd, &ent, &to.join(&ent), owner)?;
            }
            let _ = std::os::unix::fs::lchown(to, Some(st.st_uid), Some(st.st_gid));
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
        }
        nix::libc::S_IFREG => {
            let mut src = File::from(fd);
            let mut dst = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(to)?;
            io::copy(&mut src, &mut dst)?;
            nix::unistd::fchown(&dst, Some(st.st_uid.into()), Some(st.st_gid.into()))
                .map_err(io::Error::from)?;
            dst.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))?;
        }
        _ => tracing::warn!(
            "not copying {}: neither a regular file, a directory nor a symbolic link",
            to.display()
        ),
    }
    Ok(())
}

/// Opens a file for appending, creating it (0600) if needed.
pub(crate) fn open_append(path: &Path) -> Result<File, ExecError> {
    OpenOptions::new()
        .create(true)
        .mode(0o600)
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
