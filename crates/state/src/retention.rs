//! Retention of ended jobs: which leave the replicated state, and when.
//!
//! A job that has ended (SUCCEEDED, FAILED, CANCELLED) stays in the state while users
//! are likely to look at it, then leaves it: the leader proposes
//! [`Command::ForgetEnded`], which names a cut-off (jobs that ended before it), a cap
//! (at most this many ended jobs stay, the oldest leave first) and a batch size, and
//! every controller computes the same jobs from its copy of the state with
//! [`State::forgettable`]. Before a controller drops them it writes them to its
//! history store (outside this crate).
//!
//! The unit of retention is an *entry*: a job on its own, or a whole array once every
//! task of it has ended (an array leaves at once, so `42` always names all of its tasks
//! or none). An entry's end time is the latest of its jobs' end times. An entry that a
//! waiting job still depends on is kept. The accounting ledger counts hours, not jobs:
//! forgetting a job changes nothing in it.

use crate::command::ApplyError;
use crate::state::State;
use tranche_model::*;

/// The time `job` ended: that of its last transition (into its ended status).
pub fn ended_at(job: &Job) -> Millis {
    job.transitions.last().map_or(job.submitted_at, |t| t.at)
}

impl State {
    /// The id under which `job`'s retention entry is kept: its array's for a task.
    fn entry_of(job: &Job) -> JobId {
        job.array.as_ref().map_or(job.id, |a| a.array)
    }

    /// The jobs of entry `id` (one job, or every task of an array).
    fn entry_jobs(&self, id: JobId) -> Vec<&Job> {
        match self.jobs.get(&id) {
            Some(j) => match &j.array {
                Some(a) if a.array == id => self.tasks_of(id, a.count).collect(),
                _ => vec![j],
            },
            None => vec![],
        }
    }

    /// Job `id` has just ended: counts it, and files its entry once the entry has
    /// ended whole.
    pub(crate) fn note_ended(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        self.index.ended_jobs += 1;
        let entry = Self::entry_of(job);
        if job.array.is_some() && self.index.array_open.contains_key(&entry) {
            return;
        }
        let at = self
            .entry_jobs(entry)
            .into_iter()
            .map(ended_at)
            .max()
            .unwrap_or(0);
        self.index.ended.insert((at, entry));
    }

    /// Rebuilds the ended entries from the jobs (after the job counts are rebuilt).
    pub(crate) fn rebuild_ended(&mut self) {
        let mut ended = std::collections::BTreeSet::new();
        let mut count = 0u64;
        let mut arrays: std::collections::BTreeMap<JobId, Millis> = Default::default();
        for job in self.jobs.values() {
            if !job.status.is_terminal() {
                continue;
            }
            count += 1;
            match &job.array {
                None => {
                    ended.insert((ended_at(job), job.id));
                }
                Some(a) if !self.index.array_open.contains_key(&a.array) => {
                    let t = arrays.entry(a.array).or_default();
                    *t = (*t).max(ended_at(job));
                }
                Some(_) => {}
            }
        }
        ended.extend(arrays.into_iter().map(|(id, t)| (t, id)));
        self.index.ended = ended;
        self.index.ended_jobs = count;
    }

    /// How many ended jobs the state holds.
    pub fn ended_count(&self) -> u64 {
        self.index.ended_jobs
    }

    /// When the oldest ended entry the state holds ended.
    pub fn oldest_ended(&self) -> Option<Millis> {
        self.index.ended.first().map(|&(t, _)| t)
    }

    /// The jobs [`Command::ForgetEnded`] with these arguments drops, oldest entry
    /// first: entries that ended before `ended_before`, and while more than `keep`
    /// ended jobs would stay, the oldest others; no entry that a waiting job depends
    /// on; at most `limit` jobs, except that an array is never split.
    pub fn forgettable(&self, ended_before: Millis, keep: u64, limit: u32) -> Vec<JobId> {
        self.forgettable_entries(ended_before, keep, limit)
            .into_iter()
            .flat_map(|(_, jobs)| jobs)
            .collect()
    }

    fn forgettable_entries(
        &self,
        ended_before: Millis,
        keep: u64,
        limit: u32,
    ) -> Vec<((Millis, JobId), Vec<JobId>)> {
        let mut out = Vec::new();
        let (mut n, mut left) = (0usize, self.index.ended_jobs);
        for &(at, entry) in &self.index.ended {
            if n >= limit as usize || (at >= ended_before && left <= keep) {
                break;
            }
            let jobs = self.entry_jobs(entry);
            if jobs
                .iter()
                .any(|j| self.index.dependents.contains_key(&j.id))
            {
                continue;
            }
            left = left.saturating_sub(jobs.len() as u64);
            n += jobs.len();
            out.push(((at, entry), jobs.iter().map(|j| j.id).collect()));
        }
        out
    }

    /// Applies [`Command::ForgetEnded`]: drops the jobs [`State::forgettable`] names,
    /// with their idempotency tokens.
    pub(crate) fn forget_ended(
        &mut self,
        ended_before: Millis,
        keep: u64,
        limit: u32,
    ) -> Result<(), ApplyError> {
        for (key, ids) in self.forgettable_entries(ended_before, keep, limit) {
            self.index.ended.remove(&key);
            for id in ids {
                let Some(job) = self.jobs.remove(&id) else {
                    continue;
                };
                self.index.ended_jobs = self.index.ended_jobs.saturating_sub(1);
                if let Some(t) = &job.spec.client_token {
                    let key = (job.spec.user.clone(), t.clone());
                    if self.tokens.get(&key) == Some(&id) {
                        self.tokens.remove(&key);
                    }
                }
            }
        }
        Ok(())
    }
}
