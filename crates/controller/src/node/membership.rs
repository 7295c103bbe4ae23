//! Membership: adding and removing controllers (one Raft conf change at a time), the
//! peers' addresses, and the cluster status this controller publishes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use raft::eraftpb::{ConfChange, ConfChangeType};
use raft::StateRole;
use tokio::sync::oneshot;
use tranche_proto::{ApiError, ClusterStatus, Member, MemberStatus, MembershipChange};
use tranche_state::codec;

use super::pending::Pending;
use super::RaftNode;

impl RaftNode {
    pub(super) fn change_membership(
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
                cc.context = codec::seal(m).into();
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
        let ctx = codec::seal(&(self.id, id));
        match self.raw.propose_conf_change(ctx, cc) {
            Ok(()) => {
                let deadline =
                    Instant::now() + Duration::from_millis(self.cfg.raft.proposal_timeout_ms);
                self.requests
                    .changes
                    .insert(id, Pending { reply, deadline });
            }
            Err(e) => {
                let _ = reply.send(Err(ApiError::Unavailable(format!(
                    "membership change not accepted: {e}"
                ))));
            }
        }
    }

    pub(super) fn leader_member(&self) -> Option<Member> {
        let l = self.raw.raft.leader_id;
        if l == 0 {
            return None;
        }
        self.shared.read().unwrap().members.get(&l).cloned()
    }

    pub(super) fn sync_addresses(&self) {
        let sh = self.shared.read().unwrap();
        self.net.set_members(&sh.members);
    }

    pub(super) fn publish_status(&mut self) {
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
