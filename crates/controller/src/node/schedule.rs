//! The leader's scheduling and liveness duties, driven from the Raft loop.
//!
//! **One plan in flight.** The leader asks the planner for a pass only when no plan it
//! proposed is still uncommitted (`plan_inflight`), and a pass runs on a replica that
//! has taken every command applied before it was asked. So each plan is computed from a
//! state that includes every earlier plan, and the holds a plan relies on (GPUs kept for
//! a job while its victims exit) cannot have been given away by another plan in
//! between. The state machine still re-verifies every action of a plan when it applies
//! it (a command from a client may have changed things meanwhile), and a plan whose
//! entry is lost (a leader change, a timeout) lets the next pass be asked.
//!
//! **Liveness** is judged by [`crate::liveness::judge`] from the heartbeats the service
//! layer noted in memory; only its verdicts are proposed.

use std::time::{Duration, Instant};

use tracing::{debug, info, warn};
use tranche_state::ledger::HOUR_MS;
use tranche_state::Command;

use super::RaftNode;
use crate::cadence::LastPass;
use crate::liveness::{judge, Thresholds};
use crate::mailbox::wall_ms;
use crate::planner::PlannerMsg;

impl RaftNode {
    pub(super) fn maybe_schedule(&mut self) {
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

    pub(super) fn plan_done(
        &mut self,
        plan: Option<tranche_state::Plan>,
        took: Duration,
        last: LastPass,
    ) {
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

    /// The leader drops the ledger's hours older than `[accounting] retention_days`,
    /// looking once a minute; every controller applies the same cut.
    pub(super) fn prune_ledger(&mut self) {
        if !self.is_leader()
            || self.applied_term != self.raw.raft.term
            || self.last_prune.elapsed() < Duration::from_secs(60)
        {
            return;
        }
        self.last_prune = Instant::now();
        let keep_ms = u64::from(self.cfg.accounting.retention_days) * 24 * HOUR_MS;
        let before_hour = wall_ms().saturating_sub(keep_ms) / HOUR_MS;
        let oldest = {
            let sh = self.shared.read().unwrap();
            sh.state.ledger.hours.keys().next().copied()
        };
        if oldest.is_some_and(|h| h < before_hour) {
            info!(before_hour, "dropping ledger hours past their retention");
            let id = self.new_id();
            self.propose(self.id, id, Command::PruneLedger { before_hour }, None);
        }
    }

    /// The leader marks nodes whose agents stopped heartbeating UNREACHABLE, then
    /// DOWN (which requeues their jobs), and brings them back UP when heartbeats
    /// return. Timers start when this controller became leader.
    pub(super) fn check_agents(&mut self) {
        if !self.is_leader() {
            if self.beats.leading() {
                self.beats.follow();
            }
            return;
        }
        if !self.beats.leading() {
            self.beats.lead();
        }
        if self.last_liveness.elapsed() < Duration::from_millis(500)
            || self.applied_term != self.raw.raft.term
        {
            return;
        }
        self.last_liveness = Instant::now();
        let t = Thresholds {
            unreachable_ms: self.cfg.agents.unreachable_after_s * 1000,
            down_ms: self.cfg.agents.down_after_s * 1000,
        };
        let (since, beats) = self.beats.view();
        let verdicts = {
            let sh = self.shared.read().unwrap();
            judge(&sh.state, since, &beats, self.beats.now_ms(), t)
        };
        for (name, verdict) in verdicts {
            // A verdict proposed a moment ago is not repeated while it commits.
            if self
                .liveness_sent
                .get(&name)
                .is_some_and(|(v, t)| *v == verdict && t.elapsed() < Duration::from_secs(2))
            {
                continue;
            }
            let cmd = verdict.command(&name);
            info!(node = %name, verdict = ?verdict, "agent liveness");
            let id = self.new_id();
            self.propose(self.id, id, cmd, None);
            self.liveness_sent.insert(name, (verdict, Instant::now()));
        }
    }

    /// Starts or stops the planner's replica as leadership comes and goes.
    pub(super) fn sync_planner(&mut self) {
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
}
