//! Virtual-time driver: the real state machine and scheduler, with simulated jobs.

use crate::scenario::*;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tranche_model::*;
use tranche_state::*;

pub use crate::scenario::DEFAULT_QUEUE as QUEUE;
pub const POLICY: &str = "fifo";
pub const USER: &str = "sim";

/// One status change, as the timeline prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub t: u64,
    pub job: String,
    pub from: String,
    pub to: String,
    pub nodes: Vec<String>,
    pub reason: String,
}

/// An expectation that did not hold.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub t: u64,
    pub what: String,
    pub expected: String,
    pub found: String,
}

/// An event the state machine refused (a refused submit is `REJECTED`).
#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub t: u64,
    pub event: String,
    pub error: String,
}

#[derive(Debug, Clone, Copy)]
struct Behavior {
    runtime_ms: Option<Millis>,
    /// Work saved by the checkpoints of earlier attempts: the next attempt resumes there.
    done_ms: Millis,
    exit_code: i32,
    on_signal: OnSignal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// The attempt's process finishes by itself.
    Complete(JobId, u32),
    /// The attempt exits after its checkpoint signal.
    SignalExit(JobId, u32),
    /// The grace period ended: SIGKILL.
    Kill(JobId, u32),
    /// The scheduler asked to run again (a `min_runtime_s` boundary).
    Wake,
}

/// A scenario in progress. `step_to` advances virtual time; tests may also drive it
/// event by event and inspect `state` in between.
pub struct Sim {
    pub state: State,
    pub now: Millis,
    pub jobs: BTreeMap<String, JobId>,
    pub rejected: BTreeSet<String>,
    names: HashMap<JobId, String>,
    behavior: HashMap<JobId, Behavior>,
    timers: BTreeSet<(Millis, Timer)>,
    signalled: BTreeSet<(JobId, u32)>,
    seen: HashMap<JobId, usize>,
    pub records: Vec<Record>,
    pub refusals: Vec<Refusal>,
    pub placements: u64,
    pub preemptions: u64,
    pub passes: u64,
    /// Each share's queue, for submits.
    share_queue: HashMap<String, String>,
    /// The queue a submit to an unknown share names (it is refused anyway).
    first_queue: String,
    scheduler: tranche_sched::Scheduler,
    /// Also plans every pass with every job looked at on its own
    /// ([`tranche_sched::plan_each`]) and fails where the two plans differ.
    pub check_passes: bool,
}

/// A settle loop that does not settle is a scheduler bug, not a scenario property.
const MAX_PASSES_PER_INSTANT: usize = 1_000;

/// The state machine refused an object of the scenario's cluster: `field` is where
/// the file gives it (`shares[0]`, `nodes[2]`, `policy`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {error}")]
pub struct SetupError {
    pub field: String,
    #[source]
    pub error: ApplyError,
}

/// Why a scenario could not be run to its end. Every kind but [`RunError::Setup`] is
/// a fault of the scheduler or the state machine, not of the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The state machine rejected actions of a plan the scheduler just made.
    #[error("t={at_s}: the state machine rejected part of a fresh plan: {rejected:?}")]
    PlanRejected {
        at_s: u64,
        rejected: Vec<(u32, ApplyError)>,
    },
    /// The state machine refused a plan as a whole.
    #[error("plan rejected: {0}")]
    PlanRefused(ApplyError),
    /// The scheduler kept acting at one instant.
    #[error(
        "t={at_s}: scheduling did not settle after {} passes",
        MAX_PASSES_PER_INSTANT
    )]
    Unsettled { at_s: u64 },
    /// Jobs kept ending and being placed again at one instant.
    #[error(
        "t={at_s}: jobs kept ending and being placed again at this instant ({} rounds)",
        MAX_PASSES_PER_INSTANT
    )]
    Cycle { at_s: u64 },
    /// The pass that judges jobs by class planned otherwise than the one that looks at
    /// every job (only with `check_passes`).
    #[error("t={at_s}: the pass by classes and the pass over every job differ: {detail}")]
    PassesDiffer { at_s: u64, detail: String },
}

impl Sim {
    /// Builds the cluster the scenario describes at time 0.
    pub fn new(sc: &Scenario) -> Result<Sim, SetupError> {
        let mut sim = Sim {
            state: State::new(),
            now: 0,
            jobs: BTreeMap::new(),
            rejected: BTreeSet::new(),
            names: HashMap::new(),
            behavior: HashMap::new(),
            timers: BTreeSet::new(),
            signalled: BTreeSet::new(),
            seen: HashMap::new(),
            records: vec![],
            refusals: vec![],
            placements: 0,
            preemptions: 0,
            passes: 0,
            share_queue: (0..sc.shares.len())
                .map(|i| (sc.shares[i].name.clone(), sc.share_queue(i)))
                .collect(),
            first_queue: sc.queue_list().remove(0).name,
            scheduler: tranche_sched::Scheduler::new(),
            check_passes: false,
        };
        let setup = |sim: &mut Sim, field: &str, cmd: Command| -> Result<(), SetupError> {
            sim.state
                .apply(&cmd, 0)
                .map(|_| ())
                .map_err(|error| SetupError {
                    field: field.to_string(),
                    error,
                })
        };
        let o = objects(sc);
        for (i, e) in o.environments.into_iter().enumerate() {
            setup(
                &mut sim,
                &format!("environments[{i}]"),
                Command::PutEnvironment(e),
            )?;
        }
        setup(&mut sim, "policy", Command::PutPolicy(o.policy))?;
        for (i, q) in o.queues.into_iter().enumerate() {
            setup(&mut sim, &format!("queues[{i}]"), Command::PutQueue(q))?;
        }
        for (i, s) in o.shares.into_iter().enumerate() {
            setup(&mut sim, &format!("shares[{i}]"), Command::PutShare(s))?;
        }
        // A group's members are applied before it (each names only earlier ones).
        for (i, g) in o.groups.into_iter().enumerate() {
            setup(&mut sim, &format!("groups[{i}]"), Command::PutGroup(g))?;
        }
        for (i, n) in sc.nodes.iter().enumerate() {
            for name in expand_names(n) {
                let gpus = (0..n.gpus)
                    .map(|g| Gpu {
                        index: GpuIndex(g),
                        uuid: format!("GPU-{name}-{g}"),
                        unit: Unit(n.unit.clone()),
                        memory_mb: 81_559,
                        healthy: true,
                    })
                    .collect();
                let inv = NodeInventory {
                    name: NodeName(name.clone()),
                    address: "127.0.0.1".into(),
                    labels: n.labels.clone().unwrap_or_default(),
                    gpus,
                    cpus: 64,
                    memory_mb: 1 << 20,
                };
                setup(&mut sim, &format!("nodes[{i}]"), Command::RegisterNode(inv))?;
            }
        }
        Ok(sim)
    }

    fn cmd(&mut self, cmd: Command) -> Result<Outcome, ApplyError> {
        let r = self.state.apply(&cmd, self.now);
        self.collect();
        r
    }

    /// Appends the transitions made since the last call to the timeline.
    fn collect(&mut self) {
        for job in self.state.jobs.values() {
            // A job is named right after its submit is accepted; it is collected then.
            if !self.names.contains_key(&job.id) {
                continue;
            }
            let seen = self.seen.entry(job.id).or_insert(0);
            for tr in &job.transitions[*seen..] {
                self.records.push(Record {
                    t: tr.at / SECOND,
                    job: self.names[&job.id].clone(),
                    from: tr.from.to_string(),
                    to: tr.to.to_string(),
                    nodes: tr.nodes.iter().map(|n| n.0.clone()).collect(),
                    reason: tr.reason.clone(),
                });
            }
            *seen = job.transitions.len();
        }
    }

    fn refuse(&mut self, event: String, e: impl std::fmt::Display) {
        self.refusals.push(Refusal {
            t: self.now / SECOND,
            event,
            error: e.to_string(),
        });
    }

    /// Applies one scenario event at the current time.
    pub fn event(&mut self, e: &EventSpec) {
        if let Some(s) = &e.submit {
            let queue = self
                .share_queue
                .get(&s.share)
                .unwrap_or(&self.first_queue)
                .clone();
            let mut spec = JobSpec::new(
                &s.name,
                &queue,
                &s.share,
                USER,
                &s.unit,
                s.gpus,
                s.nodes.unwrap_or(1),
            );
            spec.priority = s.priority.unwrap_or(0);
            spec.checkpoint.grace_s = s.grace_s;
            spec.preemption_retries = s.preemption_retries;
            spec.retry_attempts = s.retry_attempts.unwrap_or(1);
            spec.checkpoint.every_s = s.checkpoint_every_s;
            match self.cmd(Command::Submit(spec)) {
                Ok(Outcome::Submitted { job, .. }) => {
                    self.jobs.insert(s.name.clone(), job);
                    self.names.insert(job, s.name.clone());
                    self.collect();
                    let on_signal = s.on_signal().unwrap_or(OnSignal::ExitAfter(0));
                    self.behavior.insert(
                        job,
                        Behavior {
                            runtime_ms: s.runtime_s.map(|r| r * SECOND),
                            done_ms: 0,
                            exit_code: s.exit_code.unwrap_or(0),
                            on_signal,
                        },
                    );
                }
                Ok(other) => self.refuse(
                    format!("submit {}", s.name),
                    format!("unexpected outcome {other:?}"),
                ),
                Err(err) => {
                    self.rejected.insert(s.name.clone());
                    self.refuse(format!("submit {}", s.name), err);
                }
            }
        } else if let Some(name) = &e.checkpoint {
            let Some(&id) = self.jobs.get(name) else {
                self.refuse(format!("checkpoint {name}"), "no such job");
                return;
            };
            let attempt = self.state.jobs[&id].attempts.len() as u32;
            if let Err(err) = self.cmd(Command::JobProgress {
                job: id,
                attempt,
                event: Progress::Checkpointed,
            }) {
                self.refuse(format!("checkpoint {name}"), err);
            }
        } else if let Some(name) = &e.cancel {
            if let Some(&id) = self.jobs.get(name) {
                if let Err(err) = self.cmd(Command::Cancel {
                    job: JobRef::job(id),
                    reason: "cancelled by user".into(),
                }) {
                    self.refuse(format!("cancel {name}"), err);
                }
            }
        } else if let Some(p) = &e.update_priority {
            if let Some(&id) = self.jobs.get(&p.job) {
                if let Err(err) = self.cmd(Command::UpdatePriority {
                    job: JobRef::job(id),
                    priority: p.priority,
                }) {
                    self.refuse(format!("update_priority {}", p.job), err);
                }
            }
        } else if let Some(u) = &e.update_share {
            let Some(mut share) = self.state.shares.get(&ShareName(u.name.clone())).cloned() else {
                self.refuse(format!("update_share {}", u.name), "share no longer exists");
                return;
            };
            if let Some(l) = &u.capacity_limits {
                share.capacity_limits = l
                    .iter()
                    .map(|l| CapacityLimit {
                        unit: Unit(l.unit.clone()),
                        max: l.max,
                    })
                    .collect();
            }
            if let Some(s) = u.strategy {
                share.resource_sharing.strategy = s;
                if s != Strategy::LendAndBorrow {
                    share.resource_sharing.borrow_limit = None;
                }
            }
            if u.borrow_limit.is_some() {
                share.resource_sharing.borrow_limit = u.borrow_limit;
            }
            share.in_share_preemption = u.in_share_preemption.unwrap_or(share.in_share_preemption);
            share.default_grace_s = u.default_grace_s.unwrap_or(share.default_grace_s);
            share.min_runtime_s = u.min_runtime_s.unwrap_or(share.min_runtime_s);
            share.state = u.state.unwrap_or(share.state);
            if let Err(err) = self.cmd(Command::PutShare(share)) {
                self.refuse(format!("update_share {}", u.name), err);
            }
        } else {
            let (what, cmd) = if let Some(d) = &e.drain {
                (
                    format!("drain {}", d.node),
                    Command::DrainNode {
                        node: NodeName(d.node.clone()),
                        reason: d.reason.clone(),
                        now: d.now.unwrap_or(false),
                    },
                )
            } else if let Some(n) = &e.resume {
                (
                    format!("resume {n}"),
                    Command::ResumeNode {
                        node: NodeName(n.clone()),
                    },
                )
            } else if let Some(n) = &e.node_down {
                (
                    format!("node_down {n}"),
                    Command::NodeDown {
                        node: NodeName(n.clone()),
                        reason: "node_down event".into(),
                    },
                )
            } else if let Some(n) = &e.node_up {
                (
                    format!("node_up {n}"),
                    Command::NodeUp {
                        node: NodeName(n.clone()),
                    },
                )
            } else {
                return;
            };
            if let Err(err) = self.cmd(cmd) {
                self.refuse(what, err);
            }
        }
        self.arm_stops();
    }

    /// Schedules what each newly signalled job does: exit after N seconds, or be killed
    /// when its grace ends.
    fn arm_stops(&mut self) {
        let mut new = vec![];
        for job in self.state.stopping_jobs() {
            let Some(a) = job.current_attempt() else {
                continue;
            };
            let stop = job.stop.as_ref().expect("stopping");
            if self.signalled.insert((job.id, a.number)) {
                new.push((job.id, a.number, stop.signalled_at, stop.deadline));
            }
        }
        for (id, attempt, at, deadline) in new {
            let b = self.behavior.get(&id).copied();
            let exit_at = match b.map(|b| b.on_signal) {
                Some(OnSignal::ExitAfter(n)) => Some(at + n * SECOND),
                _ => None,
            };
            match exit_at {
                Some(t) if t < deadline => self.timers.insert((t, Timer::SignalExit(id, attempt))),
                _ => self.timers.insert((deadline, Timer::Kill(id, attempt))),
            };
        }
    }

    /// A stopped attempt keeps the work up to its last checkpoint for the next one.
    fn save_work(&mut self, id: JobId) {
        let Some(job) = self.state.jobs.get(&id) else {
            return;
        };
        let Some(a) = job.current_attempt() else {
            return;
        };
        let saved = a.work_saved(job.spec.checkpoint.every_s, self.now);
        if let Some(b) = self.behavior.get_mut(&id) {
            b.done_ms += saved;
        }
    }

    fn fire(&mut self, timer: Timer) {
        let (id, attempt, code) = match timer {
            Timer::Wake => return,
            Timer::Complete(id, a) => (
                id,
                a,
                Some(self.behavior.get(&id).map_or(0, |b| b.exit_code)),
            ),
            Timer::SignalExit(id, a) => (id, a, Some(0)),
            Timer::Kill(id, a) => (id, a, None),
        };
        let stop_timer = matches!(timer, Timer::Kill(..) | Timer::SignalExit(..));
        if stop_timer {
            self.save_work(id);
        }
        for cmd in exit_reports(&self.state, id, attempt, stop_timer, code, None) {
            let _ = self.cmd(cmd);
        }
    }

    /// Runs the scheduler until nothing moves, starting every placed job at once.
    pub fn settle(&mut self) -> Result<(), RunError> {
        for _ in 0..MAX_PASSES_PER_INSTANT {
            let plan = self.scheduler.plan(&self.state, self.now);
            if self.check_passes {
                let each = tranche_sched::plan_each(&self.state, self.now);
                let by_class = tranche_sched::plan_by_class(&self.state, self.now);
                for p in [&plan, &by_class] {
                    if !each.same_as(p) {
                        return Err(RunError::PassesDiffer {
                            at_s: self.now / SECOND,
                            detail: plan_difference(p, &each),
                        });
                    }
                }
            }
            self.passes += 1;
            if let Some(w) = plan.next_wakeup {
                if w > self.now {
                    self.timers.insert((w, Timer::Wake));
                }
            }
            if plan.is_empty() {
                return Ok(());
            }
            let actions = !plan.actions.is_empty();
            let placed: Vec<JobId> = plan
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::Place { job, .. } => Some(*job),
                    _ => None,
                })
                .collect();
            self.preemptions += plan.preemptions() as u64;
            match self.cmd(Command::ApplyPlan(plan)) {
                Ok(Outcome::Plan(out)) if !out.rejected.is_empty() => {
                    return Err(RunError::PlanRejected {
                        at_s: self.now / SECOND,
                        rejected: out.rejected,
                    });
                }
                Ok(_) => {}
                Err(e) => return Err(RunError::PlanRefused(e)),
            }
            for id in placed {
                self.placements += 1;
                let attempt = self.state.jobs[&id].attempts.len() as u32;
                let _ = self.cmd(Command::JobProgress {
                    job: id,
                    attempt,
                    event: Progress::Starting,
                });
                let _ = self.cmd(Command::JobProgress {
                    job: id,
                    attempt,
                    event: Progress::Running,
                });
                if let Some(b) = self.behavior.get(&id) {
                    if let Some(r) = b.runtime_ms {
                        let left = r.saturating_sub(b.done_ms);
                        self.timers
                            .insert((self.now + left, Timer::Complete(id, attempt)));
                    }
                }
            }
            self.arm_stops();
            if !actions {
                return Ok(());
            }
        }
        Err(RunError::Unsettled {
            at_s: self.now / SECOND,
        })
    }

    /// Fires every timer due at or before `t` (each at its own instant, settling after
    /// each instant), then moves the clock to `t`.
    pub fn advance_to(&mut self, t: Millis) -> Result<(), RunError> {
        let mut rounds_at = (0, 0usize);
        while let Some(&(at, _)) = self.timers.first() {
            if at > t {
                break;
            }
            // Jobs that end at the instant they are placed or signalled fire again at
            // the same instant; a cycle of those would never let the clock move.
            rounds_at = if rounds_at.0 == at {
                (at, rounds_at.1 + 1)
            } else {
                (at, 1)
            };
            if rounds_at.1 > MAX_PASSES_PER_INSTANT {
                return Err(RunError::Cycle { at_s: at / SECOND });
            }
            self.now = at;
            while let Some(&(at2, timer)) = self.timers.first() {
                if at2 != at {
                    break;
                }
                self.timers.pop_first();
                self.fire(timer);
            }
            self.settle()?;
        }
        self.now = t;
        Ok(())
    }

    /// Checks one expectation against the current state.
    pub fn check(&self, x: &ExpectSpec) -> Vec<Failure> {
        let mut out = vec![];
        let t = self.now / SECOND;
        let mut fail = |what: String, expected: String, found: String| {
            out.push(Failure {
                t,
                what,
                expected,
                found,
            })
        };
        if let Some(share) = &x.share {
            for (unit, n) in x.used.iter().flatten() {
                let used = self
                    .state
                    .share_used(&ShareName(share.clone()), &Unit(unit.clone()));
                if used != *n {
                    fail(
                        format!("share {share} used {unit}"),
                        n.to_string(),
                        used.to_string(),
                    );
                }
            }
            return out;
        }
        let Some(name) = &x.job else { return out };
        let Some(job) = self.jobs.get(name).and_then(|id| self.state.jobs.get(id)) else {
            let found = if self.rejected.contains(name) {
                "REJECTED"
            } else {
                "not submitted"
            };
            if x.state.as_deref() != Some(found) {
                fail(
                    format!("job {name} state"),
                    x.state.clone().unwrap_or_else(|| "a job".into()),
                    found.into(),
                );
            }
            return out;
        };
        if let Some(s) = &x.state {
            if job.status.as_str() != s {
                let why = job
                    .pending_reason
                    .as_ref()
                    .map(|r| format!(" ({})", r.render(self.now)))
                    .unwrap_or_default();
                fail(
                    format!("job {name} state"),
                    s.clone(),
                    format!("{}{why}", job.status),
                );
            }
        }
        if let Some(p) = x.preempting {
            if job.preempting() != p {
                fail(
                    format!("job {name} preempting"),
                    p.to_string(),
                    job.preempting().to_string(),
                );
            }
        }
        if let Some(n) = &x.node {
            let found = job
                .allocation()
                .first()
                .map(|a| a.node.0.clone())
                .unwrap_or_else(|| "no node".into());
            if &found != n {
                fail(format!("job {name} node"), n.clone(), found);
            }
        }
        if let Some(a) = x.attempts {
            if job.attempts.len() as u32 != a {
                fail(
                    format!("job {name} attempts"),
                    a.to_string(),
                    job.attempts.len().to_string(),
                );
            }
        }
        if let Some(r) = &x.reason {
            let found = job
                .pending_reason
                .as_ref()
                .map(|p| p.render(self.now))
                .unwrap_or_else(|| "no pending reason".into());
            if !found.contains(r.as_str()) {
                fail(
                    format!("job {name} reason"),
                    format!("contains {r:?}"),
                    found,
                );
            }
        }
        out
    }
}

/// The reports of an attempt's end: one per member of a gang, as each member's agent
/// reports its own (the simulated members end together). None when the attempt has
/// ended already, or when a stop's timer (`stop_timer`) finds the job no longer being
/// stopped: an end that races a stop is still an end.
pub(crate) fn exit_reports(
    state: &State,
    id: JobId,
    attempt: u32,
    stop_timer: bool,
    code: Option<i32>,
    reason: Option<String>,
) -> Vec<Command> {
    let Some(job) = state.jobs.get(&id) else {
        return vec![];
    };
    let current =
        job.current_attempt().map(|a| a.number) == Some(attempt) && job.status.is_active();
    if !current || (stop_timer && job.stop.is_none()) {
        return vec![];
    }
    let members = job.current_attempt().map_or(1, |a| a.allocation.len());
    (0..members)
        .map(|_| Command::JobProgress {
            job: id,
            attempt,
            event: Progress::Exited {
                code,
                reason: reason.clone(),
            },
        })
        .collect()
}

/// The quota objects a scenario (or a policy file) defines, as the state machine and
/// the controllers take them.
pub struct Objects {
    pub environments: Vec<ServiceEnvironment>,
    pub policy: SchedulingPolicy,
    pub queues: Vec<JobQueue>,
    pub shares: Vec<QuotaShare>,
    /// Applied after the shares, which they name.
    pub groups: Vec<ShareGroup>,
}

/// Builds the scenario's environment, policy, queues, shares and groups.
pub fn objects(sc: &Scenario) -> Objects {
    let limit = |unit: String, max: u32| CapacityLimit {
        unit: Unit(unit),
        max,
    };
    let environments: Vec<ServiceEnvironment> = sc
        .environment_list()
        .into_iter()
        .map(|e| {
            let mut env = ServiceEnvironment {
                name: EnvName(e.name.clone().unwrap_or_else(|| "default".into())),
                selector: e.selector.clone().unwrap_or_default(),
                capacity_limits: vec![],
                state: ObjState::Enabled,
            };
            // Without a cap, the environment's limit per unit is every GPU of that
            // unit on the nodes its selector takes.
            let mut totals: BTreeMap<String, u32> = BTreeMap::new();
            for n in &sc.nodes {
                if env.selects(&n.labels.clone().unwrap_or_default()) {
                    *totals.entry(n.unit.clone()).or_default() += n.gpus * n.count.unwrap_or(1);
                }
            }
            env.capacity_limits = match e.capacity_limits {
                Some(l) => l.into_iter().map(|l| limit(l.unit, l.max)).collect(),
                None => totals.into_iter().map(|(u, m)| limit(u, m)).collect(),
            };
            env
        })
        .collect();
    let env_of = |q: &QueueSpec| match &q.environment {
        Some(e) => EnvName(e.clone()),
        None => environments[0].name.clone(),
    };
    let queues = sc
        .queue_list()
        .into_iter()
        .map(|q| JobQueue {
            name: q.name.as_str().into(),
            priority: q.priority.unwrap_or(0),
            state: ObjState::Enabled,
            environment: env_of(&q),
            policy: POLICY.into(),
        })
        .collect();
    let shares = sc
        .shares
        .iter()
        .enumerate()
        .map(|(i, s)| QuotaShare {
            weight: s.weight,
            name: ShareName(s.name.clone()),
            queue: sc.share_queue(i).as_str().into(),
            capacity_limits: s
                .capacity_limits
                .iter()
                .map(|l| limit(l.unit.clone(), l.max))
                .collect(),
            resource_sharing: ResourceSharing {
                strategy: s.strategy,
                borrow_limit: s.borrow_limit,
            },
            in_share_preemption: s.in_share_preemption.unwrap_or(false),
            state: s.state.unwrap_or_default(),
            members: vec![],
            default_grace_s: s.default_grace_s.unwrap_or(60),
            max_grace_s: s
                .max_grace_s
                .unwrap_or(3600)
                .max(s.default_grace_s.unwrap_or(60)),
            min_runtime_s: s.min_runtime_s.unwrap_or(0),
            loans: LoanTerms {
                min_runtime_s: s.loan_min_runtime_s,
                recall_notice_s: s.recall_notice_s.unwrap_or(0),
            },
            // The simulator measures scheduling: submits are not limited.
            max_user_priority: tranche_model::MAX_JOB_PRIORITY,
            limits: tranche_model::JobLimits::widest(),
        })
        .collect();
    Objects {
        environments,
        policy: SchedulingPolicy {
            name: POLICY.into(),
            // Checked when the file was read.
            idle_resource_assignment: sc.idle_assignment().unwrap_or_default(),
        },
        queues,
        shares,
        groups: sc
            .groups
            .iter()
            .map(|g| ShareGroup {
                name: ShareName(g.name.clone()),
                queue: g
                    .queue
                    .clone()
                    .unwrap_or_else(|| crate::scenario::DEFAULT_QUEUE.to_string())
                    .as_str()
                    .into(),
                shares: g.shares.iter().map(|s| ShareName(s.clone())).collect(),
                groups: g.groups.iter().map(|s| ShareName(s.clone())).collect(),
                capacity_limits: g
                    .capacity_limits
                    .iter()
                    .map(|l| limit(l.unit.clone(), l.max))
                    .collect(),
                resource_sharing: ResourceSharing {
                    strategy: g.strategy,
                    borrow_limit: g.borrow_limit,
                },
            })
            .collect(),
    }
}

/// The result of running a whole scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub records: Vec<Record>,
    pub failures: Vec<Failure>,
    pub refusals: Vec<Refusal>,
    pub expectations: usize,
    /// Expectations with at least one failure (one expectation may fail on several fields).
    pub failed_expectations: usize,
    pub end_s: u64,
    pub placements: u64,
    pub preemptions: u64,
    pub passes: u64,
    /// Final status of every job, by name.
    pub jobs: BTreeMap<String, String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs a scenario to the last event or expectation.
pub fn run(sc: &Scenario) -> Result<Report, RunError> {
    let mut sim = Sim::new(sc)?;
    let mut instants: BTreeSet<u64> = sc.events.iter().map(|e| e.at).collect();
    instants.extend(sc.expect.iter().map(|x| x.at));
    let mut failures = vec![];
    let mut failed_expectations = 0;
    let mut ev = 0;
    sim.settle()?;
    for &t in &instants {
        sim.advance_to(t * SECOND)?;
        while ev < sc.events.len() && sc.events[ev].at == t {
            sim.event(&sc.events[ev]);
            ev += 1;
        }
        sim.settle()?;
        // What the events set off at this same instant (an exit on the signal with
        // `exit_after:0`, a zero runtime) happens before the expectations are checked.
        sim.advance_to(t * SECOND)?;
        for x in sc.expect.iter().filter(|x| x.at == t) {
            let f = sim.check(x);
            failed_expectations += usize::from(!f.is_empty());
            failures.extend(f);
        }
    }
    let jobs = sim
        .jobs
        .iter()
        .map(|(n, id)| (n.clone(), sim.state.jobs[id].status.to_string()))
        .chain(
            sim.rejected
                .iter()
                .map(|n| (n.clone(), "REJECTED".to_string())),
        )
        .collect();
    Ok(Report {
        records: sim.records,
        failures,
        refusals: sim.refusals,
        expectations: sc.expect.len(),
        failed_expectations,
        end_s: sim.now / SECOND,
        placements: sim.placements,
        preemptions: sim.preemptions,
        passes: sim.passes,
        jobs,
    })
}

/// The first difference between two plans, for a failing check.
fn plan_difference(a: &Plan, b: &Plan) -> String {
    if a.next_wakeup != b.next_wakeup {
        return format!("wakeup {:?} against {:?}", a.next_wakeup, b.next_wakeup);
    }
    for (i, (x, y)) in a.actions.iter().zip(&b.actions).enumerate() {
        if x != y {
            return format!("action {i}: {x:?} against {y:?}");
        }
    }
    if a.actions.len() != b.actions.len() {
        return format!("{} actions against {}", a.actions.len(), b.actions.len());
    }
    // Reasons by job: a pass may give them in another order.
    fn by_job(p: &Plan) -> Vec<&(JobId, PendingReason)> {
        let mut r: Vec<_> = p.reasons.iter().collect();
        r.sort_by_key(|(id, _)| *id);
        r
    }
    for (x, y) in by_job(a).into_iter().zip(by_job(b)) {
        if x != y {
            return format!("reason for job {}: {:?} against {:?}", x.0, x.1, y.1);
        }
    }
    format!("{} reasons against {}", a.reasons.len(), b.reasons.len())
}
