//! Holds: GPUs kept for a preemptor while the jobs on them exit. The pass counts each
//! hold in its views (the share's and environment's `held`, the nodes' held GPUs) and
//! keeps the list of holds as they stand, so that rule 3 can reach a hold as it reaches
//! a running job.
//!
//! Rule 3 and holds: a job of a share over its max may hold GPUs whose jobs are
//! stopping (it preempted them in its own share). Were it to start there, its share
//! would be over max and a within-max job of another share would reclaim it at once,
//! then wait a grace period more. So a within-max job that cannot start takes such a
//! hold over before it preempts anyone: the GPUs are being freed already, and no work
//! is lost (`take_borrowed_hold`).

use super::*;

/// A hold as the pass counts it.
#[derive(Clone)]
pub(super) struct Held {
    s: usize,
    u: Ux,
    need: u32,
    targets: Vec<(Nx, u32)>,
}

impl<'a> Pass<'a> {
    /// Counts a hold of `need` GPUs (`targets` per node) for `job` of share `s`.
    pub(super) fn take_hold(
        &mut self,
        job: JobId,
        s: usize,
        u: Ux,
        need: u32,
        targets: &[(Nx, u32)],
    ) {
        self.shares[s].held[u] += need;
        if let Some(e) = self.shares[s].env {
            self.envs[e].holds[u] += need;
        }
        for &(n, c) in targets {
            self.touch(n, u, |nu| nu.held += c);
        }
        let targets = targets.to_vec();
        self.holds.insert(
            job,
            Held {
                s,
                u,
                need,
                targets,
            },
        );
    }

    /// Uncounts `job`'s hold, if the pass counts one.
    pub(super) fn release_hold(&mut self, job: JobId) {
        let Some(Held {
            s,
            u,
            need,
            targets,
        }) = self.holds.remove(&job)
        else {
            return;
        };
        self.shares[s].held[u] -= need.min(self.shares[s].held[u]);
        if let Some(e) = self.shares[s].env {
            self.envs[e].holds[u] -= need.min(self.envs[e].holds[u]);
        }
        for (n, c) in targets {
            self.touch(n, u, |nu| nu.held -= c.min(nu.held));
        }
    }

    /// Releases `job`'s hold, in the plan and in the pass's views.
    pub(super) fn give_back_hold(&mut self, job: JobId) {
        self.plan.actions.push(Action::Hold { job, hold: None });
        self.release_hold(job);
    }

    /// The jobs of unit `u` being stopped on `targets`' nodes: how many, and when the
    /// last one's grace ends (`None` when there are none).
    pub(super) fn stopping_on(&self, targets: &[(Nx, u32)], u: Ux) -> Option<(u32, Millis)> {
        let (jobs, _, deadline) = self.stopping_gpus_on(targets, u);
        (jobs > 0).then_some((jobs, deadline))
    }

    /// As [`Pass::stopping_on`], with the GPUs those jobs hold on the nodes.
    fn stopping_gpus_on(&self, targets: &[(Nx, u32)], u: Ux) -> (u32, u32, Millis) {
        let unit = self.units[u];
        let mut out = (0, 0, 0);
        for job in self.st.stopping_jobs() {
            if job.spec.request.unit.as_str() != unit {
                continue;
            }
            let on: u32 = job
                .allocation()
                .iter()
                .filter(|a| {
                    targets
                        .iter()
                        .any(|&(n, _)| self.nodes[n as usize].name == a.node.as_str())
                })
                .map(|a| a.gpus.len() as u32)
                .sum();
            if on > 0 {
                out.0 += 1;
                out.1 += on;
                out.2 = out.2.max(job.stop.as_ref().map_or(0, |s| s.deadline));
            }
        }
        out
    }

    /// Rule 3 for GPUs already being freed: a single-node job within its share's max
    /// takes over the hold of another share's job that would start over its max, on a
    /// node where the GPUs being freed make room for it. Of several, the hold whose
    /// jobs are freed first is taken (then the lowest job id). Returns whether a hold
    /// was taken; the job then waits for the jobs exiting there.
    pub(super) fn take_borrowed_hold(&mut self, ask: Ask<'a>) -> bool {
        let (s, u, g) = (ask.s, ask.u, ask.w.gpus_per_node);
        if ask.w.nodes != 1 || self.holds.is_empty() {
            return false;
        }
        let Some(pi) = self.shares[s].env.and_then(|e| self.envs[e].pool[u]) else {
            return false;
        };
        // Over max once its holds start: what it uses, less what is being stopped, plus
        // what it holds. Most passes have no such share, and the holds are not read.
        let over = |t: usize| {
            let hv = &self.shares[t];
            t != s && hv.held[u] > 0 && hv.used[u] + hv.held[u] > hv.max[u] + hv.stopping[u]
        };
        if !(0..self.shares.len()).any(over) {
            return false;
        }
        let mut best: Option<(Millis, JobId, Nx, u32)> = None;
        for (&h, held) in &self.holds {
            if h == ask.id || held.u != u || !over(held.s) {
                continue;
            }
            for &(n, c) in &held.targets {
                if self.pool_avail(n, u, pi).is_none() {
                    continue;
                }
                let Some(nu) = self.nodes[n as usize].nu(u) else {
                    continue;
                };
                let (jobs, gpus, deadline) = self.stopping_gpus_on(&[(n, c)], u);
                // GPUs free once the jobs stopping there exit, less other holds.
                let room = (nu.free.len() as u32 + gpus).saturating_sub(nu.held - c.min(nu.held));
                if jobs == 0 || room < g {
                    continue;
                }
                if best.is_none_or(|b| (deadline, h) < (b.0, b.1)) {
                    best = Some((deadline, h, n, jobs));
                }
            }
        }
        let Some((deadline, h, n, jobs)) = best else {
            return false;
        };
        self.give_back_hold(h);
        self.hold_lost.insert(h);
        self.takeovers += 1;
        self.take_hold(ask.id, s, u, g, &[(n, g)]);
        let hold = Hold {
            nodes: vec![(NodeName(self.nodes[n as usize].name.to_owned()), g)],
            since: self.now,
        };
        self.plan.actions.push(Action::Hold {
            job: ask.id,
            hold: Some(hold),
        });
        let why = PendingReasonOf::WaitingForPreempted {
            jobs,
            grace_ends_at: deadline,
        };
        self.reason(ask.id, ask.w, why);
        true
    }
}
