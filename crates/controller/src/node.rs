//! The Raft node: one task owns the `RawNode`, its storage and all its I/O.
//!
//! The loop drives raft-rs with logical ticks and handles each `Ready` in the order
//! raft-rs documents: send the messages that need no persistence, apply a received
//! snapshot, apply committed entries, persist entries + hard state + conf state +
//! applied index (+ a state-machine image when one is due) in one fsync'd redb
//! transaction, then send the messages that needed it, answer clients, and advance.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfState, Entry, EntryType, Message, Snapshot};
use raft::{RawNode, StateRole};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, error, info, warn};
use tranche_model::Millis;
use tranche_proto::peer::{ImageData, Proposal};
use tranche_proto::{ApiError, ClusterStatus, Member, MemberStatus, MembershipChange};
use tranche_raftlog::{DiskStorage, Fsync, Image, PersistBatch};
use tranche_state::codec::{decode, encode};
use tranche_state::{ApplyError, Command, Outcome, State};

use crate::cadence::{Cadence, LastPass};
use crate::config::Config;
use crate::peer::{PeerItem, PeerNet};
use crate::planner::{Planner, PlannerMsg};

/// The result of a write: committed and applied (the state machine's answer), or not
/// known to be.
pub type WriteResult = Result<Result<Outcome, ApplyError>, ApiError>;

/// What the rest of the controller asks of the node task.
pub enum NodeMsg {
    /// Items from another controller.
    Peer { from: u64, items: Vec<PeerItem> },
    /// A client's write, authorized here against the applied state before it is
    /// proposed or forwarded.
    Write {
        who: tranche_tls::Identity,
        cmd: Command,
        request: Option<tranche_state::RequestId>,
        reply: oneshot::Sender<WriteResult>,
    },
    /// A linearizable read barrier: answered once this controller has applied at least
    /// the leader's commit index as of the request.
    ReadBarrier {
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    Membership {
        change: MembershipChange,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    /// A scheduling pass finished on the planner thread (`None`: it had no replica).
    /// `took` is the pass itself; `busy` the planner's whole work for it from taking
    /// the request at `started` (the commands queued behind it included), which the
    /// busy cap counts.
    Plan {
        plan: Option<tranche_state::Plan>,
        took: Duration,
        started: Instant,
        busy: Duration,
    },
}

/// The applied state, shared with the API (readers take the read lock).
pub struct Shared {
    pub state: State,
    pub applied: u64,
    /// The latest entry time applied; entry times never go backwards.
    pub last_now: Millis,
    pub members: BTreeMap<u64, Member>,
    pub status: ClusterStatus,
    /// Scheduling passes run on this controller, the latest one's duration and their
    /// durations summed, each as the busy cap counts it (the planner's whole work for
    /// the pass, from taking the request to answering it).
    pub passes: u64,
    pub last_pass: Duration,
    pub pass_busy: Duration,
}

pub type SharedRef = Arc<RwLock<Shared>>;

/// Runs a blocking call (the fsync'd write) from the Raft loop: through
/// `block_in_place` on a multi-threaded runtime, directly on a single-threaded one.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

pub fn wall_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// An error that stops the controller: it can no longer write its log safely.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("raft log: {0}")]
    Log(#[from] tranche_raftlog::LogError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("{0}")]
    Other(String),
}

struct Pending<T> {
    reply: oneshot::Sender<T>,
    deadline: Instant,
}

pub struct Node {
    id: u64,
    raw: RawNode<DiskStorage>,
    storage: DiskStorage,
    shared: SharedRef,
    inbox: mpsc::Receiver<NodeMsg>,
    net: Arc<PeerNet>,
    cfg: Config,
    conf_state: ConfState,
    applied_term: u64,
    image_index: u64,
    next_id: u64,
    writes: HashMap<u64, Pending<WriteResult>>,
    changes: HashMap<u64, Pending<Result<(), ApiError>>>,
    reads: HashMap<u64, Pending<Result<(), ApiError>>>,
    /// Read barriers whose read index is known, waiting for `applied` to reach it.
    reads_waiting: Vec<(u64, Pending<Result<(), ApiError>>)>,
    leader: u64,
    sched_dirty: bool,
    /// The latest scheduling pass: when the planner took it up and how long it took.
    last_pass: Option<LastPass>,
    cadence: Cadence,
    planner: Planner,
    /// Since when this controller leads (liveness judgements wait a while after it).
    leader_since: Option<Instant>,
    last_liveness: Instant,
    /// Liveness commands proposed recently, per node, so they are not repeated.
    liveness_sent: HashMap<tranche_model::NodeName, Instant>,
    /// Tells waiting agents that more has been applied.
    applied_tx: watch::Sender<u64>,
    /// A pass was asked of the planner and has not come back (with the term it was
    /// asked in).
    pass_running: Option<(u64, Instant)>,
    plan_inflight: Option<(u64, Instant)>,
    next_wakeup: Option<Millis>,
    /// Answers held until the batch that makes them durable is committed.
    deferred: Vec<(oneshot::Sender<WriteResult>, WriteResult)>,
    deferred_changes: Vec<(oneshot::Sender<Result<(), ApiError>>, Result<(), ApiError>)>,
    commit_update: Option<u64>,
    removed: bool,
    /// A conf change was applied: the next image must carry it, since a joining member
    /// refuses a snapshot whose conf state does not list it.
    image_for_conf_change: bool,
    /// The conf state changed since it was last persisted.
    conf_dirty: bool,
    /// Term and vote as last synced to disk.
    synced_term: u64,
    synced_vote: u64,
}

/// The node's starting point: storage opened, state restored.
pub fn open(cfg: &Config) -> Result<(DiskStorage, Shared, ConfState, u64), NodeError> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
        NodeError::Other(format!(
            "cannot create data_dir {}: {e}",
            cfg.data_dir.display()
        ))
    })?;
    let fsync = match cfg.raft.unsafe_no_fsync {
        false => Fsync::Always,
        true => Fsync::UnsafeNever,
    };
    let storage = DiskStorage::open_with(&cfg.data_dir.join("raft.redb"), fsync)?;
    if !storage.is_initialized() && !cfg.join {
        // A founding member: every founder starts from the same image at index 1 that
        // holds the voters and their addresses, so a member added later must be sent a
        // snapshot and learns the membership from it.
        let data = ImageData {
            state: State::new().snapshot(),
            members: cfg.peers.clone(),
            last_now: 0,
        };
        let mut snap = Snapshot::default();
        snap.set_data(encode(&data).into());
        let meta = snap.mut_metadata();
        meta.index = 1;
        meta.term = 1;
        meta.mut_conf_state().voters = cfg.peers.iter().map(|p| p.id).collect();
        let voters = meta.get_conf_state().voters.clone();
        storage.persist(&PersistBatch {
            snapshot: Some(&snap),
            ..Default::default()
        })?;
        info!(?voters, "bootstrapped a new cluster member");
    }
    let mut shared = Shared {
        state: State::new(),
        applied: 0,
        last_now: 0,
        members: BTreeMap::new(),
        status: ClusterStatus {
            id: cfg.id,
            leader: None,
            term: 0,
            commit: 0,
            applied: 0,
            image_index: 0,
            first_index: 0,
            members: vec![],
        },
        passes: 0,
        last_pass: Duration::ZERO,
        pass_busy: Duration::ZERO,
    };
    let mut image_index = 0;
    if let Some(img) = storage.image() {
        restore_image(&mut shared, &img.data)?;
        shared.applied = img.index;
        image_index = img.index;
    }
    if shared.members.is_empty() {
        // A joining member knows only itself until the leader's snapshot arrives.
        shared.members.insert(cfg.id, cfg.me());
    }
    let cs = storage.conf_state();
    Ok((storage, shared, cs, image_index))
}

fn restore_image(shared: &mut Shared, data: &[u8]) -> Result<(), NodeError> {
    let img: ImageData =
        decode(data).map_err(|e| NodeError::Other(format!("state image does not decode: {e}")))?;
    shared.state = State::restore(&img.state).map_err(|e| NodeError::Other(e.to_string()))?;
    shared.members = img.members.into_iter().map(|m| (m.id, m)).collect();
    shared.last_now = img.last_now;
    Ok(())
}

impl Node {
    pub fn new(
        cfg: Config,
        storage: DiskStorage,
        shared: SharedRef,
        conf_state: ConfState,
        image_index: u64,
        inbox: mpsc::Receiver<NodeMsg>,
        net: Arc<PeerNet>,
        planner: Planner,
        applied_tx: watch::Sender<u64>,
    ) -> Result<Node, NodeError> {
        let applied = shared.read().unwrap().applied;
        let rcfg = raft::Config {
            id: cfg.id,
            election_tick: cfg.raft.election_ticks,
            heartbeat_tick: cfg.raft.heartbeat_ticks,
            applied,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: cfg.raft.max_inflight_msgs,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        rcfg.validate()?;
        let logger = slog::Logger::root(tracing_slog::TracingSlogDrain, slog::o!());
        let raw = RawNode::new(&rcfg, storage.clone(), &logger)?;
        let hard_state = storage.hard_state();
        let cadence = Cadence::new(&cfg.sched);
        Ok(Node {
            id: cfg.id,
            raw,
            storage,
            shared,
            inbox,
            net,
            cfg,
            conf_state,
            applied_term: 0,
            image_index,
            next_id: rand::random::<u64>() >> 1,
            writes: HashMap::new(),
            changes: HashMap::new(),
            reads: HashMap::new(),
            reads_waiting: Vec::new(),
            leader: 0,
            sched_dirty: true,
            last_pass: None,
            cadence,
            planner,
            pass_running: None,
            applied_tx,
            leader_since: None,
            last_liveness: Instant::now(),
            liveness_sent: HashMap::new(),
            plan_inflight: None,
            next_wakeup: None,
            deferred: Vec::new(),
            deferred_changes: Vec::new(),
            commit_update: None,
            removed: false,
            image_for_conf_change: false,
            conf_dirty: false,
            synced_term: hard_state.term,
            synced_vote: hard_state.vote,
        })
    }

    fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    fn new_id(&mut self) -> u64 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }

    /// Runs until shutdown is signalled or the inbox closes.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> Result<(), NodeError> {
        let mut ticker = tokio::time::interval(Duration::from_millis(self.cfg.raft.tick_ms));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.raw.tick();
                    self.expire();
                    self.publish_status();
                    self.check_agents();
                }
                msg = self.inbox.recv() => {
                    let Some(msg) = msg else { break };
                    self.handle(msg);
                    // Take everything already queued: one Ready, one fsync, for all.
                    let mut n = 0;
                    while n < 8192 {
                        match self.inbox.try_recv() {
                            Ok(m) => self.handle(m),
                            Err(_) => break,
                        }
                        n += 1;
                    }
                }
                _ = shutdown.changed() => break,
            }
            self.maybe_schedule();
            self.on_ready()?;
            self.watch_leader();
            self.sync_planner();
            if self.removed {
                warn!("this controller was removed from the cluster; stopping");
                break;
            }
        }
        info!("raft node stopped");
        Ok(())
    }

    fn handle(&mut self, msg: NodeMsg) {
        match msg {
            NodeMsg::Peer { from, items } => {
                for item in items {
                    match item {
                        PeerItem::Raft(bytes) => match Message::parse_from_bytes(&bytes) {
                            Ok(m) => {
                                if let Err(e) = self.raw.step(m) {
                                    debug!(from, "raft step: {e}");
                                }
                            }
                            Err(e) => warn!(from, "undecodable raft message: {e}"),
                        },
                        PeerItem::Forward { id, cmd, request } => {
                            if self.is_leader() {
                                self.propose(from, id, cmd, request);
                            }
                            // Not the leader any more: the forwarder notices the new
                            // leader and answers its client `Unavailable` (retry).
                        }
                    }
                }
            }
            NodeMsg::Write {
                who,
                cmd,
                request,
                reply,
            } => {
                let denied = {
                    let sh = self.shared.read().unwrap();
                    crate::api::authorize(&who, &cmd, &sh.state).err()
                };
                if let Some(e) = denied {
                    let _ = reply.send(Err(e));
                    return;
                }
                let id = self.new_id();
                let deadline =
                    Instant::now() + Duration::from_millis(self.cfg.raft.proposal_timeout_ms);
                if self.is_leader() {
                    if self.propose(self.id, id, cmd, request) {
                        self.writes.insert(id, Pending { reply, deadline });
                    } else {
                        let _ = reply.send(Err(ApiError::Unavailable(
                            "the leader could not take the proposal; retry".into(),
                        )));
                    }
                } else if self.raw.raft.leader_id != 0 {
                    let leader = self.raw.raft.leader_id;
                    self.net
                        .send(leader, PeerItem::Forward { id, cmd, request });
                    self.writes.insert(id, Pending { reply, deadline });
                } else {
                    let _ = reply.send(Err(ApiError::Unavailable(
                        "no leader is elected yet; retry".into(),
                    )));
                }
            }
            NodeMsg::ReadBarrier { reply } => {
                if self.raw.raft.leader_id == 0 {
                    let _ = reply.send(Err(ApiError::Unavailable(
                        "no leader is elected yet; retry, or ask for a stale read".into(),
                    )));
                    return;
                }
                let id = self.new_id();
                self.raw.read_index(id.to_be_bytes().to_vec());
                let deadline =
                    Instant::now() + Duration::from_millis(self.cfg.raft.proposal_timeout_ms);
                self.reads.insert(id, Pending { reply, deadline });
            }
            NodeMsg::Membership { change, reply } => self.change_membership(change, reply),
            NodeMsg::Plan {
                plan,
                took,
                started,
                busy,
            } => self.plan_done(
                plan,
                took,
                LastPass {
                    start: started,
                    took: busy,
                },
            ),
        }
    }

    /// Proposes a command with the leader's time. False when raft refused it.
    fn propose(
        &mut self,
        origin: u64,
        id: u64,
        cmd: Command,
        request: Option<tranche_state::RequestId>,
    ) -> bool {
        let p = Proposal {
            origin,
            id,
            now: wall_ms(),
            cmd,
            request,
        };
        match self.raw.propose(vec![], encode(&p)) {
            Ok(()) => true,
            Err(e) => {
                debug!("proposal dropped: {e}");
                false
            }
        }
    }

    fn change_membership(
        &mut self,
        change: MembershipChange,
        reply: oneshot::Sender<Result<(), ApiError>>,
    ) {
        if !self.is_leader() {
            let leader = self.leader_member();
            let _ = reply.send(Err(ApiError::NotLeader { leader }));
            return;
        }
        let mut cc = ConfChange::default();
        match &change {
            MembershipChange::Add(m) => {
                if m.id == 0 {
                    let _ = reply.send(Err(ApiError::BadRequest(
                        "member id: must be a positive integer".into(),
                    )));
                    return;
                }
                if self.conf_state.voters.contains(&m.id) {
                    let _ = reply.send(Err(ApiError::BadRequest(format!(
                        "member id: {} is already a voter",
                        m.id
                    ))));
                    return;
                }
                for addr in [&m.peer_addr, &m.client_addr] {
                    if addr.parse::<std::net::SocketAddr>().is_err() {
                        let _ = reply.send(Err(ApiError::BadRequest(format!(
                            "member address: `{addr}` is not an IP address and port"
                        ))));
                        return;
                    }
                }
                cc.set_change_type(ConfChangeType::AddNode);
                cc.node_id = m.id;
                cc.context = encode(m).into();
            }
            MembershipChange::Remove { id } => {
                if !self.conf_state.voters.contains(id) {
                    let _ = reply.send(Err(ApiError::NotFound(format!(
                        "controller {id} is not a member"
                    ))));
                    return;
                }
                if self.conf_state.voters.len() <= 1 {
                    let _ = reply.send(Err(ApiError::BadRequest(
                        "member id: the last member cannot be removed".into(),
                    )));
                    return;
                }
                cc.set_change_type(ConfChangeType::RemoveNode);
                cc.node_id = *id;
            }
        }
        let id = self.new_id();
        let ctx = encode(&(self.id, id));
        match self.raw.propose_conf_change(ctx, cc) {
            Ok(()) => {
                let deadline =
                    Instant::now() + Duration::from_millis(self.cfg.raft.proposal_timeout_ms);
                self.changes.insert(id, Pending { reply, deadline });
            }
            Err(e) => {
                let _ = reply.send(Err(ApiError::Unavailable(format!(
                    "membership change not accepted: {e}"
                ))));
            }
        }
    }

    fn leader_member(&self) -> Option<Member> {
        let l = self.raw.raft.leader_id;
        if l == 0 {
            return None;
        }
        self.shared.read().unwrap().members.get(&l).cloned()
    }

    /// Answers writes and reads that ran out of time.
    fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .writes
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        if !late.is_empty() {
            warn!(
                count = late.len(),
                "writes not committed in time; answered Unavailable"
            );
        }
        for k in late {
            let p = self.writes.remove(&k).unwrap();
            let _ = p.reply.send(Err(ApiError::Unavailable(
                "not committed in time; the outcome is unknown, retry".into(),
            )));
        }
        for map in [&mut self.reads, &mut self.changes] {
            let late: Vec<u64> = map
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(k, _)| *k)
                .collect();
            for k in late {
                let p = map.remove(&k).unwrap();
                let _ = p.reply.send(Err(ApiError::Unavailable(
                    "no answer in time; retry".into(),
                )));
            }
        }
        self.reads_waiting
            .retain(|(_, p)| p.deadline > now || p.reply.is_closed());
        if let Some((_, at)) = self.plan_inflight {
            if at.elapsed() > Duration::from_millis(self.cfg.raft.proposal_timeout_ms) {
                self.plan_inflight = None;
            }
        }
    }

    /// On a change of leader, everything in flight has an unknown outcome: answer it
    /// `Unavailable` so that clients retry (safely, with their tokens) at once.
    fn watch_leader(&mut self) {
        let l = self.raw.raft.leader_id;
        if l == self.leader {
            return;
        }
        info!(leader = l, term = self.raw.raft.term, "leader changed");
        self.leader = l;
        self.sched_dirty = true;
        self.plan_inflight = None;
        let msg = "the leader changed; the outcome is unknown, retry";
        for (_, p) in self.writes.drain() {
            let _ = p.reply.send(Err(ApiError::Unavailable(msg.into())));
        }
        for (_, p) in self.reads.drain().chain(self.changes.drain()) {
            let _ = p.reply.send(Err(ApiError::Unavailable(msg.into())));
        }
        for (_, p) in self.reads_waiting.drain(..) {
            let _ = p.reply.send(Err(ApiError::Unavailable(msg.into())));
        }
        self.publish_status();
    }

    fn maybe_schedule(&mut self) {
        if !self.is_leader() || self.plan_inflight.is_some() || !self.planner.active {
            return;
        }
        if let Some((_, at)) = self.pass_running {
            if at.elapsed() < Duration::from_millis(self.cfg.raft.proposal_timeout_ms) * 10 {
                return;
            }
            warn!("a scheduling pass did not come back; asking again");
        }
        // A leader schedules only once it has applied an entry of its own term, so its
        // state includes everything committed before it.
        if self.applied_term != self.raw.raft.term {
            return;
        }
        // The busy cap holds whatever asks for the pass (see `cadence`).
        let now = Instant::now();
        let now_wall = wall_ms();
        let wakeup = self
            .next_wakeup
            .map(|w| now + Duration::from_millis(w.saturating_sub(now_wall)));
        if !self
            .cadence
            .due(now, self.last_pass, self.sched_dirty, wakeup)
        {
            return;
        }
        let entry_now = now_wall.max(self.shared.read().unwrap().last_now);
        self.sched_dirty = false;
        self.pass_running = Some((self.raw.raft.term, now));
        self.planner.send(PlannerMsg::Run(entry_now));
    }

    fn plan_done(&mut self, plan: Option<tranche_state::Plan>, took: Duration, last: LastPass) {
        let Some((term, _)) = self.pass_running.take() else {
            return;
        };
        self.last_pass = Some(last);
        {
            let mut sh = self.shared.write().unwrap();
            sh.passes += 1;
            sh.last_pass = last.took;
            sh.pass_busy += last.took;
        }
        let Some(plan) = plan else { return };
        if !self.is_leader() || self.raw.raft.term != term {
            return;
        }
        self.next_wakeup = plan.next_wakeup;
        if plan.is_empty() {
            return;
        }
        debug!(
            placements = plan.placements(),
            actions = plan.actions.len(),
            pass_ms = took.as_millis() as u64,
            "proposing a plan"
        );
        let id = self.new_id();
        if self.propose(self.id, id, Command::ApplyPlan(plan), None) {
            self.plan_inflight = Some((id, Instant::now()));
        }
    }

    /// The leader marks nodes whose agents stopped heartbeating UNREACHABLE, then
    /// DOWN (which requeues their jobs), and brings them back UP when heartbeats return.
    /// A new leader waits `unreachable_after` before judging, so that agents have had
    /// time to reach it.
    fn check_agents(&mut self) {
        if !self.is_leader() {
            self.leader_since = None;
            return;
        }
        let since = *self.leader_since.get_or_insert_with(Instant::now);
        let unreachable = self.cfg.agents.unreachable_after_s * 1000;
        let down = self.cfg.agents.down_after_s * 1000;
        if since.elapsed() < Duration::from_millis(unreachable)
            || self.last_liveness.elapsed() < Duration::from_millis(500)
            || self.applied_term != self.raw.raft.term
        {
            return;
        }
        self.last_liveness = Instant::now();
        let now = wall_ms();
        let mut cmds = Vec::new();
        {
            let sh = self.shared.read().unwrap();
            for (name, n) in &sh.state.nodes {
                let age = now.saturating_sub(n.last_heartbeat);
                let cmd = match &n.down {
                    None if age > down => Command::NodeDown {
                        node: name.clone(),
                        reason: format!("no heartbeat for {} s", age / 1000),
                    },
                    None if age > unreachable && !n.unreachable => {
                        Command::NodeUnreachable { node: name.clone() }
                    }
                    Some(r) if r.starts_with("no heartbeat") && age < unreachable => {
                        Command::NodeUp { node: name.clone() }
                    }
                    _ => continue,
                };
                cmds.push((name.clone(), cmd));
            }
        }
        for (name, cmd) in cmds {
            if self
                .liveness_sent
                .get(&name)
                .is_some_and(|t| t.elapsed() < Duration::from_secs(2))
            {
                continue;
            }
            info!(node = %name, command = ?cmd, "agent liveness");
            let id = self.new_id();
            self.propose(self.id, id, cmd, None);
            self.liveness_sent.insert(name, Instant::now());
        }
    }

    /// Starts or stops the planner's replica as leadership comes and goes.
    fn sync_planner(&mut self) {
        let leader = self.is_leader();
        if leader && !self.planner.active {
            let st = self.shared.read().unwrap().state.clone();
            self.planner.send(PlannerMsg::Reset(Box::new(st)));
            self.planner.active = true;
        } else if !leader && self.planner.active {
            self.planner.send(PlannerMsg::Drop);
            self.planner.active = false;
            self.pass_running = None;
        }
    }

    fn send_messages(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to;
            let is_snap = m.get_msg_type() == raft::eraftpb::MessageType::MsgSnapshot;
            match m.write_to_bytes() {
                Ok(b) => self.net.send(to, PeerItem::Raft(b)),
                Err(e) => error!("raft message does not encode: {e}"),
            }
            if is_snap {
                self.raw.report_snapshot(to, raft::SnapshotStatus::Finish);
            }
        }
    }

    fn on_ready(&mut self) -> Result<(), NodeError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut rd = self.raw.ready();
        let msgs = rd.take_messages();
        self.send_messages(msgs);

        let mut batch_snapshot: Option<Snapshot> = None;
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            {
                let mut sh = self.shared.write().unwrap();
                restore_image(&mut sh, snap.get_data())?;
                sh.applied = snap.get_metadata().index;
                if self.planner.active {
                    self.planner
                        .send(PlannerMsg::Reset(Box::new(sh.state.clone())));
                }
                self.applied_tx.send_replace(sh.applied);
            }
            self.conf_state = snap.get_metadata().get_conf_state().clone();
            self.conf_dirty = true;
            self.applied_term = snap.get_metadata().term;
            self.image_index = snap.get_metadata().index;
            self.sync_addresses();
            info!(
                index = snap.get_metadata().index,
                "restored a snapshot from the leader"
            );
            batch_snapshot = Some(snap);
        }

        for rs in rd.take_read_states() {
            self.read_state(rs);
        }

        let committed = rd.take_committed_entries();
        self.apply_entries(committed)?;

        let image = self.image_due();
        let mut hs = rd.hs().cloned();
        // A hard state whose term and vote are unchanged differs only in its commit
        // index, which need not be synced (Raft recovers it): it rides along with the
        // next batch that must be. So does the applied index.
        if let Some(h) = &hs {
            if h.term == self.synced_term && h.vote == self.synced_vote {
                self.commit_update = Some(h.commit);
                hs = None;
            }
        }
        let must_sync = !rd.entries().is_empty()
            || batch_snapshot.is_some()
            || image.is_some()
            || hs.is_some()
            || self.conf_dirty;
        if must_sync {
            let applied = self.shared.read().unwrap().applied;
            let compact_to = image.as_ref().and_then(|img| {
                let to = img.index.saturating_sub(self.cfg.raft.keep_entries);
                let first = raft::Storage::first_index(&self.storage).unwrap_or(0);
                (to > first).then_some(to)
            });
            let conf_state = self.conf_dirty.then(|| self.conf_state.clone());
            let batch = PersistBatch {
                entries: rd.entries(),
                hard_state: hs.clone(),
                commit: self.commit_update.take(),
                snapshot: batch_snapshot.as_ref(),
                image: image.clone(),
                compact_to,
                applied: Some(applied),
                conf_state,
                meta: &[],
            };
            let t = Instant::now();
            blocking(|| self.storage.persist(&batch))?;
            if batch.image.is_some() {
                info!(persist_ms = t.elapsed().as_millis() as u64, compact_to = ?batch.compact_to, "state image stored");
            }
            if let Some(h) = &hs {
                self.synced_term = h.term;
                self.synced_vote = h.vote;
            }
            self.conf_dirty = false;
            if let Some(img) = image {
                self.image_index = img.index;
            }
        }
        self.answer_deferred();

        let pmsgs = rd.take_persisted_messages();
        self.send_messages(pmsgs);

        let mut light = self.raw.advance(rd);
        if let Some(c) = light.commit_index() {
            self.commit_update = Some(c);
        }
        let msgs = light.take_messages();
        self.send_messages(msgs);
        let committed = light.take_committed_entries();
        // These entries are committed on a majority and already durable here.
        self.apply_entries(committed)?;
        self.answer_deferred();
        self.raw.advance_apply();
        Ok(())
    }

    fn answer_deferred(&mut self) {
        for (tx, r) in self.deferred.drain(..) {
            let _ = tx.send(r);
        }
        for (tx, r) in self.deferred_changes.drain(..) {
            let _ = tx.send(r);
        }
        let applied = self.shared.read().unwrap().applied;
        let mut i = 0;
        while i < self.reads_waiting.len() {
            if self.reads_waiting[i].0 <= applied {
                let (_, p) = self.reads_waiting.swap_remove(i);
                let _ = p.reply.send(Ok(()));
            } else {
                i += 1;
            }
        }
    }

    fn read_state(&mut self, rs: raft::ReadState) {
        let Ok(ctx) = <[u8; 8]>::try_from(rs.request_ctx.as_slice()) else {
            return;
        };
        if let Some(p) = self.reads.remove(&u64::from_be_bytes(ctx)) {
            self.reads_waiting.push((rs.index, p));
        }
    }

    fn image_due(&mut self) -> Option<Image> {
        let (applied, data, t) = {
            let sh = self.shared.read().unwrap();
            let due = sh.applied >= self.image_index + self.cfg.raft.snapshot_entries
                || ((self.storage.snapshot_wanted() || self.image_for_conf_change)
                    && sh.applied > self.image_index);
            self.image_for_conf_change = false;
            if !due || sh.applied == 0 {
                return None;
            }
            let t = Instant::now();
            let data = ImageData {
                state: sh.state.snapshot(),
                members: sh.members.values().cloned().collect(),
                last_now: sh.last_now,
            };
            (sh.applied, encode(&data), t)
        };
        info!(
            index = applied,
            bytes = data.len(),
            encode_ms = t.elapsed().as_millis() as u64,
            "writing a state image"
        );
        Some(Image {
            index: applied,
            term: self.applied_term,
            conf_state: self.conf_state.clone(),
            data,
        })
    }

    fn apply_entries(&mut self, entries: Vec<Entry>) -> Result<(), NodeError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut sh = self.shared.write().unwrap();
        for e in entries {
            if e.index <= sh.applied {
                continue;
            }
            self.applied_term = e.term;
            match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() => {
                    // A new leader's first entry.
                    self.sched_dirty = true;
                }
                EntryType::EntryNormal => match decode::<Proposal>(&e.data) {
                    Ok(p) => {
                        let now = p.now.max(sh.last_now);
                        sh.last_now = now;
                        let cmd = Arc::new(p.cmd);
                        let applied = sh.state.apply_request(p.request.as_ref(), &cmd, now);
                        let r = applied.result;
                        // A copy of a request applied before changed nothing: the
                        // scheduler's replica must not apply it either.
                        if self.planner.active && applied.fresh {
                            self.planner.send(PlannerMsg::Apply(cmd.clone(), now));
                        }
                        match (&*cmd, &r) {
                            (Command::Heartbeat { .. }, _) => {}
                            (Command::ApplyPlan(_), Ok(Outcome::Plan(o))) => {
                                if !o.rejected.is_empty() {
                                    self.sched_dirty = true;
                                }
                            }
                            (_, Ok(_)) => self.sched_dirty = true,
                            _ => {}
                        }
                        if self.plan_inflight.is_some_and(|(id, _)| id == p.id)
                            && p.origin == self.id
                        {
                            self.plan_inflight = None;
                        }
                        if p.origin == self.id {
                            if let Some(w) = self.writes.remove(&p.id) {
                                self.deferred.push((w.reply, Ok(r)));
                            }
                        }
                    }
                    Err(err) => {
                        // Every member skips it alike; the log stays consistent.
                        error!(index = e.index, "log entry does not decode: {err}");
                    }
                },
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data).map_err(|er| {
                        NodeError::Other(format!("conf change at {}: {er}", e.index))
                    })?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.conf_state = cs;
                    self.conf_dirty = true;
                    self.image_for_conf_change = true;
                    match cc.get_change_type() {
                        ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                            if let Ok(m) = decode::<Member>(&cc.context) {
                                info!(id = m.id, addr = %m.peer_addr, "controller added");
                                sh.members.insert(m.id, m);
                            }
                        }
                        ConfChangeType::RemoveNode => {
                            info!(id = cc.node_id, "controller removed");
                            sh.members.remove(&cc.node_id);
                            if cc.node_id == self.id {
                                self.removed = true;
                            }
                        }
                    }
                    if let Ok((origin, id)) = decode::<(u64, u64)>(&e.context) {
                        if origin == self.id {
                            if let Some(p) = self.changes.remove(&id) {
                                self.deferred_changes.push((p.reply, Ok(())));
                            }
                        }
                    }
                }
                EntryType::EntryConfChangeV2 => {
                    warn!(
                        index = e.index,
                        "ignoring a joint-consensus entry (not used by Tranche)"
                    );
                }
            }
            sh.applied = e.index;
        }
        let applied = sh.applied;
        drop(sh);
        self.applied_tx.send_replace(applied);
        self.sync_addresses();
        Ok(())
    }

    fn sync_addresses(&self) {
        let sh = self.shared.read().unwrap();
        self.net.set_members(&sh.members);
    }

    fn publish_status(&mut self) {
        let r = &self.raw.raft;
        let leader = (r.leader_id != 0).then_some(r.leader_id);
        let commit = r.raft_log.committed;
        let is_leader = r.state == StateRole::Leader;
        let mut progress: BTreeMap<u64, u64> = BTreeMap::new();
        if is_leader {
            for (id, pr) in r.prs().iter() {
                progress.insert(*id, pr.matched);
            }
        }
        let voters = self.conf_state.voters.clone();
        let first_index = raft::Storage::first_index(&self.storage).unwrap_or(0);
        let image_index = self.image_index;
        let mut sh = self.shared.write().unwrap();
        let members = sh
            .members
            .values()
            .map(|m| MemberStatus {
                member: m.clone(),
                voter: voters.contains(&m.id),
                matched: progress.get(&m.id).copied(),
                lag: progress.get(&m.id).map(|x| commit.saturating_sub(*x)),
            })
            .collect();
        sh.status = ClusterStatus {
            id: self.id,
            leader,
            term: r.term,
            commit,
            applied: sh.applied,
            image_index,
            first_index,
            members,
        };
    }
}
