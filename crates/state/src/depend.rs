//! Arrays, dependencies and holds (design §8): naming jobs as `42` or `42_7`, judging
//! a PENDING job's dependencies as the jobs it names move, and the commands that act
//! on a job or on every task of an array.

use crate::command::*;
use crate::state::*;
use tranche_model::*;

/// A submit's dependencies, resolved against the state.
pub(crate) struct Resolved {
    /// Not yet satisfied.
    pub waiting: Vec<Dep>,
    /// Set when one can never be satisfied: the reason the job is cancelled.
    pub never: Option<String>,
}

impl State {
    /// The jobs `r` names: one job, one task of an array (`42_7`), or every task of an
    /// array (`42`, when 42 is an array's id).
    pub fn resolve(&self, r: &JobRef) -> Result<Vec<JobId>, ApplyError> {
        let job = self.jobs.get(&r.job).ok_or_else(|| not_found("job", r))?;
        let array = job.array.as_ref().filter(|a| a.array == r.job);
        match (r.task, array) {
            (None, None) => Ok(vec![r.job]),
            (None, Some(a)) => Ok(self.tasks_of(r.job, a.count).map(|j| j.id).collect()),
            (Some(t), Some(a)) => self
                .tasks_of(r.job, a.count)
                .find(|j| j.array.as_ref().is_some_and(|x| x.index == t))
                .map(|j| vec![j.id])
                .ok_or_else(|| not_found("job", r)),
            (Some(_), None) => Err(not_found("job", r)),
        }
    }

    /// The PENDING jobs that depend on any of `ids`, and those that depend on them in
    /// turn: the jobs an entry that changes `ids` may change too.
    pub fn dependents_of(&self, ids: &std::collections::BTreeSet<JobId>) -> Vec<JobId> {
        let mut seen = std::collections::BTreeSet::new();
        let mut work: Vec<JobId> = ids.iter().copied().collect();
        while let Some(x) = work.pop() {
            for d in self.index.dependents.get(&x).into_iter().flatten() {
                if !ids.contains(d) && seen.insert(*d) {
                    work.push(*d);
                }
            }
        }
        seen.into_iter().collect()
    }

    /// The tasks of array `array` (ids `array..array + count`).
    pub fn tasks_of(&self, array: JobId, count: u32) -> impl Iterator<Item = &Job> + '_ {
        self.jobs
            .range(array..JobId(array.0 + count as u64))
            .map(|(_, j)| j)
            .filter(move |j| j.array.as_ref().is_some_and(|a| a.array == array))
    }

    /// Resolves a spec's dependencies: every job it names must exist; `singleton`
    /// waits for every unfinished job of the same user and name.
    pub(crate) fn resolve_dependency(&self, spec: &JobSpec) -> Result<Resolved, ApplyError> {
        let mut deps: Vec<Dep> = vec![];
        for (kind, refs) in &spec.dependency.after {
            for r in refs {
                let ids = self.resolve(r).map_err(|_| {
                    ValidationError::new("dependency", format!("job {r} does not exist"))
                })?;
                deps.extend(ids.into_iter().map(|job| Dep { kind: *kind, job }));
            }
        }
        if spec.dependency.singleton {
            deps.extend(
                self.jobs
                    .values()
                    .filter(|j| {
                        !j.status.is_terminal()
                            && j.spec.user == spec.user
                            && j.spec.name == spec.name
                    })
                    .map(|j| Dep {
                        kind: DepKind::AfterAny,
                        job: j.id,
                    }),
            );
        }
        deps.sort();
        deps.dedup();
        let mut out = Resolved {
            waiting: vec![],
            never: None,
        };
        for d in deps {
            let target = &self.jobs[&d.job];
            match d.state(target.status) {
                DepState::Waiting => out.waiting.push(d),
                DepState::Satisfied => {}
                DepState::Never => {
                    out.never.get_or_insert_with(|| never_reason(target));
                }
            }
        }
        Ok(out)
    }

    /// Why a PENDING job waits: its hold, else its first dependency left.
    pub(crate) fn pending_why(&self, job: &Job) -> PendingReason {
        if job.held {
            return PendingReason::Held;
        }
        match job.deps.first().and_then(|d| self.jobs.get(&d.job)) {
            Some(t) => PendingReason::Dependency {
                job: t.job_ref().to_string().into(),
                status: t.status.as_str().into(),
            },
            None => PendingReason::NotYetScheduled,
        }
    }

    /// Judges again the jobs that depend on `id`, which has just changed status: a
    /// satisfied dependency is dropped (the job becomes RUNNABLE when none is left and
    /// it is not held), one that can never be satisfied cancels the job. Whatever
    /// changes status is judged in turn for its own dependents.
    pub(crate) fn wake_dependents(&mut self, id: JobId, now: Millis) {
        let mut work = vec![id];
        while let Some(x) = work.pop() {
            let Some(ds) = self.index.dependents.get(&x) else {
                continue;
            };
            let ds: Vec<JobId> = ds.iter().copied().collect();
            let target = &self.jobs[&x];
            let status = target.status;
            let never = never_reason(target);
            for d in ds {
                let job = &self.jobs[&d];
                let mut cancel = false;
                let mut satisfied = 0;
                for dep in job.deps.iter().filter(|dep| dep.job == x) {
                    match dep.state(status) {
                        DepState::Never => cancel = true,
                        DepState::Satisfied => satisfied += 1,
                        DepState::Waiting => {}
                    }
                }
                if cancel {
                    self.set_status_one(d, JobStatus::Cancelled, &never, vec![], now);
                    work.push(d);
                    continue;
                }
                if satisfied > 0 {
                    let job = self.jobs.get_mut(&d).expect("dependent exists");
                    job.deps
                        .retain(|dep| !(dep.job == x && dep.state(status) == DepState::Satisfied));
                    if !job.deps.iter().any(|dep| dep.job == x) {
                        if let Some(set) = self.index.dependents.get_mut(&x) {
                            set.remove(&d);
                            if set.is_empty() {
                                self.index.dependents.remove(&x);
                            }
                        }
                    }
                }
                let job = &self.jobs[&d];
                if job.deps.is_empty() && !job.held {
                    self.set_status_one(
                        d,
                        JobStatus::Runnable,
                        "dependencies satisfied",
                        vec![],
                        now,
                    );
                    work.push(d);
                } else {
                    let why = self.pending_why(job);
                    self.jobs
                        .get_mut(&d)
                        .expect("dependent exists")
                        .pending_reason = Some(why);
                }
            }
        }
    }

    /// `tranche cancel 42`, `42_7`: a job, a task, or every unfinished task of an array.
    pub(crate) fn cancel_ref(
        &mut self,
        r: &JobRef,
        reason: &str,
        now: Millis,
    ) -> Result<(), ApplyError> {
        validate_reason(reason)?;
        let ids = self.resolve(r)?;
        if let [id] = ids[..] {
            return self.cancel(id, reason, now);
        }
        for id in self.unfinished(r, ids)? {
            self.cancel(id, reason, now)?;
        }
        Ok(())
    }

    pub(crate) fn update_priority_ref(
        &mut self,
        r: &JobRef,
        priority: u32,
    ) -> Result<(), ApplyError> {
        let ids = self.resolve(r)?;
        if let [id] = ids[..] {
            return self.update_priority(id, priority, &mut None);
        }
        if priority > MAX_JOB_PRIORITY {
            return Err(ValidationError::new(
                "priority",
                format!("must be 0-{MAX_JOB_PRIORITY}, got {priority}"),
            )
            .into());
        }
        let mut donor = None;
        for id in self.unfinished(r, ids)? {
            self.update_priority(id, priority, &mut donor)?;
        }
        Ok(())
    }

    /// The tasks of array `r` that have not ended; an error when none is left.
    fn unfinished(&self, r: &JobRef, ids: Vec<JobId>) -> Result<Vec<JobId>, ApplyError> {
        let open: Vec<JobId> = ids
            .into_iter()
            .filter(|id| !self.jobs[id].status.is_terminal())
            .collect();
        if open.is_empty() {
            return Err(conflict(format!(
                "every task of array {r} has already ended"
            )));
        }
        Ok(open)
    }

    /// `tranche hold`: waiting jobs (PENDING or RUNNABLE) stay PENDING until released.
    pub(crate) fn hold_jobs(&mut self, r: &JobRef, now: Millis) -> Result<(), ApplyError> {
        let ids = self.resolve(r)?;
        let waiting: Vec<JobId> = ids
            .iter()
            .copied()
            .filter(|id| {
                let j = &self.jobs[id];
                matches!(j.status, JobStatus::Pending | JobStatus::Runnable) && !j.held
            })
            .collect();
        if waiting.is_empty() {
            let j = &self.jobs[&ids[0]];
            return Err(conflict(if ids.len() == 1 && j.held {
                format!("job {r} is already held")
            } else if ids.len() == 1 {
                format!("job {r} is {}: only a waiting job can be held", j.status)
            } else {
                format!("no task of array {r} is waiting to be held")
            }));
        }
        for id in waiting {
            self.jobs.get_mut(&id).expect("job exists").held = true;
            self.set_status(id, JobStatus::Pending, "held", vec![], now);
            self.jobs.get_mut(&id).expect("job exists").pending_reason = Some(PendingReason::Held);
        }
        Ok(())
    }

    /// `tranche release`: held jobs may run once their dependencies are satisfied.
    pub(crate) fn release_jobs(&mut self, r: &JobRef, now: Millis) -> Result<(), ApplyError> {
        let ids = self.resolve(r)?;
        let held: Vec<JobId> = ids
            .iter()
            .copied()
            .filter(|id| self.jobs[id].held)
            .collect();
        if held.is_empty() {
            return Err(conflict(if ids.len() == 1 {
                format!("job {r} is not held")
            } else {
                format!("no task of array {r} is held")
            }));
        }
        for id in held {
            let job = self.jobs.get_mut(&id).expect("job exists");
            job.held = false;
            if job.status == JobStatus::Pending && job.deps.is_empty() {
                self.set_status(id, JobStatus::Runnable, "released", vec![], now);
            } else {
                let why = self.pending_why(&self.jobs[&id]);
                self.jobs.get_mut(&id).expect("job exists").pending_reason = Some(why);
            }
        }
        Ok(())
    }
}

/// Why a dependency on `target` can never be satisfied.
fn never_reason(target: &Job) -> String {
    format!("dependency job {} {}", target.job_ref(), target.status)
}
