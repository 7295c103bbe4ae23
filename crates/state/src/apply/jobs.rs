//! The commands that make and change jobs: submit (single jobs and arrays, with their
//! limits and the check that some node could ever hold them), cancel and priority.

use crate::command::*;
use crate::state::*;
use std::cmp::Reverse;
use tranche_model::*;

impl State {
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

    pub(super) fn submit(&mut self, spec: &JobSpec, now: Millis) -> Result<Outcome, ApplyError> {
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
}
