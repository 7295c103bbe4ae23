//! Opening a job user's files with that user's rights, from the (multi-threaded) agent.
//!
//! The kernel keeps credentials per thread; glibc's `seteuid` and friends (and nix's
//! wrappers of them) change every thread of the process at once. The shim, which is
//! single-threaded, may use them (`output::create_as`); the agent may not, since its
//! other threads would run as the user meanwhile. Here the calling thread alone takes
//! the user's effective uid, gid and groups through the raw system calls, opens, and
//! takes its own back; the process aborts if it cannot, so that nothing more ever runs
//! with the user's credentials half applied. The kernel then checks every component of
//! the path exactly as it would for the user: what the user cannot read, the agent does
//! not open for them, and there is nothing to check first and use later.
//!
//! Files are opened `O_NONBLOCK` (a FIFO or a device without a peer does not block the
//! agent) and `O_NOCTTY`; `open_regular` takes only a regular file, checked on the open
//! descriptor.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;

/// The credentials a job's files are opened with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUser {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

fn check(rc: libc::c_long) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `setresuid`/`setresgid` (`call`) of this thread alone, to effective id `id`.
fn set_effective(call: libc::c_long, id: u32) -> io::Result<()> {
    let keep = -1 as libc::c_long;
    // SAFETY: a plain system call on this thread's credentials.
    check(unsafe { libc::syscall(call, keep, libc::c_long::from(id), keep) })
}

/// `setgroups` of this thread alone.
fn set_groups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: a valid pointer to `groups.len()` ids.
    check(unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) })
}

/// Runs `f` on this thread with `who`'s effective credentials (where the agent is
/// root; otherwise with its own, which are then no more than the user's rights on a
/// test machine).
pub(crate) fn run_as<T>(who: Option<&ImageUser>, f: impl FnOnce() -> T) -> io::Result<T> {
    let Some(who) = who.filter(|_| nix::unistd::geteuid().is_root()) else {
        return Ok(f());
    };
    let groups = nix::unistd::getgroups()?;
    let egid = nix::unistd::getegid().as_raw();
    struct Back {
        egid: u32,
        groups: Vec<libc::gid_t>,
    }
    impl Drop for Back {
        fn drop(&mut self) {
            let back = set_effective(libc::SYS_setresuid, 0)
                .and_then(|()| set_effective(libc::SYS_setresgid, self.egid))
                .and_then(|()| set_groups(&self.groups));
            if let Err(e) = back {
                eprintln!("tranche-agent: cannot return to the agent's credentials: {e}");
                std::process::abort();
            }
        }
    }
    let back = Back {
        egid,
        groups: groups.iter().map(|g| g.as_raw()).collect(),
    };
    // Groups and gid first, while still root; the uid last (`back` undoes them in the
    // reverse order, whichever step failed).
    set_groups(&who.groups)?;
    set_effective(libc::SYS_setresgid, who.gid)?;
    set_effective(libc::SYS_setresuid, who.uid)?;
    let out = f();
    drop(back);
    Ok(out)
}

/// Opens `path` (relative to `dir` where given) read-only, with `who`'s rights.
/// `nofollow`: a symlink as the last component is refused (`ELOOP`).
pub(crate) fn open(
    who: Option<&ImageUser>,
    dir: Option<&File>,
    path: &Path,
    nofollow: bool,
) -> io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the path"))?;
    let mut flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    if nofollow {
        flags |= libc::O_NOFOLLOW;
    }
    let at = dir.map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    let fd = run_as(who, || {
        // SAFETY: a NUL-terminated path and a valid (or AT_FDCWD) directory fd.
        let fd = unsafe { libc::openat(at, c.as_ptr(), flags) };
        if fd < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(fd)
        }
    })??;
    // SAFETY: a descriptor just opened, owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Opens a regular file as [`open`] does, never following a symlink at its end:
/// anything else (a directory, FIFO, socket, device, symlink) is refused, and the file
/// reads blocking from then on.
pub(crate) fn open_regular(
    who: Option<&ImageUser>,
    dir: Option<&File>,
    path: &Path,
) -> io::Result<File> {
    let f = open(who, dir, path, true).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            io::Error::other("is a symbolic link (refused: a blob or index must be a regular file)")
        } else {
            e
        }
    })?;
    let kind = f.metadata()?.file_type();
    if !kind.is_file() {
        return Err(io::Error::other(format!(
            "is {} (refused: only a regular file is read)",
            kind_name(&kind)
        )));
    }
    blocking(f)
}

/// `f` without `O_NONBLOCK`.
pub(crate) fn blocking(f: File) -> io::Result<File> {
    let flags = nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) & !nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&f, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    Ok(f)
}

/// "a directory", "a FIFO", ... for messages.
pub(crate) fn kind_name(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}
