//! Retention of ended jobs: which leave the replicated state, and when.
//!
//! A job that has ended (SUCCEEDED, FAILED, CANCELLED) stays in the state while users
//! are likely to look at it, then leaves it: the leader proposes
//! [`Command::ForgetEnded`], which names a cut-off (jobs that ended before it), two caps
//! (at most this many ended jobs, and this many bytes of their specs, stay; the oldest
//! leave first) and a batch size ([`Retention`]), and
//! every controller computes the same jobs from its copy of the state with
//! [`State::forgettable`]. Before a controller drops them it writes them to its
//! history store (outside this crate).
//!
//! The unit of retention is an *entry*: a job on its own, or a whole array once every
//! task of it has ended (an array leaves at once, so `42` always names all of its tasks
//! or none). An entry's end time is the latest of its jobs' end times. An entry that a
//! waiting job still depends on is kept. The accounting ledger counts hours, not jobs:
//! forgetting a job changes nothing in it.

use serde::{Deserialize, Serialize};

use crate::command::ApplyError;
use crate::state::State;
use tranche_model::*;

/// What [`Command::ForgetEnded`] drops: see [`State::forgettable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Entries that ended before this time leave.
    pub ended_before: Millis,
    /// While more ended jobs than this would stay, the oldest entries leave too.
    pub keep_jobs: u64,
    /// While the ended entries would weigh more than this ([`ENTRY_JOB_BYTES`] per job
    /// and the text of each entry's spec), the oldest entries leave too.
    pub keep_bytes: u64,
    /// At most this many jobs leave (an array is never split).
    pub limit: u32,
}

/// What an ended job weighs for [`Retention::keep_bytes`] besides its spec's text: its
/// attempts, transitions and the maps that hold it, roughly.
pub const ENTRY_JOB_BYTES: u64 = 512;

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
        let jobs = self.entry_jobs(entry);
        let at = jobs.iter().map(|j| ended_at(j)).max().unwrap_or(0);
        let bytes = Self::entry_bytes(&jobs);
        self.index.ended.insert((at, entry));
        self.index.ended_bytes += bytes;
    }

    /// What an entry weighs for [`Retention::keep_bytes`]: its first job's spec text
    /// (an array's tasks share theirs) and [`ENTRY_JOB_BYTES`] per job. Values only, so
    /// that every controller weighs alike.
    fn entry_bytes(jobs: &[&Job]) -> u64 {
        let spec = jobs.first().map_or(0, |j| j.spec.text_bytes() as u64);
        spec + ENTRY_JOB_BYTES * jobs.len() as u64
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
        let bytes = ended
            .iter()
            .map(|&(_, e)| Self::entry_bytes(&self.entry_jobs(e)))
            .sum();
        self.index.ended = ended;
        self.index.ended_jobs = count;
        self.index.ended_bytes = bytes;
    }

    /// How many ended jobs the state holds.
    pub fn ended_count(&self) -> u64 {
        self.index.ended_jobs
    }

    /// When the oldest ended entry the state holds ended.
    pub fn oldest_ended(&self) -> Option<Millis> {
        self.index.ended.first().map(|&(t, _)| t)
    }

    /// What the ended entries weigh (see [`Retention::keep_bytes`]).
    pub fn ended_bytes(&self) -> u64 {
        self.index.ended_bytes
    }

    /// The jobs [`Command::ForgetEnded`] with `r` drops, oldest entry first: entries
    /// that ended before `r.ended_before`, and while more than `r.keep_jobs` ended jobs
    /// or `r.keep_bytes` would stay, the oldest others; no entry that a waiting job
    /// depends on; at most `r.limit` jobs, except that an array is never split.
    pub fn forgettable(&self, r: &Retention) -> Vec<JobId> {
        self.forgettable_entries(r)
            .into_iter()
            .flat_map(|(_, _, jobs)| jobs)
            .collect()
    }

    #[allow(clippy::type_complexity)]
    fn forgettable_entries(&self, r: &Retention) -> Vec<((Millis, JobId), u64, Vec<JobId>)> {
        let mut out = Vec::new();
        let (mut n, mut jobs_left, mut bytes_left) =
            (0usize, self.index.ended_jobs, self.index.ended_bytes);
        for &(at, entry) in &self.index.ended {
            let due = at < r.ended_before || jobs_left > r.keep_jobs || bytes_left > r.keep_bytes;
            if n >= r.limit as usize || !due {
                break;
            }
            let jobs = self.entry_jobs(entry);
            if jobs
                .iter()
                .any(|j| self.index.dependents.contains_key(&j.id))
            {
                continue;
            }
            let bytes = Self::entry_bytes(&jobs);
            jobs_left = jobs_left.saturating_sub(jobs.len() as u64);
            bytes_left = bytes_left.saturating_sub(bytes);
            n += jobs.len();
            out.push(((at, entry), bytes, jobs.iter().map(|j| j.id).collect()));
        }
        out
    }

    /// Applies [`Command::ForgetEnded`]: drops the jobs [`State::forgettable`] names,
    /// with their idempotency tokens.
    pub(crate) fn forget_ended(&mut self, r: &Retention) -> Result<(), ApplyError> {
        for (key, bytes, ids) in self.forgettable_entries(r) {
            self.index.ended.remove(&key);
            self.index.ended_bytes = self.index.ended_bytes.saturating_sub(bytes);
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
