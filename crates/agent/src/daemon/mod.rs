//! The agent's main loop: register, heartbeat, learn the node's work from the
//! controllers (a long-poll that answers as soon as a placement or a stop is
//! committed), start and stop attempts through the executors, report their progress,
//! and fence itself when it has lost the controllers for `fence_after`.
//!
//! This file holds the [`Agent`], its start-up (the inventory, the executors and the
//! attempts they adopt, the log port), its loop, registration, heartbeats, the GPU
//! health watch, and the glue of the reconcile: gathering what runs here and carrying
//! out what `reconcile::decide` returns. The rest, by job:
//!
//! * `reconcile`: the reconcile decision, a pure function tested on its actions;
//! * `start_stop`: starting an attempt and stopping one;
//! * `monitor`: the exit monitor, its exit reports, time limits and the fence;
//! * `report`: progress reports to the controllers;
//! * `logs_port`: the QUIC log port, its reader authorization, the output sweep;
//! * `metrics`: the agent's metrics and their server.

mod logs_port;
mod metrics;
mod monitor;
mod reconcile;
mod report;
mod start_stop;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::{debug, info, warn};
use tranche_client::Client;
use tranche_model::NodeInventory;
use tranche_proto::ClientCommand;
use tranche_proto::{NodeWork, Query, Response};

use crate::config::AgentConfig;
use crate::exec::{lease, Attempt, Executors, ExitStatus};
use crate::inventory::{FakeInventory, Inventory, NvmlInventory, UnitMap};
use reconcile::{Action, AttemptKey, AttemptView, Here, RunningReport};

/// How long the agent's long poll for its node's work waits when nothing changes. A
/// change (a placement, a stop) is answered at once; heartbeats, not this poll, keep the
/// node alive, so a long wait costs nothing but keeps the requests of an idle node few.
const LONG_POLL_MS: u32 = 10_000;

/// Starts in a row whose shim ended without starting the job or saying why, after which
/// the node drains: each such attempt is lost and its job requeued, and a node where
/// every start ends so would otherwise draw the same jobs back again and again.
pub(super) const SHIMS_GONE_DRAIN: u32 = 3;

/// The grace given to an attempt the controllers no longer list, to an attempt past its
/// time limit, and to every attempt when the agent fences itself: a job's own grace
/// reaches the agent only with a stop order.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(10);

/// How long an attempt's setup may take before the agent reports it STARTING.
const STARTING_AFTER: Duration = Duration::from_millis(100);

/// How often the monitor looks for every attempt's end in the spool, watched or not.
const SWEEP: Duration = Duration::from_secs(1);
/// How often the agent renews the lease on its node's jobs.
const LEASE_EVERY: Duration = Duration::from_secs(1);

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
    /// The lease on the node's jobs could not be written at start.
    #[error("cannot write the lease {}: {source}", path.display())]
    Lease {
        /// The lease's file.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

struct RunningAttempt {
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
    /// The checkpoint file's time last reported, and when that report went out.
    checkpoint_seen: Option<std::time::SystemTime>,
    checkpoint_sent: Option<Instant>,
}

impl RunningAttempt {
    fn new(
        attempt: Arc<Attempt>,
        signal: String,
        time_limit_at: Option<Instant>,
    ) -> RunningAttempt {
        RunningAttempt {
            // An attempt adopted after a restart may have touched its file before: that
            // checkpoint was reported then (or cannot be dated), and is not reported
            // again as new.
            checkpoint_seen: attempt.checkpoint_touched(),
            attempt,
            signal,
            running: RunningReport::Unsent,
            stopping: false,
            time_limit_at,
            stopped_for: None,
            look: Arc::new(AtomicBool::new(true)),
            watched: false,
            checkpoint_sent: None,
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
    attempts: Mutex<HashMap<AttemptKey, RunningAttempt>>,
    /// The log port (`tranche logs`), bound in `new`.
    logs: quinn::Endpoint,
    /// The log port's limits: connections per identity, streams, request bytes, the
    /// frame deadline; it also closes connections whose certificate is revoked.
    logs_gate: Arc<tranche_tls::Gate>,
    last_contact: Mutex<Instant>,
    /// The kernel's boot id, written with the lease.
    boot: String,
    fenced: AtomicBool,
    /// Attempts whose end on this node the controllers have: a gang's attempt stays
    /// placed here until its last member ends, and this node's part of it must be
    /// neither started again nor reported lost meanwhile.
    ended_here: Mutex<std::collections::HashSet<AttemptKey>>,
    /// Attempts being started (each on its own task, so that the attempts of one
    /// placement start side by side): not started again meanwhile.
    /// With the GPUs each holds.
    starting: Mutex<HashMap<AttemptKey, Vec<tranche_model::GpuIndex>>>,
    /// Ended attempts whose output is being moved to `<spool>/logs`: no longer in
    /// `attempts`, not yet kept. The log port waits for them.
    filing: Mutex<std::collections::HashSet<AttemptKey>>,
    /// Notified when a watched shim has gone.
    shim_gone: Arc<tokio::sync::Notify>,
    /// Starts in a row whose shim ended without a word (see
    /// [`crate::exec::ExecError::ShimGone`]); the node drains at [`SHIMS_GONE_DRAIN`].
    shims_gone: std::sync::atomic::AtomicU32,
    /// Acknowledged attempts are cleared [`CLEARING`] at a time: clearing (files moved
    /// and removed, the cgroup removed) takes the same directory and cgroup locks as an
    /// attempt's start, and many at once would make the starts wait behind them.
    clearing: tokio::sync::Semaphore,
    /// Attempts whose exit report is on its way: not reported again meanwhile.
    reporting: Mutex<std::collections::HashSet<AttemptKey>>,
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
        let cannot = |e: std::io::Error| {
            AgentError::Client(format!("cannot listen on logs_addr {addr}: {e}"))
        };
        let socket = tranche_daemon_kit::listen::udp(addr).map_err(cannot)?;
        let logs = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(server),
            socket,
            std::sync::Arc::new(quinn::TokioRuntime),
        )
        .map_err(cannot)?;
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
            attempts: Mutex::new(HashMap::new()),
            logs,
            logs_gate,
            last_contact: Mutex::new(Instant::now()),
            boot: lease::boot_id(),
            fenced: AtomicBool::new(false),
            ended_here: Mutex::new(std::collections::HashSet::new()),
            starting: Mutex::new(HashMap::new()),
            filing: Mutex::new(std::collections::HashSet::new()),
            shim_gone: Arc::new(tokio::sync::Notify::new()),
            shims_gone: std::sync::atomic::AtomicU32::new(0),
            clearing: tokio::sync::Semaphore::new(CLEARING as usize),
            reporting: Mutex::new(std::collections::HashSet::new()),
        };
        // The lease first: the shims of attempts started by an earlier agent process
        // are watching it, and it may have run out while no agent renewed it.
        agent.renew_lease().map_err(|source| AgentError::Lease {
            path: lease::path(&agent.cfg.spool_dir),
            source,
        })?;
        // Attempts started by an earlier agent process keep running under their shims.
        for a in agent.execs.adopt()? {
            let signal = a.spec().stop_signal.clone().unwrap_or("SIGTERM".into());
            info!(
                job = a.job().0,
                attempt = a.attempt().0,
                "re-adopted an attempt"
            );
            agent.attempts.lock().unwrap().insert(
                AttemptKey {
                    job: a.job(),
                    attempt: a.attempt(),
                },
                RunningAttempt::new(Arc::new(a), signal, None),
            );
        }
        Ok(Arc::new(agent))
    }

    /// Sets the lease on the node's jobs to run out `fence_after_s` after the last
    /// contact with a controller quorum (see [`lease`]).
    fn renew_lease(&self) -> std::io::Result<()> {
        let since = self.last_contact.lock().unwrap().elapsed().as_millis() as u64;
        let expires = (lease::boottime_ms() + self.cfg.fence_after_s * 1000).saturating_sub(since);
        lease::renew(&self.cfg.spool_dir, &self.boot, expires)
    }

    /// Renews the lease every [`LEASE_EVERY`]; a failure is logged (the shims stop
    /// their jobs once the lease runs out, as a fence would).
    async fn keep_lease(self: Arc<Self>) {
        let mut failing = false;
        loop {
            tokio::time::sleep(LEASE_EVERY).await;
            let agent = self.clone();
            match tokio::task::spawn_blocking(move || agent.renew_lease()).await {
                Ok(Ok(())) if failing => {
                    failing = false;
                    info!("the lease on this node's jobs is renewed again");
                }
                Ok(Ok(())) => {}
                Ok(Err(e)) if !failing => {
                    failing = true;
                    warn!(
                        "cannot renew the lease {}: {e}; the jobs of this node stop once it runs out",
                        lease::path(&self.cfg.spool_dir).display()
                    );
                }
                _ => {}
            }
        }
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
        tranche_daemon_kit::systemd::notify("READY=1");
        // The monitor (exits, time limits, the fence) runs from the start: an agent
        // restarted while cut from the controllers re-adopts running jobs, and must
        // fence them even if it never gets to register.
        let mon = tokio::spawn(self.clone().monitor());
        let lease = tokio::spawn(self.clone().keep_lease());
        self.register().await;
        let hb = tokio::spawn(self.clone().heartbeats());
        let health = tokio::spawn(self.clone().health());
        let logs = tokio::spawn(self.clone().serve_logs());
        if let Some(addr) = self.cfg.metrics_addr.clone() {
            if let Err(e) = self.clone().serve_metrics(&addr) {
                warn!("{e}");
            }
        }
        let checkpoints = tokio::spawn(self.clone().checkpoints());
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
        lease.abort();
        checkpoints.abort();
        health.abort();
        logs.abort();
        // Attempts the controllers have acknowledged are cleared before the agent goes
        // (their turns come first: the semaphore is fair); one not cleared by then is
        // left to the next agent, which adopts every attempt in the spool.
        let _ = tokio::time::timeout(CLEARING_ON_STOP, self.clearing.acquire_many(CLEARING)).await;
        info!(
            fence_after_s = self.cfg.fence_after_s,
            "agent stopping; jobs keep running under their shims until the lease runs out"
        );
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
                self.drain_self(reason).await;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }

    /// Drains this node with `reason` (once per reason): running jobs finish, nothing new
    /// is placed, and an operator resumes the node once it is repaired.
    pub(super) async fn drain_self(&self, reason: &str) {
        if self.drained_for.lock().unwrap().as_deref() == Some(reason) {
            return;
        }
        warn!(%reason, "draining this node");
        let r = self
            .client
            .command(ClientCommand::DrainNode {
                node: self.inventory.name.clone(),
                reason: reason.to_string(),
                now: false,
            })
            .await;
        match r {
            Ok(Ok(_)) => *self.drained_for.lock().unwrap() = Some(reason.to_string()),
            Ok(Err(e)) => warn!("drain refused: {e}"),
            Err(e) => warn!("drain not delivered: {e}"),
        }
    }

    /// Starts what is placed here, stops what must stop, and stops what is no longer
    /// listed (cancelled, requeued after a DOWN): gathers what runs here, asks
    /// [`reconcile::decide`] what to do, and does it, in its order.
    async fn reconcile(self: Arc<Self>, w: NodeWork) {
        let here = self.here(&w);
        for action in reconcile::decide(&w, &here) {
            match action {
                Action::StopUnplaced { key, signal, grace } => {
                    info!(
                        job = key.job.0,
                        attempt = key.attempt.0,
                        "attempt no longer placed here; stopping it"
                    );
                    self.clone().stop(key, Some(signal), grace);
                }
                Action::Stop { key, signal, grace } => {
                    self.clone().stop(key, Some(signal), grace);
                }
                Action::ForgetEnded(key) => {
                    self.ended_here.lock().unwrap().remove(&key);
                }
                Action::Report { key, event } => {
                    self.progress(key, event).await;
                }
                Action::WaitForGpus { key, holders } => debug!(
                    job = key.job.0,
                    attempt = key.attempt.0,
                    holders = %holders
                        .iter()
                        .map(AttemptKey::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    "waiting for earlier attempts to give back the GPUs"
                ),
                Action::Start(item) => {
                    let key = AttemptKey::of(&item);
                    self.starting
                        .lock()
                        .unwrap()
                        .insert(key, item.gpus.iter().map(|g| g.index).collect());
                    let agent = self.clone();
                    tokio::spawn(async move {
                        agent.clone().start(*item).await;
                        agent.starting.lock().unwrap().remove(&key);
                    });
                }
                Action::SetSignal { key, signal } => {
                    if let Some(e) = self.attempts.lock().unwrap().get_mut(&key) {
                        e.signal = signal;
                    }
                }
                Action::SetTimeLimit { key, limit, left } => {
                    // Counted on this node's boot clock from the job's start, as for an
                    // attempt this process started: the controllers' clocks (one of
                    // them may be minutes off, and their time never goes back) only
                    // where the job's start cannot be read.
                    if let Some(e) = self.attempts.lock().unwrap().get_mut(&key) {
                        let left = match e.attempt.running_for() {
                            Some(ran) => limit.saturating_sub(ran),
                            None => left,
                        };
                        e.time_limit_at = Some(Instant::now() + left);
                    }
                }
                Action::ReportRunning(key) => {
                    // The view may be older than the reports awaited before this action:
                    // the attempt may have ended, or been forgotten, since.
                    let report = match self.attempts.lock().unwrap().get_mut(&key) {
                        Some(e) if e.running == RunningReport::Unsent && e.exit().is_none() => {
                            e.running = RunningReport::Sending;
                            true
                        }
                        _ => false,
                    };
                    if report {
                        // Off the poll loop: the next work list need not wait for it.
                        let agent = self.clone();
                        tokio::spawn(async move { agent.report_running(key).await });
                    }
                }
            }
        }
    }

    /// What runs here, for the reconcile of `w`. Read in the order attempts move
    /// between the agent's records (being started, then held, then ended and
    /// reported), so that none is missed while it moves.
    fn here(&self, w: &NodeWork) -> Here {
        let starting = self
            .starting
            .lock()
            .unwrap()
            .iter()
            .map(|(k, gpus)| (*k, gpus.clone()))
            .collect();
        let attempts: BTreeMap<AttemptKey, AttemptView> = self
            .attempts
            .lock()
            .unwrap()
            .iter()
            .map(|(k, a)| {
                let view = AttemptView {
                    gpus: a.attempt.spec().gpus.iter().map(|g| g.index).collect(),
                    signal: a.signal.clone(),
                    stopping: a.stopping,
                    ended: a.exit().is_some(),
                    running: a.running,
                    time_limit_set: a.time_limit_at.is_some(),
                };
                (*k, view)
            })
            .collect();
        let mut here = Here {
            node: self.inventory.name.to_string(),
            attempts,
            starting,
            ended_here: self.ended_here.lock().unwrap().iter().copied().collect(),
            fenced: self.fenced.load(Ordering::Relaxed),
        };
        // After a restart, an attempt whose end was reported is known by its kept
        // output alone.
        for item in &w.items {
            let key = AttemptKey::of(item);
            let unknown = !here.attempts.contains_key(&key)
                && !here.starting.contains_key(&key)
                && !here.ended_here.contains(&key);
            if unknown && self.ended_here(key) {
                here.ended_here.insert(key);
            }
        }
        here
    }
}

fn jitter(d: Duration) -> Duration {
    let ms = d.as_millis() as u64;
    Duration::from_millis(ms / 2 + rand::random::<u64>() % (ms / 2 + 1))
}
