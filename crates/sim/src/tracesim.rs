//! A trace in virtual time: the real state machine and scheduler, at millisecond
//! resolution, until every job has ended.
//!
//! Unlike the scenario runner, which rescans every job after every command to print
//! a timeline, this driver only touches what an event names: the job a timer is for,
//! the jobs a plan places or preempts. Its own cost grows with events; what is left
//! is the scheduler's pass itself.

use crate::engine::{SetupError, Sim};
use crate::report::{self, JobRun};
use crate::scenario::Scenario;
use crate::trace::{TraceError, TraceJob};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use tranche_model::*;
use tranche_state::*;

/// The user of trace jobs that name none.
pub const USER: &str = "sim";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// The attempt ends by itself: its duration ran out (`true`: its time limit did).
    End(JobId, u32, bool),
    /// The attempt exits after its checkpoint signal.
    SignalExit(JobId, u32),
    /// The grace period ended: SIGKILL.
    Kill(JobId, u32),
    /// The scheduler asked to run again at this time.
    Wake,
}

/// What a simulation produced.
#[derive(Debug, Clone)]
pub struct Simulated {
    pub runs: Vec<JobRun>,
    pub passes: u64,
    pub commands: u64,
    /// Virtual time at which the last job ended.
    pub end: Millis,
}

/// A settle loop that does not settle is a scheduler bug, not a property of the trace.
const MAX_PASSES_PER_INSTANT: usize = 1_000;

/// Why a trace could not be simulated to its end. [`SimulateError::Trace`],
/// [`SimulateError::Setup`] and [`SimulateError::Refused`] are about the files; the
/// others are faults of the scheduler or the state machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimulateError {
    /// A row does not fit the policy.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The state machine refused an object of the policy's cluster.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The state machine refused a row's job.
    #[error("line {line}: the job is refused: {error}")]
    Refused { line: usize, error: ApplyError },
    /// A submit answered with something else than the job it submitted.
    #[error("a submit gave {0:?}")]
    Submit(Box<Outcome>),
    /// The state machine rejected an action of a plan the scheduler just made.
    #[error(
        "at {}: the state machine rejected action {action} of a fresh plan: {error}",
        report::fmt_duration(*.at)
    )]
    PlanRejected {
        at: Millis,
        action: u32,
        error: ApplyError,
    },
    /// The state machine refused a plan as a whole.
    #[error("a plan was refused: {0}")]
    PlanRefused(ApplyError),
    /// The scheduler kept acting at one instant.
    #[error(
        "at {}: scheduling did not settle after {} passes",
        report::fmt_duration(*.at),
        MAX_PASSES_PER_INSTANT
    )]
    Unsettled { at: Millis },
}

/// The job specs of a trace on a cluster, each checked against the policy.
pub fn specs(sc: &Scenario, jobs: &[TraceJob]) -> Result<Vec<JobSpec>, TraceError> {
    let shares: HashMap<&str, String> = (0..sc.shares.len())
        .map(|i| (sc.shares[i].name.as_str(), sc.share_queue(i)))
        .collect();
    // The largest node of each unit, for jobs that give no `nodes`.
    let mut widest: BTreeMap<&str, u32> = BTreeMap::new();
    for n in &sc.nodes {
        let w = widest.entry(n.unit.as_str()).or_default();
        *w = (*w).max(n.gpus);
    }
    let only_unit = (widest.len() == 1).then(|| *widest.keys().next().expect("one"));
    jobs.iter()
        .map(|j| {
            let bad = |column: &'static str, message: String| TraceError::Policy {
                line: j.line,
                column,
                message,
            };
            let Some(queue) = shares.get(j.share.as_str()) else {
                let names: Vec<&str> = sc.shares.iter().map(|s| s.name.as_str()).collect();
                return Err(bad(
                    "share",
                    format!(
                        "share {} is not in the policy (its shares: {})",
                        j.share,
                        names.join(", ")
                    ),
                ));
            };
            let unit = match (&j.unit, only_unit) {
                (Some(u), _) => u.as_str(),
                (None, Some(u)) => u,
                (None, None) => {
                    return Err(bad(
                        "unit",
                        "the nodes have several units, so every job needs its unit".into(),
                    ))
                }
            };
            let Some(&width) = widest.get(unit) else {
                return Err(bad("unit", format!("no node has {unit} GPUs")));
            };
            let (per, nodes) = match j.nodes {
                Some(n) => (j.gpus / n, n),
                None if j.gpus <= width => (j.gpus, 1),
                None if j.gpus % width == 0 => (width, j.gpus / width),
                None => {
                    return Err(bad(
                        "gpus",
                        format!(
                            "{} GPUs do not fit one node of {width} {unit} nor fill whole nodes; give the job's nodes",
                            j.gpus
                        ),
                    ))
                }
            };
            let mut spec = JobSpec::new(
                &j.name,
                queue,
                &j.share,
                j.user.as_deref().unwrap_or(USER),
                unit,
                per,
                nodes,
            );
            spec.priority = j.priority;
            spec.time_limit_s = j.time_limit_s;
            spec.checkpoint.every_s = j.checkpoint_every_s;
            spec.validate().map_err(|error| TraceError::Job {
                line: j.line,
                error,
            })?;
            Ok(spec)
        })
        .collect()
}

/// Runs the trace under the policy until every job has ended.
pub fn simulate(sc: &Scenario, jobs: &[TraceJob]) -> Result<Simulated, SimulateError> {
    simulate_with(sc, jobs, false)
}

/// As [`simulate`]; with `every_job`, each pass looks at every waiting job on its own
/// ([`tranche_sched::plan_each`]), the reference the pass by classes is checked against.
pub fn simulate_with(
    sc: &Scenario,
    jobs: &[TraceJob],
    every_job: bool,
) -> Result<Simulated, SimulateError> {
    let specs = specs(sc, jobs)?;
    let mut d = Driver {
        state: Sim::new(sc)?.state,
        now: 0,
        timers: BinaryHeap::new(),
        wakes: BTreeSet::new(),
        signalled: BTreeSet::new(),
        trace_ix: HashMap::new(),
        jobs,
        passes: 0,
        commands: 0,
        scheduler: tranche_sched::Scheduler::new(),
        every_job,
        done: HashMap::new(),
    };
    let mut next = 0;
    d.settle()?;
    loop {
        let t_sub = jobs.get(next).map(|j| j.submit);
        let t_timer = d.timers.peek().map(|Reverse((t, _))| *t);
        let t = match (t_sub, t_timer) {
            (None, None) => break,
            (a, b) => a.into_iter().chain(b).min().expect("one"),
        };
        d.now = t;
        while let Some(&Reverse((at, timer))) = d.timers.peek() {
            if at != t {
                break;
            }
            d.timers.pop();
            d.fire(timer);
        }
        while next < jobs.len() && jobs[next].submit == t {
            match d.cmd(Command::Submit(specs[next].clone())) {
                Ok(Outcome::Submitted { job, .. }) => {
                    d.trace_ix.insert(job, next);
                }
                Ok(other) => return Err(SimulateError::Submit(Box::new(other))),
                Err(error) => {
                    return Err(SimulateError::Refused {
                        line: jobs[next].line,
                        error,
                    })
                }
            }
            next += 1;
        }
        d.settle()?;
    }
    let runs = report::runs_from_jobs(d.state.jobs.values());
    Ok(Simulated {
        runs,
        passes: d.passes,
        commands: d.commands,
        end: d.now,
    })
}

struct Driver<'a> {
    state: State,
    now: Millis,
    timers: BinaryHeap<Reverse<(Millis, Timer)>>,
    wakes: BTreeSet<Millis>,
    signalled: BTreeSet<(JobId, u32)>,
    trace_ix: HashMap<JobId, usize>,
    jobs: &'a [TraceJob],
    passes: u64,
    commands: u64,
    scheduler: tranche_sched::Scheduler,
    every_job: bool,
    /// Per job, the work its stopped attempts saved by their checkpoints: the next
    /// attempt resumes there.
    done: HashMap<JobId, Millis>,
}

impl Driver<'_> {
    fn cmd(&mut self, cmd: Command) -> Result<Outcome, ApplyError> {
        self.commands += 1;
        self.state.apply(&cmd, self.now)
    }

    fn trace_job(&self, id: JobId) -> &TraceJob {
        &self.jobs[self.trace_ix[&id]]
    }

    fn fire(&mut self, timer: Timer) {
        let (id, attempt, code, reason) = match timer {
            Timer::Wake => {
                self.wakes.remove(&self.now);
                return;
            }
            Timer::End(id, a, false) => (id, a, Some(0), None),
            Timer::End(id, a, true) => (id, a, None, Some("time limit reached".to_string())),
            Timer::SignalExit(id, a) => (id, a, Some(0), None),
            Timer::Kill(id, a) => (id, a, None, None),
        };
        let stop_timer = matches!(timer, Timer::Kill(..) | Timer::SignalExit(..));
        if stop_timer {
            if let Some(job) = self.state.jobs.get(&id) {
                if let Some(a) = job.current_attempt() {
                    *self.done.entry(id).or_default() +=
                        a.work_saved(job.spec.checkpoint.every_s, self.now);
                }
            }
        }
        for cmd in crate::engine::exit_reports(&self.state, id, attempt, stop_timer, code, reason) {
            let _ = self.cmd(cmd);
        }
    }

    /// Runs the scheduler until nothing moves, starting every placed job at once.
    fn settle(&mut self) -> Result<(), SimulateError> {
        for _ in 0..MAX_PASSES_PER_INSTANT {
            let plan = if self.every_job {
                tranche_sched::plan_each(&self.state, self.now)
            } else {
                self.scheduler.plan(&self.state, self.now)
            };
            self.passes += 1;
            if let Some(w) = plan.next_wakeup.filter(|w| *w > self.now) {
                if self.wakes.insert(w) {
                    self.timers.push(Reverse((w, Timer::Wake)));
                }
            }
            if plan.is_empty() {
                return Ok(());
            }
            let mut placed = vec![];
            let mut stopped = vec![];
            for a in &plan.actions {
                match a {
                    Action::Place { job, .. } => placed.push(*job),
                    Action::Preempt { job, .. } => stopped.push(*job),
                    Action::Hold { .. } => {}
                }
            }
            let actions = !plan.actions.is_empty();
            match self.cmd(Command::ApplyPlan(plan)) {
                Ok(Outcome::Plan(mut out)) if !out.rejected.is_empty() => {
                    let (action, error) = out.rejected.swap_remove(0);
                    return Err(SimulateError::PlanRejected {
                        at: self.now,
                        action,
                        error,
                    });
                }
                Ok(_) => {}
                Err(e) => return Err(SimulateError::PlanRefused(e)),
            }
            for id in placed {
                let attempt = self.state.jobs[&id].attempts.len() as u32;
                for event in [Progress::Starting, Progress::Running] {
                    let _ = self.cmd(Command::JobProgress {
                        job: id,
                        attempt,
                        event,
                    });
                }
                let j = self.trace_job(id);
                let limit = j.time_limit_s.map(|s| s * SECOND);
                let left = j
                    .duration
                    .map(|d| d.saturating_sub(self.done.get(&id).copied().unwrap_or(0)));
                let (after, by_limit) = match (left, limit) {
                    (Some(d), Some(l)) if l < d => (l, true),
                    (Some(d), _) => (d, false),
                    (None, Some(l)) => (l, true),
                    (None, None) => unreachable!("the trace parser requires one"),
                };
                self.timers.push(Reverse((
                    self.now + after,
                    Timer::End(id, attempt, by_limit),
                )));
            }
            for id in stopped {
                let job = &self.state.jobs[&id];
                let (Some(a), Some(stop)) = (job.current_attempt(), job.stop.as_ref()) else {
                    continue;
                };
                if !self.signalled.insert((id, a.number)) {
                    continue;
                }
                let (number, at, deadline) = (a.number, stop.signalled_at, stop.deadline);
                let exit = self.trace_job(id).checkpoint.unwrap_or(0);
                let timer = if at + exit < deadline {
                    (at + exit, Timer::SignalExit(id, number))
                } else {
                    (deadline, Timer::Kill(id, number))
                };
                self.timers.push(Reverse(timer));
            }
            // Exits at once on the signal happen at this same instant.
            while let Some(&Reverse((at, timer))) = self.timers.peek() {
                if at > self.now {
                    break;
                }
                self.timers.pop();
                self.fire(timer);
            }
            if !actions {
                return Ok(());
            }
        }
        Err(SimulateError::Unsettled { at: self.now })
    }
}
