//! The agents' progress reports and how an attempt ends: starting, running, exited or
//! lost, for one node or a gang of several, and what the job becomes (succeeded, retried,
//! requeued, preempted, cancelled or failed).

use crate::command::*;
use crate::state::*;
use tranche_model::*;

impl State {
    pub(super) fn progress(
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
            Progress::Checkpointed => {
                if job.status != JobStatus::Running {
                    return Err(conflict(format!(
                        "job {id} is {}, not RUNNING: only a running job checkpoints",
                        job.status
                    )));
                }
                let job = self.jobs.get_mut(&id).expect("job exists");
                if let Some(a) = job.attempts.last_mut() {
                    a.checkpointed_at = Some(now);
                }
                if let Some(r) = self.index.running_mut(&job.spec.share, id) {
                    r.checkpointed_at = Some(now);
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
    pub(super) fn attempt_lost(&mut self, id: JobId, why: &str, nodes: Vec<NodeName>, now: Millis) {
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
