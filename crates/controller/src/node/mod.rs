//! The Raft node: one task owns the `RawNode`, its storage and all its I/O.
//!
//! The loop drives raft-rs with logical ticks and takes messages from the rest of the
//! controller ([`NodeMsg`]): peers' raft messages, authorized writes, read barriers,
//! membership changes and finished scheduling passes. After each wake-up it asks for a
//! scheduling pass if one is due, handles the `Ready` ([`ready`]), notices a change of
//! leader, and starts or stops the planner's replica.
//!
//! - [`storage`]: opening the data dir (bootstrap, restore, format migration), images;
//! - [`ready`]: the `Ready` handling and applying entries;
//! - [`pending`]: requests waiting on the log;
//! - [`membership`]: conf changes, peer addresses, the published status;
//! - [`schedule`]: the scheduling cadence, the one-plan-in-flight rule, and liveness;
//! - [`retention`]: ended jobs leave the state for the history store.

mod membership;
mod pending;
mod ready;
mod retention;
mod schedule;
pub mod storage;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::peer::Proposal;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Message};
use raft::{RawNode, StateRole};
use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};
use tranche_model::{Millis, NodeName};
use tranche_proto::ApiError;
use tranche_raftlog::DiskStorage;
use tranche_state::Command;

use crate::cadence::{Cadence, LastPass};
use crate::config::Config;
use crate::liveness::{Beats, Verdict};
use crate::mailbox::{wall_ms, NodeError, NodeMsg, SharedRef, WorkWatch};
use crate::peer::{PeerItem, PeerNet};
use crate::planner::Planner;
use pending::{Pending, Requests};

/// Runs a blocking call (the fsync'd write) from the Raft loop: through
/// `block_in_place` on a multi-threaded runtime, directly on a single-threaded one.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

pub struct RaftNode {
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
    requests: Requests,
    leader: u64,
    sched_dirty: bool,
    /// The latest scheduling pass: when the planner took it up and how long it took.
    last_pass: Option<LastPass>,
    cadence: Cadence,
    planner: Planner,
    /// The leader's soft state of agent heartbeats.
    beats: Arc<Beats>,
    last_liveness: Instant,
    /// When the leader last looked for ledger hours past their retention.
    last_prune: Instant,
    /// When the leader last looked for ended jobs past their retention, and whether
    /// it then left some behind (a full batch).
    last_forget: Instant,
    forget_backlog: bool,
    /// When this controller last dropped history records past their retention.
    last_history_prune: Option<Instant>,
    /// Liveness verdicts proposed recently, per node, so they are not repeated.
    liveness_sent: HashMap<NodeName, (Verdict, Instant)>,
    /// Tells waiting agents that their node's work changed.
    work: Arc<WorkWatch>,
    /// A pass was asked of the planner and has not come back (with the term it was
    /// asked in).
    pass_running: Option<(u64, Instant)>,
    /// The plan this leader proposed and has not seen applied (see [`schedule`]).
    plan_inflight: Option<(u64, Instant)>,
    next_wakeup: Option<Millis>,
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

impl RaftNode {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: Config,
        storage: DiskStorage,
        shared: SharedRef,
        conf_state: ConfState,
        image_index: u64,
        inbox: mpsc::Receiver<NodeMsg>,
        net: Arc<PeerNet>,
        planner: Planner,
        work: Arc<WorkWatch>,
        beats: Arc<Beats>,
    ) -> Result<RaftNode, NodeError> {
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
        Ok(RaftNode {
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
            requests: Requests::default(),
            leader: 0,
            sched_dirty: true,
            last_pass: None,
            cadence,
            planner,
            pass_running: None,
            work,
            beats,
            last_liveness: Instant::now(),
            last_prune: Instant::now(),
            last_forget: Instant::now(),
            forget_backlog: false,
            last_history_prune: None,
            liveness_sent: HashMap::new(),
            plan_inflight: None,
            next_wakeup: None,
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
                    self.prune_ledger();
                    self.forget_ended();
                    self.prune_history();
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
                cmd,
                request,
                reply,
            } => {
                let id = self.new_id();
                let deadline =
                    Instant::now() + Duration::from_millis(self.cfg.raft.proposal_timeout_ms);
                if self.is_leader() {
                    if self.propose(self.id, id, cmd, request) {
                        self.requests.writes.insert(id, Pending { reply, deadline });
                    } else {
                        let _ = reply.send(Err(ApiError::Unavailable(
                            "the leader could not take the proposal; retry".into(),
                        )));
                    }
                } else if self.raw.raft.leader_id != 0 {
                    let leader = self.raw.raft.leader_id;
                    self.net
                        .send(leader, PeerItem::Forward { id, cmd, request });
                    self.requests.writes.insert(id, Pending { reply, deadline });
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
                self.requests.reads.insert(id, Pending { reply, deadline });
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
        match self.raw.propose(vec![], p.seal()) {
            Ok(()) => true,
            Err(e) => {
                debug!("proposal dropped: {e}");
                false
            }
        }
    }

    /// Answers writes and reads that ran out of time; forgets a plan that did not
    /// commit in time, so that the next pass may be asked.
    fn expire(&mut self) {
        self.requests.expire(Instant::now());
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
        self.requests
            .fail_all("the leader changed; the outcome is unknown, retry");
        self.publish_status();
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
}
