//! One run: the cluster, the clients, the two fault tracks, the settling, the checks.

use std::net::SocketAddr;
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
use tranche_proto::ClientCommand;
use tranche_proto::{
    ClientRequest, HistoryFilter, JobFilter, JobSummary, Query, Response, MAX_HISTORY_PAGE,
};
use tranche_tls::Role;

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

#[derive(Debug, Serialize)]
pub struct Summary {
    pub passed: bool,
    pub seed: u64,
    pub duration_s: u64,
    #[serde(flatten)]
    pub report: Report,
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
fn binaries() -> Result<(PathBuf, PathBuf), String> {
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

/// The cluster's processes, shared by the fault tracks (locked only for process
/// operations, never across a wait).
struct Procs {
    cluster: Mutex<LocalCluster>,
    agent_bin: PathBuf,
    cuts: Arc<Cuts>,
    /// One client per controller, for leader lookups and digests.
    probes: Vec<Client>,
    ids: Vec<u64>,
}

impl Procs {
    fn controller_pid(&self, i: usize) -> Option<u32> {
        let c = self.cluster.lock().unwrap();
        c.controllers[i].child.as_ref().map(|c| c.id())
    }

    fn agent_pid(&self, i: usize) -> Option<u32> {
        let c = self.cluster.lock().unwrap();
        c.agents[i].child.as_ref().map(|c| c.id())
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

    async fn pick(&self, target: Target, rng: &mut StdRng) -> usize {
        let leader = self.leader().await;
        match (target, leader) {
            (Target::Leader, Some(l)) => l,
            (Target::Follower, Some(l)) => (l + rng.gen_range(1..CONTROLLERS)) % CONTROLLERS,
            (_, None) => rng.gen_range(0..CONTROLLERS),
        }
    }

    /// Applies one fault, holds it, heals it; returns what it hit.
    async fn inject(&self, step: &Step, rng: &mut StdRng) -> String {
        let hold = Duration::from_millis(step.hold_ms);
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
                if let Err(e) = c.start_agent(&self.agent_bin, node) {
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
        }
    }

    /// Runs a track's faults one after another until `until`.
    async fn track(&self, steps: Vec<Step>, seed: u64, until: Instant, history: Arc<History>) {
        let mut rng = StdRng::seed_from_u64(seed);
        for step in steps {
            if Instant::now() >= until {
                break;
            }
            let start_us = now_us();
            let target = self.inject(&step, &mut rng).await;
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
        let mut c = self.cluster.lock().unwrap();
        for i in 0..c.controllers.len() {
            signal(
                c.controllers[i].child.as_ref().map(|c| c.id()),
                Signal::SIGCONT,
            );
            if !c.is_running(i) {
                c.start(i)?;
            }
        }
        for i in 0..c.agents.len() {
            signal(c.agents[i].child.as_ref().map(|c| c.id()), Signal::SIGCONT);
            let dead = match &mut c.agents[i].child {
                Some(ch) => ch.try_wait().ok().flatten().is_some(),
                None => true,
            };
            if dead {
                c.start_agent(&self.agent_bin, i)?;
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

pub async fn run(args: Args, seed: u64) -> Result<RunOutput, String> {
    let (dir, tmp) = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            (d.clone(), None)
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("tranche-nemesis-")
                .tempdir()
                .map_err(|e| e.to_string())?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let (tranched, agent_bin) = binaries()?;
    let mut opts = LocalOptions::new(tranched);
    opts.fault_injection = false;
    opts.extra_config = format!(
        "[agents]\nunreachable_after_s = 1\ndown_after_s = {DOWN_AFTER_S}\n\
         [retention]\njob_hot_s = {}\ncheck_s = 1\n",
        args.job_hot_s
    );
    opts.log_filter = std::env::var("TRANCHE_LOG").unwrap_or_else(|_| "info,raft=warn".into());
    let mut cluster = LocalCluster::create(&dir, CONTROLLERS, opts)?;

    // Each controller listens privately; the others reach it through its relay.
    let cuts = Arc::new(Cuts::default());
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
    let nodes: Vec<String> = (0..AGENTS).map(|n| format!("n{n}")).collect();
    for n in &nodes {
        cluster.add_agent(
            &agent_bin,
            n,
            &format!("{GPUS_PER_NODE} x h100"),
            "heartbeat_ms = 300\nfence_after_s = 10\n",
        )?;
    }
    let t0 = Instant::now();
    loop {
        if let Ok(Response::Nodes(ns)) = admin.read(Query::Nodes, false).await {
            if ns.len() == AGENTS && ns.iter().all(|n| n.schedulable()) {
                break;
            }
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err("the agents did not register within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let probes = (0..CONTROLLERS)
        .map(|i| {
            cluster
                .client_of(i, Role::Admin, "admin")
                .map(|c| tune(c, 500, 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ids = cluster.controllers.iter().map(|c| c.member.id).collect();
    let procs = Arc::new(Procs {
        cluster: Mutex::new(cluster),
        agent_bin,
        cuts: cuts.clone(),
        probes,
        ids,
    });

    // Load and faults.
    let history = Arc::new(History::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ctx = Arc::new(Ctx {
        history: history.clone(),
        stop: stop.clone(),
        nodes: nodes.clone(),
    });
    let started = Instant::now();
    let mut clients = Vec::new();
    {
        let c = procs.cluster.lock().unwrap();
        for n in 0..args.clients {
            let user = format!("user{n}");
            let client = tune(c.client(Role::User, &user)?, 1_000, 20);
            clients.push(tokio::spawn(workload::user(
                ctx.clone(),
                client,
                n,
                user,
                seed.wrapping_add(100 + n as u64),
            )));
        }
        let admin2 = tune(c.client(Role::Admin, "admin")?, 1_000, 20);
        let operator = tune(c.client(Role::Operator, "operator")?, 1_000, 20);
        clients.push(tokio::spawn(workload::operator(
            ctx.clone(),
            admin2,
            operator,
            args.clients,
            seed.wrapping_add(99),
        )));
    }
    let schedule = faults::schedule(
        seed,
        Shape {
            duration_ms: args.duration * 1000,
            agents: AGENTS,
            down_after_ms: DOWN_AFTER_S * 1000,
        },
    );
    let until = started + Duration::from_secs(args.duration);
    let tracks = [
        (schedule.controllers, seed.wrapping_add(1)),
        (schedule.agents, seed.wrapping_add(2)),
    ]
    .map(|(steps, s)| {
        let procs = procs.clone();
        let history = history.clone();
        tokio::spawn(async move { procs.track(steps, s, until, history).await })
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
    for cmd in workload::policy(AGENTS, 0) {
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
        for i in 0..c.agents.len() {
            c.kill_agent(i);
            if let Ok(execs) = tranche_agent::exec::Executors::new(&c.agents[i].spool) {
                for a in execs.adopt().unwrap_or_default() {
                    let _ = a.kill_all();
                }
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(DOWN_AFTER_S + 2)).await;
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

    let ledgers = {
        let c = procs.cluster.lock().unwrap();
        c.agents
            .iter()
            .map(|a| {
                let (entries, bad_lines) =
                    tranche_agent::exec::ledger::read(&a.spool).unwrap_or_default();
                NodeLedger {
                    node: a.node.clone(),
                    entries,
                    bad_lines,
                }
            })
            .collect::<Vec<_>>()
    };
    let ops = history.ops.lock().unwrap().clone();
    let faults = history.faults.lock().unwrap().clone();
    let report = check::check(&check::Input {
        ops: &ops,
        faults: &faults,
        jobs: &jobs,
        ledgers: &ledgers,
        digests: &ds,
    });
    write_history(&dir, &ops, &faults);
    let summary = Summary {
        passed: report.passed(),
        seed,
        duration_s: args.duration,
        relay_dropped: cuts.dropped.load(Ordering::Relaxed),
        report,
        elapsed_s: started.elapsed().as_secs_f64(),
        settle_s,
    };
    drop(procs);
    let keep = args.keep || !summary.passed;
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
