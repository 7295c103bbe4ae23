//! The shim launcher: one small single-threaded process per agent that forks each
//! attempt's shim, so that starting an attempt costs a fork of a small process rather
//! than a fresh exec of the agent's binary (its loading, relocation and, on a virtual
//! machine, glibc's CPU detection, whose `cpuid` instructions each trap to the
//! hypervisor).
//!
//! The agent starts `tranche-agent shim-launcher --spool <spool>` (a hidden subcommand)
//! from the binary the shims run from, on the first attempt it starts, with one end of
//! a Unix socket pair as its standard input. Each request is an attempt directory
//! (a 4-byte little-endian length, then the path's bytes). The launcher forks and
//! answers at once with the child's pid and start time; the child, named
//! `tranche-shim`, with standard input on `/dev/null` and its output to the attempt's
//! `shim.log`, takes a session of its own, records itself in `shim.pid` and supervises
//! the attempt (see `shim`). Nothing but the fork and a read of the child's start time
//! is done between a request and its answer, so requests from many attempts started at
//! once do not queue behind each other's file writes.
//!
//! The shims are the launcher's children, and it reaps them as they end. It exits when
//! the agent's end of the socket closes (the agent stopped or was killed); its shims
//! go on, the children of init (or of a subreaper) from then on.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use nix::libc;
use nix::unistd::ForkResult;

use super::shim::run_shim;
use super::spool::files;
use super::{fsutil, procfs};

/// The longest attempt directory path a request may carry.
const MAX_PATH: usize = 64 * 1024;

/// The name a forked shim takes (`comm`, at most 15 bytes), shown by `ps` and `top`.
const SHIM_NAME: &[u8] = b"tranche-shim\0";

/// Entry point of the hidden `tranche-agent shim-launcher` subcommand: serves the
/// agent's requests on standard input until it closes. Must be called before any thread
/// is started (each request forks, and the child goes on running Rust code).
pub fn launcher_main() -> ExitCode {
    // SAFETY: standard input is the agent's socket, owned by nothing else here.
    let mut sock = unsafe { UnixStream::from_raw_fd(0) };
    loop {
        // The shims are this process's children: each one that has ended is reaped
        // between requests, and at least every second.
        reap();
        let mut p = libc::pollfd {
            fd: sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call.
        if unsafe { libc::poll(&mut p, 1, 1000) } <= 0 {
            continue;
        }
        let mut len = [0u8; 4];
        match sock.read_exact(&mut len) {
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
        if let Err(e) = sock.read_exact(&mut raw) {
            eprintln!("tranche-agent shim-launcher: reading a request: {e}");
            return ExitCode::FAILURE;
        }
        let dir = PathBuf::from(OsString::from_vec(raw));
        let answer = match fork_shim(&dir) {
            Some((pid, start)) => {
                let mut a = [0u8; ANSWER];
                a[1..5].copy_from_slice(&pid.to_le_bytes());
                a[5..].copy_from_slice(&start.to_le_bytes());
                a
            }
            None => [1u8; ANSWER],
        };
        if let Err(e) = sock.write_all(&answer) {
            eprintln!("tranche-agent shim-launcher: answering the agent: {e}");
            return ExitCode::FAILURE;
        }
    }
}

/// An answer's length: 0 (forked) or 1 (not), the shim's pid (4 bytes) and start time
/// (8 bytes, clock ticks after boot as `/proc/<pid>/stat` gives it), little-endian.
const ANSWER: usize = 13;

/// Reaps every child that has ended.
fn reap() {
    loop {
        // SAFETY: waitpid with a null status pointer only reaps.
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if r <= 0 {
            return;
        }
    }
}

/// Forks the shim of the attempt in `dir`: its pid and start time, or `None` (with
/// `launch_error` written) when it could not be forked.
fn fork_shim(dir: &Path) -> Option<(i32, u64)> {
    // SAFETY: this process is single-threaded; the child goes on running ordinary Rust
    // code, as a process started by exec would.
    match unsafe { nix::unistd::fork() } {
        Err(e) => {
            let _ = fsutil::write_atomic(
                &dir.join(files::LAUNCH_ERROR),
                format!("the shim launcher could not fork: {e}\n").as_bytes(),
            );
            None
        }
        Ok(ForkResult::Child) => {
            let ok = become_shim(dir) && run_shim(dir);
            // SAFETY: ends this process without running the launcher's exit handlers
            // (there are none to run for a shim); `_exit` is always safe to call.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        Ok(ForkResult::Parent { child }) => {
            // The child is not reaped before the next request, so its entry is there.
            let pid = child.as_raw();
            let start = procfs::stat(pid).map(|s| s.starttime).unwrap_or(0);
            Some((pid, start))
        }
    }
}

/// Gives the forked child standard input on `/dev/null`, standard output and error on
/// the attempt's `shim.log`, no descriptor of the agent's socket, and the shim's name.
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
    let Some((start, end)) = procfs::own_arg_range() else {
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

/// The agent's side: the launcher process, the socket to it, and a thread that hands
/// each answer to whoever waits for it. Requests are sent one after another (the
/// executors hold a lock while sending) without waiting for the answers, which come
/// back in the same order: attempts started at once are forked in one go.
#[derive(Debug)]
pub(super) struct Launcher {
    child: Child,
    sock: UnixStream,
    waiting: Waiting,
    /// Set once the launcher is known to be gone (or hung): a new one is started.
    gone: Arc<AtomicBool>,
    answers: Option<std::thread::JoinHandle<()>>,
}

/// Who waits for the next answers, in the order the requests were sent.
type Waiting = Arc<Mutex<VecDeque<mpsc::SyncSender<[u8; ANSWER]>>>>;

/// How a request to the launcher went.
pub(super) enum Launched {
    /// The shim was forked: its pid and start time.
    Forked { pid: i32, start: u64 },
    /// It could not be (the attempt's `launch_error` says why).
    NotForked,
    /// The request was sent but no answer came: the launcher died or hung after
    /// reading it, so a shim may or may not have been forked.
    Unanswered(String),
}

/// A request sent: its answer comes through `answer`.
pub(super) struct Sent {
    rx: mpsc::Receiver<[u8; ANSWER]>,
    gone: Arc<AtomicBool>,
}

/// How long an answer may take: forking takes milliseconds, so a launcher that does
/// not answer for this long is taken as hung (and replaced).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

impl Sent {
    /// Waits for the answer.
    pub(super) fn answer(self) -> Launched {
        match self.rx.recv_timeout(ANSWER_TIMEOUT) {
            Ok(a) if a[0] == 0 => Launched::Forked {
                pid: i32::from_le_bytes(a[1..5].try_into().expect("4 bytes")),
                start: u64::from_le_bytes(a[5..].try_into().expect("8 bytes")),
            },
            Ok(_) => Launched::NotForked,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.gone.store(true, Ordering::Release);
                Launched::Unanswered(format!("no answer in {} s", ANSWER_TIMEOUT.as_secs()))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Launched::Unanswered("the launcher went away".into())
            }
        }
    }
}

impl Launcher {
    /// Starts `bin shim-launcher --spool <spool>`, its errors going to the agent's.
    pub(super) fn start(bin: &Path, spool: &Path) -> io::Result<Launcher> {
        let (ours, theirs) = UnixStream::pair()?;
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
        let waiting: Waiting = Arc::default();
        let gone = Arc::new(AtomicBool::new(false));
        let mut reader = ours.try_clone()?;
        let answers = {
            let waiting = waiting.clone();
            let gone = gone.clone();
            std::thread::Builder::new()
                .name("shim-launcher".into())
                .spawn(move || loop {
                    let mut a = [0u8; ANSWER];
                    if reader.read_exact(&mut a).is_err() {
                        // Gone: whoever still waits learns it (their senders drop).
                        gone.store(true, Ordering::Release);
                        waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
                        return;
                    }
                    let next = waiting
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .pop_front();
                    if let Some(tx) = next {
                        let _ = tx.send(a);
                    }
                })?
        };
        Ok(Launcher {
            child,
            sock: ours,
            waiting,
            gone,
            answers: Some(answers),
        })
    }

    /// Whether this launcher is gone (or hung) and a new one must be started.
    pub(super) fn gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Asks for the shim of the attempt in `dir`. `Err` when the request could not be
    /// sent (nothing was forked: another launcher may be asked).
    pub(super) fn send(&mut self, dir: &Path) -> io::Result<Sent> {
        let path = dir.as_os_str().as_bytes();
        if path.is_empty() || path.len() > MAX_PATH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("attempt directory path of {} bytes", path.len()),
            ));
        }
        if self.gone() {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the shim launcher is gone",
            ));
        }
        let mut req = Vec::with_capacity(4 + path.len());
        req.extend_from_slice(&(path.len() as u32).to_le_bytes());
        req.extend_from_slice(path);
        let (tx, rx) = mpsc::sync_channel(1);
        // Queued before the request goes, so that its answer finds it.
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(tx);
        if let Err(e) = self.sock.write_all(&req) {
            self.gone.store(true, Ordering::Release);
            self.waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_back();
            return Err(e);
        }
        Ok(Sent {
            rx,
            gone: self.gone.clone(),
        })
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        // The launcher ends when its socket closes; a hung one is killed.
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        let mut ended = false;
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                ended = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !ended {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(t) = self.answers.take() {
            let _ = t.join();
        }
    }
}
