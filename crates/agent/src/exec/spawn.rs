//! How the shim starts a process job: `clone(CLONE_VM | CLONE_VFORK)`, as `posix_spawn`
//! does, rather than a `fork`. The child runs on a stack of its own in the shim's
//! memory until it execs, and the shim waits meanwhile; nothing of the shim's address
//! space is copied, faulted in again, or torn down by the exec. A fork costs that for
//! every job, which on a node starting hundreds of short jobs a second is much of what
//! starting one costs.
//!
//! Between the clone and the exec the child makes system calls only (no allocation, no
//! lock, nothing of glibc that keeps state): it takes its standard streams, its own
//! process group, every signal's default disposition (the shim, a Rust program, ignores
//! SIGPIPE) and an empty signal mask, writes its pid to each of its cgroups'
//! `cgroup.procs`, drops to the job's groups, gid and uid (the raw system calls: glibc's
//! would also act on the shim's threads, whose memory this is), sets
//! `PR_SET_NO_NEW_PRIVS` unless the node lets the job's share run setuid programs,
//! enters its directory,
//! and execs the command, looked up on the job's own `PATH` as `execvp` does (without
//! its fallback of running a file that is no executable with `/bin/sh`). An error on
//! that way is sent back on a close-on-exec pipe, and the child exits.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};

use nix::fcntl::OFlag;
use nix::libc::{self, c_char, c_int, c_void};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// What a job's process is started with.
pub(super) struct Launch<'a> {
    /// argv; the first is the program, looked up on the environment's `PATH` when it
    /// has no `/`.
    pub argv: &'a [String],
    /// The whole environment.
    pub env: &'a [(String, String)],
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// Open `cgroup.procs` files the child writes its pid to.
    pub cgroup_procs: &'a [RawFd],
    /// The uid and gid to run as, with `groups`; `None`: as the shim.
    pub user: Option<(u32, u32)>,
    pub groups: &'a [u32],
    /// Entered after the uid is dropped.
    pub cwd: &'a str,
    /// Sets `PR_SET_NO_NEW_PRIVS` before the exec: no setuid/setgid bit or file
    /// capability of what the job executes raises its privileges.
    pub no_new_privs: bool,
}

/// The child's stack. The child does little, in frames of its own.
const STACK: usize = 256 * 1024;

/// Everything the child reads, made before the clone.
struct Child<'a> {
    launch: &'a Launch<'a>,
    programs: Vec<CString>,
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    cwd: CString,
    err: RawFd,
}

fn cstring(what: &str, s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the {what} has a NUL byte"),
        )
    })
}

/// Starts the job's process; its pid. The process is the caller's child: reap it.
pub(super) fn spawn(l: &Launch) -> io::Result<i32> {
    let program = l
        .argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the command is empty"))?;
    let programs: Vec<CString> = if program.contains('/') {
        vec![cstring("command", program)?]
    } else {
        let path = l
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or("", |(_, v)| v);
        path.split(':')
            .map(|d| {
                let d = if d.is_empty() { "." } else { d };
                cstring("command", &format!("{}/{program}", d.trim_end_matches('/')))
            })
            .collect::<io::Result<_>>()?
    };
    let args: Vec<CString> = l
        .argv
        .iter()
        .map(|a| cstring("command", a))
        .collect::<io::Result<_>>()?;
    let env: Vec<CString> = l
        .env
        .iter()
        .map(|(k, v)| cstring("environment", &format!("{k}={v}")))
        .collect::<io::Result<_>>()?;
    let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());

    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let child = Child {
        launch: l,
        programs,
        argv,
        envp,
        cwd: cstring("working directory", l.cwd)?,
        err: write.as_raw_fd(),
    };
    let result = clone_child(&child);
    // The child no longer has the write end (exec or exit): closed here, a read of the
    // other ends at once.
    drop(write);
    let pid = result?;
    let mut sent = Vec::new();
    File::from(read).read_to_end(&mut sent)?;
    if sent.is_empty() {
        return Ok(pid);
    }
    // The child failed before its exec, and has exited: reap it.
    while waitpid(Pid::from_raw(pid), None) == Err(nix::errno::Errno::EINTR) {}
    Err(match <[u8; 4]>::try_from(sent.as_slice()) {
        Ok(b) => io::Error::from_raw_os_error(i32::from_le_bytes(b)),
        Err(_) => io::Error::other("the job's process failed before its exec"),
    })
}

/// The clone itself, with every signal blocked across it (the child unblocks them once
/// every disposition is the default), so that no handler runs in the child on the shim's
/// memory.
fn clone_child(child: &Child<'_>) -> io::Result<i32> {
    // SAFETY: an anonymous private mapping for the child's stack, its lowest page made a
    // guard; unmapped below once the child has exec'd or exited.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the mapping's first page, ours.
    unsafe { libc::mprotect(stack, 4096, libc::PROT_NONE) };
    // SAFETY: sigset_t is plain data; filled by sigfillset.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigsets; this thread's mask is restored below.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: the child runs `child_main` on the mapping's top (16-byte aligned) with
    // `child`, which outlives it: with CLONE_VFORK this thread is suspended until the
    // child has exec'd or exited.
    let pid = unsafe {
        let top = (stack as *mut u8).add(STACK) as *mut c_void;
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            child as *const Child<'_> as *mut c_void,
        )
    };
    let err = io::Error::last_os_error();
    // SAFETY: restoring this thread's mask; unmapping the stack no one runs on now.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::munmap(stack, STACK);
    }
    if pid < 0 {
        Err(err)
    } else {
        Ok(pid)
    }
}

/// The kernel's `struct sigaction` for `rt_sigaction` (handler, flags, restorer, a
/// 64-bit mask), which is not glibc's.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The child, between the clone and the exec: system calls only.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Child` the parent keeps alive while it is suspended.
    let c = unsafe { &*(arg as *const Child<'_>) };
    let l = c.launch;
    // SAFETY: every call below is a system call on values prepared before the clone.
    unsafe {
        let fail = |errno: c_int| -> c_int {
            let b = errno.to_le_bytes();
            libc::write(c.err, b.as_ptr().cast(), b.len());
            libc::_exit(127)
        };
        let errno = || *libc::__errno_location();
        for (target, fd) in [l.stdin, l.stdout, l.stderr].into_iter().enumerate() {
            let target = target as c_int;
            if fd == target {
                // Already there; it only needs to survive the exec.
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return fail(errno());
                }
            } else if libc::dup2(fd, target) < 0 {
                return fail(errno());
            }
        }
        if libc::setpgid(0, 0) < 0 {
            return fail(errno());
        }
        // Every disposition back to the default: an ignored signal stays ignored
        // across an exec (the shim ignores SIGPIPE, and whatever started the agent
        // may have ignored others). The raw call, which glibc's own two real-time
        // signals do not refuse; SIGKILL and SIGSTOP refuse it, and keep their default.
        let dfl = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        for sig in 1..=64 {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &dfl as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        if !l.cgroup_procs.is_empty() {
            let pid = libc::syscall(libc::SYS_getpid) as u32;
            let mut buf = itoa::Buffer::new();
            let text = buf.format(pid).as_bytes();
            for &fd in l.cgroup_procs {
                if libc::write(fd, text.as_ptr().cast(), text.len()) < 0 {
                    return fail(errno());
                }
            }
        }
        if let Some((uid, gid)) = l.user {
            // The groups while still root, then the gid, then the uid.
            if libc::syscall(libc::SYS_setgroups, l.groups.len(), l.groups.as_ptr()) < 0
                || libc::syscall(libc::SYS_setgid, gid) < 0
                || libc::syscall(libc::SYS_setuid, uid) < 0
            {
                return fail(errno());
            }
        }
        if l.no_new_privs
            && libc::syscall(libc::SYS_prctl, libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0
        {
            return fail(errno());
        }
        // The usual umask, whatever the agent's own (its unit's is 0077).
        libc::syscall(libc::SYS_umask, 0o022);
        if libc::chdir(c.cwd.as_ptr()) != 0 {
            return fail(errno());
        }
        // As execvp: the first candidate that execs; EACCES from any of them is the
        // error where none does, else the last one's.
        let mut last = libc::ENOENT;
        let mut denied = false;
        for p in &c.programs {
            libc::syscall(
                libc::SYS_execve,
                p.as_ptr(),
                c.argv.as_ptr(),
                c.envp.as_ptr(),
            );
            last = errno();
            match last {
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                _ => break,
            }
        }
        fail(if denied { libc::EACCES } else { last })
    }
}
