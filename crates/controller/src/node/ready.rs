//! Handling a `Ready`, in the order raft-rs documents (see its `five_mem_node`
//! example): send what needs no persistence, install a snapshot, apply committed
//! entries (answering their writes), persist everything new in one fsync'd
//! transaction, send what needed it, answer reads and membership changes, and advance.
//! A follower applies its committed entries after the transaction instead: its answer
//! to the leader's append, which the leader's commit waits for, then does not wait for
//! the apply.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use crate::peer::Proposal;
use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType, Snapshot};
use tracing::{debug, error, info, warn};
use tranche_proto::Member;
use tranche_raftlog::PersistBatch;
use tranche_state::codec::{self, FormatError};
use tranche_state::{Command, Outcome, Touched};

use super::storage::restore_image;
use super::{blocking, RaftNode};
use crate::mailbox::{NodeError, Shared};
use crate::planner::PlannerMsg;

impl RaftNode {
    pub(super) fn on_ready(&mut self) -> Result<(), NodeError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut rd = self.raw.ready();
        // 1. Messages that need nothing persisted first (a leader's appends and
        //    heartbeats) go out at once, so followers write in parallel with us.
        let msgs = rd.take_messages();
        self.send_messages(msgs);

        // 2. A snapshot from the leader replaces the applied state.

        let mut batch_snapshot: Option<Snapshot> = None;
        if !rd.snapshot().is_empty() {
            let snap = rd.snapshot().clone();
            {
                let mut sh = self.shared.write().unwrap();
                restore_image(&mut sh, snap.get_data()).map_err(NodeError::Snapshot)?;
                sh.applied = snap.get_metadata().index;
                let index = sh.applied;
                sh.events.replaced(index);
                if self.planner.active {
                    self.planner
                        .send(PlannerMsg::Reset(Box::new(sh.state.clone())));
                }
                self.work.all_changed(sh.applied);
            }
            self.conf_state = snap.get_metadata().get_conf_state().clone();
            self.conf_dirty = true;
            self.applied_term = snap.get_metadata().term;
            self.image_index = snap.get_metadata().index;
            self.sync_addresses();
            self.publish_status();
            info!(
                index = snap.get_metadata().index,
                "restored a snapshot from the leader"
            );
            batch_snapshot = Some(snap);
        }

        // 3. Read barriers learn their index.
        for rs in rd.take_read_states() {
            self.requests.read_state(rs);
        }

        // 4. Entries committed on a majority are applied, and their writes answered at
        //    once: an entry is committed only when a majority has it durable (raft-rs
        //    counts the leader only once the leader's own transaction is written). A
        //    follower applies them after step 6.
        let committed = rd.take_committed_entries();
        let (now, after_batch) = if self.is_leader() {
            (committed, Vec::new())
        } else {
            (Vec::new(), committed)
        };
        self.apply_entries(now)?;

        // 5. New entries, hard state, conf state, applied index and a state image
        //    when one is due: one fsync'd transaction.
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

        // 6. Messages that needed the batch durable (votes, append answers).
        let pmsgs = rd.take_persisted_messages();
        self.send_messages(pmsgs);
        // A follower's committed entries (step 4); its reads are answered below.
        self.apply_entries(after_batch)?;

        // 7. Advance: raft-rs hands back the commit index and what became committed
        //    meanwhile, and any further messages.
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
        let applied = self.shared.read().unwrap().applied;
        self.requests.answer_deferred(applied);
    }

    fn apply_entries(&mut self, entries: Vec<Entry>) -> Result<(), NodeError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut sh = self.shared.write().unwrap();
        // The nodes whose agents must hear of this batch (`None`: every node).
        let mut touched = Some(BTreeSet::new());
        let mut conf_changed = false;
        for e in entries {
            if e.index <= sh.applied {
                continue;
            }
            self.applied_term = e.term;
            sh.events.applying(e.index);
            match e.get_entry_type() {
                EntryType::EntryNormal if e.data.is_empty() => {
                    // A new leader's first entry.
                    self.sched_dirty = true;
                }
                EntryType::EntryNormal => match Proposal::open(&e.data) {
                    Ok(p) => {
                        let now = p.now.max(sh.last_now);
                        sh.last_now = now;
                        let cmd = Arc::new(p.cmd);
                        match (sh.state.touched_by(&cmd), touched.as_mut()) {
                            (Touched::Nodes(n), Some(t)) => t.extend(n),
                            (Touched::All, _) => touched = None,
                            (_, None) => {}
                        }
                        let shr = &mut *sh;
                        if let Command::ForgetEnded(r) = &*cmd {
                            archive(shr, r)?;
                        }
                        let before = shr.events.before(&shr.state, &cmd, e.index);
                        let applied = shr.state.apply_request(p.request.as_ref(), &cmd, now);
                        let r = applied.result;
                        shr.events
                            .after(&shr.state, e.index, before, r.as_ref().ok());
                        // A copy of a request applied before changed nothing: the
                        // scheduler's replica must not apply it either.
                        if self.planner.active && applied.fresh {
                            self.planner.send(PlannerMsg::Apply(cmd.clone(), now));
                        }
                        match (&*cmd, &r) {
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
                            if let Some(w) = self.requests.writes.remove(&p.id) {
                                let _ = w.reply.send(Ok(r));
                            }
                        }
                    }
                    Err(err @ FormatError::Unknown { .. }) => {
                        // Skipping it would make this member's state differ from the
                        // others': stop instead, and say why.
                        return Err(NodeError::NewerEntry {
                            index: e.index,
                            source: err,
                        });
                    }
                    Err(err) => {
                        // Every member skips it alike; the log stays consistent.
                        error!(index = e.index, "log entry does not decode: {err}");
                    }
                },
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data).map_err(|er| {
                        NodeError::ConfChange {
                            index: e.index,
                            detail: er.to_string(),
                        }
                    })?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.conf_state = cs;
                    self.conf_dirty = true;
                    conf_changed = true;
                    self.image_for_conf_change = true;
                    match cc.get_change_type() {
                        ConfChangeType::AddNode | ConfChangeType::AddLearnerNode => {
                            if let Ok(m) = codec::unseal::<Member>(&cc.context) {
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
                    if let Ok((origin, id)) = codec::unseal::<(u64, u64)>(&e.context) {
                        if origin == self.id {
                            if let Some(p) = self.requests.changes.remove(&id) {
                                self.requests.deferred_changes.push((p.reply, Ok(())));
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
        let events = sh.events.notifier();
        drop(sh);
        events.send_replace(applied);
        match &touched {
            Some(nodes) => self.work.changed(nodes, applied),
            None => self.work.all_changed(applied),
        }
        self.sync_addresses();
        if conf_changed {
            // The status (members, voters) is otherwise refreshed on the next tick: a
            // client that saw this change applied must not then read the old members.
            self.publish_status();
        }
        Ok(())
    }
}

/// Writes the jobs that `ForgetEnded` is about to drop to this controller's history
/// store, durably, before they leave memory. A store that cannot be written stops the
/// controller: it drops no job it could not keep.
fn archive(sh: &mut Shared, r: &tranche_state::Retention) -> Result<(), NodeError> {
    let Some(history) = &sh.history else {
        return Ok(());
    };
    let ids = sh.state.forgettable(r);
    if ids.is_empty() {
        return Ok(());
    }
    let jobs = ids
        .iter()
        .filter_map(|id| sh.state.job(*id))
        .map(|j| (tranche_state::retention::ended_at(j), j));
    let t = Instant::now();
    blocking(|| history.append(jobs)).map_err(NodeError::Archive)?;
    debug!(
        jobs = ids.len(),
        write_ms = t.elapsed().as_millis() as u64,
        "ended jobs moved to history"
    );
    Ok(())
}
