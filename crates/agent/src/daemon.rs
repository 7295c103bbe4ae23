//! The agent's main loop: register, heartbeat, learn the node's work from the
//! controllers (a long-poll that answers as soon as a placement or a stop is
//! committed), start and stop attempts through the executors, report their progress,
//! and fence itself when it has lost the controllers for `fence_after`.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{debug, info, warn};
use tranche_client::{Client, ClientError};
use tranche_model::{JobId, JobStatus, NodeInventory};
use tranche_proto::ClientCommand;
use tranche_proto::{ApiError, NodeWork, Query, Response, WorkItem};
use tranche_state::{ApplyError, Progress};

use crate::config::AgentConfig;
use crate::exec::{
    signal_number, Attempt, AttemptNo, Executors, ExitStatus, OutputFile, StopOutcome,
};
use crate::inventory::{FakeInventory, Inventory, NvmlInventory, UnitMap};
use crate::launch;

/// How long the agent's long poll for its node's work waits when nothing changes. A
/// change (a placement, a stop) is answered at once; heartbeats, not this poll, keep the
/// node alive, so a long wait costs nothing but keeps the requests of an idle node few.
const LONG_POLL_MS: u32 = 10_000;

/// The grace given to an attempt the controllers no longer list, to an attempt past its
/// time limit, and to every attempt when the agent fences itself: a job's own grace
/// reaches the agent only with a stop order.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(10);

/// How long an attempt's setup may take before the agent reports it STARTING.
const STARTING_AFTER: Duration = Duration::from_millis(100);

/// How often the monitor looks for every attempt's end in the spool, watched or not.
const SWEEP: Duration = Duration::from_secs(1);

/// How many acknowledged attempts are cleared at once (see `Agent::clearing`).
const CLEARING: u32 = 2;

/// How long a stopping agent waits for the clearing of attempts already acknowledged.
const CLEARING_ON_STOP: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Inventory(#[from] crate::inventory::InventoryError),
    #[error("executors: {0}")]
    Exec(#[from] crate::exec::ExecError),
    #[error("client: {0}")]
    Client(String),
}

struct Local {
    attempt: Arc<Attempt>,
    /// The checkpoint signal of the job, as the work item gave it.
    signal: String,
    running: RunningReport,
    stopping: bool,
    /// When the job's time limit ends (counted from its start on this agent).
    time_limit_at: Option<Instant>,
    /// Why the agent itself stopped the attempt, for the exit report.
    stopped_for: Option<String>,
    /// False while the attempt's shim is known to run (the monitor waits on its pidfd,
    /// which has not fired): its end is then not looked for in the spool.
    look: Arc<AtomicBool>,
    /// The monitor has tried to watch the shim's pidfd.
    watched: bool,
}

impl Local {
    fn new(attempt: Arc<Attempt>, signal: String, time_limit_at: Option<Instant>) -> Local {
        Local {
            attempt,
            signal,
            running: RunningReport::Unsent,
            stopping: false,
            time_limit_at,
            stopped_for: None,
            look: Arc::new(AtomicBool::new(true)),
            watched: false,
        }
    }

    /// How the attempt ended; `None` while it runs. Reads the spool only once the shim
    /// is gone, or when it is not watched.
    fn exit(&self) -> Option<ExitStatus> {
        if !self.look.load(Ordering::Acquire) {
            return None;
        }
        self.attempt.exit()
    }
}

/// Where the report that an attempt runs stands: sent once, by whoever starts the
/// attempt or, for one adopted after a restart or whose report was not delivered, by
/// the next reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunningReport {
    Unsent,
    /// On its way (the attempt's start, or a reconcile, sends it).
    Sending,
    Sent,
}

/// An attempt on this node: its job and attempt number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    job: JobId,
    attempt: AttemptNo,
}

impl Key {
    /// The attempt a work item names.
    fn of(item: &WorkItem) -> Key {
        Key {
            job: item.job,
            attempt: AttemptNo(item.attempt),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job {} attempt {}", self.job, self.attempt)
    }
}

pub struct Agent {
    cfg: AgentConfig,
    client: Client,
    execs: Arc<Executors>,
    inventory: NodeInventory,
    fake_devices: bool,
    /// Read again every few seconds for GPU health.
    gpus: Box<dyn Inventory>,
    /// The drain reason this agent asked for, once asked.
    drained_for: Mutex<Option<String>>,
    local: Mutex<HashMap<Key, Local>>,
    /// The log port (`tranche logs`), bound in `new`.
    logs: quinn::Endpoint,
    /// The log port's limits: connections per identity, streams, request bytes, the
    /// frame deadline; it also closes connections whose certificate is revoked.
    logs_gate: Arc<tranche_tls::Gate>,
    last_contact: Mutex<Instant>,
    fenced: AtomicBool,
    /// Attempts whose end on this node the controllers have: a gang's attempt stays
    /// placed here until its last member ends, and this node's part of it must be
    /// neither started again nor reported lost meanwhile.
    ended_here: Mutex<std::collections::HashSet<Key>>,
    /// Attempts being started (each on its own task, so that the attempts of one
    /// placement start side by side): not started again meanwhile.
    /// With the GPUs each holds.
    starting: Mutex<HashMap<Key, Vec<tranche_model::GpuIndex>>>,
    /// Ended attempts whose output is being moved to `<spool>/logs`: no longer in
    /// `local`, not yet kept. The log port waits for them.
    filing: Mutex<std::collections::HashSet<Key>>,
    /// Notified when a watched shim has gone.
    shim_gone: Arc<tokio::sync::Notify>,
    /// Acknowledged attempts are cleared [`CLEARING`] at a time: clearing (files moved
    /// and removed, the cgroup removed) takes the same directory and cgroup locks as an
    /// attempt's start, and many at once would make the starts wait behind them.
    clearing: tokio::sync::Semaphore,
    /// Attempts whose exit report is on its way: not reported again meanwhile.
    reporting: Mutex<std::collections::HashSet<Key>>,
}

/// Why an attempt did not start.
enum StartError {
    /// The job may not run as its user here, or names output files it cannot have
    /// (see [`launch`]).
    Refused(launch::NotStarted),
    /// The executor could not start it.
    Exec(crate::exec::ExecError),
}

/// Reads the node's GPUs through the configured backend and builds its inventory.
pub fn node_inventory(
    cfg: &AgentConfig,
) -> Result<(NodeInventory, bool, Box<dyn Inventory>), AgentError> {
    let (inv, map): (Box<dyn Inventory>, UnitMap) = if cfg.inventory == "fake" {
        let mut f = FakeInventory::parse(cfg.fake.as_deref().unwrap_or(""), &cfg.node)?;
        for &i in &cfg.fake_unhealthy {
            f.set_unhealthy(i, "declared unhealthy in the agent config (fake_unhealthy)");
        }
        let map = f.unit_map();
        (Box::new(f), map)
    } else {
        let map = UnitMap {
            by_product: cfg.units.clone(),
            node_override: cfg.labels.get("tranche.unit").cloned(),
        };
        (Box::new(NvmlInventory::open()?), map)
    };
    let mut gpus = Vec::new();
    for g in inv.gpus()? {
        gpus.push(g.to_model(map.unit_for(&g)?));
    }
    let cpus = cfg.cpus.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    });
    let memory_mb = cfg.memory_mb.unwrap_or_else(host_memory_mb);
    Ok((
        NodeInventory {
            name: cfg.node.as_str().into(),
            address: cfg.advertised_address(),
            labels: cfg.labels.clone(),
            gpus,
            cpus,
            memory_mb,
        },
        cfg.inventory == "fake",
        inv,
    ))
}

/// On a gang's rank 0, whether the attempt's `MASTER_PORT` is free, so that a job
/// whose rendezvous port another program holds fails at once with a message that says
/// so, instead of hanging in its launcher. Another attempt of the job gets another port.
fn rendezvous_port_free(rank: u32, port: u16) -> Result<(), String> {
    if rank != 0 {
        return Ok(());
    }
    match std::net::TcpListener::bind(("0.0.0.0", port)) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "MASTER_PORT {port} is not free on this node (rank 0): {e}; another attempt \
             gets another port from the agent's rendezvous_ports"
        )),
    }
}

fn host_memory_mb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024)
        .unwrap_or(0)
}

impl Agent {
    pub fn new(cfg: AgentConfig) -> Result<Arc<Agent>, AgentError> {
        let (mut inventory, fake_devices, gpus) = node_inventory(&cfg)?;
        let execs = Arc::new(
            Executors::open(
                &cfg.spool_dir,
                cfg.attempts_dir.as_deref(),
                cfg.cgroup_mode(),
            )?
            .with_policy(cfg.job_policy(inventory.cpus, inventory.memory_mb, inventory.gpus.len()))
            .with_image_policy(cfg.image_policy()),
        );
        info!(cgroups = %execs.cgroup_summary(), "executors ready");
        let tls = cfg.tls.clone();
        let mut client = Client::new(cfg.controller_addrs(), &tls)
            .map_err(|e| AgentError::Client(e.to_string()))?;
        let certs =
            tranche_tls::CertVerifier::new(&tls).map_err(|e| AgentError::Client(e.to_string()))?;
        let mut server = tranche_tls::server_config_with(&tls, &certs)
            .map_err(|e| AgentError::Client(e.to_string()))?;
        let limits = tranche_tls::QuicLimits::default();
        tranche_tls::only_client_streams(&mut server, tranche_tls::ClientStreams::Bidi, &limits);
        let logs_gate = tranche_tls::Gate::new(limits, certs);
        let addr: std::net::SocketAddr = cfg.logs_addr.parse().expect("validated");
        let logs = quinn::Endpoint::server(server, addr)
            .map_err(|e| AgentError::Client(format!("cannot listen on logs_addr {addr}: {e}")))?;
        let port = logs.local_addr().map(|a| a.port()).unwrap_or(addr.port());
        let host = if addr.ip().is_unspecified() {
            inventory.address.clone()
        } else {
            addr.ip().to_string()
        };
        inventory
            .labels
            .insert(tranche_proto::LOGS_LABEL.into(), format!("{host}:{port}"));
        let (lo, hi) = cfg.rendezvous_range();
        inventory.labels.insert(
            tranche_proto::RENDEZVOUS_PORTS_LABEL.into(),
            format!("{lo}-{hi}"),
        );
        client.attempt_timeout = Duration::from_secs(3);
        client.retry_for = Duration::from_secs(5);
        let agent = Agent {
            cfg,
            client,
            execs,
            inventory,
            fake_devices,
            gpus,
            drained_for: Mutex::new(None),
            local: Mutex::new(HashMap::new()),
            logs,
            logs_gate,
            last_contact: Mutex::new(Instant::now()),
            fenced: AtomicBool::new(false),
            ended_here: Mutex::new(std::collections::HashSet::new()),
            starting: Mutex::new(HashMap::new()),
            filing: Mutex::new(std::collections::HashSet::new()),
            shim_gone: Arc::new(tokio::sync::Notify::new()),
            clearing: tokio::sync::Semaphore::new(CLEARING as usize),
            reporting: Mutex::new(std::collections::HashSet::new()),
        };
        // Attempts started by an earlier agent process keep running under their shims.
        for a in agent.execs.adopt()? {
            info!(
                job = a.job().0,
                attempt = a.attempt().0,
                "re-adopted an attempt"
            );
            agent.local.lock().unwrap().insert(
                Key {
                    job: a.job(),
                    attempt: a.attempt(),
                },
                Local::new(Arc::new(a), "SIGTERM".into(), None),
            );
        }
        Ok(Arc::new(agent))
    }

    fn contact(&self) {
        *self.last_contact.lock().unwrap() = Instant::now();
        if self.fenced.swap(false, Ordering::Relaxed) {
            info!("controllers reachable again; fence lifted");
        }
    }

    /// Runs until `shutdown` turns true. Jobs keep running after the agent stops.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        // Ready once jobs are re-adopted and the log port is open; registration may wait
        // for the controllers.
        tranche_proto::service::notify("READY=1");
        self.register().await;
        let hb = tokio::spawn(self.clone().heartbeats());
        let health = tokio::spawn(self.clone().health());
        let logs = tokio::spawn(self.clone().serve_logs());
        if let Some(addr) = self.cfg.metrics_addr.clone() {
            if let Err(e) = self.clone().serve_metrics(&addr) {
                warn!("{e}");
            }
        }
        let mon = tokio::spawn(self.clone().monitor());
        let sweep = tokio::spawn(self.clone().sweep_output());
        let mut seen: Option<u64> = None;
        loop {
            let poll = self.client.read(
                Query::NodeWork {
                    node: self.inventory.name.clone(),
                    after: seen,
                    wait_ms: LONG_POLL_MS,
                },
                true,
            );
            tokio::select! {
                r = poll => match r {
                    Ok(Response::NodeWork(w)) => {
                        self.contact();
                        seen = Some(w.applied);
                        if !w.registered {
                            self.register().await;
                            continue;
                        }
                        self.clone().reconcile(w).await;
                    }
                    Ok(other) => warn!(
                        "unexpected answer to node work: {}",
                        Response::kind(&other)
                    ),
                    Err(e) => {
                        warn!("cannot reach the controllers: {e}");
                        seen = None;
                        tokio::time::sleep(jitter(Duration::from_millis(500))).await;
                    }
                },
                _ = shutdown.changed() => break,
            }
        }
        hb.abort();
        sweep.abort();
        mon.abort();
        health.abort();
        logs.abort();
        // Attempts the controllers have acknowledged are cleared before the agent goes
        // (their turns come first: the semaphore is fair); one not cleared by then is
        // left to the next agent, which adopts every attempt in the spool.
        let _ = tokio::time::timeout(CLEARING_ON_STOP, self.clearing.acquire_many(CLEARING)).await;
        info!("agent stopping; jobs keep running under their shims");
    }

    async fn register(&self) {
        let mut backoff = Duration::from_millis(200);
        loop {
            match self
                .client
                .command(ClientCommand::RegisterNode(self.inventory.clone()))
                .await
            {
                Ok(Ok(_)) => {
                    self.contact();
                    info!(node = %self.inventory.name, gpus = self.inventory.gpus.len(), "registered");
                    return;
                }
                Ok(Err(e)) => warn!("registration refused: {e}"),
                Err(e) => warn!("cannot reach the controllers to register: {e}"),
            }
            tokio::time::sleep(jitter(backoff)).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    async fn heartbeats(self: Arc<Self>) {
        let every = Duration::from_millis(self.cfg.heartbeat_ms);
        loop {
            tokio::time::sleep(every).await;
            // Answered by the leader from memory (the client follows the leader).
            match self.client.heartbeat(self.inventory.name.clone()).await {
                Ok(true) => self.contact(),
                Ok(false) => {
                    self.contact();
                    self.register().await;
                }
                Err(e) => warn!("heartbeat not delivered: {e}"),
            }
        }
    }

    /// A GPU reported unhealthy drains the node with that reason: running jobs finish,
    /// nothing new is placed, and an operator resumes the node after the repair.
    async fn health(self: Arc<Self>) {
        loop {
            let bad = match self.gpus.gpus() {
                Ok(gpus) => gpus
                    .iter()
                    .filter_map(|g| {
                        g.unhealthy
                            .as_ref()
                            .map(|why| format!("GPU {} unhealthy: {why}", g.index))
                    })
                    .collect::<Vec<_>>(),
                Err(e) => vec![format!("GPU inventory unreadable: {e}")],
            };
            if let Some(reason) = bad.first() {
                let already = self.drained_for.lock().unwrap().as_deref() == Some(reason.as_str());
                if !already {
                    warn!(%reason, "draining this node");
                    let r = self
                        .client
                        .command(ClientCommand::DrainNode {
                            node: self.inventory.name.clone(),
                            reason: reason.clone(),
                            now: false,
                        })
                        .await;
                    match r {
                        Ok(Ok(_)) => *self.drained_for.lock().unwrap() = Some(reason.clone()),
                        Ok(Err(e)) => warn!("drain refused: {e}"),
                        Err(e) => warn!("drain not delivered: {e}"),
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }

    /// Starts what is placed here, stops what must stop, and stops what is no longer
    /// listed (cancelled, requeued after a DOWN).
    async fn reconcile(self: Arc<Self>, w: NodeWork) {
        let listed: HashMap<Key, &WorkItem> = w.items.iter().map(|i| (Key::of(i), i)).collect();
        // Attempts the controllers no longer place here (cancelled, or requeued while
        // this node was DOWN) are stopped first: their GPUs may be placed anew below.
        let orphans: Vec<Key> = self
            .local
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, l)| !listed.contains_key(k) && !l.stopping && l.exit().is_none())
            .map(|(k, _)| *k)
            .collect();
        for key in orphans {
            info!(
                job = key.job.0,
                attempt = key.attempt.0,
                "attempt no longer placed here; stopping it"
            );
            self.clone().stop(key, None, ORPHAN_GRACE);
        }
        self.ended_here
            .lock()
            .unwrap()
            .retain(|k| listed.contains_key(k));
        for item in &w.items {
            let key = Key::of(item);
            let present = self.local.lock().unwrap().contains_key(&key);
            if !present && self.starting.lock().unwrap().contains_key(&key) {
                continue;
            }
            if !present && self.ended_here(key) {
                // This node's member of a gang has ended; the others have not yet.
                continue;
            }
            if !present {
                if item.status != JobStatus::Scheduled {
                    // Started by this node, but no trace of it is left here (the spool
                    // was lost): it cannot be running any more.
                    self.progress(
                        key,
                        Progress::Lost {
                            reason: format!(
                                "the agent on {} has no record of this attempt",
                                self.inventory.name
                            ),
                        },
                    )
                    .await;
                    continue;
                }
                if item.stop.is_some() {
                    // Stopped before it ever started here: nothing to signal.
                    self.progress(
                        key,
                        Progress::Exited {
                            code: None,
                            reason: Some("stopped before it started".into()),
                        },
                    )
                    .await;
                    continue;
                }
                if self.fenced.load(Ordering::Relaxed) {
                    continue;
                }
                // A GPU is never held by two running jobs: an attempt placed on GPUs
                // that an earlier attempt here still holds (one the controllers gave up
                // while this node was DOWN) starts once that one has exited.
                let holders = self.holders_of(item);
                if !holders.is_empty() {
                    debug!(
                        job = item.job.0,
                        attempt = item.attempt,
                        holders = %holders
                            .iter()
                            .map(Key::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        "waiting for earlier attempts to give back the GPUs"
                    );
                    continue;
                }
                self.starting
                    .lock()
                    .unwrap()
                    .insert(key, item.gpus.iter().map(|g| g.index).collect());
                let agent = self.clone();
                let item = item.clone();
                tokio::spawn(async move {
                    agent.clone().start(item).await;
                    agent.starting.lock().unwrap().remove(&key);
                });
                continue;
            }
            if let Some(stop) = &item.stop {
                let grace = Duration::from_millis(stop.deadline_ms.saturating_sub(w.now));
                self.clone().stop(key, Some(item.signal.clone()), grace);
            } else {
                let report = {
                    let mut l = self.local.lock().unwrap();
                    let e = l.get_mut(&key).unwrap();
                    e.signal = item.signal.clone();
                    // An attempt adopted after a restart: its time limit counts from the
                    // start the controllers recorded.
                    if e.time_limit_at.is_none() {
                        if let (Some(limit), Some(started)) = (item.time_limit_s, item.started_at) {
                            let end_ms = started + limit * 1000;
                            let left = end_ms.saturating_sub(w.now);
                            e.time_limit_at = Some(Instant::now() + Duration::from_millis(left));
                        }
                    }
                    let report = e.running == RunningReport::Unsent && e.exit().is_none();
                    if report {
                        e.running = RunningReport::Sending;
                    }
                    report
                };
                if report {
                    // Off the poll loop: the next work list need not wait for it.
                    let agent = self.clone();
                    tokio::spawn(async move { agent.report_running(key).await });
                }
            }
        }
    }

    /// Attempts on this node, not yet ended, that hold any of the item's GPUs.
    /// Attempts being started count: they will hold their GPUs.
    fn holders_of(&self, item: &WorkItem) -> Vec<Key> {
        let mine = |g: &tranche_model::GpuIndex| item.gpus.iter().any(|b| b.index == *g);
        let mut out: Vec<Key> = self
            .local
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l)| {
                l.attempt.spec().gpus.iter().any(|g| mine(&g.index)) && l.exit().is_none()
            })
            .map(|(k, _)| *k)
            .collect();
        out.extend(
            self.starting
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, gpus)| **k != Key::of(item) && gpus.iter().any(mine))
                .map(|(k, _)| *k),
        );
        out
    }

    async fn start(self: Arc<Self>, item: WorkItem) {
        let key = Key::of(&item);
        // STARTING is reported once the setup has taken STARTING_AFTER (an image to
        // unpack, a container to create); RUNNING once the job runs and any STARTING
        // report is in. A job that starts sooner goes from SCHEDULED to RUNNING: one
        // replicated write fewer per job.
        let (set_up, set_up_rx) = tokio::sync::oneshot::channel::<()>();
        let starting = {
            let agent = self.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = set_up_rx => {}
                    _ = tokio::time::sleep(STARTING_AFTER) => {
                        agent.progress(key, Progress::Starting).await;
                    }
                }
            })
        };
        let r = &item.rendezvous;
        if let Err(why) = rendezvous_port_free(r.rank, r.master_port) {
            warn!(job = item.job.0, "attempt not started: {why}");
            let _ = set_up.send(());
            let _ = starting.await;
            self.progress(
                key,
                Progress::Exited {
                    code: None,
                    reason: Some(format!("failed to start: {why}")),
                },
            )
            .await;
            return;
        }
        let execs = self.execs.clone();
        let agent = self.clone();
        let work = item.clone();
        // The account lookup may ask a directory service (LDAP, SSSD): off the runtime.
        let started = tokio::task::spawn_blocking(move || {
            let spec = launch::launch_spec(&agent.cfg, &work, agent.fake_devices)
                .map_err(StartError::Refused)?;
            execs.start(&spec).map_err(StartError::Exec)
        })
        .await
        .expect("start task");
        let _ = set_up.send(());
        let _ = starting.await;
        match started {
            Ok(a) => {
                info!(job = item.job.0, attempt = item.attempt, "attempt started");
                let mut local = Local::new(
                    Arc::new(a),
                    item.signal.clone(),
                    item.time_limit_s
                        .map(|s| Instant::now() + Duration::from_secs(s)),
                );
                // Sending from here: a reconcile while the report is on its way does not
                // send it again.
                local.running = RunningReport::Sending;
                self.local.lock().unwrap().insert(key, local);
                self.report_running(key).await;
            }
            Err(e) => {
                // A refusal is the user's or the config's doing, not the node's: the
                // attempt ends with it as its reason and nothing of the job ran.
                let reason = match e {
                    StartError::Refused(why) => format!("not started: {why}"),
                    StartError::Exec(e) => format!("failed to start: {e}"),
                };
                warn!(job = item.job.0, "attempt {reason}");
                self.progress(
                    key,
                    Progress::Exited {
                        code: None,
                        reason: Some(reason),
                    },
                )
                .await;
            }
        }
    }

    /// Reports that an attempt runs (its `running` is `Sending`); a report not
    /// delivered is sent again by the next reconcile.
    async fn report_running(&self, key: Key) {
        let delivered = self.progress(key, Progress::Running).await;
        if let Some(e) = self.local.lock().unwrap().get_mut(&key) {
            e.running = if delivered {
                RunningReport::Sent
            } else {
                RunningReport::Unsent
            };
        }
    }

    /// Signals an attempt and kills it when the grace ends (on a blocking thread).
    fn stop(self: Arc<Self>, key: Key, signal: Option<String>, grace: Duration) {
        let (attempt, sig_name) = {
            let mut l = self.local.lock().unwrap();
            let Some(e) = l.get_mut(&key) else { return };
            if e.stopping {
                return;
            }
            e.stopping = true;
            (
                e.attempt.clone(),
                signal.unwrap_or_else(|| e.signal.clone()),
            )
        };
        let sig = signal_number(&sig_name).unwrap_or(15);
        info!(job = key.job.0, attempt = key.attempt.0, signal = %sig_name, grace_ms = grace.as_millis() as u64, "stopping an attempt");
        tokio::task::spawn_blocking(move || {
            let outcome = attempt.stop(sig, grace);
            match outcome {
                StopOutcome::ExitedInGrace { status } => {
                    info!(job = key.job.0, attempt = key.attempt.0, status = %status, "exited within its grace period")
                }
                StopOutcome::Killed { via, .. } => {
                    info!(job = key.job.0, attempt = key.attempt.0, via = %via, "killed when its grace period ended")
                }
            }
        });
    }

    /// Reports exits (exactly once: an exit is forgotten only once the controllers have
    /// it), and fences the node when the controllers have been out of reach too long.
    ///
    /// An attempt's end is waited for on its shim's pidfd, which wakes the monitor at
    /// once; every second each attempt is also looked for in the spool, for an end the
    /// shim did not live to see through (its processes outliving a killed shim).
    async fn monitor(self: Arc<Self>) {
        let fence_after = Duration::from_secs(self.cfg.fence_after_s);
        let mut swept = Instant::now();
        loop {
            tokio::select! {
                _ = self.shim_gone.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            let sweep = swept.elapsed() >= SWEEP;
            if sweep {
                swept = Instant::now();
            }
            // Under the lock only what is in memory; the spool is read on a blocking
            // thread, so that the runtime's workers (the connection to the controllers,
            // every report) never wait on the file system.
            let (new, known, look) = {
                let mut l = self.local.lock().unwrap();
                let mut new = vec![];
                for e in l.values_mut().filter(|e| !e.watched) {
                    e.watched = true;
                    // Not looked for in the spool while its watch is set up: a watch that
                    // cannot be made looks again.
                    e.look.store(false, Ordering::Release);
                    new.push((e.attempt.clone(), e.look.clone()));
                }
                let mut known = vec![];
                let mut look = vec![];
                // An exit whose report is on its way is not copied out again: this runs
                // every 10 ms, and an attempt's copy is its whole spec.
                let reporting = self.reporting.lock().unwrap();
                for (k, e) in l.iter() {
                    if e.attempt.known_exit().is_some() {
                        if !reporting.contains(k) {
                            known.push((*k, e.attempt.clone()));
                        }
                    } else if sweep || e.look.load(Ordering::Acquire) {
                        look.push((*k, e.attempt.clone()));
                    }
                }
                (new, known, look)
            };
            for (attempt, look) in new {
                self.watch(attempt, look);
            }
            let mut exited = known;
            if !look.is_empty() {
                let found = tokio::task::spawn_blocking(move || {
                    look.into_iter()
                        .filter(|(_, a)| a.exit().is_some())
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
                exited.extend(found);
            }
            // Each exit is reported on a task of its own, so that one ending while
            // others' reports are on their way goes at once; an exit whose report is on
            // its way is not sent again, one not delivered is at a later look.
            for (key, a) in exited {
                if !self.reporting.lock().unwrap().insert(key) {
                    continue;
                }
                let agent = self.clone();
                tokio::spawn(async move {
                    agent.report_exit(key, a).await;
                    agent.reporting.lock().unwrap().remove(&key);
                });
            }
            let overdue: Vec<Key> = {
                let mut l = self.local.lock().unwrap();
                l.iter_mut()
                    .filter(|(_, e)| {
                        !e.stopping && e.time_limit_at.is_some_and(|t| t <= Instant::now())
                    })
                    .map(|(k, e)| {
                        e.stopped_for = Some("time limit reached".into());
                        *k
                    })
                    .collect()
            };
            for k in overdue {
                info!(job = k.job.0, attempt = k.attempt.0, "time limit reached");
                self.clone().stop(k, None, ORPHAN_GRACE);
            }
            let lost = self.last_contact.lock().unwrap().elapsed();
            if lost > fence_after && !self.fenced.swap(true, Ordering::Relaxed) {
                warn!(
                    lost_s = lost.as_secs(),
                    "no controller quorum for fence_after: stopping every job on this node"
                );
                let keys: Vec<Key> = self.local.lock().unwrap().keys().copied().collect();
                for k in keys {
                    self.clone().stop(k, None, ORPHAN_GRACE);
                }
            }
        }
    }

    /// Waits on the attempt's shim's pidfd, if it has one: until it fires, the monitor
    /// does not look for the attempt's end in the spool (`look` is false). The pidfd is
    /// found on a blocking thread (it reads the spool); where there is none, `look` is
    /// set again and the monitor looks in the spool.
    fn watch(&self, attempt: Arc<Attempt>, look: Arc<AtomicBool>) {
        let gone = self.shim_gone.clone();
        tokio::spawn(async move {
            let fd = tokio::task::spawn_blocking(move || attempt.shim_pidfd())
                .await
                .ok()
                .flatten();
            let registered = fd.map(|fd| {
                // SAFETY: an OwnedFd is a valid open descriptor that stays the same
                // until it is dropped, which happens with the AsyncFd.
                unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        fd,
                        tokio::io::Interest::READABLE,
                    )
                }
            });
            match registered {
                Some(Ok(fd)) => {
                    // Readable once the shim has ended; an error is taken as that too.
                    let _ = fd.readable().await;
                }
                Some(Err(err)) => debug!("cannot wait on the shim's pidfd: {err}"),
                None => {}
            }
            look.store(true, Ordering::Release);
            gone.notify_one();
        });
    }

    /// Reports one attempt's exit; once the controllers have it, the attempt is
    /// forgotten and its directory cleared.
    async fn report_exit(&self, key: Key, a: Arc<Attempt>) {
        let st = a.exit().expect("exited");
        let stopped_for = self
            .local
            .lock()
            .unwrap()
            .get(&key)
            .and_then(|l| l.stopped_for.clone());
        let killed = st.signal.map(|s| format!("killed by signal {s}"));
        let reason = match (stopped_for, killed) {
            (Some(why), Some(k)) => Some(format!("{why}; {k}")),
            (Some(why), None) => Some(why),
            (None, k) => k,
        };
        // Neither code nor signal, and no launch error: the agent lost the
        // attempt (it died before the shim started, or the shim vanished). The
        // job did not fail; the controllers requeue it.
        let event = if st.code.is_none() && st.signal.is_none() && a.launch_error().is_none() {
            Progress::Lost {
                reason: reason.unwrap_or_else(|| {
                    format!(
                        "the agent on {} lost track of the attempt (no exit status)",
                        self.inventory.name
                    )
                }),
            }
        } else {
            Progress::Exited {
                code: st.code,
                reason,
            }
        };
        let delivered = self.progress(key, event).await;
        if delivered {
            // Forgotten first, then cleared: nothing may look at an attempt
            // whose directory is going away (it would seem to have vanished
            // without an exit, and be stopped as an orphan).
            self.filing.lock().unwrap().insert(key);
            self.local.lock().unwrap().remove(&key);
            // File-system work (the directory's files moved and removed, the cgroup
            // removed) is done on a blocking thread: on the runtime's workers it would
            // hold up the connection to the controllers and every other report.
            // [`CLEARING`] attempts at a time (see `clearing`).
            let cleared = {
                let _turn = self.clearing.acquire().await;
                tokio::task::spawn_blocking(move || a.acknowledge()).await
            };
            if let Ok(Err(e)) = cleared {
                warn!(job = key.job.0, "cannot clear the attempt dir: {e}");
            }
            self.filing.lock().unwrap().remove(&key);
        }
    }

    /// Whether this node's part of the attempt has ended and the controllers have
    /// that: in this agent's memory, or, after a restart, its output kept in the spool
    /// (which happens only once the end has been reported).
    fn ended_here(&self, key: Key) -> bool {
        if self.ended_here.lock().unwrap().contains(&key) {
            return true;
        }
        crate::exec::kept_output(&self.cfg.spool_dir, key.job, key.attempt, false).is_some()
    }

    /// Sends a progress report. True when the controllers have it: applied, or refused
    /// because the attempt is already over (a report repeated after a restart).
    async fn progress(&self, key: Key, event: Progress) -> bool {
        let delivered = self.report(key, &event).await;
        if delivered && matches!(event, Progress::Exited { .. } | Progress::Lost { .. }) {
            self.ended_here.lock().unwrap().insert(key);
        }
        delivered
    }

    async fn report(&self, key: Key, event: &Progress) -> bool {
        let event = event.clone();
        let job = key.job;
        match self
            .client
            .command(ClientCommand::JobProgress {
                job,
                attempt: key.attempt.0,
                event,
            })
            .await
        {
            Ok(Ok(_)) => {
                self.contact();
                true
            }
            Ok(Err(ApiError::Rejected(ApplyError::Conflict(_) | ApplyError::NotFound { .. }))) => {
                self.contact();
                true
            }
            Ok(Err(e)) => {
                warn!(job = job.0, "progress refused: {e}");
                false
            }
            Err(ClientError::Api(e)) => {
                warn!(job = job.0, "progress refused: {e}");
                false
            }
            Err(e) => {
                warn!(job = job.0, "progress not delivered: {e}");
                false
            }
        }
    }
}

fn jitter(d: Duration) -> Duration {
    let ms = d.as_millis() as u64;
    Duration::from_millis(ms / 2 + rand::random::<u64>() % (ms / 2 + 1))
}

// ---- metrics ----------------------------------------------------------------------------

impl Agent {
    /// The agent's metrics in Prometheus' text format.
    pub fn metrics(&self) -> String {
        let age = self.last_contact.lock().unwrap().elapsed().as_secs_f64();
        let (running, stopping) = {
            let l = self.local.lock().unwrap();
            let running = l.values().filter(|e| e.exit().is_none()).count();
            (running, l.values().filter(|e| e.stopping).count())
        };
        let fenced = self.fenced.load(Ordering::Relaxed) as u8;
        let gpus = self.inventory.gpus.len();
        format!(
            "# HELP tranche_agent_heartbeat_age_seconds Time since the controllers last answered.\n\
             # TYPE tranche_agent_heartbeat_age_seconds gauge\n\
             tranche_agent_heartbeat_age_seconds {age}\n\
             # HELP tranche_agent_attempts_running Attempts with a process left on this node.\n\
             # TYPE tranche_agent_attempts_running gauge\n\
             tranche_agent_attempts_running {running}\n\
             # HELP tranche_agent_attempts_stopping Attempts being stopped (signal sent).\n\
             # TYPE tranche_agent_attempts_stopping gauge\n\
             tranche_agent_attempts_stopping {stopping}\n\
             # HELP tranche_agent_fenced 1 while the agent has fenced its node.\n\
             # TYPE tranche_agent_fenced gauge\n\
             tranche_agent_fenced {fenced}\n\
             # HELP tranche_agent_gpus GPUs this node reports.\n\
             # TYPE tranche_agent_gpus gauge\n\
             tranche_agent_gpus {gpus}\n"
        )
    }

    /// Serves `GET /metrics` on `addr` (a bare port: 127.0.0.1). Metrics carry no
    /// authentication, so an address off this machine is warned about.
    fn serve_metrics(self: Arc<Self>, addr: &str) -> Result<(), String> {
        let a = tranche_tls::listen_addr(addr).map_err(|e| format!("metrics_addr: {e}"))?;
        if !a.ip().is_loopback() {
            warn!(
                addr = %a,
                "metrics_addr is not a loopback address: every host that reaches it (every \
                 job on this node too) reads the metrics without authentication"
            );
        }
        let server = tiny_http::Server::http(a).map_err(|e| format!("metrics_addr {a}: {e}"))?;
        std::thread::Builder::new()
            .name("tranche-metrics".into())
            .spawn(move || {
                for req in server.incoming_requests() {
                    let resp = if req.url() == "/metrics" {
                        tiny_http::Response::from_string(self.metrics())
                    } else {
                        tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                    };
                    let _ = req.respond(resp);
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}

// ---- the log port ---------------------------------------------------------------------

impl Agent {
    /// Serves jobs' output: one `LogRequest` per bidirectional stream, answered with
    /// chunks and an end frame. Admins, operators and controllers may read any job; a
    /// user only its own (asked of the controllers); no other role. The output is read
    /// from wherever it went: the attempt's spool files, kept in `<spool>/logs` once it
    /// has ended, or the job's `--output`/`--error` files, found through the record the
    /// shim made of them (`outputs.json`, kept beside those logs) and read only while
    /// each path still leads to the file the job was given.
    /// Once an hour, removes the kept output older than `output_keep_days`.
    async fn sweep_output(self: Arc<Self>) {
        let days = self.cfg.output_keep_days;
        if days == 0 {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tick.tick().await;
            let keep = Duration::from_secs(u64::from(days) * 86_400);
            let Some(before) = std::time::SystemTime::now().checked_sub(keep) else {
                continue;
            };
            let spool = self.cfg.spool_dir.clone();
            let n =
                tokio::task::spawn_blocking(move || crate::exec::sweep_kept_logs(&spool, before))
                    .await
                    .unwrap_or(0);
            if n > 0 {
                info!(files = n, days, "removed job output past output_keep_days");
            }
        }
    }

    /// What a missing output's error adds: how long this agent keeps output.
    fn keep_note(&self) -> String {
        match self.cfg.output_keep_days {
            0 => String::new(),
            d => format!(
                " (this agent keeps an attempt's output for output_keep_days = {d} after it ended)"
            ),
        }
    }

    async fn serve_logs(self: Arc<Self>) {
        while let Some(incoming) = self.logs.accept().await {
            let me = self.clone();
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                if tranche_tls::peer_identity(&conn).is_err() {
                    conn.close(2u32.into(), b"no usable client certificate");
                    return;
                }
                let admitted = match me.logs_gate.admit(&conn) {
                    Ok(a) => Arc::new(a),
                    Err(why) => {
                        warn!(client = %conn.remote_address(), "log port refused a connection: {why}");
                        conn.close(tranche_tls::CLOSE_TOO_MANY.into(), why.as_bytes());
                        return;
                    }
                };
                while let Ok((send, recv)) = conn.accept_bi().await {
                    let me = me.clone();
                    let admitted = admitted.clone();
                    tokio::spawn(async move { me.log_stream(&admitted, send, recv).await });
                }
            });
        }
    }

    async fn log_stream(
        &self,
        admitted: &tranche_tls::Admitted,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
    ) {
        use tranche_proto::{frame, LogFrame, LogRequest, MAX_LOG_REQUEST};
        let who = admitted.who.clone();
        // A request is a few bytes: its frame is capped, and reserved from the port's
        // budgets while it is read and decoded.
        let req = frame::read_payload_within(
            &mut recv,
            MAX_LOG_REQUEST,
            admitted.frame_timeout(),
            |len| admitted.reserve(len),
        )
        .await
        .and_then(|p| match p {
            Some((p, _reserved)) => frame::decode_payload::<LogRequest>(&p),
            None => Err(frame::FrameError::Truncated),
        });
        let req: LogRequest = match req {
            Ok(r) => r,
            Err(e) => {
                let _ = frame::write(
                    &mut send,
                    &LogFrame::Error(ApiError::BadRequest(e.to_string())),
                )
                .await;
                let _ = send.finish();
                return;
            }
        };
        let r = self.stream_log(&who, &req, &mut send).await;
        if let Err(e) = r {
            let _ = frame::write(&mut send, &LogFrame::Error(e)).await;
        }
        let _ = send.finish();
    }

    async fn may_read(&self, who: &tranche_tls::Identity, job: JobId) -> Result<(), ApiError> {
        use tranche_tls::Role;
        match who.role {
            // A controller fetches output for its HTTP API's callers, whom it has
            // checked by this same rule.
            Role::Admin | Role::Operator | Role::Controller => Ok(()),
            Role::User => match self
                .client
                .read(Query::Job(tranche_model::JobRef::job(job)), true)
                .await
            {
                Ok(Response::Job(j)) if j.spec.user.as_str() == who.name => Ok(()),
                Ok(Response::Job(j)) => Err(ApiError::Unauthorized(format!(
                    "{who} may read only its own jobs' output; job {job} belongs to {}",
                    j.spec.user
                ))),
                Ok(other) => Err(ApiError::Unavailable(format!(
                    "unexpected answer to a job query: {}",
                    Response::kind(&other)
                ))),
                Err(ClientError::Api(e)) => Err(e),
                Err(e) => Err(ApiError::Unavailable(format!(
                    "cannot check the job's owner with the controllers: {e}"
                ))),
            },
            _ => Err(ApiError::Unauthorized(format!(
                "{who} may not read jobs' output"
            ))),
        }
    }

    async fn stream_log(
        &self,
        who: &tranche_tls::Identity,
        req: &tranche_proto::LogRequest,
        send: &mut quinn::SendStream,
    ) -> Result<(), ApiError> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        use tranche_proto::{frame, LogFrame};
        self.may_read(who, req.job).await?;
        let job = req.job;
        // An attempt that has just ended is being filed: its output is in neither place
        // for a moment.
        for _ in 0..200 {
            if !self.filing.lock().unwrap().iter().any(|k| k.job == job) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The attempt: the one asked for, else the latest running here, else the
        // latest kept.
        let running: Vec<AttemptNo> = {
            let l = self.local.lock().unwrap();
            l.keys()
                .filter(|k| k.job == job)
                .map(|k| k.attempt)
                .collect()
        };
        let attempt = match req.attempt {
            Some(a) => AttemptNo(a),
            None => match running.iter().max() {
                Some(a) => *a,
                None => (1..=64)
                    .rev()
                    .map(AttemptNo)
                    .find(|a| {
                        crate::exec::kept_output(&self.cfg.spool_dir, job, *a, false).is_some()
                    })
                    .ok_or_else(|| {
                        ApiError::NotFound(format!(
                            "no output of job {job} on this node{}",
                            self.keep_note()
                        ))
                    })?,
            },
        };
        let file_now = || -> Option<(OutputFile, bool)> {
            let l = self.local.lock().unwrap();
            if let Some(e) = l.get(&Key { job, attempt }) {
                let running = e.exit().is_none();
                return e.attempt.output(req.stderr).map(|f| (f, running));
            }
            drop(l);
            crate::exec::kept_output(&self.cfg.spool_dir, job, attempt, req.stderr)
                .map(|f| (f, false))
        };
        let mut offset = req.offset;
        let mut buf = vec![0u8; 64 * 1024];
        // An attempt that ends while it is read has its output moved to the kept
        // logs: a file gone between finding and opening it is looked for again.
        let mut moved_retries = 100;
        loop {
            let Some((file, running)) = file_now() else {
                if self.filing.lock().unwrap().contains(&Key { job, attempt }) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                return Err(ApiError::NotFound(format!(
                    "no output of job {job} attempt {attempt} on this node{}",
                    self.keep_note()
                )));
            };
            // A file outside the spool is read only while it is still the one the job
            // was given (see `OutputFile::open`).
            let opened = tokio::task::spawn_blocking(move || {
                file.open().map_err(|e| {
                    let gone = e.kind() == std::io::ErrorKind::NotFound;
                    (
                        gone,
                        ApiError::NotFound(format!("{}: {e}", file.path().display())),
                    )
                })
            })
            .await
            .map_err(|e| ApiError::Unavailable(e.to_string()))?;
            let opened = match opened {
                Ok(f) => f,
                Err((true, _)) if moved_retries > 0 => {
                    moved_retries -= 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Err((_, e)) => return Err(e),
            };
            let mut f = tokio::fs::File::from_std(opened);
            f.seek(std::io::SeekFrom::Start(offset))
                .await
                .map_err(|e| ApiError::Unavailable(e.to_string()))?;
            loop {
                let n = f
                    .read(&mut buf)
                    .await
                    .map_err(|e| ApiError::Unavailable(e.to_string()))?;
                if n == 0 {
                    break;
                }
                offset += n as u64;
                if frame::write(send, &LogFrame::Chunk(buf[..n].to_vec()))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            if !req.follow || !running {
                let _ = frame::write(
                    send,
                    &LogFrame::End {
                        attempt: attempt.0,
                        running,
                    },
                )
                .await;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
