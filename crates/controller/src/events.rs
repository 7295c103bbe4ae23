//! The events of the applied state: job transitions and share usage, numbered by the
//! log index whose entry caused them, kept in memory for the HTTP API's event stream
//! (`GET /api/v1/events`).
//!
//! Every controller records them as it applies entries, and the state machine is
//! deterministic, so every controller numbers the same events alike: a client that
//! loses one controller resumes from another with the last index it saw. Events are
//! soft state: they are not in the log or the image, a controller has those of the
//! entries it applied since it started (at most [`KEEP_EVENTS`] of them), and a client
//! that asks for older ones is told to read the state again (a `reset`).
//!
//! Recording costs little per entry: the jobs an entry can change are named by its
//! command (a submit, a cancel, a plan's jobs, an agent's report), and only entries
//! that may change any job (deleting a share, a node going down, commands this module
//! does not know) look at every job that has not ended.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use tokio::sync::watch;
use tranche_model::{JobId, JobStatus, Millis, NodeName, ShareName, Unit, UserName};
use tranche_state::{Action, Command, Outcome, State};

/// How many events a controller keeps for clients that resume.
pub const KEEP_EVENTS: usize = 50_000;

/// One job's change of status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEvent {
    pub job: JobId,
    pub share: ShareName,
    pub user: UserName,
    /// `None` for a job's first event (it was submitted).
    pub from: Option<JobStatus>,
    pub to: JobStatus,
    pub at: Millis,
    pub reason: String,
    pub nodes: Vec<NodeName>,
}

/// A share's use of its units after an entry changed the GPUs its jobs hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEvent {
    pub share: ShareName,
    /// (unit, max, used)
    pub units: Vec<(Unit, u32, u32)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    Job(JobEvent),
    Share(ShareEvent),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The log index of the entry that caused it.
    pub index: u64,
    pub kind: EventKind,
}

/// What a client resuming after `after` gets.
pub struct Since {
    /// Events between `after` and the oldest kept one are gone: the client must read
    /// the state again. Carries the index from which events are complete.
    pub reset: Option<u64>,
    pub events: Vec<Event>,
    /// The applied index these events are complete up to.
    pub upto: u64,
}

/// The jobs an entry may change, and how many transitions each had before it.
pub struct Before {
    jobs: Vec<(JobId, usize, JobStatus)>,
}

pub struct EventLog {
    events: VecDeque<Event>,
    /// Events of entries up to this index are not (or no longer) kept. `None` until
    /// the first entry is recorded: then the applied index before it.
    floor: Option<u64>,
    notify: Arc<watch::Sender<u64>>,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog {
            events: VecDeque::new(),
            floor: None,
            notify: Arc::new(watch::channel(0).0),
        }
    }
}

impl EventLog {
    /// Called for every entry applied, before it is: the first one tells from which
    /// index this controller's events are complete.
    pub fn applying(&mut self, index: u64) {
        if self.floor.is_none() {
            self.floor = Some(index.saturating_sub(1));
        }
    }

    /// Called before `cmd` is applied at `index`.
    pub fn before(&mut self, state: &State, cmd: &Command, index: u64) -> Before {
        self.applying(index);
        let mut ids = BTreeSet::new();
        let all = match cmd {
            Command::Submit(_) => false,
            Command::Cancel { job, .. } | Command::Hold { job } | Command::Release { job } => {
                ids.extend(state.resolve(job).unwrap_or_default());
                false
            }
            Command::JobProgress { job, .. } => {
                ids.insert(*job);
                false
            }
            Command::ApplyPlan(plan) => {
                for a in &plan.actions {
                    match a {
                        Action::Place { job, .. }
                        | Action::Preempt { job, .. }
                        | Action::Hold { job, .. } => ids.insert(*job),
                    };
                }
                false
            }
            // These change no job's status.
            Command::UpdatePriority { .. }
            | Command::PruneLedger { .. }
            | Command::ForgetEnded(_)
            | Command::PutEnvironment(_)
            | Command::PutPolicy(_)
            | Command::PutQueue(_)
            | Command::RegisterNode(_)
            | Command::Heartbeat { .. }
            | Command::NodeUp { .. }
            | Command::NodeUnreachable { .. }
            | Command::ResumeNode { .. } => false,
            // Anything else may change any job that has not ended.
            _ => true,
        };
        // A job that ends or is cancelled may release or cancel those that depend on it.
        let dependents = state.dependents_of(&ids);
        ids.extend(dependents);
        let jobs = if all {
            state
                .jobs
                .values()
                .filter(|j| !j.status.is_terminal())
                .map(|j| (j.id, j.transitions.len(), j.status))
                .collect()
        } else {
            ids.into_iter()
                .filter_map(|id| state.job(id).map(|j| (id, j.transitions.len(), j.status)))
                .collect()
        };
        Before { jobs }
    }

    /// Called after the entry at `index` was applied with `outcome`.
    pub fn after(&mut self, state: &State, index: u64, before: Before, outcome: Option<&Outcome>) {
        let mut touched: BTreeSet<ShareName> = BTreeSet::new();
        let mut emit = |ev: JobEvent, events: &mut VecDeque<Event>| {
            if ev.from.is_some_and(|f| f.is_active()) != ev.to.is_active() {
                touched.insert(ev.share.clone());
            }
            events.push_back(Event {
                index,
                kind: EventKind::Job(ev),
            });
        };
        if let Some(Outcome::Submitted {
            job,
            existing: false,
        }) = outcome
        {
            // An array's submit makes every task.
            let tasks: Vec<&tranche_model::Job> =
                match state.job(*job).and_then(|j| j.array.clone()) {
                    Some(a) => state.tasks_of(a.array, a.count).collect(),
                    None => state.job(*job).into_iter().collect(),
                };
            for j in tasks {
                emit(
                    JobEvent {
                        job: j.id,
                        share: j.spec.share.clone(),
                        user: j.spec.user.clone(),
                        from: None,
                        to: j.transitions.first().map(|t| t.from).unwrap_or(j.status),
                        at: j.submitted_at,
                        reason: "submitted".into(),
                        nodes: vec![],
                    },
                    &mut self.events,
                );
                for t in &j.transitions {
                    emit(transition(j, t), &mut self.events);
                }
            }
        }
        for (id, seen, status) in before.jobs {
            let Some(j) = state.job(id) else { continue };
            for t in j.transitions.iter().skip(seen) {
                emit(transition(j, t), &mut self.events);
            }
            // A change of status without a recorded transition still shows.
            if j.transitions.len() == seen && j.status != status {
                emit(
                    JobEvent {
                        job: j.id,
                        share: j.spec.share.clone(),
                        user: j.spec.user.clone(),
                        from: Some(status),
                        to: j.status,
                        at: 0,
                        reason: String::new(),
                        nodes: vec![],
                    },
                    &mut self.events,
                );
            }
        }
        for share in touched {
            if let Some(s) = state.shares.get(&share) {
                let units = s
                    .capacity_limits
                    .iter()
                    .map(|l| (l.unit.clone(), l.max, state.share_used(&share, &l.unit)))
                    .collect();
                self.events.push_back(Event {
                    index,
                    kind: EventKind::Share(ShareEvent { share, units }),
                });
            }
        }
        while self.events.len() > KEEP_EVENTS {
            let gone = self.events.pop_front().expect("not empty").index;
            while self.events.front().is_some_and(|e| e.index == gone) {
                self.events.pop_front();
            }
            self.floor = Some(gone);
        }
    }

    /// The applied state was replaced by an image at `index`: no event before it can
    /// be told.
    pub fn replaced(&mut self, index: u64) {
        self.events.clear();
        self.floor = Some(index);
    }

    /// Wakes the streams waiting for events: the state is applied up to `applied`.
    pub fn notifier(&self) -> Arc<watch::Sender<u64>> {
        self.notify.clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// The events after index `after`, at most `max` (cut at an index boundary, so a
    /// client's last index always has all its events), as of `applied`.
    pub fn since(&self, after: u64, applied: u64, max: usize) -> Since {
        let floor = self.floor.unwrap_or(applied);
        let (reset, after) = if after < floor {
            (Some(floor), floor)
        } else {
            (None, after)
        };
        let start = self.events.partition_point(|e| e.index <= after);
        let mut events: Vec<Event> = self.events.range(start..).take(max).cloned().collect();
        let mut upto = applied;
        if events.len() == max {
            // Drop the last index's events if some of them did not fit.
            let last = events.last().map(|e| e.index).unwrap_or(after);
            let complete = self
                .events
                .get(start + max)
                .is_none_or(|next| next.index != last);
            if !complete && events.first().is_some_and(|e| e.index != last) {
                events.retain(|e| e.index != last);
                upto = last - 1;
            } else if !complete {
                // One index with more events than a batch: all of them, whatever `max`.
                events.extend(
                    self.events
                        .range(start + max..)
                        .take_while(|e| e.index == last)
                        .cloned(),
                );
                upto = last;
            } else {
                upto = last;
            }
        }
        Since {
            reset,
            events,
            upto: upto.max(after),
        }
    }
}

fn transition(j: &tranche_model::Job, t: &tranche_model::Transition) -> JobEvent {
    JobEvent {
        job: j.id,
        share: j.spec.share.clone(),
        user: j.spec.user.clone(),
        from: Some(t.from),
        to: t.to,
        at: t.at,
        reason: t.reason.clone(),
        nodes: t.nodes.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(index: u64) -> Event {
        Event {
            index,
            kind: EventKind::Share(ShareEvent {
                share: "s".into(),
                units: vec![],
            }),
        }
    }

    fn log(indexes: &[u64], floor: u64) -> EventLog {
        let mut l = EventLog {
            floor: Some(floor),
            ..Default::default()
        };
        l.events.extend(indexes.iter().map(|i| ev(*i)));
        l
    }

    #[test]
    fn since_resumes_after_an_index_and_resets_before_the_floor() {
        let l = log(&[3, 3, 5, 7], 2);
        let s = l.since(3, 8, 100);
        assert_eq!(s.reset, None);
        assert_eq!(s.events.iter().map(|e| e.index).collect::<Vec<_>>(), [5, 7]);
        assert_eq!(s.upto, 8);
        let s = l.since(1, 8, 100);
        assert_eq!(s.reset, Some(2), "index 1's events are not kept");
        assert_eq!(s.events.len(), 4);
    }

    #[test]
    fn a_batch_never_splits_an_index() {
        let l = log(&[3, 4, 4, 4, 6], 2);
        let s = l.since(2, 9, 3);
        assert_eq!(s.events.iter().map(|e| e.index).collect::<Vec<_>>(), [3]);
        assert_eq!(s.upto, 3, "the client resumes after 3, then gets all of 4");
        let s = l.since(3, 9, 3);
        assert_eq!(s.events.len(), 3);
        assert_eq!(s.upto, 4);
    }

    #[test]
    fn an_index_larger_than_a_batch_comes_whole() {
        let l = log(&[4, 4, 4, 4, 6], 2);
        let s = l.since(3, 9, 2);
        assert_eq!(s.events.len(), 4);
        assert_eq!(s.upto, 4);
    }

    #[test]
    fn a_replaced_state_forgets_its_events() {
        let mut l = log(&[3, 4], 2);
        l.replaced(10);
        let s = l.since(4, 12, 100);
        assert_eq!(s.reset, Some(10));
        assert!(s.events.is_empty());
    }
}
