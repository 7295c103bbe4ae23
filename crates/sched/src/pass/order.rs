//! The order of work in one queue: shares take turns in the own-capacity pass (rules 1
//! and 2, with reclaim and in-share preemption for jobs that cannot start), then the
//! FIFO borrow pass (rule 5); holders are placed once their GPUs are free.

use super::classes::{DLevel, OwnEvent, ShareWalk};
use super::*;

impl<'a> Pass<'a> {
    pub(super) fn reason(&mut self, id: JobId, w: &Waiting, why: Why) {
        // A borrow round that takes only the nearer borrowers gives no reasons: the
        // last round, which takes every borrower, gives each its own; a job placed in
        // an earlier round needs none.
        if self.borrow_reach.is_some() || self.placed.contains(&id) {
            return;
        }
        if w.reason.as_ref() != Some(&why) {
            self.plan.reasons.push((id, why));
        }
    }

    // ---- one queue -----------------------------------------------------------------

    pub(super) fn queue(&mut self, q: &'a JobQueue) {
        let st = self.st;
        let shares: Vec<usize> = st
            .shares
            .values()
            .enumerate()
            .filter(|(_, s)| s.queue == q.name)
            .map(|(i, _)| i)
            .collect();
        let env = self.env_ix.get(q.environment.as_str()).copied();
        let blocked: Option<Why> = if q.state != ObjState::Enabled {
            Some(PendingReasonOf::QueueDisabled {
                queue: q.name.as_str().into(),
            })
        } else {
            match env {
                Some(e) if self.envs[e].enabled => None,
                _ => Some(PendingReasonOf::EnvironmentDisabled {
                    env: q.environment.as_str().into(),
                }),
            }
        };
        // Rule 1 and 2: the own-capacity pass, visiting shares by their next job's
        // priority, then lowest usage ratio, then the job's age; then rule 5, the
        // borrow pass. Both walk the queue by class where its classes are long enough
        // to pay for it (see [`classes`]), else job by job: the two plan alike.
        let mut open = vec![];
        let (mut jobs, mut classes) = (0, 0);
        for &s in &shares {
            let sv = &self.shares[s];
            let Some(waiters) = st.waiting_in(&sv.q.name) else {
                continue;
            };
            let why = blocked.clone().or_else(|| {
                (!sv.enabled()).then(|| PendingReasonOf::ShareDisabled {
                    share: sv.name.clone(),
                })
            });
            if let Some(why) = why {
                // Where every class gives the reason already, no job is read.
                if !waiters
                    .classes()
                    .all(|(_, l)| l.uniform_reason() == Some(Some(&why)))
                {
                    for (k, w) in waiters.iter() {
                        self.reason(k.id, w, why.clone());
                    }
                }
                continue;
            }
            open.push((s, waiters));
            jobs += waiters.len();
            classes += waiters.classes().len();
        }
        let by_class = match self.walk {
            Walk::Each => false,
            Walk::Classes => true,
            Walk::Auto => jobs >= CLASS_WALK_MIN_JOBS * classes,
        };
        if !by_class {
            let open: Vec<usize> = open.iter().map(|(s, _)| *s).collect();
            self.queue_each(&open);
            return;
        }
        let mut walks: Vec<ShareWalk<'a>> =
            open.iter().map(|(s, w)| ShareWalk::new(*s, w)).collect();
        // The share whose next job has the highest key goes next: the walks give
        // each share's next job to judge, and settle the rest by class.
        loop {
            let mut best: Option<(usize, OwnEvent)> = None;
            for (j, w) in walks.iter_mut().enumerate() {
                if let Some(e) = self.own_next(w) {
                    if best.is_none_or(|(_, b)| e.key > b.key) {
                        best = Some((j, e));
                    }
                }
            }
            let Some((j, e)) = best else {
                break;
            };
            self.own_step(&mut walks, j, e);
        }
        for w in &mut walks {
            self.own_finish(w);
        }
        // Rule 5: the borrow pass, FIFO by submit time across shares; under
        // FAIR_SHARE share by share, least decayed usage per weight first. With groups,
        // in rounds: first the borrowers whose lenders are inside the deepest groups,
        // then one level up, and so on; the last round takes every borrower (see
        // `Pass::borrow_depth`).
        let deferred: Vec<(usize, Vec<DLevel<'a>>)> =
            walks.into_iter().map(|w| (w.s, w.deferred)).collect();
        let open: Vec<usize> = deferred.iter().map(|d| d.0).collect();
        let order = self.fair_order(&open);
        let deepest = self.deepest_group(self.queue_ix[q.name.as_str()]);
        for d in (0..=deepest).rev() {
            self.borrow_reach = (d > 0).then_some(d);
            match &order {
                Some(order) => {
                    for &s in order {
                        if let Some(one) = deferred.iter().find(|d| d.0 == s) {
                            self.borrow_walk(std::slice::from_ref(one));
                        }
                    }
                }
                None => self.borrow_walk(&deferred),
            }
        }
        self.borrow_reach = None;
    }

    /// Whether the job is a task of an array with its `%` limit of tasks already
    /// holding GPUs (then its reason says so).
    pub(super) fn array_full(&mut self, id: JobId, w: &'a Waiting) -> bool {
        let Some((array, limit)) = w.array_limit else {
            return false;
        };
        let st = self.st;
        let taken = *self.array_taken.entry(array).or_insert_with(|| {
            let count = st
                .job(array)
                .and_then(|j| j.array.as_ref())
                .map_or(0, |a| a.count);
            st.tasks_of(array, count)
                .filter(|j| j.status.is_active() || j.hold.is_some())
                .count() as u32
        });
        // A task that holds GPUs already is one of those counted.
        if taken < limit || w.has_hold {
            return false;
        }
        let why = PendingReasonOf::ArrayLimit {
            array: array.to_string().into(),
            running: taken,
            limit,
        };
        self.reason(id, w, why);
        true
    }

    /// Counts the job against its array's limit when the actions since `mark` place it
    /// or give it a hold.
    pub(super) fn array_count(&mut self, id: JobId, w: &Waiting, mark: usize) {
        let Some((array, _)) = w.array_limit.filter(|_| !w.has_hold) else {
            return;
        };
        let took = self.plan.actions[mark..].iter().any(|a| match a {
            Action::Place { job, .. } => *job == id,
            Action::Hold { job, hold } => *job == id && hold.is_some(),
            Action::Preempt { .. } => false,
        });
        if took {
            *self.array_taken.entry(array).or_default() += 1;
        }
    }

    /// Returns whether the job still waits for room in its share: it neither started
    /// nor holds GPUs, and it could start once there is room.
    /// Sets `defer` when the job is left to the borrow pass.
    pub(super) fn own_job(
        &mut self,
        k: &RunKey,
        w: &'a Waiting,
        s: usize,
        u: Option<Ux>,
        defer: &mut bool,
    ) -> bool {
        let Some(u) = u else {
            let env = self.shares[s]
                .env
                .map_or_else(|| "".into(), |e| self.envs[e].name.clone());
            self.reason(
                k.id,
                w,
                PendingReasonOf::NoNodes {
                    unit: w.unit.as_str().into(),
                    env,
                },
            );
            return false;
        };
        let ask = Ask {
            id: k.id,
            w,
            s,
            u,
            prio: k.priority.0,
        };
        if w.has_hold && self.holder(ask) {
            return false;
        }
        let sv = &self.shares[s];
        let need = ask.need();
        // More than the share may ever hold: no placement or preemption can help, and
        // the reason says what would.
        if let Some(ceiling) = sv.ceiling[u].filter(|c| need as u64 > *c) {
            let why = PendingReasonOf::AboveCeiling {
                share: sv.name.clone(),
                need,
                ceiling,
                unit: self.unit_names[u].clone(),
                strategy: sv.strategy.clone(),
            };
            self.reason(k.id, w, why);
            return false;
        }
        // Rule 1 and 2: in a share that may borrow, a job's room counts the GPUs its
        // share's waiting jobs of higher priority want; without it the job borrows. (A
        // share that cannot borrow lets it start within max: it would otherwise wait
        // beside free GPUs, and rule 4 gives the share's higher priorities their room.)
        let above = if sv.q.borrows() {
            self.shares[s].ahead[u].above(ask.prio)
        } else {
            0
        };
        let sv = &self.shares[s];
        if sv.used[u] + sv.held[u] + above + need <= sv.max[u] {
            let why = match self.try_place(ask, false, None) {
                Ok(()) => return false,
                Err(why) => why,
            };
            // Rule 3: take over a hold of an over-max share's job, else reclaim from
            // over-max shares; rule 4: in-share preemption.
            if self.take_borrowed_hold(ask) {
                return false;
            }
            let mut protect = None;
            if self.try_preempt(ask, Mode::Reclaim, &mut protect) {
                return false;
            }
            if self.shares[s].q.in_share_preemption
                && self.try_preempt(ask, Mode::InShare(ask.prio), &mut protect)
            {
                return false;
            }
            let why = match protect {
                Some(until) => PendingReasonOf::MinRuntime { until },
                None => why,
            };
            self.reason(k.id, w, why);
        } else if sv.q.borrows() {
            *defer = true;
        } else {
            let mut protect = None;
            if sv.q.in_share_preemption
                && self.try_preempt(ask, Mode::InShare(ask.prio), &mut protect)
            {
                return false;
            }
            let sv = &self.shares[s];
            let why = match protect {
                Some(until) => PendingReasonOf::MinRuntime { until },
                None => PendingReasonOf::AtMaxNoBorrow {
                    share: sv.name.clone(),
                    used: sv.used[u] + sv.held[u],
                    max: sv.max[u],
                    need,
                    unit: self.unit_names[u].clone(),
                    strategy: sv.strategy.clone(),
                },
            };
            self.reason(k.id, w, why);
        }
        true
    }

    /// The borrow pass for one job (rule 5): up to the share's ceiling, on idle GPUs,
    /// never by preempting another share. Returns the judgement a class may keep: the
    /// job's reason, where it made no action and is not judged on its own.
    pub(super) fn borrow_event(
        &mut self,
        id: JobId,
        w: &'a Waiting,
        s: usize,
        prio: u32,
        u: Ux,
        alone: bool,
    ) -> Option<super::classes::WhyAt<'a>> {
        // Placed in an earlier round of this borrow pass, or left to a later one.
        if self.placed.contains(&id) {
            return None;
        }
        if let Some(reach) = self.borrow_reach {
            if self.borrow_depth(s, u, w.gpus_per_node * w.nodes) < reach {
                return None;
            }
        }
        if self.array_full(id, w) {
            return None;
        }
        let mark = (self.plan.actions.len(), self.plan.reasons.len());
        self.borrow_job(id, w, s, prio, u);
        self.array_count(id, w, mark.0);
        (self.walk != Walk::Each && !alone && self.plan.actions.len() == mark.0)
            .then(|| self.why_at(id, w, mark.1))
            .flatten()
    }

    fn borrow_job(&mut self, id: JobId, w: &'a Waiting, s: usize, prio: u32, u: Ux) {
        let ask = Ask { id, w, s, u, prio };
        let sv = &self.shares[s];
        let need = ask.need();
        let have = sv.used[u] + sv.held[u];
        let why = match sv.ceiling[u] {
            Some(limit) if (have + need) as u64 > limit => PendingReasonOf::BorrowLimit {
                used: have,
                limit,
                need,
                unit: self.unit_names[u].clone(),
            },
            _ => match self.try_place(ask, true, None) {
                Ok(()) => return,
                Err(why) => why,
            },
        };
        let mut protect = None;
        if self.shares[s].q.in_share_preemption
            && self.try_preempt(ask, Mode::InShare(prio), &mut protect)
        {
            return;
        }
        self.reason(id, w, why);
    }

    /// A job that holds GPUs while its victims exit. Returns true when it is dealt with
    /// (placed, or still waiting); false when its hold was released and it should be
    /// scheduled like any other job.
    pub(super) fn holder(&mut self, ask: Ask<'a>) -> bool {
        // A hold another share's within-max job took over in this pass is gone.
        if self.hold_lost.contains(&ask.id) {
            return false;
        }
        let st = self.st;
        let Some(hold) = st.jobs.get(&ask.id).and_then(|j| j.hold.as_ref()) else {
            return false;
        };
        let u = ask.u;
        let mut valid = true;
        let mut ready = true;
        let mut targets = vec![];
        for (node, count) in &hold.nodes {
            let nu = self.node_ix(node).and_then(|n| {
                let nv = &self.nodes[n as usize];
                nv.nu(u)
                    .filter(|nu| nv.usable && !nu.pools.is_empty())
                    .map(|nu| (n, nu))
            });
            match nu {
                None => valid = false,
                Some((n, nu)) => {
                    // Our own hold is part of `held`; the rest belongs to others.
                    let others = nu.held.saturating_sub(*count);
                    if (nu.free.len() as u32).saturating_sub(others) < *count {
                        ready = false;
                    }
                    targets.push((n, *count));
                }
            }
        }
        let mut victims = self.victims_of.get(&ask.id).copied();
        // A hold taken over from another share's job (see `take_borrowed_hold`) waits
        // for the jobs exiting on its GPUs, though they were not stopped for it.
        if victims.is_none() && valid && !ready {
            victims = self.stopping_on(&targets, u);
        }
        // A hold won by in-share preemption in the borrow pass may start above max.
        let sv = &self.shares[ask.s];
        let borrowed = sv.used[u] + ask.need() > sv.max[u];
        if valid && ready {
            match self.try_place(ask, borrowed, Some(&targets)) {
                Ok(()) => return true,
                // Blocked by the cap or a reserve with no victim left to wait for: keep
                // the hold and say why.
                Err(why) if victims.is_none() && Self::waits_on_cap_or_reserve(&why) => {
                    self.reason(ask.id, ask.w, why);
                    return true;
                }
                // Over the share's limit only until its jobs being stopped (drained,
                // cancelled) have exited, which is how the victims were chosen: wait
                // for those, keeping the hold, or the victims' room would go to them
                // again.
                Err(
                    PendingReasonOf::AtMaxNoBorrow { .. } | PendingReasonOf::BorrowLimit { .. },
                ) if victims.is_none() && self.fits_once_stopped(ask, borrowed) => {
                    victims = Some(self.stopping_of(ask.s, u));
                }
                Err(_) => {}
            }
        }
        // Work conservation: while its victims are still stopping, a holder starts at
        // once where free GPUs fit it (its hold is given back), so that it never waits
        // while GPUs it may use are free, say on a node that was resumed since.
        if valid {
            let mark = self.plan.actions.len();
            self.give_back_hold(ask.id);
            if self.try_place(ask, borrowed, None).is_ok() {
                return true;
            }
            self.plan.actions.truncate(mark);
            self.take_hold(ask.id, ask.s, u, ask.need(), &targets);
        }
        // Still waiting for victims (say, its own share's, to get under max), or for the
        // share's other jobs being stopped.
        if let (true, Some((jobs, grace_ends_at))) = (valid, victims) {
            self.reason(
                ask.id,
                ask.w,
                PendingReasonOf::WaitingForPreempted {
                    jobs,
                    grace_ends_at,
                },
            );
            return true;
        }
        // The hold no longer leads anywhere: give its GPUs back.
        self.give_back_hold(ask.id);
        false
    }

    /// Whether the job fits its share's limit once the share's jobs being stopped have
    /// exited.
    fn fits_once_stopped(&self, ask: Ask<'a>, borrowed: bool) -> bool {
        let sv = &self.shares[ask.s];
        let u = ask.u;
        sv.stopping[u] > 0
            && sv
                .limit(u, borrowed)
                .is_none_or(|l| (sv.used[u] - sv.stopping[u] + ask.need()) as u64 <= l)
    }

    /// The share's jobs of unit `u` being stopped, and when the last one's grace ends.
    fn stopping_of(&self, s: usize, u: Ux) -> (u32, Millis) {
        let name = self.shares[s].q.name.as_str();
        let unit = self.units[u];
        self.st
            .stopping_jobs()
            .filter(|j| j.spec.share.as_str() == name && j.spec.request.unit.as_str() == unit)
            .fold((0, 0), |(n, t), j| {
                (n + 1, t.max(j.stop.as_ref().map_or(0, |s| s.deadline)))
            })
    }

    /// The job waits on the environment's cap or a RESERVE share's idle GPUs, which a
    /// hold keeps covering, rather than on GPUs that will not come.
    pub(super) fn waits_on_cap_or_reserve(why: &Why) -> bool {
        matches!(
            why,
            PendingReasonOf::EnvironmentCap { .. } | PendingReasonOf::ReserveHeld { .. }
        )
    }
}
