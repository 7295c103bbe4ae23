//! One run: the cluster, the clients, the two fault tracks, the settling, the checks.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use tranche_client::Client;
use tranche_local::{LocalCluster, LocalOptions};
use tranche_model::JobSpec;
use tranche_proto::ClientCommand;
use tranche_proto::{
    ClientRequest, HistoryFilter, JobFilter, JobSummary, Query, Response, MAX_HISTORY_PAGE,
};
use tranche_tls::Role;

use crate::bed::{Bed, BedOptions, Loss};
use crate::check::{self, FinalJob, NodeLedger, Report};
use crate::faults::{self, Fault, Shape, Step, Target};
use crate::history::{now_us, FaultRecord, History};
use crate::relay::{self, Cuts};
use crate::workload::{self, Ctx, GPUS_PER_NODE};
use crate::Args;

const CONTROLLERS: usize = 3;
const AGENTS: usize = 3;
/// The controllers' `[agents]` settings: an agent silent for 3 s is DOWN.
const DOWN_AFTER_S: u64 = 3;
/// On the bed: an agent that has lost the controllers for 2 s stops its jobs; one
/// silent for 15 s (> 2 s + the 10 s orphan grace + the jobs' 2 s grace) is DOWN.
const HOSTS_FENCE_AFTER_S: u64 = 2;
const HOSTS_DOWN_AFTER_S: u64 = 15;
/// On the bed every job has this time limit, twice its longest sleep: a job that ends
/// FAILED by it was timed out early (by a skewed clock, say).
const HOSTS_TIME_LIMIT_S: u64 = 60;
/// On the bed each controller's data dir is on a tmpfs of this size (a 10-minute run
/// writes about 5 MiB), which a `disk_full` fault fills.
const HOSTS_DISK_MIB: u64 = 64;
/// On the bed each agent's spool is on a tmpfs of this size, which an
/// `agent_disk_full` fault fills.
const HOSTS_AGENT_DISK_MIB: u64 = 32;
/// How long a controller has to answer again once its disk has space again (and an
/// agent to be up again once its spool has).
const DISK_RECOVERY: Duration = Duration::from_secs(30);

/// Waits until a controller (one client each in `probes`) says it leads.
async fn wait_leader(probes: &[Client], timeout: Duration) -> Result<(), String> {
    tranche_local::wait_until("a leader", timeout, async || {
        for p in probes {
            let req = ClientRequest::Read {
                query: Query::Controllers,
                stale: true,
            };
            if let Ok(Response::Controllers(s)) = p.request_to(0, &req).await {
                if s.leader == Some(s.id) {
                    return Ok(());
                }
            }
        }
        Err("no controller says it leads".into())
    })
    .await
}

/// What the `disk_full` faults (or the `agent_disk_full` ones) did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DiskFigures {
    /// Disks filled.
    pub fills: usize,
    /// Of those, how often the controller (the agent) exited, and was started again.
    pub exits: usize,
    /// The longest time from the space coming back to the controller answering (the
    /// agent's node being up: neither unreachable nor DOWN), in ms.
    pub recover_max_ms: u64,
    /// Controllers (agents) that did not recover within 30 s of the space coming back.
    pub unrecovered: usize,
}

impl DiskFigures {
    fn add(&mut self, exited: bool, recovery: Duration, recovered: bool) {
        self.fills += 1;
        self.exits += usize::from(exited);
        self.recover_max_ms = self.recover_max_ms.max(recovery.as_millis() as u64);
        self.unrecovered += usize::from(!recovered);
    }
}

/// What the `delay` faults did to the delayed controllers' packets.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DelayFigures {
    /// Delays applied.
    pub delays: usize,
    /// Packets held, all delays together.
    pub packets: u64,
    /// Of those, how many left after a packet that came after them.
    pub reordered: u64,
    /// The longest a packet was held, in ms.
    pub max_held_ms: u64,
    /// Delays that could not be applied or ended with an error.
    pub errors: usize,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub passed: bool,
    pub seed: u64,
    pub duration_s: u64,
    #[serde(flatten)]
    pub report: Report,
    pub disk_full: DiskFigures,
    pub agent_disk_full: DiskFigures,
    pub delay: DelayFigures,
    /// Peer datagrams the relays dropped while a controller was cut off.
    pub relay_dropped: u64,
    /// Seconds from the first fault to the end of the checks.
    pub elapsed_s: f64,
    /// Seconds the cluster took to settle after the faults.
    pub settle_s: f64,
}

pub struct RunOutput {
    pub summary: Summary,
    pub dir: PathBuf,
}

/// `tranched` and `tranche-agent` of the same build profile as this binary: `$TRANCHED`
/// and `$TRANCHE_AGENT` when set; otherwise built first when run by cargo (`$CARGO`).
pub fn binaries() -> Result<(PathBuf, PathBuf), String> {
    if let (Ok(c), Ok(a)) = (std::env::var("TRANCHED"), std::env::var("TRANCHE_AGENT")) {
        return Ok((c.into(), a.into()));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut dir = exe.parent().ok_or("no executable directory")?.to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let (tranched, agent) = (dir.join("tranched"), dir.join("tranche-agent"));
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "tranched", "--bin", "tranched"])
            .args(["-p", "tranche-agent", "--bin", "tranche-agent"]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let st = cmd.status().map_err(|e| format!("cargo build: {e}"))?;
        if !st.success() {
            return Err("building tranched and tranche-agent failed".into());
        }
    }
    for b in [&tranched, &agent] {
        if !b.exists() {
            return Err(format!(
                "{} is missing: build it (cargo build -p tranched -p tranche-agent) or set $TRANCHED and $TRANCHE_AGENT",
                b.display()
            ));
        }
    }
    Ok((tranched, agent))
}

fn signal(pid: Option<u32>, sig: Signal) {
    if let Some(pid) = pid {
        let _ = kill(Pid::from_raw(pid as i32), sig);
    }
}

/// The cluster's processes: on 127.0.0.1, or on the hosts of a test bed.
pub enum Fleet {
    Local {
        cluster: LocalCluster,
        agent_bin: PathBuf,
    },
    Hosts(Bed),
}

impl Fleet {
    fn controller_pid(&self, i: usize) -> Option<u32> {
        match self {
            Fleet::Local { cluster, .. } => cluster.controllers[i].child.as_ref(),
            Fleet::Hosts(b) => b.controllers[i].child.as_ref(),
        }
        .map(|c| c.id())
    }

    fn agent_pid(&self, i: usize) -> Option<u32> {
        match self {
            Fleet::Local { cluster, .. } => cluster.agents[i].child.as_ref(),
            Fleet::Hosts(b) => b.agents[i].child.as_ref(),
        }
        .map(|c| c.id())
    }

    fn controllers(&self) -> usize {
        match self {
            Fleet::Local { cluster, .. } => cluster.controllers.len(),
            Fleet::Hosts(b) => b.controllers.len(),
        }
    }

    fn kill(&mut self, i: usize) {
        match self {
            Fleet::Local { cluster, .. } => cluster.kill(i),
            Fleet::Hosts(b) => b.kill_controller(i),
        }
    }

    fn start(&mut self, i: usize) -> Result<(), String> {
        match self {
            Fleet::Local { cluster, .. } => cluster.start(i).map_err(|e| e.to_string()),
            Fleet::Hosts(b) => b.start_controller(i),
        }
    }

    fn is_running(&mut self, i: usize) -> bool {
        match self {
            Fleet::Local { cluster, .. } => cluster.is_running(i),
            Fleet::Hosts(b) => b.controller_running(i),
        }
    }

    fn kill_agent(&mut self, i: usize) {
        match self {
            Fleet::Local { cluster, .. } => cluster.kill_agent(i),
            Fleet::Hosts(b) => b.kill_agent(i),
        }
    }

    fn start_agent(&mut self, i: usize) -> Result<(), String> {
        match self {
            Fleet::Local { cluster, agent_bin } => {
                cluster.start_agent(agent_bin, i).map_err(|e| e.to_string())
            }
            Fleet::Hosts(b) => b.start_agent(i),
        }
    }

    fn agent_dead(&mut self, i: usize) -> bool {
        match self {
            Fleet::Local { cluster, .. } => match &mut cluster.agents[i].child {
                Some(ch) => ch.try_wait().ok().flatten().is_some(),
                None => true,
            },
            Fleet::Hosts(b) => !b.agent_running(i),
        }
    }

    /// Each agent's node and spool.
    fn spools(&self) -> Vec<(String, PathBuf)> {
        match self {
            Fleet::Local { cluster, .. } => cluster
                .agents
                .iter()
                .map(|a| (a.node.clone(), a.spool.clone()))
                .collect(),
            Fleet::Hosts(b) => b
                .agents
                .iter()
                .map(|a| (a.node.clone(), a.spool.clone()))
                .collect(),
        }
    }

    /// A client of every controller, or of controller `only`.
    fn client(&self, role: Role, name: &str, only: Option<usize>) -> Result<Client, String> {
        match (self, only) {
            (Fleet::Local { cluster, .. }, None) => cluster.client(role, name),
            (Fleet::Local { cluster, .. }, Some(i)) => cluster.client_of(i, role, name),
            (Fleet::Hosts(b), _) => return b.client(role, name, only),
        }
        .map_err(|e| e.to_string())
    }
}

/// The addresses of a bed's hosts, for the network faults.
struct Net {
    controllers: Vec<Ipv4Addr>,
    agents: Vec<Ipv4Addr>,
    client: Ipv4Addr,
}

type Drops = Vec<Loss>;

/// `percent` of the packets between a host of `a` and one of `b` are lost, both ways.
fn lossy(a: &[Ipv4Addr], b: &[Ipv4Addr], percent: u8) -> Drops {
    let mut d = Vec::new();
    for x in a {
        for y in b {
            d.push(Loss {
                from: *x,
                to: *y,
                percent,
            });
            d.push(Loss {
                from: *y,
                to: *x,
                percent,
            });
        }
    }
    d
}

/// Every packet between a host of `a` and one of `b` is lost, both ways.
fn cut(a: &[Ipv4Addr], b: &[Ipv4Addr]) -> Drops {
    lossy(a, b, 100)
}

/// The cluster's processes, shared by the fault tracks (locked only for process
/// operations, never across a wait).
struct Procs {
    cluster: Mutex<Fleet>,
    cuts: Arc<Cuts>,
    net: Option<Net>,
    /// The packets each fault track has lost (applied together).
    drops: Mutex<[Drops; 2]>,
    disk: Mutex<DiskFigures>,
    agent_disk: Mutex<DiskFigures>,
    delay: Mutex<DelayFigures>,
    /// One client per controller, for leader lookups and digests.
    probes: Vec<Client>,
    ids: Vec<u64>,
}

impl Procs {
    fn controller_pid(&self, i: usize) -> Option<u32> {
        self.cluster.lock().unwrap().controller_pid(i)
    }

    fn agent_pid(&self, i: usize) -> Option<u32> {
        self.cluster.lock().unwrap().agent_pid(i)
    }

    /// Track `track`'s packet drops become `d` (with the other track's, in force).
    fn set_drops(&self, track: usize, d: Drops) {
        let mut all = self.drops.lock().unwrap();
        all[track] = d;
        let union: Drops = all.iter().flatten().copied().collect();
        if let Fleet::Hosts(b) = &*self.cluster.lock().unwrap() {
            if let Err(e) = b.set_losses(&union) {
                eprintln!("tranche-nemesis: {e}");
            }
        }
    }

    /// Holds a network fault for `hold`, then heals it.
    async fn drop_for(&self, track: usize, d: Drops, hold: Duration) {
        self.set_drops(track, d);
        tokio::time::sleep(hold).await;
        self.set_drops(track, Vec::new());
    }

    /// The controller that says it leads, at the highest term.
    async fn leader(&self) -> Option<usize> {
        let mut best: Option<(u64, usize)> = None;
        for (i, p) in self.probes.iter().enumerate() {
            let req = ClientRequest::Read {
                query: Query::Controllers,
                stale: true,
            };
            if let Ok(Response::Controllers(s)) = p.request_to(0, &req).await {
                if s.leader == Some(s.id) && best.is_none_or(|(t, _)| s.term > t) {
                    best = Some((s.term, i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Waits (up to `timeout`) for controller `i` to answer a read; false if it did not.
    async fn answers(&self, i: usize, timeout: Duration) -> bool {
        let req = ClientRequest::Read {
            query: Query::Controllers,
            stale: true,
        };
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Response::Controllers(_)) = self.probes[i].request_to(0, &req).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Waits (up to `timeout`) for agent `i`'s node to be up (neither unreachable nor
    /// DOWN) as a controller that answers sees it; false if it was not.
    async fn node_up(&self, i: usize, timeout: Duration) -> bool {
        let name = format!("n{i}");
        let req = ClientRequest::Read {
            query: Query::Nodes,
            stale: true,
        };
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            for p in &self.probes {
                if let Ok(Response::Nodes(ns)) = p.request_to(0, &req).await {
                    if ns.iter().any(|n| {
                        n.inventory.name.as_str() == name && n.down.is_none() && !n.unreachable
                    }) {
                        return true;
                    }
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// The agent (`n<i>`) whose node has the most GPUs allocated, as a controller sees it.
    async fn busiest(&self) -> Option<usize> {
        for p in &self.probes {
            let req = ClientRequest::Read {
                query: Query::Nodes,
                stale: true,
            };
            if let Ok(Response::Nodes(ns)) = p.request_to(0, &req).await {
                return ns
                    .iter()
                    .filter_map(|n| {
                        let i = n.inventory.name.as_str().strip_prefix('n')?.parse().ok()?;
                        Some((n.allocated.iter().flatten().count(), i))
                    })
                    .max()
                    .map(|(_, i)| i);
            }
        }
        None
    }

    async fn pick(&self, target: Target, rng: &mut StdRng) -> usize {
        let leader = self.leader().await;
        match (target, leader) {
            (Target::Leader, Some(l)) => l,
            (Target::Follower, Some(l)) => (l + rng.gen_range(1..CONTROLLERS)) % CONTROLLERS,
            (_, None) => rng.gen_range(0..CONTROLLERS),
        }
    }

    /// Applies one fault, holds it, heals it; returns what it hit.
    async fn inject(&self, track: usize, step: &Step, rng: &mut StdRng) -> String {
        let hold = Duration::from_millis(step.hold_ms);
        if let Some(net) = &self.net {
            if let Some(t) = self.bed_fault(net, track, step, rng, hold).await {
                return t;
            }
        }
        match step.fault {
            Fault::KillController { target } => {
                let i = self.pick(target, rng).await;
                self.cluster.lock().unwrap().kill(i);
                tokio::time::sleep(hold).await;
                if let Err(e) = self.cluster.lock().unwrap().start(i) {
                    eprintln!(
                        "tranche-nemesis: restarting controller {}: {e}",
                        self.ids[i]
                    );
                }
                format!("c{}", self.ids[i])
            }
            Fault::PauseLeader => {
                let i = self.pick(Target::Leader, rng).await;
                let pid = self.controller_pid(i);
                signal(pid, Signal::SIGSTOP);
                tokio::time::sleep(hold).await;
                signal(pid, Signal::SIGCONT);
                format!("c{}", self.ids[i])
            }
            Fault::Isolate { target } => {
                let i = self.pick(target, rng).await;
                self.cuts.set(&[self.ids[i]]);
                tokio::time::sleep(hold).await;
                self.cuts.set(&[]);
                format!("c{}", self.ids[i])
            }
            Fault::KillAgent { node } => {
                self.cluster.lock().unwrap().kill_agent(node);
                tokio::time::sleep(hold).await;
                let mut c = self.cluster.lock().unwrap();
                if let Err(e) = c.start_agent(node) {
                    eprintln!("tranche-nemesis: restarting agent n{node}: {e}");
                }
                format!("n{node}")
            }
            Fault::StopAgent { node } => {
                let pid = self.agent_pid(node);
                signal(pid, Signal::SIGSTOP);
                tokio::time::sleep(hold).await;
                signal(pid, Signal::SIGCONT);
                format!("n{node}")
            }
            // The bed's own faults need a bed (handled above).
            _ => format!("{:?}", step.fault),
        }
    }

    /// Runs `f` on the bed (not on 127.0.0.1), saying what failed; its result.
    fn on_bed<T>(&self, f: impl FnOnce(&mut Bed) -> Result<T, String>) -> Option<T> {
        match &mut *self.cluster.lock().unwrap() {
            Fleet::Hosts(b) => f(b).map_err(|e| eprintln!("tranche-nemesis: {e}")).ok(),
            Fleet::Local { .. } => None,
        }
    }

    /// Applies, holds and heals a fault only the bed has (the network's, a clock's, a
    /// disk's); `None` for the other kinds.
    async fn bed_fault(
        &self,
        net: &Net,
        track: usize,
        step: &Step,
        rng: &mut StdRng,
        hold: Duration,
    ) -> Option<String> {
        let others = |i: usize| -> Vec<Ipv4Addr> {
            let mut v: Vec<Ipv4Addr> = net.controllers.clone();
            v.remove(i);
            v
        };
        let (drops, target) = match step.fault {
            Fault::Partition { target } => {
                // One controller alone: the rest of the bed neither hears it nor is heard.
                let i = self.pick(target, rng).await;
                let mut rest = others(i);
                rest.extend(&net.agents);
                rest.push(net.client);
                (
                    cut(&[net.controllers[i]], &rest),
                    format!("c{}", self.ids[i]),
                )
            }
            Fault::Bridge => {
                // Two halves that share one controller: it hears both, they not each other.
                let mut order: Vec<usize> = (0..net.controllers.len()).collect();
                let turn = rng.gen_range(0..order.len());
                order.rotate_left(turn);
                let (x, z, y) = (order[0], order[1], order[2]);
                let half = net.agents.len() / 2;
                let mut one = vec![net.controllers[x]];
                one.extend(&net.agents[..half]);
                let mut two = vec![net.controllers[y], net.client];
                two.extend(&net.agents[half..]);
                let t = format!("c{}|c{}|c{}", self.ids[x], self.ids[z], self.ids[y]);
                (cut(&one, &two), t)
            }
            Fault::OneWay { target } => {
                // What a controller sends its peers is lost; what they send it arrives.
                let i = self.pick(target, rng).await;
                let from = net.controllers[i];
                let d = others(i)
                    .into_iter()
                    .map(|to| Loss {
                        from,
                        to,
                        percent: 100,
                    })
                    .collect();
                (d, format!("c{}>", self.ids[i]))
            }
            Fault::Lossy { target, percent } => {
                // Every link of a controller loses a share of its packets, both ways.
                let i = self.pick(target, rng).await;
                let mut rest = others(i);
                rest.extend(&net.agents);
                rest.push(net.client);
                let d = lossy(&[net.controllers[i]], &rest, percent);
                (d, format!("c{}~{percent}%", self.ids[i]))
            }
            Fault::SkewClock { target, offset_s } => {
                // A wall clock off by minutes: elections and timers run on the
                // monotonic clock, which stays right.
                let i = self.pick(target, rng).await;
                self.on_bed(|b| b.skew(i, offset_s.into()));
                tokio::time::sleep(hold).await;
                self.on_bed(|b| b.skew(i, 0));
                return Some(format!("c{}{offset_s:+}s", self.ids[i]));
            }
            Fault::Delay { target, max_ms } => {
                // Each packet of a controller held for its own time: late and reordered.
                let i = self.pick(target, rng).await;
                let host = self.on_bed(|b| Ok(b.controllers[i].host.clone()))?;
                let ms = faults::DELAY_MIN_MS..=u64::from(max_ms);
                let applied = self.on_bed(|b| b.delay(&host, ms)).is_some();
                tokio::time::sleep(hold).await;
                let ended = match applied {
                    true => self.on_bed(|b| b.undelay(&host.ns).unwrap_or(Err("no delay".into()))),
                    false => None,
                };
                let mut d = self.delay.lock().unwrap();
                match ended {
                    Some(s) => {
                        d.delays += 1;
                        d.packets += s.packets;
                        d.reordered += s.reordered;
                        d.max_held_ms = d.max_held_ms.max(s.max_held_ms);
                    }
                    None => d.errors += 1,
                }
                return Some(format!("c{}~{max_ms}ms", self.ids[i]));
            }
            Fault::DiskFull { target } => {
                let i = self.pick(target, rng).await;
                let with_bed = |f: &dyn Fn(&Bed) -> Result<(), String>| {
                    if let Fleet::Hosts(b) = &*self.cluster.lock().unwrap() {
                        if let Err(e) = f(b) {
                            eprintln!("tranche-nemesis: {e}");
                        }
                    }
                };
                with_bed(&|b| b.fill(i).map(|_| ()));
                tokio::time::sleep(hold).await;
                with_bed(&|b| b.unfill(i));
                // A controller that gave up on its full disk is started again.
                let exited = {
                    let mut c = self.cluster.lock().unwrap();
                    let exited = !c.is_running(i);
                    if exited {
                        if let Err(e) = c.start(i) {
                            eprintln!("tranche-nemesis: restarting c{}: {e}", self.ids[i]);
                        }
                    }
                    exited
                };
                let t0 = Instant::now();
                let back = self.answers(i, DISK_RECOVERY).await;
                self.disk.lock().unwrap().add(exited, t0.elapsed(), back);
                let how = if exited { " (exited)" } else { "" };
                return Some(format!("c{}{how}", self.ids[i]));
            }
            Fault::SkewAgentClock {
                node,
                offset_s,
                restart,
            } => {
                // An agent's wall clock off by minutes; half the time it is restarted
                // with it, and adopts its jobs. Its lease and timers run on clocks
                // that stay right.
                self.on_bed(|b| b.skew_agent(node, offset_s.into()));
                if restart {
                    tokio::time::sleep(hold / 2).await;
                    self.on_bed(|b| {
                        b.kill_agent(node);
                        b.start_agent(node)
                    });
                    tokio::time::sleep(hold - hold / 2).await;
                } else {
                    tokio::time::sleep(hold).await;
                }
                self.on_bed(|b| b.skew_agent(node, 0));
                let how = if restart { " (restarted)" } else { "" };
                return Some(format!("n{node}{offset_s:+}s{how}"));
            }
            Fault::AgentDiskFull { node } => {
                // The busiest agent's spool full: its jobs go on or are requeued, never
                // fail for it; once the space is back its node must be up again.
                let node = self.busiest().await.unwrap_or(node);
                self.on_bed(|b| b.fill_agent(node));
                tokio::time::sleep(hold).await;
                self.on_bed(|b| b.unfill_agent(node));
                let exited = self
                    .on_bed(|b| {
                        let exited = !b.agent_running(node);
                        if exited {
                            b.start_agent(node)?;
                        }
                        Ok(exited)
                    })
                    .unwrap_or(false);
                let t0 = Instant::now();
                let back = self.node_up(node, DISK_RECOVERY).await;
                self.agent_disk
                    .lock()
                    .unwrap()
                    .add(exited, t0.elapsed(), back);
                let how = if exited { " (exited)" } else { "" };
                return Some(format!("n{node}{how}"));
            }
            Fault::CutAgent { node } => {
                // The agent with the most GPUs in use, so that the cut has jobs to fence.
                let node = self.busiest().await.unwrap_or(node);
                (
                    cut(&[net.agents[node]], &net.controllers),
                    format!("n{node}"),
                )
            }
            Fault::AgentMinority { node } => {
                // The agent hears one follower only: no quorum it could heartbeat to.
                let seen = self.pick(Target::Follower, rng).await;
                let d = cut(&[net.agents[node]], &others(seen));
                (d, format!("n{node}:c{}", self.ids[seen]))
            }
            _ => return None,
        };
        self.drop_for(track, drops, hold).await;
        Some(target)
    }

    /// Runs a track's faults one after another until `until`.
    async fn track(
        &self,
        track: usize,
        steps: Vec<Step>,
        seed: u64,
        until: Instant,
        history: Arc<History>,
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        for step in steps {
            if Instant::now() >= until {
                break;
            }
            let start_us = now_us();
            let target = self.inject(track, &step, &mut rng).await;
            history.fault(FaultRecord {
                kind: step.fault.name(),
                target,
                start_us,
                healed_us: now_us(),
            });
            tokio::time::sleep(Duration::from_millis(step.gap_ms)).await;
        }
    }

    /// Ends every fault: traffic flows, stopped processes go on, dead ones restart.
    fn heal_all(&self) -> Result<(), String> {
        self.cuts.set(&[]);
        self.set_drops(0, Vec::new());
        self.set_drops(1, Vec::new());
        let mut c = self.cluster.lock().unwrap();
        if let Fleet::Hosts(b) = &*c {
            for r in b.undelay_all() {
                if let Err(e) = r {
                    eprintln!("tranche-nemesis: {e}");
                }
            }
        }
        for i in 0..c.controllers() {
            signal(c.controller_pid(i), Signal::SIGCONT);
            if !c.is_running(i) {
                c.start(i)?;
            }
        }
        for i in 0..c.spools().len() {
            signal(c.agent_pid(i), Signal::SIGCONT);
            if c.agent_dead(i) {
                c.start_agent(i)?;
            }
        }
        Ok(())
    }
}

fn tune(mut c: Client, attempt_ms: u64, retry_s: u64) -> Client {
    c.attempt_timeout = Duration::from_millis(attempt_ms);
    c.retry_for = Duration::from_secs(retry_s);
    c
}

/// A write that must succeed (setup and healing).
async fn must(client: &Client, cmd: ClientCommand) -> Result<(), String> {
    let what = format!("{cmd:?}");
    for _ in 0..5 {
        match client.command(cmd.clone()).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => return Err(format!("{what}: {e}")),
            Err(_) => continue,
        }
    }
    Err(format!("{what}: no controller answered"))
}

fn final_job(j: JobSummary, archived: bool) -> FinalJob {
    FinalJob {
        archived,
        id: j.id.0,
        name: j.name,
        status: j.status,
        priority: j.priority,
        reason: j.reason,
        preemptions: j.preemptions,
    }
}

/// Every job: those in the replicated state, as `client` reads them, and the ended
/// jobs that have left it, from the history store of every controller that answers
/// (a controller's history is its own: one that caught up by snapshot lacks the
/// records of jobs dropped before it).
async fn all_jobs(client: &Client, probes: &[Client]) -> Result<Vec<FinalJob>, String> {
    let mut jobs: BTreeMap<u64, FinalJob> = match client
        .read(Query::Jobs(JobFilter::default()), false)
        .await
        .map_err(|e| e.to_string())?
    {
        Response::Jobs(js) => js
            .into_iter()
            .map(|j| (j.id.0, final_job(j, false)))
            .collect(),
        other => return Err(format!("unexpected answer to a job list: {other:?}")),
    };
    for p in probes {
        let mut before = None;
        loop {
            let req = ClientRequest::Read {
                query: Query::History(HistoryFilter {
                    limit: MAX_HISTORY_PAGE,
                    before,
                    ..Default::default()
                }),
                stale: true,
            };
            let Ok(Response::History(page)) = p.request_to(0, &req).await else {
                break;
            };
            for e in page.jobs.into_iter().filter(|e| e.archived) {
                jobs.entry(e.job.id.0)
                    .or_insert_with(|| final_job(e.job, true));
            }
            match page.next {
                Some(c) => before = Some(c),
                None => break,
            }
        }
    }
    Ok(jobs.into_values().collect())
}

fn settled(jobs: &[FinalJob]) -> bool {
    jobs.iter().all(FinalJob::settled)
}

async fn digests(probes: &[Client]) -> check::Digests {
    let mut out = Vec::new();
    for p in probes {
        let req = ClientRequest::Read {
            query: Query::Digest,
            stale: true,
        };
        out.push(match p.request_to(0, &req).await {
            Ok(Response::Digest(d)) => Some((d.applied, d.digest)),
            _ => None,
        });
    }
    out
}

/// The settings a run's controllers and agents get: on the bed, `down_after_s`
/// exceeds `fence_after_s` plus the agents' 10 s orphan grace (DESIGN §4), so that a
/// partitioned agent has stopped its jobs before they are requeued elsewhere.
pub struct Timing {
    pub down_after_s: u64,
    pub fence_after_s: u64,
}

impl Timing {
    pub fn of(hosts: bool) -> Timing {
        match hosts {
            true => Timing {
                down_after_s: HOSTS_DOWN_AFTER_S,
                fence_after_s: HOSTS_FENCE_AFTER_S,
            },
            false => Timing {
                down_after_s: DOWN_AFTER_S,
                fence_after_s: 10,
            },
        }
    }

    fn controller_config(&self, job_hot_s: u64) -> String {
        format!(
            "[agents]\nunreachable_after_s = 1\ndown_after_s = {}\n\
             [retention]\njob_hot_s = {job_hot_s}\ncheck_s = 1\n",
            self.down_after_s
        )
    }

    fn agent_config(&self) -> String {
        format!(
            "heartbeat_ms = 300\nfence_after_s = {}\n",
            self.fence_after_s
        )
    }
}

/// The bed a `--hosts` run uses: its daemons and settings (see [`Timing`]).
pub fn bed_options(args: &Args) -> Result<BedOptions, String> {
    let (tranched, agent_bin) = binaries()?;
    let t = Timing::of(true);
    Ok(BedOptions {
        agents: args.agents,
        tranched,
        agent_bin,
        controller_extra: t.controller_config(args.job_hot_s),
        agent_extra: t.agent_config(),
        gpus: format!("{GPUS_PER_NODE} x h100"),
        log_filter: std::env::var("TRANCHE_LOG").unwrap_or_else(|_| "info,raft=warn".into()),
        keep: args.keep,
        faketime: tranche_local::rig::find_faketime(),
        disk_mib: Some(HOSTS_DISK_MIB),
        agent_disk_mib: Some(HOSTS_AGENT_DISK_MIB),
    })
}

/// 3 controllers and 3 agents on 127.0.0.1, each controller behind its relay.
async fn loopback(args: &Args, dir: &Path, cuts: &Arc<Cuts>) -> Result<Fleet, String> {
    let (tranched, agent_bin) = binaries()?;
    let t = Timing::of(false);
    let mut opts = LocalOptions::new(tranched);
    opts.fault_injection = false;
    opts.extra_config = t.controller_config(args.job_hot_s);
    opts.log_filter = std::env::var("TRANCHE_LOG").unwrap_or_else(|_| "info,raft=warn".into());
    let mut cluster = LocalCluster::create(dir, CONTROLLERS, opts)?;

    // Each controller listens privately; the others reach it through its relay.
    for i in 0..cluster.controllers.len() {
        let (id, public) = {
            let m = &cluster.controllers[i].member;
            let public: SocketAddr = m.peer_addr.parse().map_err(|_| "peer_addr")?;
            (m.id, public)
        };
        // The relay takes the port the cluster held for the peer address; the
        // controller is handed a private one.
        let front = cluster
            .ports
            .take_udp(public)
            .ok_or_else(|| format!("no port held for {public}"))?;
        let private: SocketAddr = cluster.reserve_udp()?.parse().map_err(|_| "peer_listen")?;
        cluster.prepend_config(i, &format!("peer_listen = \"{private}\""))?;
        relay::spawn(id, front, private, cuts.clone())
            .await
            .map_err(|e| format!("relay on {public}: {e}"))?;
        cuts.add_source(private, id);
    }
    cluster.start_all()?;
    let admin = tune(cluster.client(Role::Admin, "admin")?, 1_000, 30);
    cluster
        .wait_leader(&admin, Duration::from_secs(30))
        .await
        .ok_or("no leader was elected within 30 s")?;
    for cmd in workload::policy(AGENTS, 0) {
        must(&admin, cmd).await?;
    }
    for n in 0..AGENTS {
        cluster.add_agent(
            &agent_bin,
            &format!("n{n}"),
            &format!("{GPUS_PER_NODE} x h100"),
            &t.agent_config(),
        )?;
    }
    Ok(Fleet::Local { cluster, agent_bin })
}

/// The cluster, on the bed or on 127.0.0.1, with the policy in and every agent's node
/// registered; its processes, and an admin client.
async fn setup(
    args: &Args,
    bed: Option<Bed>,
    dir: &Path,
    cuts: &Arc<Cuts>,
) -> Result<(Arc<Procs>, Client), String> {
    let hosts = bed.is_some();
    let (fleet, net) = match bed {
        Some(b) => {
            let net = Net {
                controllers: b.controllers.iter().map(|c| c.host.addr).collect(),
                agents: b.agents.iter().map(|a| a.host.addr).collect(),
                client: b.client.addr,
            };
            (Fleet::Hosts(b), Some(net))
        }
        None => (loopback(args, dir, cuts).await?, None),
    };
    let agents = fleet.spools().len();
    let admin = tune(fleet.client(Role::Admin, "admin", None)?, 1_000, 30);
    let probes = (0..CONTROLLERS)
        .map(|i| {
            fleet
                .client(Role::Admin, "admin", Some(i))
                .map(|c| tune(c, 500, 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if hosts {
        wait_leader(&probes, Duration::from_secs(30)).await?;
        for cmd in workload::policy(agents, 0) {
            must(&admin, cmd).await?;
        }
    }
    let t0 = Instant::now();
    loop {
        if let Ok(Response::Nodes(ns)) = admin.read(Query::Nodes, false).await {
            if ns.len() == agents && ns.iter().all(|n| n.schedulable()) {
                break;
            }
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err("the agents did not register within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let procs = Arc::new(Procs {
        cluster: Mutex::new(fleet),
        cuts: cuts.clone(),
        net,
        drops: Mutex::new([Vec::new(), Vec::new()]),
        disk: Mutex::default(),
        agent_disk: Mutex::default(),
        delay: Mutex::default(),
        probes,
        ids: (1..=CONTROLLERS as u64).collect(),
    });
    Ok((procs, admin))
}

pub async fn run(args: Args, seed: u64, bed: Option<Bed>) -> Result<RunOutput, String> {
    let hosts = bed.is_some();
    let timing = Timing::of(hosts);
    let cuts = Arc::new(Cuts::default());
    let (dir, tmp) = match (&bed, &args.dir) {
        (Some(b), _) => (b.dir.clone(), None),
        (None, Some(d)) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            (d.clone(), None)
        }
        (None, None) => {
            let t = tempfile::Builder::new()
                .prefix("tranche-nemesis-")
                .tempdir()
                .map_err(|e| e.to_string())?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let (procs, admin) = setup(&args, bed, &dir, &cuts).await?;
    let agents = procs.cluster.lock().unwrap().spools().len();
    let nodes: Vec<String> = (0..agents).map(|n| format!("n{n}")).collect();

    // Load and faults.
    let history = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new(Ctx {
        history: history.clone(),
        stop: stop.clone(),
        nodes: nodes.clone(),
        long_jobs: hosts,
        time_limit_s: hosts.then_some(HOSTS_TIME_LIMIT_S),
    });
    let started = Instant::now();
    let mut clients = Vec::new();
    {
        let c = procs.cluster.lock().unwrap();
        for n in 0..args.clients {
            let user = format!("user{n}");
            let client = tune(c.client(Role::User, &user, None)?, 1_000, 20);
            clients.push(tokio::spawn(workload::user(
                ctx.clone(),
                client,
                n,
                user,
                seed.wrapping_add(100 + n as u64),
            )));
        }
        let admin2 = tune(c.client(Role::Admin, "admin", None)?, 1_000, 20);
        let operator = tune(c.client(Role::Operator, "operator", None)?, 1_000, 20);
        clients.push(tokio::spawn(workload::operator(
            ctx.clone(),
            admin2,
            operator,
            args.clients,
            seed.wrapping_add(99),
        )));
    }
    let shape = Shape {
        duration_ms: args.duration * 1000,
        agents,
        down_after_ms: timing.down_after_s * 1000,
        fence_after_ms: timing.fence_after_s * 1000,
        skew: hosts && tranche_local::rig::find_faketime().is_some(),
        disk: hosts,
        agent_disk: hosts && !args.no_agent_disk_full,
        delay: hosts && crate::bed::find_iptables().is_some(),
    };
    let schedule = match hosts {
        true => faults::schedule_hosts(seed, shape),
        false => faults::schedule(seed, shape),
    };
    let until = started + Duration::from_secs(args.duration);
    let tracks = [
        (0, schedule.controllers, seed.wrapping_add(1)),
        (1, schedule.agents, seed.wrapping_add(2)),
    ]
    .map(|(track, steps, s)| {
        let procs = procs.clone();
        let history = history.clone();
        tokio::spawn(async move { procs.track(track, steps, s, until, history).await })
    });
    tokio::time::sleep_until(until.into()).await;
    stop.store(true, Ordering::Relaxed);
    for t in tracks {
        let _ = t.await;
    }
    for c in clients {
        let _ = c.await;
    }

    // Heal, undo the operators' changes, let every job end.
    procs.heal_all()?;
    let settle_start = Instant::now();
    for n in &nodes {
        must(
            &admin,
            ClientCommand::ResumeNode {
                node: n.as_str().into(),
            },
        )
        .await?;
    }
    for cmd in workload::policy(agents, 0) {
        must(&admin, cmd).await?;
    }
    // Settling ends when every job has ended or waits with a reason; it gives up when no
    // job has ended for `STALL` (something is stuck), or after `--settle` seconds.
    const STALL: Duration = Duration::from_secs(60);
    let deadline = settle_start + Duration::from_secs(args.settle);
    let mut jobs = all_jobs(&admin, &procs.probes).await?;
    let ended = |js: &[FinalJob]| js.iter().filter(|j| j.status.is_terminal()).count();
    let (mut last_ended, mut last_progress) = (ended(&jobs), Instant::now());
    while !settled(&jobs) && Instant::now() < deadline && last_progress.elapsed() < STALL {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(j) = all_jobs(&admin, &procs.probes).await {
            jobs = j;
        }
        if ended(&jobs) > last_ended {
            (last_ended, last_progress) = (ended(&jobs), Instant::now());
        }
    }
    let settle_s = settle_start.elapsed().as_secs_f64();

    // Stop the agents so the state stops changing, then compare the controllers.
    {
        let mut c = procs.cluster.lock().unwrap();
        for (i, (_, spool)) in c.spools().into_iter().enumerate() {
            c.kill_agent(i);
            if let Ok(execs) = tranche_agent::exec::Executors::new(&spool) {
                for a in execs.adopt().unwrap_or_default() {
                    let _ = a.kill_all();
                }
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(timing.down_after_s + 2)).await;
    let mut ds = digests(&procs.probes).await;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(30) {
        let first = ds.first().copied().flatten();
        if first.is_some() && ds.iter().all(|d| *d == first) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        ds = digests(&procs.probes).await;
    }

    let ledgers = procs
        .cluster
        .lock()
        .unwrap()
        .spools()
        .into_iter()
        .map(|(node, spool)| {
            let (entries, bad_lines) =
                tranche_agent::exec::ledger::read(&spool).unwrap_or_default();
            NodeLedger {
                node,
                entries,
                bad_lines,
            }
        })
        .collect::<Vec<_>>();
    let ops = history.ops.lock().unwrap().clone();
    let faults = history.faults.lock().unwrap().clone();
    let report = check::check(&check::Input {
        ops: &ops,
        faults: &faults,
        jobs: &jobs,
        ledgers: &ledgers,
        digests: &ds,
        fence: hosts.then_some(check::Fence {
            after_us: timing.fence_after_s * 1_000_000,
            grace_us: tranche_agent::daemon::ORPHAN_GRACE.as_micros() as u64,
            slack_us: 2_000_000,
        }),
    });
    write_history(&dir, &ops, &faults);
    let disk_full = procs.disk.lock().unwrap().clone();
    let agent_disk_full = procs.agent_disk.lock().unwrap().clone();
    let delay = procs.delay.lock().unwrap().clone();
    let summary = Summary {
        passed: report.passed()
            && disk_full.unrecovered == 0
            && agent_disk_full.unrecovered == 0
            && delay.errors == 0,
        disk_full,
        agent_disk_full,
        delay,
        seed,
        duration_s: args.duration,
        relay_dropped: cuts.dropped.load(Ordering::Relaxed),
        report,
        elapsed_s: started.elapsed().as_secs_f64(),
        settle_s,
    };
    let keep = args.keep || !summary.passed;
    if let Fleet::Hosts(b) = &mut *procs.cluster.lock().unwrap() {
        b.keep |= keep;
    }
    drop(procs);
    if let Some(t) = tmp {
        if keep {
            let _ = t.keep();
        }
    }
    Ok(RunOutput { summary, dir })
}

fn write_history(dir: &Path, ops: &[crate::history::Op], faults: &[FaultRecord]) {
    let v = serde_json::json!({ "ops": ops, "faults": faults });
    let _ = std::fs::write(dir.join("history.json"), v.to_string());
}

/// `tranche-nemesis bed`: the bed with the run's policy, until Ctrl-C or SIGTERM.
/// Prints the bed (`bed TAG DIR`), each host (`host NAME ADDRESS NAMESPACE`), the
/// CLI's settings, and `ready`.
pub fn serve_bed(args: &Args, fail_when_up: bool) -> std::process::ExitCode {
    let bed = match bed_options(args).and_then(Bed::up) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tranche-nemesis bed: the test bed could not be made: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = match bed.runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tranche-nemesis bed: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match rt.block_on(bed_ready(&bed, fail_when_up)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "tranche-nemesis bed: {e} (the daemons' logs are in {}, removed now)",
                bed.dir.display()
            );
            std::process::ExitCode::from(2)
        }
    }
}

async fn bed_ready(bed: &Bed, fail_when_up: bool) -> Result<(), String> {
    let probes = (0..CONTROLLERS)
        .map(|i| {
            bed.client(Role::Admin, "admin", Some(i))
                .map(|c| tune(c, 500, 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    wait_leader(&probes, Duration::from_secs(30)).await?;
    let admin = tune(bed.client(Role::Admin, "admin", None)?, 1_000, 30);
    for cmd in workload::policy(bed.agents.len(), 0) {
        must(&admin, cmd).await?;
    }
    tranche_local::wait_until(
        "the agents' nodes",
        Duration::from_secs(30),
        async || match admin.read(Query::Nodes, false).await {
            Ok(Response::Nodes(ns)) if ns.len() == bed.agents.len() => Ok(()),
            Ok(Response::Nodes(ns)) => Err(format!("{} nodes registered", ns.len())),
            other => Err(format!("{other:?}")),
        },
    )
    .await?;
    println!("bed {} {}", bed.tag, bed.dir.display());
    for h in bed.hosts() {
        println!("host {} {} {}", h.name, h.addr, h.ns);
    }
    let user = bed.cli_config(Role::User, "user0")?;
    let admin_cfg = bed.cli_config(Role::Admin, "admin")?;
    println!("export TRANCHE_CONFIG={}", user.display());
    println!("ready");
    eprintln!(
        "The bed is up in {}: run the CLI on the client host, as user0 (queue q; shares \
         reserve, lend, borrow; the admin's config is {}):\n  \
         ip netns exec {} env TRANCHE_CONFIG={} tranche jobs\n  \
         ip netns exec {} $SHELL    # a shell on the client host\n\
         Ctrl-C removes the bed.",
        bed.dir.display(),
        admin_cfg.display(),
        bed.client.ns,
        user.display(),
        bed.client.ns,
    );
    if fail_when_up {
        panic!("failing on purpose with the bed up (--fail-when-up)");
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("tranche-nemesis bed: removing the bed");
    Ok(())
}

/// `tranche-nemesis failover`: the time from losing the leader to the next acknowledged
/// write, `rounds` times each way: the leader killed (SIGKILL, restarted after), and the
/// leader partitioned away (on the bed cut from every host; on 127.0.0.1 cut from its
/// peers by the relays, clients still reaching it), then healed. No other load runs.
pub async fn failover(args: Args, bed: Option<Bed>, rounds: usize) -> Result<String, String> {
    if rounds == 0 {
        return Err("rounds: must be at least 1".into());
    }
    let hosts = bed.is_some();
    let cuts = Arc::new(Cuts::default());
    let tmp = tempfile::Builder::new()
        .prefix("tranche-nemesis-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let dir = match &bed {
        Some(b) => b.dir.clone(),
        None => tmp.path().to_path_buf(),
    };
    let (procs, _admin) = setup(&args, bed, &dir, &cuts).await?;
    let mut kill_ms = Vec::new();
    let mut partition_ms = Vec::new();
    for round in 0..rounds * 2 {
        let partition = round % 2 == 1;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        wait_leader(&procs.probes, Duration::from_secs(15)).await?;
        let leader = procs.leader().await.ok_or("no leader before the fault")?;
        // Connected before the fault, as a busy client would be.
        let probe = tune(
            procs
                .cluster
                .lock()
                .unwrap()
                .client(Role::User, "user0", None)?,
            300,
            30,
        );
        let _ = probe.read(Query::Controllers, true).await;
        match (partition, &procs.net) {
            (false, _) => procs.cluster.lock().unwrap().kill(leader),
            (true, Some(net)) => {
                let mut rest: Vec<Ipv4Addr> = net.controllers.clone();
                rest.remove(leader);
                rest.extend(&net.agents);
                rest.push(net.client);
                procs.set_drops(0, cut(&[net.controllers[leader]], &rest));
            }
            (true, None) => procs.cuts.set(&[procs.ids[leader]]),
        }
        let t0 = Instant::now();
        let name = format!("failover-{round}");
        let mut spec = JobSpec::new(&name, "q", "borrow", "user0", "h100", 1, 1);
        spec.client_token = Some(tranche_client::new_token());
        spec.command = vec!["true".into()];
        let acked = probe.submit(spec).await;
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        // Heal before judging, so that a failed round leaves the cluster whole.
        procs.set_drops(0, Vec::new());
        procs.cuts.set(&[]);
        procs.cluster.lock().unwrap().start(leader)?;
        acked.map_err(|e| format!("round {round}: no write acknowledged: {e}"))?;
        match partition {
            true => partition_ms.push(ms),
            false => kill_ms.push(ms),
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(serde_json::json!({
        "on": if hosts { "hosts" } else { "loopback" },
        "rounds": rounds,
        "kill_ms_median": median(&mut kill_ms),
        "kill_ms": kill_ms,
        "partition_ms_median": median(&mut partition_ms),
        "partition_ms": partition_ms,
    })
    .to_string())
}
