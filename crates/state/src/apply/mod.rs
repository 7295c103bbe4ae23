//! `State::apply`: one function per command. Each checks everything first and mutates
//! only once the command is known to be accepted, so a rejected command changes nothing.
//!
//! This module dispatches a [`Command`] to its aggregate's file: admin objects
//! ([`objects`]), jobs ([`jobs`]), agents' progress reports ([`progress`]), nodes
//! ([`nodes`]), the plan verifier ([`plan`]), and the endpoint's access keys and tags
//! ([`keys_tags`]). [`transitions`] holds the stops and status transitions they share,
//! and [`ledger`] what the accounting ledger is fed at each entry.

mod jobs;
mod keys_tags;
mod ledger;
mod nodes;
mod objects;
mod plan;
mod progress;
mod transitions;

pub use keys_tags::TAGGED_KINDS;
pub use progress::is_gang_stop;

use crate::command::*;
use crate::state::*;
use tranche_model::*;

/// `event` with its reason cut to [`MAX_REASON_BYTES`].
fn capped_progress(event: &Progress) -> std::borrow::Cow<'_, Progress> {
    use std::borrow::Cow;
    match event {
        Progress::Exited {
            code,
            reason: Some(r),
        } if r.len() > MAX_REASON_BYTES => Cow::Owned(Progress::Exited {
            code: *code,
            reason: Some(capped_reason(r).to_string()),
        }),
        Progress::Lost { reason } if reason.len() > MAX_REASON_BYTES => {
            Cow::Owned(Progress::Lost {
                reason: capped_reason(reason).to_string(),
            })
        }
        _ => Cow::Borrowed(event),
    }
}

impl State {
    /// Applies `cmd` at time `now`. Deterministic and total: it never panics on any input,
    /// and an error leaves the state exactly as it was.
    pub fn apply(&mut self, cmd: &Command, now: Millis) -> Result<Outcome, ApplyError> {
        // The time since the previous entry is counted at the rates before this one.
        let accrual = self.accrual(now);
        let node = match cmd {
            Command::RegisterNode(inv) => Some(inv.name.clone()),
            Command::NodeDown { node, .. } | Command::NodeUp { node } => Some(node.clone()),
            _ => None,
        };
        let before = node
            .as_ref()
            .and_then(|n| self.nodes.get(n))
            .map(|n| (node_capacity(n), node_units(n)));
        let out = self.apply_command(cmd, now);
        if out.is_ok() {
            self.book(accrual, now);
            if let Some(after) = node.as_ref().and_then(|n| self.nodes.get(n)) {
                let name = after.name();
                self.index.nodes.id(name);
                let (cap_before, units_before) = before.unwrap_or_default();
                self.index
                    .recount_capacity(cap_before, node_capacity(after));
                self.index
                    .recount_node_units(name, units_before, node_units(after));
            }
        }
        out
    }

    fn apply_command(&mut self, cmd: &Command, now: Millis) -> Result<Outcome, ApplyError> {
        let out = match cmd {
            Command::PutEnvironment(e) => self.put_environment(e),
            Command::DeleteEnvironment(n) => self
                .delete_environment(n)
                .map(|()| self.forget_tags_of_deleted()),
            Command::PutPolicy(p) => self.put_policy(p),
            Command::DeletePolicy(n) => self
                .delete_policy(n)
                .map(|()| self.forget_tags_of_deleted()),
            Command::PutQueue(q) => self.put_queue(q),
            Command::DeleteQueue(n) => self.delete_queue(n).map(|()| self.forget_tags_of_deleted()),
            Command::PutShare(s) => self.put_share(s),
            Command::PutGroup(g) => self.put_group(g),
            Command::DeleteGroup(n) => self.delete_group(n),
            Command::DeleteShare(n) => self
                .delete_share(n, now)
                .map(|()| self.forget_tags_of_deleted()),
            Command::Submit(spec) => return self.submit(spec, now),
            Command::Cancel { job, reason } => self.cancel_ref(job, reason, now),
            Command::UpdatePriority { job, priority } => self.update_priority_ref(job, *priority),
            Command::Hold { job } => self.hold_jobs(job, now),
            Command::PruneLedger { before_hour } => {
                self.ledger.drop_hours_before(*before_hour);
                Ok(())
            }
            Command::Release { job } => self.release_jobs(job, now),
            Command::ForgetEnded(r) => self.forget_ended(r),
            Command::PutAccessKey(k) => self.put_access_key(k, now),
            Command::RevokeAccessKey { id } => self.revoke_access_key(id, now),
            Command::TagResource { resource, tags } => self.tag_resource(resource, tags),
            Command::UntagResource { resource, keys } => self.untag_resource(resource, keys),
            Command::RegisterNode(inv) => self.register_node(inv, now),
            // Written only by format-1 controllers (heartbeats are the leader's soft
            // state now); applied as they did, so that old log entries replay alike.
            Command::Heartbeat { node } => self.with_node(node, |n| n.unreachable = false),
            Command::DrainNode {
                node,
                reason,
                now: stop,
            } => self.drain_node(node, reason, *stop, now),
            Command::ResumeNode { node } => self.with_node(node, |n| n.drain = None),
            Command::NodeUnreachable { node } => self.with_node(node, |n| n.unreachable = true),
            Command::NodeDown { node, reason } => self.node_down(node, reason, now),
            Command::NodeUp { node } => self.with_node(node, |n| {
                n.down = None;
                n.unreachable = false;
            }),
            // A node's report is kept whatever its reason's size: the reason is cut
            // to MAX_REASON_BYTES rather than the report refused.
            Command::JobProgress {
                job,
                attempt,
                event,
            } => self.progress(*job, *attempt, &capped_progress(event), now),
            Command::ApplyPlan(plan) => return Ok(Outcome::Plan(self.apply_plan(plan, now))),
        };
        out.map(|()| {
            self.version += 1;
            Outcome::Done
        })
    }
}
