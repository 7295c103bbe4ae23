//! How a job moves: a stop (checkpoint signal now, SIGKILL at the deadline) or a
//! cancel, and the status transitions that every command goes through, which keep
//! the indexes, the nodes' GPUs and the waiting dependents in step.

use crate::state::*;
use tranche_model::*;

impl State {
    /// Ends a waiting job now (CANCELLED, or RUNNABLE again for a drain), or starts
    /// stopping an active one: its checkpoint signal now, SIGKILL at the deadline.
    pub(super) fn stop_or_cancel(&mut self, id: JobId, kind: StopKind, reason: &str, now: Millis) {
        let status = self.jobs[&id].status;
        if status.is_active() {
            // A reclaimed job on loan gets its share's recall notice before its grace.
            let (notice, grace) = {
                let job = &self.jobs[&id];
                let share = self.shares.get(&job.spec.share);
                let notice = match kind {
                    StopKind::Reclaim { .. } => share.map_or(0, |s| s.loans.recall_notice_s),
                    _ => 0,
                };
                (notice * SECOND, job.spec.grace_s(share) * SECOND)
            };
            let job = self.jobs.get_mut(&id).expect("job exists");
            match &mut job.stop {
                // A stop in progress keeps its deadline; a cancel takes over its meaning.
                Some(stop) => {
                    if kind == StopKind::Cancel {
                        stop.kind = StopKind::Cancel;
                        stop.reason = reason.to_string();
                    }
                }
                None => {
                    job.stop = Some(Stop {
                        kind,
                        reason: reason.to_string(),
                        signalled_at: now,
                        deadline: now + notice + grace,
                    });
                    self.index.stopping.insert(id);
                    if let Some(r) = self.index.running_mut(&job.spec.share, id) {
                        r.stopping = true;
                    }
                    let nodes = job.allocation().iter().map(|a| a.node.clone()).collect();
                    job.transitions.push(Transition {
                        at: now,
                        from: status,
                        to: status,
                        reason: if notice > 0 {
                            format!(
                                "stopping ({reason}): {} sent, recall notice {} s, then grace {} s",
                                job.spec.checkpoint.signal,
                                notice / SECOND,
                                grace / SECOND
                            )
                        } else {
                            format!(
                                "stopping ({reason}): {} sent, grace {} s",
                                job.spec.checkpoint.signal,
                                grace / SECOND
                            )
                        },
                        nodes,
                    });
                }
            }
        } else if !status.is_terminal() {
            self.set_status(id, JobStatus::Cancelled, reason, vec![], now);
        }
    }

    /// Moves a job to `to`, records the transition and keeps the indexes in step.
    /// Leaving an active status frees the job's GPUs and ends its attempt's allocation.
    /// The jobs that depend on it are judged again (and theirs in turn).
    pub(crate) fn set_status(
        &mut self,
        id: JobId,
        to: JobStatus,
        reason: &str,
        nodes: Vec<NodeName>,
        now: Millis,
    ) {
        if self.set_status_one(id, to, reason, nodes, now) {
            self.wake_dependents(id, now);
        }
    }

    /// [`State::set_status`] for this job alone; false when it already was `to`.
    pub(crate) fn set_status_one(
        &mut self,
        id: JobId,
        to: JobStatus,
        reason: &str,
        nodes: Vec<NodeName>,
        now: Millis,
    ) -> bool {
        let job = self.jobs.get_mut(&id).expect("job exists");
        let from = job.status;
        if from == to {
            return false;
        }
        if from == JobStatus::Pending {
            job.pending_reason = None;
            for d in std::mem::take(&mut job.deps) {
                if let Some(set) = self.index.dependents.get_mut(&d.job) {
                    set.remove(&id);
                    if set.is_empty() {
                        self.index.dependents.remove(&d.job);
                    }
                }
            }
        }
        let share = job.spec.share.clone();
        let unit = job.spec.request.unit.clone();
        let queue = job.spec.queue.clone();
        let total = job.spec.request.total_gpus();
        if from == JobStatus::Runnable {
            self.index.remove_runnable(&share, &RunKey::of(job));
            job.hold = None;
            job.pending_reason = None;
            self.index.holding.remove(&id);
        }
        if to == JobStatus::Runnable {
            job.pending_reason = Some(PendingReason::NotYetScheduled);
            self.index
                .runnable
                .entry(share.clone())
                .or_default()
                .insert(RunKey::of(job), Waiting::of(job, &mut self.index.units));
        }
        let mut freed = vec![];
        if from.is_active() && !to.is_active() {
            self.index
                .deactivate(id, &share, &queue, &unit, total, holder_of(job));
            job.stop = None;
            if let Some(a) = job.attempts.last() {
                freed = a.allocation.clone();
            }
        }
        if !from.is_active() && to.is_active() {
            self.index.activate(job);
        }
        self.index.recount_job(job, from, to);
        job.status = to;
        let ended = to.is_terminal();
        job.transitions.push(Transition {
            at: now,
            from,
            to,
            reason: reason.to_string(),
            nodes,
        });
        for na in freed {
            if let Some(node) = self.nodes.get_mut(&na.node) {
                for (g, slot) in node.inventory.gpus.iter().zip(node.allocated.iter_mut()) {
                    if *slot == Some(id) && na.gpus.contains(&g.index) {
                        *slot = None;
                    }
                }
            }
        }
        if ended {
            self.note_ended(id);
        }
        true
    }
}
