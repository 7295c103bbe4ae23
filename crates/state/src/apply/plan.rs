//! The plan verifier: a scheduler's [`Plan`] applied action by action, each re-checked
//! against the state as it is now (a stale action is rejected, the rest applied), as
//! Nomad's plan applier does.

use crate::command::*;
use crate::plan::*;
use crate::state::*;
use std::collections::BTreeSet;
use tranche_model::*;

impl State {
    pub(super) fn apply_plan(&mut self, plan: &Plan, now: Millis) -> PlanOutcome {
        let mut out = PlanOutcome::default();
        for (i, action) in plan.actions.iter().enumerate() {
            let r = match action {
                Action::Place {
                    job,
                    allocation,
                    borrowed,
                    reason,
                } => self.place(*job, allocation, *borrowed, reason, now),
                Action::Preempt { job, kind, reason } => self.preempt(*job, kind, reason, now),
                Action::Hold { job, hold } => self.hold(*job, hold.as_ref()),
            };
            match r {
                Ok(()) => out.applied += 1,
                Err(e) => out.rejected.push((i as u32, e)),
            }
        }
        for (id, reason) in &plan.reasons {
            if let Some(job) = self.jobs.get_mut(id) {
                if job.status == JobStatus::Runnable && job.pending_reason.as_ref() != Some(reason)
                {
                    job.pending_reason = Some(reason.clone());
                    if let Some(w) = self.index.runnable.get_mut(&job.spec.share) {
                        w.set_reason(&RunKey::of(job), reason);
                    }
                    out.applied += 1;
                }
            }
        }
        if out.applied > 0 {
            self.version += 1;
        }
        out
    }

    /// Re-verifies a placement against the current state: the job still waits, the nodes
    /// are usable and in its environment, the GPUs are free, healthy and of its unit, and
    /// the share's ceiling and the environment's cap still allow it. All or nothing.
    fn place(
        &mut self,
        id: JobId,
        alloc: &[NodeAlloc],
        borrowed: bool,
        reason: &str,
        now: Millis,
    ) -> Result<(), ApplyError> {
        let job = self.jobs.get(&id).ok_or_else(|| not_found("job", id))?;
        if job.status != JobStatus::Runnable {
            return Err(ApplyError::Stale(format!(
                "job {id} is {}, not RUNNABLE",
                job.status
            )));
        }
        let req = &job.spec.request;
        let share = self
            .shares
            .get(&job.spec.share)
            .ok_or_else(|| ApplyError::Stale(format!("share {} is gone", job.spec.share)))?;
        if share.state != ObjState::Enabled {
            return Err(ApplyError::Stale(format!(
                "share {} is DISABLED",
                share.name
            )));
        }
        let queue = self
            .queues
            .get(&job.spec.queue)
            .ok_or_else(|| ApplyError::Stale("queue is gone".into()))?;
        let env = self
            .environments
            .get(&queue.environment)
            .ok_or_else(|| ApplyError::Stale("environment is gone".into()))?;
        if queue.state != ObjState::Enabled || env.state != ObjState::Enabled {
            return Err(ApplyError::Stale(format!(
                "queue {} or its environment is DISABLED",
                queue.name
            )));
        }
        if alloc.len() != req.nodes as usize {
            return Err(ApplyError::Stale(format!(
                "job {id} needs {} nodes, plan gives {}",
                req.nodes,
                alloc.len()
            )));
        }
        let mut seen_nodes = BTreeSet::new();
        for na in alloc {
            if !seen_nodes.insert(&na.node) {
                return Err(ApplyError::Stale(format!("node {} listed twice", na.node)));
            }
            let node = self
                .nodes
                .get(&na.node)
                .ok_or_else(|| ApplyError::Stale(format!("node {} is gone", na.node)))?;
            if !node.schedulable() {
                return Err(ApplyError::Stale(format!(
                    "node {} is {}",
                    na.node,
                    node.state()
                )));
            }
            if !env.selects(&node.inventory.labels) {
                return Err(ApplyError::Stale(format!(
                    "node {} is not in environment {}",
                    na.node, env.name
                )));
            }
            let distinct: BTreeSet<_> = na.gpus.iter().collect();
            if na.gpus.len() != req.gpus_per_node as usize || distinct.len() != na.gpus.len() {
                return Err(ApplyError::Stale(format!(
                    "job {id} needs {} distinct GPUs on {}",
                    req.gpus_per_node, na.node
                )));
            }
            for gi in &na.gpus {
                let pos = node.inventory.gpus.iter().position(|g| g.index == *gi);
                let Some(pos) = pos else {
                    return Err(ApplyError::Stale(format!(
                        "GPU {}:{gi} does not exist",
                        na.node
                    )));
                };
                let g = &node.inventory.gpus[pos];
                if !g.healthy || g.unit != req.unit || node.allocated[pos].is_some() {
                    return Err(ApplyError::Stale(format!(
                        "GPU {}:{gi} is not free for {}",
                        na.node, req.unit
                    )));
                }
            }
        }
        let need = req.total_gpus();
        let used = self.share_used(&share.name, &req.unit);
        let limit = if borrowed {
            share.ceiling_for(&req.unit)
        } else {
            Some(share.max_for(&req.unit) as u64)
        };
        if let Some(limit) = limit {
            if (used + need) as u64 > limit {
                return Err(ApplyError::Stale(format!(
                    "share {} would hold {} of {limit} {}",
                    share.name,
                    used + need,
                    req.unit
                )));
            }
        }
        if borrowed {
            for g in self.groups_above(&share.name) {
                let Some(limit) = g.ceiling_for(&req.unit) else {
                    continue;
                };
                let used = self.group_used(g, &req.unit);
                if (used + need) as u64 > limit {
                    return Err(ApplyError::Stale(format!(
                        "group {} would hold {} of {limit} {}",
                        g.name,
                        used + need,
                        req.unit
                    )));
                }
            }
        }
        if let Some(cap) = limit_for(&env.capacity_limits, &req.unit) {
            let env_used = self.env_used(&env.name, &req.unit);
            if env_used + need > cap {
                return Err(ApplyError::Stale(format!(
                    "environment {} would hold {} of {cap} {}",
                    env.name,
                    env_used + need,
                    req.unit
                )));
            }
        }
        // Accepted: bind the GPUs and open a new attempt.
        for na in alloc {
            let node = self.nodes.get_mut(&na.node).expect("checked");
            for (g, slot) in node.inventory.gpus.iter().zip(node.allocated.iter_mut()) {
                if na.gpus.contains(&g.index) {
                    *slot = Some(id);
                }
            }
        }
        let job = self.jobs.get_mut(&id).expect("checked");
        let number = job.attempts.len() as u32 + 1;
        job.attempts.push(Attempt {
            checkpointed_at: None,
            number,
            allocation: alloc.to_vec(),
            borrowed,
            scheduled_at: now,
            started_at: None,
            ended_at: None,
            end: None,
        });
        let nodes = alloc.iter().map(|a| a.node.clone()).collect();
        self.set_status(id, JobStatus::Scheduled, reason, nodes, now);
        Ok(())
    }

    fn preempt(
        &mut self,
        id: JobId,
        kind: &StopKind,
        reason: &str,
        now: Millis,
    ) -> Result<(), ApplyError> {
        let job = self.jobs.get(&id).ok_or_else(|| not_found("job", id))?;
        if !job.status.is_active() || job.stop.is_some() {
            return Err(ApplyError::Stale(format!(
                "job {id} is {} and cannot be preempted now",
                job.status
            )));
        }
        if let Some(f) = kind.for_job() {
            if self.jobs.get(&f).map(|j| j.status) != Some(JobStatus::Runnable) {
                return Err(ApplyError::Stale(format!("preemptor {f} no longer waits")));
            }
        }
        self.stop_or_cancel(id, kind.clone(), reason, now);
        Ok(())
    }

    fn hold(&mut self, id: JobId, hold: Option<&Hold>) -> Result<(), ApplyError> {
        let job = self.jobs.get_mut(&id).ok_or_else(|| not_found("job", id))?;
        if job.status != JobStatus::Runnable {
            return Err(ApplyError::Stale(format!(
                "job {id} is {}, not RUNNABLE",
                job.status
            )));
        }
        job.hold = hold.cloned();
        if job.hold.is_some() {
            self.index.holding.insert(id);
        } else {
            self.index.holding.remove(&id);
        }
        let has_hold = job.hold.is_some();
        if let Some(w) = self.index.runnable.get_mut(&job.spec.share) {
            w.update(&RunKey::of(job), |w| w.has_hold = has_hold);
        }
        Ok(())
    }
}
