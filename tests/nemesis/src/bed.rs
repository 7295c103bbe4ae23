//! The test bed: Tranche on hosts instead of ports. As root, one network namespace per
//! host (3 controllers, N agents, one client host), each with its own address in
//! 10.77.0.0/24 on an `eth0` whose other end hangs on one bridge; the bridge itself and
//! those other ends live in a namespace of their own (the switch), so the machine's own
//! network namespace gains no interface, address, route or rule: nothing can leave the
//! bed and nothing outside can reach it. The real `tranched` and `tranche-agent` run in
//! the hosts (`ip netns exec`) with certificates issued for those addresses.
//!
//! Every name carries the run's tag, `trb-<pid>`: namespaces `trb-<pid>-c1`,
//! `trb-<pid>-n0`, `trb-<pid>-cl` (client), `trb-<pid>-sw` (switch), and the bed's
//! directory `trb-<pid>-XXXXXX` under the temporary directory. Dropping the [`Bed`]
//! (also while a panic unwinds) kills every process in its namespaces and deletes them;
//! [`sweep`] removes what runs that died without that (SIGKILL) left behind.
//!
//! Network faults are nft rules in a table `inet trb` of each host: packets from the
//! hosts a host must not hear are dropped on its input hook, all of them or a random
//! share ([`Bed::set_losses`]; the kernel may lack netem, nft's `numgen` needs nothing).
//! Since every host is a fresh namespace of this run's, the daemons' ports are fixed
//! (no other process can hold them).
//!
//! Delay and reordering: the kernel may lack netem (and nft its `queue` statement), so
//! a delayed host's iptables rules (Debian's `iptables`, through the xtables NFQUEUE
//! target) send what its `eth0` sends and receives to an NFQUEUE, and a thread of this
//! process, in that host's namespace, holds each packet for a delay of its own before
//! accepting it, so that packets overtake each other ([`Bed::delay`]).
//!
//! Each controller's data dir can sit on a small tmpfs of its own ([`Bed::fill`] fills
//! it). Where libfaketime is installed, each controller and agent runs with it preloaded
//! and a clock file of its own, so that its wall clock can be set minutes off
//! ([`Bed::skew`], [`Bed::skew_agent`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde::Serialize;

use tranche_client::Client;
use tranche_tls::{Role, TlsFiles};

/// The bed's network: 10.77.0.0/24, private to its namespaces.
const NET: [u8; 3] = [10, 77, 0];
const PREFIX: u8 = 24;
const PEER_PORT: u16 = 7000;
const CLIENT_PORT: u16 = 7001;
const HTTP_PORT: u16 = 7080;
const LOGS_PORT: u16 = 7102;
/// The tag every run's names start with.
pub const TAG_PREFIX: &str = "trb-";
/// In a bed's directory: it was kept on purpose (`--keep`, or a failed run).
const KEPT: &str = "KEPT";
/// The most agents a bed holds (their addresses are .21 onwards).
pub const MAX_AGENTS: usize = 200;
/// The NFQUEUE a delayed host's packets wait in (each host's namespace has its own).
const DELAY_QUEUE: u16 = 7;

/// Packets from `from` to `to` are lost: `percent` of them, at random (100: all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loss {
    pub from: Ipv4Addr,
    pub to: Ipv4Addr,
    pub percent: u8,
}

/// One host: a network namespace and its address.
#[derive(Debug, Clone)]
pub struct Host {
    /// Its short name: `c1`, `n0`, `cl`.
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    pub addr: Ipv4Addr,
}

pub struct BedController {
    pub host: Host,
    pub id: u64,
    pub config: PathBuf,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

impl BedController {
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from((self.host.addr, CLIENT_PORT))
    }
}

pub struct BedAgent {
    pub host: Host,
    pub node: String,
    pub config: PathBuf,
    pub spool: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

/// What a bed runs.
#[derive(Debug, Clone)]
pub struct BedOptions {
    pub agents: usize,
    pub tranched: PathBuf,
    pub agent_bin: PathBuf,
    /// Top-level settings and tables for every controller's config (before its
    /// `[[peers]]` and `[tls]`).
    pub controller_extra: String,
    /// Top-level settings for every agent's config.
    pub agent_extra: String,
    /// Each agent's fake GPUs, e.g. "4 x h100".
    pub gpus: String,
    /// `TRANCHE_LOG` of the daemons.
    pub log_filter: String,
    /// Keep the bed's directory when it is dropped.
    pub keep: bool,
    /// Each controller's data dir on a file system of its own of this many MiB (a
    /// tmpfs), which [`Bed::fill`] can fill.
    pub disk_mib: Option<u64>,
    /// Each agent's spool on a file system of its own of this many MiB (a tmpfs), which
    /// [`Bed::fill_agent`] can fill. Its GPU ledger is a link to a file beside the
    /// bed's configs, off that file system, so that a full spool cannot cut the
    /// checker's evidence short (on a node, the shims log the lines they could not
    /// write and go on).
    pub agent_disk_mib: Option<u64>,
    /// libfaketime (its multi-threaded build): when set, each controller and agent runs
    /// with it, its wall clock offset by what its clock file says ([`Bed::skew`],
    /// [`Bed::skew_agent`]).
    pub faketime: Option<PathBuf>,
}

pub struct Bed {
    /// `trb-<pid>`.
    pub tag: String,
    pub dir: PathBuf,
    pub certs: PathBuf,
    pub switch: String,
    pub client: Host,
    pub controllers: Vec<BedController>,
    pub agents: Vec<BedAgent>,
    /// Hosts of a bare bed ([`Bed::bare`]): a namespace and an address each, nothing
    /// started in them.
    pub extra: Vec<Host>,
    /// Keep the directory when the bed is dropped (from [`BedOptions::keep`]).
    pub keep: bool,
    opts: BedOptions,
    /// The namespaces made so far, in order (teardown deletes them in reverse).
    made: Vec<String>,
    /// The sources each host loses, by namespace and share in percent (what its nft
    /// input chain holds).
    drops: Mutex<BTreeMap<String, BTreeMap<u8, BTreeSet<Ipv4Addr>>>>,
    /// This process's own network namespace, to come back to.
    home: File,
    /// The file systems mounted for the controllers' data dirs.
    mounts: Vec<PathBuf>,
    /// The hosts whose packets are delayed now, by namespace.
    delays: Mutex<BTreeMap<String, Delayer>>,
}

/// What one delay did to a host's packets.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DelayStats {
    /// Packets held.
    pub packets: u64,
    /// Of those, how many left after a packet that came after them.
    pub reordered: u64,
    /// The longest a packet was held, in ms (the heal releases what is left at once).
    pub max_held_ms: u64,
}

/// A host's packets held in its NFQUEUE by a thread of this process.
struct Delayer {
    ns: String,
    /// The comment its rules carry.
    comment: String,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<DelayStats, String>>,
}

impl Delayer {
    /// Binds the queue in namespace `ns` (a thread of its own reads it), then adds the
    /// rules that send the packets of its `eth0` there, commented `comment`.
    fn start(
        ns: &str,
        comment: &str,
        ms: std::ops::RangeInclusive<u64>,
    ) -> Result<Delayer, String> {
        if find_iptables().is_none() {
            return Err("a delay needs iptables (Debian package iptables)".into());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = {
            let (ns, stop) = (ns.to_string(), stop.clone());
            std::thread::Builder::new()
                .name(format!("delay-{ns}"))
                .spawn(move || delay_loop(&ns, ms, &stop, tx))
                .map_err(|e| format!("a delay thread: {e}"))?
        };
        let bound = rx
            .recv()
            .unwrap_or_else(|_| Err("the delay thread ended".into()));
        let d = Delayer {
            ns: ns.to_string(),
            comment: comment.to_string(),
            stop,
            thread,
        };
        if let Err(e) = bound {
            let _ = d.thread.join();
            return Err(e);
        }
        // The queue is bound before any packet is sent to it.
        let mut added: Vec<Vec<String>> = Vec::new();
        for rule in delay_rules(comment) {
            if let Err(e) = iptables(ns, "-A", &rule) {
                for r in added {
                    let _ = iptables(ns, "-D", &r);
                }
                let _ = d.join();
                return Err(e);
            }
            added.push(rule);
        }
        Ok(d)
    }

    /// Ends the delay: its rules go, then every packet still held is let through and
    /// the queue unbound. What it did.
    fn end(self) -> Result<DelayStats, String> {
        let mut res = Ok(());
        for rule in delay_rules(&self.comment) {
            if let Err(e) = iptables(&self.ns, "-D", &rule) {
                res = Err(e);
            }
        }
        res.and(self.join())
    }

    fn join(self) -> Result<DelayStats, String> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .unwrap_or_else(|_| Err("the delay thread panicked".into()))
    }
}

/// `iptables` (Debian package `iptables`), which the delay's NFQUEUE rules need.
pub fn find_iptables() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("iptables"))
        .find(|p| p.is_file())
}

/// The iptables rules (`-A` arguments after the chain's name) that send what a host's
/// `eth0` receives and sends to its delay queue. `comment` names the run
/// (`trb-<pid>-delay`), so that a rule left anywhere is found and swept.
fn delay_rules(comment: &str) -> [Vec<String>; 2] {
    let q = DELAY_QUEUE.to_string();
    let rule = |chain: &str, dir: &str| {
        [
            chain,
            dir,
            "eth0",
            "-m",
            "comment",
            "--comment",
            comment,
            "-j",
            "NFQUEUE",
            "--queue-num",
            &q,
            "--queue-bypass",
        ]
        .map(String::from)
        .to_vec()
    };
    [rule("INPUT", "-i"), rule("OUTPUT", "-o")]
}

/// Runs `iptables -w <op> <rule>` in namespace `ns`.
fn iptables(ns: &str, op: &str, rule: &[String]) -> Result<String, String> {
    let mut args = vec!["netns", "exec", ns, "iptables", "-w", op];
    args.extend(rule.iter().map(String::as_str));
    sh("ip", &args)
}

/// The delay's loop, on a thread of its own in namespace `ns`: binds the host's
/// queue (`ready` says whether it could), then holds each packet for a delay drawn
/// from `ms` and accepts it when that has passed. Once `stop` is set (after the rules
/// are gone) it accepts everything still held and unbinds the queue.
fn delay_loop(
    ns: &str,
    ms: std::ops::RangeInclusive<u64>,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Result<DelayStats, String> {
    let setup = || -> Result<nfq::Queue, String> {
        let f = File::open(format!("/run/netns/{ns}")).map_err(|e| format!("{ns}: {e}"))?;
        setns(&f).map_err(|e| format!("entering {ns}: {e}"))?;
        let mut q = nfq::Queue::open().map_err(|e| format!("an NFQUEUE socket in {ns}: {e}"))?;
        q.bind(DELAY_QUEUE)
            .map_err(|e| format!("binding NFQUEUE {DELAY_QUEUE} in {ns}: {e}"))?;
        // The verdict needs the packet's id only; a full queue lets packets through.
        q.set_copy_range(DELAY_QUEUE, 64)
            .and_then(|()| q.set_queue_max_len(DELAY_QUEUE, 8192))
            .and_then(|()| q.set_fail_open(DELAY_QUEUE, true))
            .map_err(|e| format!("NFQUEUE {DELAY_QUEUE} in {ns}: {e}"))?;
        q.set_nonblocking(true);
        Ok(q)
    };
    let mut q = match setup() {
        Ok(q) => {
            let _ = ready.send(Ok(()));
            q
        }
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let mut rng = rand::rngs::StdRng::from_entropy();
    let mut held: BTreeMap<(Instant, u64), (Instant, nfq::Message)> = BTreeMap::new();
    let mut stats = DelayStats::default();
    let (mut seq, mut released_after) = (0u64, 0u64);
    let mut failure = None;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        loop {
            match q.recv() {
                Ok(m) => {
                    seq += 1;
                    stats.packets += 1;
                    let now = Instant::now();
                    let d = Duration::from_millis(rng.gen_range(ms.clone()));
                    held.insert((now + d, seq), (now, m));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    failure = Some(format!("NFQUEUE in {ns}: {e}"));
                    break;
                }
            }
        }
        let now = Instant::now();
        let all = stopping || failure.is_some();
        while let Some(entry) = held.first_entry() {
            if !all && entry.key().0 > now {
                break;
            }
            let ((_, n), (came, mut m)) = entry.remove_entry();
            if n < released_after {
                stats.reordered += 1;
            }
            released_after = released_after.max(n);
            stats.max_held_ms = stats.max_held_ms.max(came.elapsed().as_millis() as u64);
            m.set_verdict(nfq::Verdict::Accept);
            if let Err(e) = q.verdict(m) {
                failure.get_or_insert(format!("a verdict in {ns}: {e}"));
            }
        }
        if all {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = q.unbind(DELAY_QUEUE);
    match failure {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Rules that carry a bed's comment (`trb-<pid>-delay`) in this process's network
/// namespace, as `iptables-save` lists them (`-A CHAIN ...`), with the run's pid.
fn bed_rules() -> Vec<(String, i32)> {
    if find_iptables().is_none() {
        return Vec::new();
    }
    let text = sh("iptables-save", &[]).unwrap_or_default();
    rules_of(&text)
}

/// The rules of an `iptables-save` listing that carry a bed's comment, with its run.
fn rules_of(save: &str) -> Vec<(String, i32)> {
    save.lines()
        .filter(|l| l.starts_with("-A "))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "--comment")?;
            let c = words.next()?.trim_matches('"');
            Some((l.to_string(), owner(c)?))
        })
        .collect()
}

fn addr(last: usize) -> Ipv4Addr {
    Ipv4Addr::new(NET[0], NET[1], NET[2], last as u8)
}

/// Runs a command to its end; its failure names the command and what it printed.
fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `nft -f -` in namespace `ns` with `script` on its stdin.
fn nft(ns: &str, script: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft in {ns}: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())
        .map_err(|e| format!("nft in {ns}: {e}"))?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("nft in {ns}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nft in {ns} failed: {}\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Why a bed cannot be made here, if it cannot: it needs root, `ip` and `nft`.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("the test bed needs root (network namespaces)".into());
    }
    for (tool, pkg) in [("ip", "iproute2"), ("nft", "nftables")] {
        let found = std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| d.join(tool).is_file())
                || Path::new("/usr/sbin").join(tool).is_file()
        });
        if !found {
            return Some(format!(
                "the test bed needs `{tool}` (Debian package {pkg})"
            ));
        }
    }
    None
}

/// The network namespaces of beds (names starting with [`TAG_PREFIX`]).
pub fn bed_namespaces() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut out: Vec<String> = dir
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(TAG_PREFIX))
        .collect();
    out.sort();
    out
}

/// The pid in a tag or a name that starts with one (`trb-<pid>-...`).
fn owner(name: &str) -> Option<i32> {
    name.strip_prefix(TAG_PREFIX)?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// A run is alive while its process is: the pid exists and is a `tranche-nemesis`.
fn alive(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("nemesis"))
}

/// Kills every process in namespace `ns` but this one, until none is left (a job's
/// shim may fork while the first ones die).
fn empty_namespace(ns: &str) {
    let me = std::process::id() as i32;
    for _ in 0..50 {
        let pids: Vec<i32> = sh("ip", &["netns", "pids", ns])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .filter(|p| *p != me)
            .collect();
        if pids.is_empty() {
            return;
        }
        for p in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Processes whose command line names a bed's directory (`/trb-<pid>-`), with that pid.
fn bed_processes() -> Vec<(i32, i32, String)> {
    tranche_local::pids_matching(&format!("/{TAG_PREFIX}"))
        .into_iter()
        .filter_map(|(pid, line)| {
            let at = line.find(&format!("/{TAG_PREFIX}"))?;
            let run = owner(&line[at + 1..])?;
            Some((pid, run, line))
        })
        .filter(|(pid, _, _)| *pid != std::process::id() as i32)
        .collect()
}

/// Removes what beds of runs no longer alive left: their processes, namespaces (with
/// the bridge, veths and nft tables inside) and directories. Returns what it removed.
pub fn sweep() -> Vec<String> {
    let mut removed = Vec::new();
    for ns in bed_namespaces() {
        if owner(&ns).is_some_and(alive) {
            continue;
        }
        empty_namespace(&ns);
        match sh("ip", &["netns", "del", &ns]) {
            Ok(_) => removed.push(format!("namespace {ns}")),
            Err(e) => eprintln!("tranche-nemesis: sweeping {ns}: {e}"),
        }
    }
    for (point, run) in bed_mounts() {
        if !alive(run) {
            unmount(&point);
            removed.push(format!("mount {}", point.display()));
        }
    }
    for (rule, run) in bed_rules() {
        if !alive(run) {
            let args: Vec<&str> = rule
                .split_whitespace()
                .map(|w| w.trim_matches('"'))
                .collect();
            let mut del = vec!["-w", "-D"];
            del.extend(&args[1..]);
            match sh("iptables", &del) {
                Ok(_) => removed.push(format!("iptables rule {rule}")),
                Err(e) => eprintln!("tranche-nemesis: sweeping a rule: {e}"),
            }
        }
    }
    for (pid, run, line) in bed_processes() {
        if !alive(run) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            removed.push(format!("process {pid}: {line}"));
        }
    }
    if let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if owner(&name).is_some_and(|p| !alive(p))
                && e.path().is_dir()
                && !e.path().join(KEPT).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
                removed.push(format!("directory {}", e.path().display()));
            }
        }
    }
    removed
}

/// What beds left on this machine: their namespaces and processes, and in the
/// machine's own namespace any interface, nft table or netem qdisc of theirs. Empty
/// when nothing is left. `tag`: only that run's; `None`: every bed's.
pub fn leftovers(tag: Option<&str>) -> Vec<String> {
    let mine = |name: &str| match tag {
        Some(t) => name.starts_with(&format!("{t}-")) || name == t,
        None => name.starts_with(TAG_PREFIX),
    };
    let mut out: Vec<String> = bed_namespaces()
        .into_iter()
        .filter(|n| mine(n))
        .map(|n| format!("namespace {n}"))
        .collect();
    for (pid, run, line) in bed_processes() {
        if tag.is_none_or(|t| owner(t) == Some(run)) {
            out.push(format!("process {pid}: {line}"));
        }
    }
    for (point, run) in bed_mounts() {
        if tag.is_none_or(|t| owner(t) == Some(run)) {
            out.push(format!("mount {}", point.display()));
        }
    }
    for line in sh("ip", &["-o", "link", "show"])
        .unwrap_or_default()
        .lines()
    {
        let name = line.split(':').nth(1).unwrap_or("").trim();
        if mine(name.split('@').next().unwrap_or("")) {
            out.push(format!("interface {name}"));
        }
    }
    for (rule, run) in bed_rules() {
        if tag.is_none_or(|t| owner(t) == Some(run)) {
            out.push(format!("iptables rule {rule}"));
        }
    }
    if let Ok(tables) = sh("nft", &["list", "tables"]) {
        out.extend(
            tables
                .lines()
                .filter(|l| l.trim_end().ends_with(" trb"))
                .map(|l| format!("nft table {l}")),
        );
    }
    out
}

impl Bed {
    /// Makes the bed and starts its controllers and agents (nothing is waited for).
    /// Sweeps the leftovers of dead runs first. On an error everything made so far is
    /// removed again.
    pub fn up(opts: BedOptions) -> Result<Bed, String> {
        if let Some(why) = unavailable() {
            return Err(why);
        }
        if opts.agents == 0 || opts.agents > MAX_AGENTS {
            return Err(format!(
                "agents: a bed has 1 to {MAX_AGENTS} agents, not {}",
                opts.agents
            ));
        }
        let mut bed = Bed::empty(opts, "cl")?;
        for id in 1..=3u64 {
            let h = bed.host(&format!("c{id}"), 10 + id as usize);
            bed.controllers.push(BedController {
                id,
                config: bed.dir.join(format!("c{id}.toml")),
                data_dir: bed.dir.join(format!("c{id}")).join("data"),
                log: bed.dir.join(format!("c{id}.log")),
                host: h,
                child: None,
            });
        }
        for n in 0..bed.opts.agents {
            let node = format!("n{n}");
            bed.agents.push(BedAgent {
                host: bed.host(&node, 21 + n),
                config: bed.dir.join(format!("agent-{node}.toml")),
                // The spool's name is the node's: cgroups are named after it.
                spool: bed.dir.join(&node).join(format!("spool-{node}")),
                log: bed.dir.join(format!("agent-{node}.log")),
                node,
                child: None,
            });
        }
        bed.network()?;
        bed.disks()?;
        bed.write_files()?;
        for i in 0..bed.controllers.len() {
            bed.start_controller(i)?;
        }
        for i in 0..bed.agents.len() {
            bed.start_agent(i)?;
        }
        Ok(bed)
    }

    /// A bed of hosts only: a namespace and an address 10.77.0.`last` for each
    /// (`name`, `last`) of `hosts` plus the client host `client` at 10.77.0.2, on the
    /// switch, with nothing started in them and no certificate issued. Sweeps the
    /// leftovers of dead runs first; on an error everything made so far is removed.
    pub fn bare(hosts: &[(&str, usize)], client: &str, keep: bool) -> Result<Bed, String> {
        if let Some(why) = unavailable() {
            return Err(why);
        }
        let opts = BedOptions {
            agents: 0,
            tranched: PathBuf::new(),
            agent_bin: PathBuf::new(),
            controller_extra: String::new(),
            agent_extra: String::new(),
            gpus: String::new(),
            log_filter: String::new(),
            keep,
            disk_mib: None,
            agent_disk_mib: None,
            faketime: None,
        };
        let mut bed = Bed::empty(opts, client)?;
        for &(name, last) in hosts {
            if !(3..=254).contains(&last) || name.len() > 15 {
                return Err(format!(
                    "host {name}: a bare bed's host has a name of at most 15 characters \
                     and an address 10.77.0.3 to 10.77.0.254, not 10.77.0.{last}"
                ));
            }
            let h = bed.host(name, last);
            bed.extra.push(h);
        }
        bed.network()?;
        Ok(bed)
    }

    /// A bed without hosts but its client host (named `client`): its tag, its
    /// directory, nothing on the network yet. Sweeps the leftovers of dead runs first.
    fn empty(opts: BedOptions, client: &str) -> Result<Bed, String> {
        for s in sweep() {
            eprintln!("tranche-nemesis: removed a dead run's {s}");
        }
        let tag = format!("{TAG_PREFIX}{}", std::process::id());
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{tag}-"))
            .tempdir()
            .map_err(|e| format!("a directory for the bed: {e}"))?;
        let dir = tmp.keep();
        let home = File::open("/proc/thread-self/ns/net")
            .map_err(|e| format!("this thread's network namespace: {e}"))?;
        Ok(Bed {
            switch: format!("{tag}-sw"),
            client: Host {
                name: client.to_string(),
                ns: format!("{tag}-{client}"),
                addr: addr(2),
            },
            certs: dir.join("certs"),
            dir,
            controllers: Vec::new(),
            agents: Vec::new(),
            extra: Vec::new(),
            made: Vec::new(),
            drops: Mutex::new(BTreeMap::new()),
            home,
            mounts: Vec::new(),
            delays: Mutex::new(BTreeMap::new()),
            keep: opts.keep,
            opts,
            tag,
        })
    }

    /// Host `name` of this bed at 10.77.0.`last`.
    fn host(&self, name: &str, last: usize) -> Host {
        Host {
            name: name.to_string(),
            ns: format!("{}-{name}", self.tag),
            addr: addr(last),
        }
    }

    /// Every host: the controllers, the agents, a bare bed's hosts, the client.
    pub fn hosts(&self) -> Vec<&Host> {
        let mut hs: Vec<&Host> = self.controllers.iter().map(|c| &c.host).collect();
        hs.extend(self.agents.iter().map(|a| &a.host));
        hs.extend(self.extra.iter());
        hs.push(&self.client);
        hs
    }

    fn add_namespace(&mut self, ns: &str) -> Result<(), String> {
        sh("ip", &["netns", "add", ns])?;
        self.made.push(ns.to_string());
        sh("ip", &["-n", ns, "link", "set", "lo", "up"])?;
        Ok(())
    }

    /// The switch with its bridge, then each host on it with its nft table.
    fn network(&mut self) -> Result<(), String> {
        let sw = self.switch.clone();
        self.add_namespace(&sw)?;
        sh("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        sh("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
        let hosts: Vec<Host> = self.hosts().into_iter().cloned().collect();
        for h in &hosts {
            self.add_namespace(&h.ns)?;
            sh(
                "ip",
                &[
                    "-n", &sw, "link", "add", &h.name, "type", "veth", "peer", "name", "eth0",
                    "netns", &h.ns,
                ],
            )?;
            sh(
                "ip",
                &["-n", &sw, "link", "set", &h.name, "master", "br0", "up"],
            )?;
            let cidr = format!("{}/{PREFIX}", h.addr);
            sh("ip", &["-n", &h.ns, "addr", "add", &cidr, "dev", "eth0"])?;
            sh("ip", &["-n", &h.ns, "link", "set", "eth0", "up"])?;
            nft(
                &h.ns,
                "table inet trb {\n  chain input {\n    type filter hook input priority 0; policy accept;\n  }\n}\n",
            )?;
        }
        Ok(())
    }

    fn issue(&self, role: Role, name: &str, hosts: &[String]) -> Result<TlsFiles, String> {
        tranche_tls::issue(&self.certs, &self.certs, role, name, hosts, 30)
            .map_err(|e| format!("a certificate for {role} {name}: {e}"))
    }

    fn tls_table(files: &TlsFiles) -> String {
        format!(
            "\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        )
    }

    /// The CA, each daemon's certificate (a controller's for its address) and config.
    fn write_files(&mut self) -> Result<(), String> {
        std::fs::create_dir_all(&self.certs).map_err(|e| e.to_string())?;
        tranche_tls::init_ca(&self.certs, "bed", true).map_err(|e| e.to_string())?;
        let mut peers = String::new();
        for c in &self.controllers {
            peers += &format!(
                "\n[[peers]]\nid = {}\nname = \"c{}\"\npeer_addr = \"{}:{PEER_PORT}\"\nclient_addr = \"{}\"\n",
                c.id,
                c.id,
                c.host.addr,
                c.client_addr()
            );
        }
        for c in &self.controllers {
            let files = self.issue(Role::Controller, &c.host.name, &[c.host.addr.to_string()])?;
            let text = format!(
                "id = {}\nname = \"c{}\"\npeer_addr = \"{a}:{PEER_PORT}\"\nclient_addr = \"{}\"\nhttp_addr = \"{a}:{HTTP_PORT}\"\ndata_dir = \"{}\"\njoin = false\nfault_injection = false\n{}\n{peers}{}",
                c.id,
                c.id,
                c.client_addr(),
                c.data_dir.display(),
                self.opts.controller_extra,
                Self::tls_table(&files),
                a = c.host.addr,
            );
            std::fs::write(&c.config, text).map_err(|e| format!("{}: {e}", c.config.display()))?;
        }
        let controllers: Vec<String> = self
            .controllers
            .iter()
            .map(|c| format!("\"{}\"", c.client_addr()))
            .collect();
        let account = tranche_local::job_account().map_err(|e| e.to_string())?;
        for a in &self.agents {
            let files = self.issue(Role::Agent, &a.node, &[])?;
            let text = format!(
                "node = \"{}\"\ncontrollers = [{}]\nspool_dir = \"{}\"\ninventory = \"fake\"\nfake = \"{}\"\naddress = \"{a_addr}\"\nlogs_addr = \"{a_addr}:{LOGS_PORT}\"\n{}{}\n\
                 # Every user's jobs run as the account that started the bed.\n[users]\n\"*\" = \"{}\"\n{}",
                a.node,
                controllers.join(", "),
                a.spool.display(),
                self.opts.gpus,
                if account.root { "allow_root = true\n" } else { "" },
                self.opts.agent_extra,
                account.name,
                Self::tls_table(&files),
                a_addr = a.host.addr,
            );
            std::fs::write(&a.config, text).map_err(|e| format!("{}: {e}", a.config.display()))?;
        }
        Ok(())
    }

    /// Mounts a tmpfs of `mib` MiB on `disk` (made first), to be unmounted at teardown.
    fn mount_disk(&mut self, disk: &Path, mib: Option<u64>) -> Result<(), String> {
        std::fs::create_dir_all(disk).map_err(|e| format!("{}: {e}", disk.display()))?;
        if let Some(mib) = mib {
            let d = disk.to_string_lossy().into_owned();
            let size = format!("size={mib}m,mode=0700");
            sh("mount", &["-t", "tmpfs", "-o", &size, "tmpfs", &d])?;
            self.mounts.push(disk.to_path_buf());
        }
        Ok(())
    }

    /// Each controller's disk: its data dir's parent, a tmpfs of `disk_mib` when set;
    /// each agent's: its spool's parent, a tmpfs of `agent_disk_mib` when set. The GPU
    /// ledger, the checker's evidence, is kept off the agent's disk (see
    /// [`BedOptions::agent_disk_mib`]).
    fn disks(&mut self) -> Result<(), String> {
        for i in 0..self.controllers.len() {
            let data = self.controllers[i].data_dir.clone();
            self.mount_disk(
                data.parent().expect("a data dir's disk"),
                self.opts.disk_mib,
            )?;
            std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        }
        for i in 0..self.agents.len() {
            let spool = self.agents[i].spool.clone();
            self.mount_disk(
                spool.parent().expect("a spool's disk"),
                self.opts.agent_disk_mib,
            )?;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&spool)
                .map_err(|e| format!("{}: {e}", spool.display()))?;
            let ledger = self.dir.join(format!("ledger-{}.log", self.agents[i].node));
            std::os::unix::fs::symlink(
                &ledger,
                spool.join(tranche_agent::exec::ledger::GPU_LEDGER),
            )
            .map_err(|e| format!("{}: {e}", ledger.display()))?;
        }
        Ok(())
    }

    /// Controller `i`'s disk.
    fn disk(&self, i: usize) -> &Path {
        self.controllers[i]
            .data_dir
            .parent()
            .expect("a data dir's disk")
    }

    /// Agent `i`'s disk.
    fn agent_disk(&self, i: usize) -> &Path {
        self.agents[i].spool.parent().expect("a spool's disk")
    }

    /// Fills controller `i`'s disk ([`fill_disk`]).
    pub fn fill(&self, i: usize) -> Result<u64, String> {
        if self.opts.disk_mib.is_none() {
            return Err("a full disk needs the bed's disks (disk_mib)".into());
        }
        fill_disk(self.disk(i))
    }

    /// Gives controller `i`'s disk its space back.
    pub fn unfill(&self, i: usize) -> Result<(), String> {
        unfill_disk(self.disk(i))
    }

    /// Fills agent `i`'s disk, its spool's file system ([`fill_disk`]).
    pub fn fill_agent(&self, i: usize) -> Result<u64, String> {
        if self.opts.agent_disk_mib.is_none() {
            return Err("a full spool needs the bed's agent disks (agent_disk_mib)".into());
        }
        fill_disk(self.agent_disk(i))
    }

    /// Gives agent `i`'s disk its space back.
    pub fn unfill_agent(&self, i: usize) -> Result<(), String> {
        unfill_disk(self.agent_disk(i))
    }

    /// The clock file of host `name`: its wall clock's offset, in libfaketime's terms.
    fn clock_file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("clock-{name}"))
    }

    /// Sets host `name`'s wall clock `offset_s` seconds off (0: right again); it takes
    /// effect within a second. Its monotonic clocks (timers, elections, the agent's
    /// lease) are never touched. An error when the bed runs without libfaketime.
    fn set_clock(&self, name: &str, offset_s: i64) -> Result<(), String> {
        if self.opts.faketime.is_none() {
            return Err("clock skew needs libfaketime (Debian package faketime)".into());
        }
        let f = self.clock_file(name);
        std::fs::write(&f, format!("{offset_s:+}\n")).map_err(|e| format!("{}: {e}", f.display()))
    }

    /// Sets controller `i`'s wall clock `offset_s` seconds off (see [`Bed::set_clock`]).
    pub fn skew(&self, i: usize, offset_s: i64) -> Result<(), String> {
        self.set_clock(&self.controllers[i].host.name, offset_s)
    }

    /// Sets agent `i`'s wall clock `offset_s` seconds off: the agent's daemon only, not
    /// the shims it starts, which write the GPU ledger the checker compares across
    /// nodes (see [`Bed::start_agent`]).
    pub fn skew_agent(&self, i: usize, offset_s: i64) -> Result<(), String> {
        self.set_clock(&self.agents[i].host.name, offset_s)
    }

    /// `env` arguments that preload libfaketime with host `name`'s clock file (made,
    /// right, if missing), and then `program`; `None` without libfaketime.
    fn faked(&self, name: &str, program: &Path) -> Result<Option<Vec<String>>, String> {
        let Some(lib) = &self.opts.faketime else {
            return Ok(None);
        };
        let clock = self.clock_file(name);
        if !clock.exists() {
            self.set_clock(name, 0)?;
        }
        Ok(Some(vec![
            format!("LD_PRELOAD={}", lib.display()),
            format!("FAKETIME_TIMESTAMP_FILE={}", clock.display()),
            "FAKETIME_CACHE_DURATION=1".to_string(),
            "FAKETIME_DONT_FAKE_MONOTONIC=1".to_string(),
            program.to_string_lossy().into_owned(),
        ]))
    }

    /// Delays every packet `host` sends or receives on its `eth0` by a time drawn from
    /// `ms` for each (so that they arrive out of order), until [`Bed::undelay`]. An
    /// error without `iptables` or when the host is delayed already.
    pub fn delay(&self, host: &Host, ms: std::ops::RangeInclusive<u64>) -> Result<(), String> {
        let mut delays = self.delays.lock().unwrap();
        if delays.contains_key(&host.ns) {
            return Err(format!("{} is delayed already", host.name));
        }
        let d = Delayer::start(&host.ns, &format!("{}-delay", self.tag), ms)?;
        delays.insert(host.ns.clone(), d);
        Ok(())
    }

    /// Ends the delay of the host in namespace `ns` ([`Delayer::end`]). What the delay
    /// did; `None` when the host was not delayed.
    pub fn undelay(&self, ns: &str) -> Option<Result<DelayStats, String>> {
        let d = self.delays.lock().unwrap().remove(ns)?;
        Some(d.end())
    }

    /// Ends every delay (see [`Bed::undelay`]).
    pub fn undelay_all(&self) -> Vec<Result<DelayStats, String>> {
        let delayed: Vec<String> = self.delays.lock().unwrap().keys().cloned().collect();
        delayed.iter().filter_map(|ns| self.undelay(ns)).collect()
    }

    fn spawn(&self, ns: &str, program: &Path, args: &[&str], log: &Path) -> Result<Child, String> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(program)
            .args(args)
            .env("TRANCHE_LOG", &self.opts.log_filter)
            .env("TRANCHE_AGENT_BIN", &self.opts.agent_bin)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("{} in {ns}: {e}", program.display()))
    }

    /// Starts controller `i` unless it runs.
    pub fn start_controller(&mut self, i: usize) -> Result<(), String> {
        if self.controller_running(i) {
            return Ok(());
        }
        let c = &self.controllers[i];
        let config = c.config.to_string_lossy().into_owned();
        // `ip netns exec NS env ... tranched`: libfaketime is loaded into the daemon
        // only, not into `ip`.
        let child = match self.faked(&c.host.name, &self.opts.tranched)? {
            None => self.spawn(
                &c.host.ns,
                &self.opts.tranched,
                &["--config", &config],
                &c.log,
            )?,
            Some(mut env) => {
                env.extend(["--config".to_string(), config]);
                let args: Vec<&str> = env.iter().map(String::as_str).collect();
                self.spawn(&c.host.ns, Path::new("env"), &args, &c.log)?
            }
        };
        self.controllers[i].child = Some(child);
        Ok(())
    }

    pub fn controller_running(&mut self, i: usize) -> bool {
        running(&mut self.controllers[i].child)
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill_controller(&mut self, i: usize) {
        kill(&mut self.controllers[i].child);
    }

    pub fn start_agent(&mut self, i: usize) -> Result<(), String> {
        if self.agent_running(i) {
            return Ok(());
        }
        let a = &self.agents[i];
        let config = a.config.to_string_lossy().into_owned();
        let child = match self.faked(&a.host.name, &self.opts.agent_bin)? {
            None => self.spawn(
                &a.host.ns,
                &self.opts.agent_bin,
                &["run", "--config", &config],
                &a.log,
            )?,
            Some(mut env) => {
                // The daemon's clock is skewed, its shims' is not: they run from a link
                // of another name (libfaketime tells programs apart by their name), so
                // the GPU ledger they write, the checker's evidence, keeps true time.
                let shim = self.shim_link()?;
                let program = env.pop().expect("the program");
                let name = Path::new(&program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                env.extend([
                    format!("FAKETIME_ONLY_CMDS={name}"),
                    format!("TRANCHE_AGENT_BIN={}", shim.display()),
                    program,
                    "run".into(),
                    "--config".into(),
                    config,
                ]);
                let args: Vec<&str> = env.iter().map(String::as_str).collect();
                self.spawn(&a.host.ns, Path::new("env"), &args, &a.log)?
            }
        };
        self.agents[i].child = Some(child);
        Ok(())
    }

    /// `<dir>/bin/tranche-shim`, a link to the agent's binary that its shims run from.
    fn shim_link(&self) -> Result<PathBuf, String> {
        let link = self.dir.join("bin").join("tranche-shim");
        if !link.exists() {
            let bin = std::fs::canonicalize(&self.opts.agent_bin)
                .map_err(|e| format!("{}: {e}", self.opts.agent_bin.display()))?;
            std::fs::create_dir_all(link.parent().expect("bin"))
                .and_then(|()| std::os::unix::fs::symlink(&bin, &link))
                .map_err(|e| format!("{}: {e}", link.display()))?;
        }
        Ok(link)
    }

    pub fn agent_running(&mut self, i: usize) -> bool {
        running(&mut self.agents[i].child)
    }

    /// SIGKILL an agent (its jobs go on under their shims).
    pub fn kill_agent(&mut self, i: usize) {
        kill(&mut self.agents[i].child);
    }

    /// A client certificate (issued on first use).
    pub fn files(&self, role: Role, name: &str) -> Result<TlsFiles, String> {
        let files = TlsFiles::in_dir(&self.certs, role, name);
        if files.cert.exists() {
            return Ok(files);
        }
        self.issue(role, name, &[])
    }

    /// A client of every controller, or of controller `only`. It reaches them only from
    /// a thread in the client host ([`Bed::enter_client`]).
    pub fn client(&self, role: Role, name: &str, only: Option<usize>) -> Result<Client, String> {
        let addrs = self
            .controllers
            .iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|o| o == *i))
            .map(|(_, c)| c.client_addr())
            .collect();
        Client::new(addrs, &self.files(role, name)?).map_err(|e| e.to_string())
    }

    /// A CLI config (`TRANCHE_CONFIG`) for a role and name, in the bed's directory.
    pub fn cli_config(&self, role: Role, name: &str) -> Result<PathBuf, String> {
        let files = self.files(role, name)?;
        let list = |f: &dyn Fn(&BedController) -> String| {
            self.controllers
                .iter()
                .map(|c| format!("\"{}\"", f(c)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = format!(
            "controllers = [{}]\nhttp = [{}]\n{}",
            list(&|c| c.client_addr().to_string()),
            list(&|c| format!("https://{}:{HTTP_PORT}", c.host.addr)),
            Self::tls_table(&files).trim_start()
        );
        let path = self.dir.join(format!("{role}-{name}.toml"));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    /// Moves the calling thread into the client host's network namespace (threads it
    /// starts afterwards are born there too).
    pub fn enter_client(&self) -> Result<(), String> {
        let f = File::open(format!("/run/netns/{}", self.client.ns))
            .map_err(|e| format!("{}: {e}", self.client.ns))?;
        setns(&f).map_err(|e| format!("entering {}: {e}", self.client.ns))
    }

    /// A runtime whose threads, and the calling thread, are in the client host.
    pub fn runtime(&self) -> Result<tokio::runtime::Runtime, String> {
        self.enter_client()?;
        let ns = format!("/run/netns/{}", self.client.ns);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .on_thread_start(move || {
                if let Err(e) = File::open(&ns).and_then(|f| setns(&f)) {
                    eprintln!("tranche-nemesis: a runtime thread cannot enter {ns}: {e}");
                }
            })
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))
    }

    /// Moves the calling thread back to the namespace the bed was made from.
    pub fn leave(&self) {
        let _ = setns(&self.home);
    }

    /// Makes each host lose what comes from the hosts `losses` name for it (by
    /// address, one direction each): all of it, or a random share (a lossy link).
    /// Hosts not named hear everyone.
    pub fn set_losses(&self, losses: &[Loss]) -> Result<(), String> {
        let mut want: BTreeMap<String, BTreeMap<u8, BTreeSet<Ipv4Addr>>> = BTreeMap::new();
        for h in self.hosts() {
            let mut by_percent: BTreeMap<u8, BTreeSet<Ipv4Addr>> = BTreeMap::new();
            for l in losses.iter().filter(|l| l.to == h.addr) {
                by_percent.entry(l.percent).or_default().insert(l.from);
            }
            want.insert(h.ns.clone(), by_percent);
        }
        let mut have = self.drops.lock().unwrap();
        for (ns, by_percent) in want {
            if have
                .get(&ns)
                .map_or(by_percent.is_empty(), |h| *h == by_percent)
            {
                continue;
            }
            let mut script = String::from("flush chain inet trb input\n");
            // The whole losses first: a source both cut and lossy is cut.
            for (percent, from) in by_percent.iter().rev() {
                let list: Vec<String> = from.iter().map(|a| a.to_string()).collect();
                let share = match percent {
                    100.. => String::new(),
                    p => format!("numgen random mod 100 < {p} "),
                };
                script += &format!(
                    "add rule inet trb input ip saddr {{ {} }} {share}drop\n",
                    list.join(", ")
                );
            }
            nft(&ns, &script)?;
            have.insert(ns, by_percent);
        }
        Ok(())
    }

    /// Kills everything in the bed and deletes its namespaces (with the bridge, veths
    /// and nft tables in them); the directory too unless it is kept.
    fn teardown(&mut self) {
        self.leave();
        for r in self.undelay_all() {
            if let Err(e) = r {
                eprintln!("tranche-nemesis: {e}");
            }
        }
        for a in &mut self.agents {
            kill(&mut a.child);
        }
        for c in &mut self.controllers {
            kill(&mut c.child);
        }
        for ns in self.made.drain(..).rev() {
            empty_namespace(&ns);
            if let Err(e) = sh("ip", &["netns", "del", &ns]) {
                eprintln!("tranche-nemesis: {e}");
            }
        }
        // The controllers' disks go too (a kept directory keeps their logs, not them).
        for m in self.mounts.drain(..) {
            unmount(&m);
        }
        if self.keep {
            // A sweep leaves a kept directory alone.
            let _ = std::fs::write(self.dir.join(KEPT), "kept for a person to read\n");
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Fills the file system of `disk`: a file in it grows until no space is left.
/// Returns the bytes it took.
fn fill_disk(disk: &Path) -> Result<u64, String> {
    let path = disk.join("ballast");
    let mut f = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let chunk = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(k) => n += k as u64,
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(n)
}

/// Gives `disk` the space [`fill_disk`] took back.
fn unfill_disk(disk: &Path) -> Result<(), String> {
    let path = disk.join("ballast");
    std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Unmounts `path` (lazily, if it is still busy).
fn unmount(path: &Path) {
    let p = path.to_string_lossy();
    if sh("umount", &[&p]).is_err() {
        if let Err(e) = sh("umount", &["-l", &p]) {
            eprintln!("tranche-nemesis: {e}");
        }
    }
}

/// The controllers' disks of beds (tmpfs mounts whose paths name a bed's directory),
/// with the run's pid.
fn bed_mounts() -> Vec<(PathBuf, i32)> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let point = l.strip_prefix("tmpfs ")?.split(' ').next()?;
            let at = point.find(&format!("/{TAG_PREFIX}"))?;
            Some((PathBuf::from(point), owner(&point[at + 1..])?))
        })
        .collect()
}

fn running(child: &mut Option<Child>) -> bool {
    child
        .as_mut()
        .is_some_and(|ch| ch.try_wait().ok().flatten().is_none())
}

fn kill(child: &mut Option<Child>) {
    if let Some(mut ch) = child.take() {
        let _ = ch.kill();
        let _ = ch.wait();
    }
}

fn setns(f: &File) -> std::io::Result<()> {
    // SAFETY: setns on a descriptor this function borrows; it changes only the calling
    // thread's network namespace.
    let rc = unsafe { nix::libc::setns(f.as_raw_fd(), nix::libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_run() {
        assert_eq!(owner("trb-123-c1"), Some(123));
        assert_eq!(owner("trb-123-abXYZ"), Some(123));
        assert_eq!(owner("trb-123"), Some(123));
        assert_eq!(owner("other-123-c1"), None);
        assert_eq!(owner("trb-x-c1"), None);
        assert_eq!(addr(21), Ipv4Addr::new(10, 77, 0, 21));
    }

    #[test]
    fn a_rule_with_a_beds_comment_is_found() {
        let save = "*filter\n:INPUT ACCEPT [0:0]\n\
            -A INPUT -i eth0 -m comment --comment trb-42-delay -j NFQUEUE --queue-num 7 --queue-bypass\n\
            -A OUTPUT -o eth0 -m comment --comment \"other rule\" -j ACCEPT\n\
            -A OUTPUT -d 10.0.0.1/32 -j DROP\nCOMMIT\n";
        let rules = rules_of(save);
        assert_eq!(rules.len(), 1, "{rules:?}");
        assert_eq!(rules[0].1, 42);
        assert!(rules[0].0.starts_with("-A INPUT -i eth0"));
        // The rules a delay adds carry the run's tag.
        let [input, output] = delay_rules("trb-42-delay");
        assert_eq!(input[0], "INPUT");
        assert_eq!(output[0], "OUTPUT");
        let line = format!("-A {}", input.join(" "));
        assert_eq!(rules_of(&line), vec![(line.clone(), 42)]);
    }

    /// Two namespaces of this test's (not a bed's: `trq-`), joined by a veth pair
    /// whose ends are each one's `eth0`; deleted when dropped, also when the test
    /// fails.
    struct Pair([String; 2]);

    impl Drop for Pair {
        fn drop(&mut self) {
            for ns in &self.0 {
                let _ = sh("ip", &["netns", "del", ns]);
            }
        }
    }

    /// Sends `n` numbered datagrams from namespace `from` to `to_addr`:9, where a thread
    /// in namespace `to` echoes them; the order the echoes came back in and the shortest
    /// round trip.
    fn echo(from: &str, to: &str, to_addr: Ipv4Addr, n: u32) -> (Vec<u32>, Duration) {
        let enter = |ns: &str| setns(&File::open(format!("/run/netns/{ns}")).unwrap()).unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let to = to.to_string();
        let server = std::thread::spawn(move || {
            enter(&to);
            let s = std::net::UdpSocket::bind((to_addr, 9)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = [0u8; 64];
            for _ in 0..n {
                let (k, peer) = s.recv_from(&mut buf).expect("a datagram");
                s.send_to(&buf[..k], peer).unwrap();
            }
        });
        ready_rx.recv().unwrap();
        let from = from.to_string();
        let client = std::thread::spawn(move || {
            enter(&from);
            let s = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let sent: Vec<Instant> = (0..n)
                .map(|i| {
                    s.send_to(&i.to_be_bytes(), (to_addr, 9)).unwrap();
                    Instant::now()
                })
                .collect();
            let (mut order, mut min) = (Vec::new(), Duration::MAX);
            let mut buf = [0u8; 64];
            for _ in 0..n {
                let k = s.recv(&mut buf).expect("an echo");
                let i = u32::from_be_bytes(buf[..k].try_into().unwrap());
                min = min.min(sent[i as usize].elapsed());
                order.push(i);
            }
            (order, min)
        });
        let out = client.join().unwrap();
        server.join().unwrap();
        out
    }

    #[test]
    fn a_delay_holds_packets_reorders_them_and_leaves_nothing_when_healed() {
        if unavailable().is_some() || find_iptables().is_none() {
            let msg = "NOT RUN: a_delay_holds_packets_...: needs root, ip, nft and iptables";
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "{msg} (CI=true)"
            );
            eprintln!("\n*** {msg} ***\n");
            return;
        }
        let pid = std::process::id();
        let pair = Pair([format!("trq-{pid}-a"), format!("trq-{pid}-b")]);
        let [a, b] = &pair.0;
        let (addr_a, addr_b) = (Ipv4Addr::new(10, 78, 0, 1), Ipv4Addr::new(10, 78, 0, 2));
        for ns in [a, b] {
            sh("ip", &["netns", "add", ns]).unwrap();
            sh("ip", &["-n", ns, "link", "set", "lo", "up"]).unwrap();
        }
        sh(
            "ip",
            &[
                "-n", a, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b,
            ],
        )
        .unwrap();
        for (ns, ad) in [(a, addr_a), (b, addr_b)] {
            sh(
                "ip",
                &["-n", ns, "addr", "add", &format!("{ad}/24"), "dev", "eth0"],
            )
            .unwrap();
            sh("ip", &["-n", ns, "link", "set", "eth0", "up"]).unwrap();
        }
        let (order, min) = echo(b, a, addr_a, 5);
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
        assert!(min < Duration::from_millis(20), "{min:?} without a delay");

        // Each way through a's eth0 holds a packet 20-150 ms.
        let comment = format!("trb-{pid}-delay");
        let d = Delayer::start(a, &comment, 20..=150).unwrap();
        let save = sh("ip", &["netns", "exec", a, "iptables-save"]).unwrap();
        assert_eq!(rules_of(&save).len(), 2, "{save}");
        let (order, min) = echo(b, a, addr_a, 40);
        assert!(
            min >= Duration::from_millis(40),
            "{min:?}: both ways are held"
        );
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            (0..40).collect::<Vec<u32>>(),
            "every datagram came back"
        );
        assert_ne!(order, sorted, "the echoes came back out of order");
        let stats = d.end().unwrap();
        assert!(stats.packets >= 80, "{stats:?}");
        assert!(stats.reordered > 0, "{stats:?}");
        assert!(
            stats.max_held_ms >= 20 && stats.max_held_ms < 1_000,
            "{stats:?}"
        );

        // Healed: no rule, no queue, no delay.
        let save = sh("ip", &["netns", "exec", a, "iptables-save"]).unwrap();
        assert_eq!(rules_of(&save), vec![], "{save}");
        let queues = sh(
            "ip",
            &[
                "netns",
                "exec",
                a,
                "cat",
                "/proc/net/netfilter/nfnetlink_queue",
            ],
        );
        assert_eq!(queues.unwrap().trim(), "", "a queue is still bound");
        let (order, min) = echo(b, a, addr_a, 5);
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
        assert!(min < Duration::from_millis(20), "{min:?} once healed");
    }
}
