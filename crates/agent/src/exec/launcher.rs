//! The shim launcher: one small single-threaded process per agent that forks each
//! attempt's shim, so that starting an attempt costs a fork of a small process rather
//! than a fresh exec of the agent's binary (its loading, relocation and, on a virtual
//! machine, glibc's CPU detection, whose `cpuid` instructions each trap to the
//! hypervisor).
//!
//! The agent starts `tranche-agent shim-launcher --spool <spool>` (a hidden subcommand)
//! from the binary the shims run from, on the first attempt it starts, with one end of
//! a Unix socket pair as its standard input. Each request is an attempt directory
//! (a 4-byte little-endian length, then the path's bytes); the launcher forks, the
//! child becomes that attempt's shim exactly as `tranche-agent shim --dir <dir>` would
//! (in a process group of its own, standard input on `/dev/null`, output to the
//! attempt's `shim.log`, and named `tranche-shim`), and once the child's first process
//! has recorded `shim.pid` and exited the launcher answers with one byte, its exit code
//! (0: the shim runs). The launcher exits when the agent's end closes (the agent
//! stopped or was killed); the shims it forked are nobody's children but init's (or a
//! subreaper's) and go on.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use nix::libc;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::ForkResult;

use super::fsutil;
use super::shim::run_shim;
use super::spool::files;

/// The longest attempt directory path a request may carry.
const MAX_PATH: usize = 64 * 1024;

/// The name a forked shim takes (`comm`, at most 15 bytes), shown by `ps` and `top`.
const SHIM_NAME: &[u8] = b"tranche-shim\0";

/// Entry point of the hidden `tranche-agent shim-launcher` subcommand: serves the
/// agent's requests on standard input until it closes. Must be called before any thread
/// is started (each request forks, and the child goes on running Rust code).
pub fn launcher_main() -> ExitCode {
    // SAFETY: standard input is the agent's socket, owned by nothing else here.
    let sock = unsafe { UnixStream::from_raw_fd(0) };
    let mut reader = BufReader::new(&sock);
    loop {
        let mut len = [0u8; 4];
        match reader.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tranche-agent shim-launcher: reading a request: {e}");
                return ExitCode::FAILURE;
            }
        }
        let n = u32::from_le_bytes(len) as usize;
        if n == 0 || n > MAX_PATH {
            eprintln!(
                "tranche-agent shim-launcher: a request of {n} bytes (1 to {MAX_PATH} allowed)"
            );
            return ExitCode::FAILURE;
        }
        let mut raw = vec![0u8; n];
        if let Err(e) = reader.read_exact(&mut raw) {
            eprintln!("tranche-agent shim-launcher: reading a request: {e}");
            return ExitCode::FAILURE;
        }
        let dir = PathBuf::from(OsString::from_vec(raw));
        let code = fork_shim(&dir);
        if let Err(e) = (&sock).write_all(&[code]) {
            eprintln!("tranche-agent shim-launcher: answering the agent: {e}");
            return ExitCode::FAILURE;
        }
    }
}

/// Forks the shim of the attempt in `dir` and waits for its first process: its exit
/// code, or 1 when it could not be forked or waited for.
fn fork_shim(dir: &Path) -> u8 {
    // SAFETY: this process is single-threaded; the child goes on running ordinary Rust
    // code, as a shim started by exec would.
    match unsafe { nix::unistd::fork() } {
        Err(e) => {
            let _ = fsutil::write_atomic(
                &dir.join(files::LAUNCH_ERROR),
                format!("the shim launcher could not fork: {e}\n").as_bytes(),
            );
            1
        }
        Ok(ForkResult::Child) => {
            let ok = become_shim(dir) && run_shim(dir);
            // SAFETY: ends this process without running the launcher's exit handlers
            // (there are none to run for a shim); `_exit` is always safe to call.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        Ok(ForkResult::Parent { child }) => loop {
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, code)) => return code.clamp(0, 255) as u8,
                Ok(WaitStatus::Signaled(..)) => return 1,
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    eprintln!("tranche-agent shim-launcher: waiting for a shim: {e}");
                    return 1;
                }
            }
        },
    }
}

/// Gives the forked child what `tranche-agent shim` started by the agent had: a process
/// group of its own, standard input on `/dev/null`, standard output and error on the
/// attempt's `shim.log`, no descriptor of the agent's socket; and the shim's name.
fn become_shim(dir: &Path) -> bool {
    let log = match fsutil::open_append(&dir.join(files::SHIM_LOG)) {
        Ok(f) => f,
        Err(e) => {
            let _ = fsutil::write_atomic(
                &dir.join(files::LAUNCH_ERROR),
                format!("the shim could not open its log: {e}\n").as_bytes(),
            );
            return false;
        }
    };
    let null = match File::open("/dev/null") {
        Ok(f) => f,
        Err(_) => return false,
    };
    // SAFETY: plain system calls on descriptors this process owns; the socket's
    // descriptor (0) is replaced by /dev/null, so the shim keeps no end of it open and
    // the launcher still sees the agent go.
    unsafe {
        if libc::dup2(null.as_raw_fd(), 0) < 0
            || libc::dup2(log.as_raw_fd(), 1) < 0
            || libc::dup2(log.as_raw_fd(), 2) < 0
        {
            return false;
        }
        libc::setpgid(0, 0);
        libc::prctl(
            libc::PR_SET_NAME,
            SHIM_NAME.as_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    set_command_line(&format!("tranche-shim {}", dir.display()));
    true
}

/// Rewrites this process's command line (what `ps` shows and `/proc/<pid>/cmdline`
/// holds) to `text`, cut to the room the original arguments took: a forked shim would
/// otherwise show the launcher's. The arguments' memory is this process's own (its
/// stack); nothing reads it after the fork.
fn set_command_line(text: &str) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the command name (which may hold spaces), from the state (field 3):
    // arg_start and arg_end are fields 48 and 49.
    let Some(close) = stat.rfind(')') else { return };
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    let (Some(start), Some(end)) = (
        fields.get(45).and_then(|f| f.parse::<usize>().ok()),
        fields.get(46).and_then(|f| f.parse::<usize>().ok()),
    ) else {
        return;
    };
    if end <= start + 1 {
        return;
    }
    let room = end - start;
    let mut bytes = vec![0u8; room];
    let n = text.len().min(room - 1);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    // SAFETY: [arg_start, arg_end) is this process's argument strings, in its own
    // writable stack, and this single-threaded process reads them no more.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), start as *mut u8, room) };
}

/// The agent's side: the launcher process and the socket to it.
#[derive(Debug)]
pub(super) struct Launcher {
    child: Child,
    sock: UnixStream,
}

/// How a request to the launcher went.
pub(super) enum Launched {
    /// The shim's first process recorded `shim.pid` and exited with this code (0: the
    /// shim runs).
    Code(u8),
    /// The request was sent but no answer came: the launcher died or hung after
    /// reading it, so a shim may or may not have been forked.
    Unanswered(io::Error),
}

impl Launcher {
    /// Starts `bin shim-launcher --spool <spool>`, its errors going to the agent's.
    pub(super) fn start(bin: &Path, spool: &Path) -> io::Result<Launcher> {
        let (ours, theirs) = UnixStream::pair()?;
        // A shim's first process takes well under a second; a launcher that does not
        // answer for this long is taken as hung.
        ours.set_read_timeout(Some(Duration::from_secs(30)))?;
        let child = Command::new(bin)
            .arg("shim-launcher")
            .arg("--spool")
            .arg(spool)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            // Out of the agent's process group: a Ctrl-C to the agent's terminal does
            // not reach it (it ends when the agent's end of the socket closes).
            .process_group(0)
            .spawn()?;
        Ok(Launcher { child, sock: ours })
    }

    /// Asks for the shim of the attempt in `dir`. `Err` when the request could not be
    /// sent (nothing was forked: another launcher may be asked).
    pub(super) fn launch(&mut self, dir: &Path) -> io::Result<Launched> {
        let path = dir.as_os_str().as_bytes();
        if path.is_empty() || path.len() > MAX_PATH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("attempt directory path of {} bytes", path.len()),
            ));
        }
        let mut req = Vec::with_capacity(4 + path.len());
        req.extend_from_slice(&(path.len() as u32).to_le_bytes());
        req.extend_from_slice(path);
        self.sock.write_all(&req)?;
        let mut code = [0u8; 1];
        Ok(match self.sock.read_exact(&mut code) {
            Ok(()) => Launched::Code(code[0]),
            Err(e) => Launched::Unanswered(e),
        })
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        // The launcher ends when its socket closes; a hung one is killed.
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
