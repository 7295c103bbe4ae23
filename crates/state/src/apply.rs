//! `State::apply`: one function per command. Each checks everything first and mutates
//! only once the command is known to be accepted, so a rejected command changes nothing.

use crate::command::*;
use crate::plan::*;
use crate::state::*;
use std::cmp::Reverse;
use std::collections::BTreeSet;
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
            Command::DeleteShare(n) => self
                .delete_share(n, now)
                .map(|()| self.forget_tags_of_deleted()),
            Command::Submit(spec) => return self.submit(spec, now),
            Command::Cancel { job, reason } => self.cancel_ref(job, reason, now),
            Command::UpdatePriority { job, priority } => self.update_priority_ref(job, *priority),
            Command::Hold { job } => self.hold_jobs(job, now),
            Command::PruneLedger { before_hour } => {
                self.ledger.hours = self.ledger.hours.split_off(before_hour);
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

    // ---- admin objects -------------------------------------------------------------

    fn put_environment(&mut self, e: &ServiceEnvironment) -> Result<(), ApplyError> {
        e.validate()?;
        self.environments.insert(e.name.clone(), e.clone());
        Ok(())
    }

    fn delete_environment(&mut self, n: &EnvName) -> Result<(), ApplyError> {
        if !self.environments.contains_key(n) {
            return Err(not_found("environment", n));
        }
        if let Some(q) = self.queues.values().find(|q| &q.environment == n) {
            return Err(conflict(format!(
                "environment {n} is used by queue {}; delete the queue first",
                q.name
            )));
        }
        self.environments.remove(n);
        Ok(())
    }

    fn put_policy(&mut self, p: &SchedulingPolicy) -> Result<(), ApplyError> {
        p.validate()?;
        self.policies.insert(p.name.clone(), p.clone());
        Ok(())
    }

    fn delete_policy(&mut self, n: &PolicyName) -> Result<(), ApplyError> {
        if !self.policies.contains_key(n) {
            return Err(not_found("scheduling policy", n));
        }
        if let Some(q) = self.queues.values().find(|q| &q.policy == n) {
            return Err(conflict(format!(
                "scheduling policy {n} is used by queue {}",
                q.name
            )));
        }
        self.policies.remove(n);
        Ok(())
    }

    fn put_queue(&mut self, q: &JobQueue) -> Result<(), ApplyError> {
        q.validate()?;
        if !self.environments.contains_key(&q.environment) {
            return Err(ValidationError::new(
                "environment",
                format!("environment {} does not exist", q.environment),
            )
            .into());
        }
        if !self.policies.contains_key(&q.policy) {
            return Err(ValidationError::new(
                "policy",
                format!("scheduling policy {} does not exist", q.policy),
            )
            .into());
        }
        if let Some(old) = self.queues.get(&q.name) {
            if old.environment != q.environment
                && self.active_jobs().any(|j| j.spec.queue == q.name)
            {
                return Err(conflict(format!(
                    "queue {} has running jobs; its environment cannot change until they end",
                    q.name
                )));
            }
        }
        self.queues.insert(q.name.clone(), q.clone());
        Ok(())
    }

    fn delete_queue(&mut self, n: &QueueName) -> Result<(), ApplyError> {
        let q = self.queues.get(n).ok_or_else(|| not_found("queue", n))?;
        if q.state != ObjState::Disabled {
            return Err(conflict(format!(
                "queue {n} must be DISABLED before it is deleted"
            )));
        }
        if let Some(s) = self.shares_of(n).next() {
            return Err(conflict(format!(
                "queue {n} still has quota share {}; delete it first",
                s.name
            )));
        }
        if self
            .jobs
            .values()
            .any(|j| &j.spec.queue == n && !j.status.is_terminal())
        {
            return Err(conflict(format!("queue {n} still has unfinished jobs")));
        }
        self.queues.remove(n);
        Ok(())
    }

    fn put_share(&mut self, s: &QuotaShare) -> Result<(), ApplyError> {
        s.validate()?;
        if !self.queues.contains_key(&s.queue) {
            return Err(
                ValidationError::new("queue", format!("queue {} does not exist", s.queue)).into(),
            );
        }
        match self.shares.get(&s.name) {
            Some(old) if old.queue != s.queue => {
                return Err(ValidationError::new(
                    "queue",
                    format!(
                        "share {} belongs to queue {}; a share cannot move to another queue",
                        s.name, old.queue
                    ),
                )
                .into());
            }
            Some(_) => {}
            None => {
                let n = self.shares_of(&s.queue).count();
                if n >= MAX_SHARES_PER_QUEUE {
                    return Err(ValidationError::new(
                        "queue",
                        format!("queue {} already has {n} quota shares; at most {MAX_SHARES_PER_QUEUE} are allowed", s.queue),
                    )
                    .into());
                }
            }
        }
        self.shares.insert(s.name.clone(), s.clone());
        Ok(())
    }

    /// Deleting a share terminates its jobs: waiting ones are cancelled now, running ones
    /// get their checkpoint signal and are cancelled when they exit.
    fn delete_share(&mut self, n: &ShareName, now: Millis) -> Result<(), ApplyError> {
        let s = self
            .shares
            .get(n)
            .ok_or_else(|| not_found("quota share", n))?;
        if s.state != ObjState::Disabled {
            return Err(conflict(format!(
                "quota share {n} must be DISABLED before it is deleted"
            )));
        }
        let ids: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| &j.spec.share == n && !j.status.is_terminal())
            .map(|j| j.id)
            .collect();
        for id in ids {
            self.stop_or_cancel(
                id,
                StopKind::Cancel,
                &format!("quota share {n} deleted"),
                now,
            );
        }
        self.shares.remove(n);
        Ok(())
    }

    // ---- jobs ----------------------------------------------------------------------

    /// Refuses a request that no node of the environment could ever hold: more GPUs
    /// per node than its largest node of the unit has, or more in all than its cap
    /// for the unit. (An environment with no node of the unit yet takes the job; it
    /// waits for one to join.)
    fn check_can_ever_fit(&self, spec: &JobSpec, env: &EnvName) -> Result<(), ApplyError> {
        let Some(env) = self.environments.get(env) else {
            return Ok(());
        };
        let req = &spec.request;
        // The unit's nodes, most GPUs first: the first the environment selects.
        let largest = self
            .index
            .node_units
            .get(&req.unit)
            .into_iter()
            .flatten()
            .find(|(_, n)| {
                self.nodes
                    .get(n)
                    .is_some_and(|n| env.selects(&n.inventory.labels))
            })
            .map_or(0, |(Reverse(g), _)| *g);
        if largest > 0 && req.gpus_per_node > largest {
            return Err(ValidationError::new(
                "request.gpus_per_node",
                format!(
                    "needs {} {} on one node, but the largest {} node in environment {} has {largest}",
                    req.gpus_per_node, req.unit, req.unit, env.name
                ),
            )
            .into());
        }
        if let Some(cap) = limit_for(&env.capacity_limits, &req.unit) {
            let total = req.total_gpus();
            if total > cap {
                return Err(ValidationError::new(
                    "request",
                    format!(
                        "needs {total} {} in all ({} node(s) × {}), more than environment {}'s cap of {cap} {}",
                        req.unit, req.nodes, req.gpus_per_node, env.name, req.unit
                    ),
                )
                .into());
            }
        }
        Ok(())
    }

    fn submit(&mut self, spec: &JobSpec, now: Millis) -> Result<Outcome, ApplyError> {
        if let Some(token) = &spec.client_token {
            if let Some(id) = self.tokens.get(&(spec.user.clone(), token.clone())) {
                return Ok(Outcome::Submitted {
                    job: *id,
                    existing: true,
                });
            }
        }
        spec.validate()?;
        let queue = self.queues.get(&spec.queue).ok_or_else(|| {
            ValidationError::new("queue", format!("queue {} does not exist", spec.queue))
        })?;
        if queue.state != ObjState::Enabled {
            return Err(ValidationError::new(
                "queue",
                format!("queue {} is DISABLED and takes no new jobs", spec.queue),
            )
            .into());
        }
        let share = self.shares.get(&spec.share).ok_or_else(|| {
            ValidationError::new(
                "share",
                format!("quota share {} does not exist", spec.share),
            )
        })?;
        if share.queue != spec.queue {
            return Err(ValidationError::new(
                "share",
                format!(
                    "quota share {} belongs to queue {}, not {}",
                    spec.share, share.queue, spec.queue
                ),
            )
            .into());
        }
        if share.state != ObjState::Enabled {
            return Err(ValidationError::new(
                "share",
                format!(
                    "quota share {} is DISABLED and takes no new jobs",
                    spec.share
                ),
            )
            .into());
        }
        if !share.is_member(&spec.user) {
            return Err(ValidationError::new(
                "share",
                format!(
                    "user {} is not a member of quota share {}",
                    spec.user, spec.share
                ),
            )
            .into());
        }
        spec.validate_for_share(share)?;
        self.check_can_ever_fit(spec, &queue.environment)?;
        let window = self.check_job_limits(spec, share, now)?;
        let deps = self.resolve_dependency(spec)?;
        let tasks: Vec<Option<ArrayTask>> = match &spec.array {
            None => vec![None],
            Some(a) => {
                let indices = a.indices();
                let count = indices.len() as u32;
                let array = JobId(self.next_job_id);
                indices
                    .into_iter()
                    .map(|index| {
                        Some(ArrayTask {
                            array,
                            index,
                            count,
                            max_running: a.max_running,
                        })
                    })
                    .collect()
            }
        };
        let first = JobId(self.next_job_id);
        if let Some(token) = &spec.client_token {
            self.tokens
                .insert((spec.user.clone(), token.clone()), first);
        }
        // One spec for every task of an array: each task holds a reference to it.
        let mut task_spec = spec.clone();
        task_spec.array = None;
        let task_spec = std::sync::Arc::new(task_spec);
        let mut never = vec![];
        for array in tasks {
            let id = JobId(self.next_job_id);
            self.next_job_id += 1;
            let mut job = Job {
                id,
                spec: task_spec.clone(),
                status: JobStatus::Runnable,
                submitted_at: now,
                attempts: vec![],
                transitions: vec![],
                stop: None,
                hold: None,
                pending_reason: Some(PendingReason::NotYetScheduled),
                preemptions: 0,
                failures: 0,
                array,
                deps: deps.waiting.clone(),
                held: spec.hold,
            };
            let mut reason = format!("submitted by {}", spec.user);
            if job.held || !job.deps.is_empty() {
                job.status = JobStatus::Pending;
                let why = self.pending_why(&job);
                reason = format!("{reason}; {}", why.render(now));
                job.pending_reason = Some(why);
                for d in &job.deps {
                    self.index.dependents.entry(d.job).or_default().insert(id);
                }
            } else {
                self.index
                    .runnable
                    .entry(spec.share.clone())
                    .or_default()
                    .insert(RunKey::of(&job), Waiting::of(&job, &mut self.index.units));
            }
            job.transitions.push(Transition {
                at: now,
                from: JobStatus::Submitted,
                to: job.status,
                reason,
                nodes: vec![],
            });
            self.index.count_job(&job, job.status, true);
            self.jobs.insert(id, job);
            if let Some(why) = &deps.never {
                never.push((id, why.clone()));
            }
        }
        for (id, why) in never {
            self.set_status(id, JobStatus::Cancelled, &why, vec![], now);
        }
        let key = (spec.share.clone(), spec.user.clone());
        if !self.submit_rate.contains_key(&key) {
            // Entries of past minutes count for nothing: dropped as new ones come.
            self.submit_rate.retain(|_, w| w.minute == window.minute);
        }
        self.submit_rate.insert(key, window);
        self.version += 1;
        Ok(Outcome::Submitted {
            job: first,
            existing: false,
        })
    }

    /// Whether a submit of `spec` at `now` is within its share's job limits as this
    /// state stands (a share it does not know passes: the submit is refused on apply,
    /// naming it). The controllers refuse with it, before proposing, what the state
    /// machine would refuse when it applies the submit, so that a user over a limit
    /// fills no log with refused entries; the state machine still decides.
    pub fn check_submit_limits(&self, spec: &JobSpec, now: Millis) -> Result<(), ApplyError> {
        match self.shares.get(&spec.share) {
            Some(share) => self.check_job_limits(spec, share, now).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Checks a submit against its share's job limits ([`JobLimits`]): the tasks it
    /// adds against what its user and the share have not yet ended, and the user's
    /// submits of this minute of entry time. Returns the user's submit window with
    /// this submit counted.
    fn check_job_limits(
        &self,
        spec: &JobSpec,
        share: &QuotaShare,
        now: Millis,
    ) -> Result<SubmitWindow, ApplyError> {
        let limits = &share.limits;
        let (user, name) = (&spec.user, &share.name);
        let tasks = match &spec.array {
            Some(a) => {
                let n = a.indices().len() as u32;
                if n > limits.max_array_tasks {
                    return Err(ValidationError::new(
                        "array",
                        format!(
                            "an array of share {name} may have at most {} tasks (max_array_tasks), got {n}",
                            limits.max_array_tasks
                        ),
                    )
                    .into());
                }
                n
            }
            None => 1,
        };
        let over = |has: String, limit: &str, max: u32| {
            conflict(format!(
                "{has}, and {limit} of share {name} is {max}; this submit adds {tasks}. Wait for jobs to end, or ask an admin to raise the limit"
            ))
        };
        let o = self.owned_in(&spec.share, user);
        if o.waiting + tasks > limits.max_pending_per_user {
            return Err(over(
                format!("user {user} has {} waiting jobs in share {name}", o.waiting),
                "max_pending_per_user",
                limits.max_pending_per_user,
            ));
        }
        if o.jobs + tasks > limits.max_jobs_per_user {
            return Err(over(
                format!("user {user} has {} jobs not ended in share {name}", o.jobs),
                "max_jobs_per_user",
                limits.max_jobs_per_user,
            ));
        }
        let in_share = self.share_job_count(&spec.share);
        if in_share + tasks > limits.max_jobs_per_share {
            return Err(over(
                format!("share {name} has {in_share} jobs not ended"),
                "max_jobs_per_share",
                limits.max_jobs_per_share,
            ));
        }
        if spec.array.is_some() && o.arrays >= limits.max_arrays_per_user {
            return Err(over(
                format!(
                    "user {user} has {} arrays with tasks not ended in share {name}",
                    o.arrays
                ),
                "max_arrays_per_user",
                limits.max_arrays_per_user,
            ));
        }
        let minute = now / 60_000;
        let mut window = self
            .submit_rate
            .get(&(spec.share.clone(), user.clone()))
            .copied()
            .filter(|w| w.minute == minute)
            .unwrap_or(SubmitWindow { minute, submits: 0 });
        if window.submits >= limits.submits_per_user_per_minute {
            return Err(conflict(format!(
                "user {user} has made {} submits to share {name} this minute, and submits_per_user_per_minute of share {name} is {}; retry in {} s",
                window.submits,
                limits.submits_per_user_per_minute,
                (60_000 - now % 60_000).div_ceil(1000)
            )));
        }
        window.submits += 1;
        Ok(window)
    }

    pub(crate) fn cancel(
        &mut self,
        id: JobId,
        reason: &str,
        now: Millis,
    ) -> Result<(), ApplyError> {
        let job = self.jobs.get(&id).ok_or_else(|| not_found("job", id))?;
        if job.status.is_terminal() {
            return Err(conflict(format!(
                "job {} has already ended ({})",
                job.job_ref(),
                job.status
            )));
        }
        if matches!(
            job.stop,
            Some(Stop {
                kind: StopKind::Cancel,
                ..
            })
        ) {
            return Ok(()); // already being cancelled
        }
        let reason = if reason.is_empty() {
            "cancelled"
        } else {
            reason
        };
        self.stop_or_cancel(id, StopKind::Cancel, reason, now);
        Ok(())
    }

    /// Ends a waiting job now (CANCELLED, or RUNNABLE again for a drain), or starts
    /// stopping an active one: its checkpoint signal now, SIGKILL at the deadline.
    fn stop_or_cancel(&mut self, id: JobId, kind: StopKind, reason: &str, now: Millis) {
        let status = self.jobs[&id].status;
        if status.is_active() {
            let grace = {
                let job = &self.jobs[&id];
                job.spec.grace_s(self.shares.get(&job.spec.share)) * SECOND
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
                        deadline: now + grace,
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
                        reason: format!(
                            "stopping ({reason}): {} sent, grace {} s",
                            job.spec.checkpoint.signal,
                            grace / SECOND
                        ),
                        nodes,
                    });
                }
            }
        } else if !status.is_terminal() {
            self.set_status(id, JobStatus::Cancelled, reason, vec![], now);
        }
    }

    /// Sets a job's priority. A task of an array shares its spec with a sibling that
    /// has that priority already (`donor`, else found among the siblings), so that the
    /// array's tasks hold at most one spec per priority in use.
    pub(crate) fn update_priority(
        &mut self,
        id: JobId,
        priority: u32,
        donor: &mut Option<std::sync::Arc<JobSpec>>,
    ) -> Result<(), ApplyError> {
        let job = self.jobs.get(&id).ok_or_else(|| not_found("job", id))?;
        if priority > MAX_JOB_PRIORITY {
            return Err(ValidationError::new(
                "priority",
                format!("must be 0-{MAX_JOB_PRIORITY}, got {priority}"),
            )
            .into());
        }
        if job.status.is_terminal() {
            return Err(conflict(format!(
                "job {} has already ended ({})",
                job.job_ref(),
                job.status
            )));
        }
        let runnable = job.status == JobStatus::Runnable;
        let old = RunKey::of(job);
        let share = job.spec.share.clone();
        if donor.as_ref().is_none_or(|d| d.priority != priority) {
            *donor = self.sibling_spec(job, priority);
        }
        let job = self.jobs.get_mut(&id).expect("job exists");
        match donor {
            Some(d) => job.spec = d.clone(),
            None => {
                std::sync::Arc::make_mut(&mut job.spec).priority = priority;
                *donor = Some(job.spec.clone());
            }
        }
        if let Some(r) = self.index.running_mut(&share, id) {
            r.priority = priority;
        }
        if runnable {
            let new = RunKey::of(job);
            let set = self.index.runnable.entry(share).or_default();
            if let Some(w) = set.remove(&old) {
                set.insert(new, w);
            }
        }
        Ok(())
    }

    /// The spec of a task of `job`'s array whose priority is `priority` (all tasks of
    /// an array have the same spec but for their priority).
    fn sibling_spec(&self, job: &Job, priority: u32) -> Option<std::sync::Arc<JobSpec>> {
        if job.spec.priority == priority {
            return Some(job.spec.clone());
        }
        let a = job.array.as_ref()?;
        let first = a.array.0;
        self.jobs
            .range(JobId(first)..JobId(first + a.count as u64))
            .map(|(_, j)| j)
            .find(|j| {
                j.spec.priority == priority && j.array.as_ref().is_some_and(|t| t.array == a.array)
            })
            .map(|j| j.spec.clone())
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

    fn progress(
        &mut self,
        id: JobId,
        attempt: u32,
        event: &Progress,
        now: Millis,
    ) -> Result<(), ApplyError> {
        let job = self.jobs.get(&id).ok_or_else(|| not_found("job", id))?;
        let current = job.current_attempt().filter(|_| job.status.is_active());
        let Some(cur) = current else {
            return Err(conflict(format!(
                "job {id} has no attempt in progress (it is {})",
                job.status
            )));
        };
        if cur.number != attempt {
            return Err(conflict(format!(
                "job {id} is on attempt {}, not {attempt}",
                cur.number
            )));
        }
        let nodes: Vec<NodeName> = cur.allocation.iter().map(|a| a.node.clone()).collect();
        match event {
            Progress::Starting => {
                if job.status != JobStatus::Scheduled {
                    return Err(conflict(format!(
                        "job {id} is {}, not SCHEDULED",
                        job.status
                    )));
                }
                self.set_status(
                    id,
                    JobStatus::Starting,
                    "agent is starting the job",
                    nodes,
                    now,
                );
            }
            Progress::Running => {
                if job.status == JobStatus::Running {
                    return Err(conflict(format!("job {id} is already RUNNING")));
                }
                let job = self.jobs.get_mut(&id).expect("job exists");
                if let Some(a) = job.attempts.last_mut() {
                    a.started_at = Some(now);
                }
                if let Some(r) = self.index.running_mut(&job.spec.share, id) {
                    r.started_at = now;
                }
                self.set_status(id, JobStatus::Running, "process started", nodes, now);
            }
            Progress::Exited { code, reason } => {
                let end = MemberEnd::Exited(*code, reason.as_deref());
                if !self.gang_member_ended(id, &end, now) {
                    self.attempt_ended(id, *code, reason.as_deref(), nodes, now)
                }
            }
            Progress::Lost { reason } => {
                if !self.gang_member_ended(id, &MemberEnd::Lost(reason), now) {
                    self.attempt_lost(id, reason, nodes, now)
                }
            }
        }
        Ok(())
    }

    /// A member of a multi-node attempt reported its end. The attempt is one attempt:
    /// it ends (once) with the report of its last member. Until then each member's end
    /// is recorded as a transition, and the first member that ends unsuccessfully
    /// (non-zero, killed, lost) while no stop is under way stops the whole attempt with
    /// the job's checkpoint signal and grace, its reason saying how that member ended
    /// (see [`gang_failure`], which reads it back when the attempt ends).
    ///
    /// Returns false when the report is the attempt's last (or its only) member's, for
    /// the caller to end the attempt.
    ///
    /// Reports do not name their node, so members are counted: each agent reports each
    /// of its attempts' ends once (it forgets an exit only once the controllers have it).
    fn gang_member_ended(&mut self, id: JobId, end: &MemberEnd, now: Millis) -> bool {
        let job = &self.jobs[&id];
        let Some(att) = job.current_attempt() else {
            return false;
        };
        let members = att.allocation.len();
        let gone = members_ended(job) + 1;
        if members <= 1 || gone >= members {
            return false;
        }
        let how = end.text();
        let failed = !matches!(end, MemberEnd::Exited(Some(0), _));
        let status = job.status;
        let start_stop = failed && job.stop.is_none();
        let job = self.jobs.get_mut(&id).expect("job exists");
        job.transitions.push(Transition {
            at: now,
            from: status,
            to: status,
            reason: format!("{MEMBER_ENDED}{gone} of {members} gone, {how}"),
            nodes: vec![],
        });
        if start_stop {
            self.stop_or_cancel(id, StopKind::Drain, &format!("{GANG_MEMBER}{how}"), now);
        }
        true
    }

    /// An attempt lost with its node or by its agent: the job is requeued (neither a
    /// failure nor a preemption), or ends as its stop meant.
    fn attempt_lost(&mut self, id: JobId, why: &str, nodes: Vec<NodeName>, now: Millis) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        if job.stop.is_some() {
            // It was being stopped anyway: end it as its stop meant, killed.
            self.attempt_ended(id, None, Some(why), nodes, now);
            return;
        }
        self.requeue_lost(id, why, nodes, now);
    }

    /// Ends the current attempt as lost and requeues the job.
    fn requeue_lost(&mut self, id: JobId, why: &str, nodes: Vec<NodeName>, now: Millis) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        if let Some(a) = job.attempts.last_mut() {
            a.ended_at = Some(now);
            a.end = Some(AttemptEnd::Lost);
        }
        self.set_status(
            id,
            JobStatus::Runnable,
            &format!("{why}; attempt lost, requeued"),
            nodes,
            now,
        );
    }

    /// The attempt's process is gone: decide what the job becomes.
    fn attempt_ended(
        &mut self,
        id: JobId,
        code: Option<i32>,
        why: Option<&str>,
        nodes: Vec<NodeName>,
        now: Millis,
    ) {
        let job = self.jobs.get_mut(&id).expect("job exists");
        let mut stop = job.stop.clone();
        let mut code = code;
        let mut why = why;
        // A gang stopped because one member failed ends as that member did.
        let failure = stop
            .as_ref()
            .and_then(|s| Some((gang_failure(s)?, s.reason.clone())));
        if let Some((failure, reason)) = failure {
            let gang_reason = format!("{reason}; the other members were stopped");
            match failure {
                GangFailure::Lost => {
                    self.requeue_lost(id, &gang_reason, nodes, now);
                    return;
                }
                GangFailure::Exited(c) => {
                    stop = None;
                    code = c;
                    why = Some("the first member of the gang to fail; the others were stopped");
                }
            }
        }
        let how = match code {
            Some(c) => format!("exited with code {c}"),
            None => "killed".to_string(),
        };
        let end = match &stop {
            Some(s) => AttemptEnd::Stopped {
                kind: s.kind.clone(),
                code,
            },
            None => AttemptEnd::Exited {
                code: code.unwrap_or(-1),
            },
        };
        if let Some(a) = job.attempts.last_mut() {
            a.ended_at = Some(now);
            a.end = Some(end);
        }
        self.book_lost(id, now);
        let job = self.jobs.get_mut(&id).expect("job exists");
        let (to, reason) = match stop {
            Some(Stop { kind, reason, .. }) if kind.is_preemption() => {
                job.preemptions += 1;
                match job.spec.preemption_retries {
                    Some(r) if job.preemptions > r => (
                        JobStatus::Failed,
                        format!("preempted ({reason}), {how}; preempted {} times, preemption_retries = {r}", job.preemptions),
                    ),
                    _ => (JobStatus::Runnable, format!("preempted ({reason}), {how}; requeued")),
                }
            }
            Some(Stop {
                kind: StopKind::Drain,
                reason,
                ..
            }) => (
                JobStatus::Runnable,
                format!("stopped ({reason}), {how}; requeued"),
            ),
            Some(Stop { reason, .. }) => (JobStatus::Cancelled, format!("{reason}; {how}")),
            None => match code {
                Some(0) => (JobStatus::Succeeded, how),
                _ => {
                    job.failures += 1;
                    let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
                    if job.failures < job.spec.retry_attempts {
                        (
                            JobStatus::Runnable,
                            format!(
                                "{how}{why}; retry {} of {}",
                                job.failures + 1,
                                job.spec.retry_attempts
                            ),
                        )
                    } else {
                        (JobStatus::Failed, format!("{how}{why}"))
                    }
                }
            },
        };
        self.set_status(id, to, &reason, nodes, now);
    }

    // ---- nodes ---------------------------------------------------------------------

    fn with_node(&mut self, name: &NodeName, f: impl FnOnce(&mut Node)) -> Result<(), ApplyError> {
        let node = self
            .nodes
            .get_mut(name)
            .ok_or_else(|| not_found("node", name))?;
        f(node);
        Ok(())
    }

    fn register_node(&mut self, inv: &NodeInventory, now: Millis) -> Result<(), ApplyError> {
        inv.validate()?;
        let mut inv = inv.clone();
        let mut drain = None;
        let allocated = match self.nodes.get(&inv.name) {
            None => vec![None; inv.gpus.len()],
            Some(old) => {
                drain = old.drain.clone();
                // GPUs keep their holder by index; a held GPU missing from the new
                // inventory stays listed, unhealthy, until its job ends.
                let mut allocated: Vec<Option<JobId>> = inv
                    .gpus
                    .iter()
                    .map(|g| {
                        old.inventory
                            .gpus
                            .iter()
                            .position(|o| o.index == g.index)
                            .and_then(|i| old.allocated[i])
                    })
                    .collect();
                for (g, a) in old.inventory.gpus.iter().zip(&old.allocated) {
                    if a.is_some() && !inv.gpus.iter().any(|n| n.index == g.index) {
                        inv.gpus.push(Gpu {
                            healthy: false,
                            ..g.clone()
                        });
                        allocated.push(*a);
                    }
                }
                allocated
            }
        };
        if drain.is_none() {
            if let Some(g) = inv.gpus.iter().find(|g| !g.healthy) {
                drain = Some(format!("GPU {} ({}) reported unhealthy", g.index, g.uuid));
            }
        }
        let registered_at = self
            .nodes
            .get(&inv.name)
            .map(|n| n.registered_at)
            .unwrap_or(now);
        self.nodes.insert(
            inv.name.clone(),
            Node {
                inventory: inv,
                allocated,
                drain,
                down: None,
                unreachable: false,
                registered_at,
            },
        );
        Ok(())
    }

    fn jobs_on(&self, node: &NodeName) -> Vec<JobId> {
        let Some(n) = self.nodes.get(node) else {
            return vec![];
        };
        let set: BTreeSet<JobId> = n.allocated.iter().flatten().copied().collect();
        set.into_iter().collect()
    }

    fn drain_node(
        &mut self,
        name: &NodeName,
        reason: &str,
        stop: bool,
        now: Millis,
    ) -> Result<(), ApplyError> {
        if !self.nodes.contains_key(name) {
            return Err(not_found("node", name));
        }
        if reason.trim().is_empty() {
            return Err(ValidationError::new(
                "reason",
                "a drain needs a reason (e.g. \"xid 79 on GPU 3\")",
            )
            .into());
        }
        validate_reason(reason)?;
        self.nodes.get_mut(name).expect("exists").drain = Some(reason.to_string());
        if stop {
            for id in self.jobs_on(name) {
                if self.jobs[&id].stop.is_none() {
                    self.stop_or_cancel(
                        id,
                        StopKind::Drain,
                        &format!("node {name} drained: {reason}"),
                        now,
                    );
                }
            }
        }
        Ok(())
    }

    /// A node declared DOWN loses its jobs: each attempt is lost and the job requeued
    /// (neither a failure nor a preemption), or ends as its stop meant.
    fn node_down(&mut self, name: &NodeName, reason: &str, now: Millis) -> Result<(), ApplyError> {
        if !self.nodes.contains_key(name) {
            return Err(not_found("node", name));
        }
        validate_reason(reason)?;
        if reason.trim().is_empty() {
            return Err(
                ValidationError::new("reason", "marking a node DOWN needs a reason").into(),
            );
        }
        self.nodes.get_mut(name).expect("exists").down = Some(reason.to_string());
        for id in self.jobs_on(name) {
            let job = &self.jobs[&id];
            let nodes: Vec<NodeName> = job.allocation().iter().map(|a| a.node.clone()).collect();
            let why = if job.stop.is_some() {
                "node down".to_string()
            } else {
                format!("node {name} DOWN ({reason})")
            };
            self.attempt_lost(id, &why, nodes, now);
        }
        Ok(())
    }

    // ---- plans ---------------------------------------------------------------------

    fn apply_plan(&mut self, plan: &Plan, now: Millis) -> PlanOutcome {
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
                    if let Some(w) = self
                        .index
                        .runnable
                        .get_mut(&job.spec.share)
                        .and_then(|m| m.get_mut(&RunKey::of(job)))
                    {
                        w.reason = Some(reason.clone());
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
        if let Some(w) = self
            .index
            .runnable
            .get_mut(&job.spec.share)
            .and_then(|m| m.get_mut(&RunKey::of(job)))
        {
            w.has_hold = job.hold.is_some();
        }
        Ok(())
    }
}

/// How one member of a gang ended, as its agent reported it.
enum MemberEnd<'a> {
    Exited(Option<i32>, Option<&'a str>),
    Lost(&'a str),
}

impl MemberEnd<'_> {
    /// In words; [`gang_failure`] reads the start of it back.
    fn text(&self) -> String {
        let why = |w: Option<&str>| w.map(|w| format!(" ({w})")).unwrap_or_default();
        match self {
            MemberEnd::Exited(Some(c), w) => format!("exited with code {c}{}", why(*w)),
            MemberEnd::Exited(None, w) => format!("was killed{}", why(*w)),
            MemberEnd::Lost(w) => format!("was lost ({w})"),
        }
    }
}

/// The start of the transition recorded for each gang member that ends before the last.
const MEMBER_ENDED: &str = "gang member ended: ";

/// The start of the reason of a stop that a gang member's failure set on its attempt.
const GANG_STOP: &str = "a member of the gang ";

const GANG_MEMBER: &str = GANG_STOP;

/// Whether `stop` is one that a gang member's failure set on the rest of its attempt
/// (its reason then says how that member ended; its kind means nothing).
pub fn is_gang_stop(stop: &Stop) -> bool {
    gang_failure(stop).is_some()
}

/// How the member whose failure stopped a gang ended, read back from the stop's
/// reason ([`MemberEnd::text`] after [`GANG_STOP`]); `None` for every other stop.
fn gang_failure(stop: &Stop) -> Option<GangFailure> {
    if stop.kind != StopKind::Drain {
        return None;
    }
    let rest = stop.reason.strip_prefix(GANG_STOP)?;
    if let Some(code) = rest.strip_prefix("exited with code ") {
        let digits = code.split(' ').next().unwrap_or("");
        return digits.parse().ok().map(|c| GangFailure::Exited(Some(c)));
    }
    if rest.starts_with("was killed") {
        return Some(GangFailure::Exited(None));
    }
    rest.starts_with("was lost").then_some(GangFailure::Lost)
}

enum GangFailure {
    Exited(Option<i32>),
    Lost,
}

/// How many members of the job's current attempt have ended so far: the
/// [`MEMBER_ENDED`] transitions since the attempt was placed.
fn members_ended(job: &Job) -> usize {
    let placed = job
        .transitions
        .iter()
        .rposition(|t| t.to == JobStatus::Scheduled)
        .unwrap_or(0);
    job.transitions[placed..]
        .iter()
        .filter(|t| t.from == t.to && t.reason.starts_with(MEMBER_ENDED))
        .count()
}
