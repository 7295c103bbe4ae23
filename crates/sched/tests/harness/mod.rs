//! A plan harness: build a `State` by hand (nodes, shares, running and waiting jobs,
//! holds), run one scheduling pass and read its plan as short lines with job names.
//!
//! ```text
//! let mut h = H::new(&[("n1", "g", 1), ("n2", "g", 1)]);
//! h.share(share("a", Strategy::Lend, 1));
//! h.running("a1", "a", 1, &[("n1", &[0])]);
//! h.waiting("a2", "a", 1, 1, 5);
//! assert_eq!(h.plan(), ["preempt a1 in-share for a2", "hold a2 n1:1"]);
//! ```
//!
//! Actions read `place JOB NODE[GPUS] ...` (with `borrowed` when above max),
//! `preempt JOB reclaim|in-share for JOB`, `hold JOB NODE:COUNT ...` and
//! `release JOB`. Time advances one second per call that changes the state, so
//! "most recently started" follows the order of `running` calls.

#![allow(dead_code)]

use std::collections::BTreeMap;

use tranche_model::*;
use tranche_state::*;

pub const QUEUE: &str = "q";
pub const ENV: &str = "env";

pub struct H {
    pub st: State,
    pub now: Millis,
    ids: BTreeMap<String, JobId>,
    names: BTreeMap<JobId, String>,
    caps: BTreeMap<String, u32>,
    last: Option<Plan>,
}

/// A share of queue `q` with one limit, in-share preemption off, no grace minimum.
pub fn share(name: &str, strategy: Strategy, max: u32) -> QuotaShare {
    QuotaShare {
        weight: None,
        loans: LoanTerms::default(),
        name: ShareName(name.into()),
        queue: QUEUE.into(),
        capacity_limits: vec![CapacityLimit {
            unit: Unit("g".into()),
            max,
        }],
        resource_sharing: ResourceSharing {
            strategy,
            borrow_limit: None,
        },
        in_share_preemption: false,
        state: ObjState::Enabled,
        members: vec![],
        default_grace_s: 10,
        max_grace_s: 3600,
        min_runtime_s: 0,
        max_user_priority: MAX_JOB_PRIORITY,
        limits: JobLimits::widest(),
    }
}

impl H {
    /// Nodes as (name, unit, GPUs); one environment over all of them, capped at their
    /// GPUs per unit unless [`H::cap`] says otherwise; one queue `q`.
    pub fn new(nodes: &[(&str, &str, u32)]) -> H {
        let mut h = H {
            st: State::new(),
            now: 0,
            ids: BTreeMap::new(),
            names: BTreeMap::new(),
            caps: BTreeMap::new(),
            last: None,
        };
        for &(_, unit, gpus) in nodes {
            *h.caps.entry(unit.to_string()).or_default() += gpus;
        }
        h.put_env();
        h.apply(Command::PutPolicy(SchedulingPolicy {
            name: "fifo".into(),
            idle_resource_assignment: IdleAssignment::Fifo,
        }));
        h.apply(Command::PutQueue(JobQueue {
            name: QUEUE.into(),
            priority: 0,
            state: ObjState::Enabled,
            environment: EnvName(ENV.into()),
            policy: "fifo".into(),
        }));
        for &(name, unit, gpus) in nodes {
            h.node(name, unit, gpus, &[]);
        }
        h
    }

    fn put_env(&mut self) {
        let limits = self
            .caps
            .iter()
            .map(|(u, m)| CapacityLimit {
                unit: Unit(u.clone()),
                max: *m,
            })
            .collect();
        self.apply(Command::PutEnvironment(ServiceEnvironment {
            name: EnvName(ENV.into()),
            selector: BTreeMap::new(),
            capacity_limits: limits,
            state: ObjState::Enabled,
        }));
    }

    /// Registers a node with labels.
    pub fn node(&mut self, name: &str, unit: &str, gpus: u32, labels: &[(&str, &str)]) {
        let inv = NodeInventory {
            name: NodeName(name.into()),
            address: "127.0.0.1".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            gpus: (0..gpus)
                .map(|g| Gpu {
                    index: GpuIndex(g),
                    uuid: format!("GPU-{name}-{g}"),
                    unit: Unit(unit.into()),
                    memory_mb: 81_559,
                    healthy: true,
                })
                .collect(),
            cpus: 64,
            memory_mb: 1 << 20,
        };
        self.apply(Command::RegisterNode(inv));
    }

    /// Sets the environment's cap for `unit`.
    pub fn cap(&mut self, unit: &str, max: u32) {
        self.caps.insert(unit.into(), max);
        self.put_env();
    }

    /// Creates or replaces a share.
    pub fn share(&mut self, s: QuotaShare) {
        self.apply(Command::PutShare(s));
    }

    /// Creates or replaces a group of queue `q` with one limit (LEND_AND_BORROW: no cap
    /// on borrowing).
    pub fn group(
        &mut self,
        name: &str,
        shares: &[&str],
        groups: &[&str],
        strategy: Strategy,
        max: u32,
    ) {
        self.apply(Command::PutGroup(ShareGroup::new(
            name,
            QUEUE,
            shares,
            groups,
            ("g", max),
            strategy,
        )));
    }

    /// Applies a command at the current time; panics if it is refused.
    pub fn apply(&mut self, cmd: Command) -> Outcome {
        match self.st.apply(&cmd, self.now) {
            Ok(o) => o,
            Err(e) => panic!("refused: {e}"),
        }
    }

    /// Applies a command at the current time and returns the error it was refused with.
    pub fn refuse(&mut self, cmd: Command) -> String {
        match self.st.apply(&cmd, self.now) {
            Ok(o) => panic!("accepted: {o:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Moves time forward by `secs`.
    pub fn tick(&mut self, secs: u64) {
        self.now += secs * SECOND;
    }

    /// A spec of `gpus` per node on `nodes` nodes in `share`, unit `g`.
    pub fn spec(&self, name: &str, share: &str, gpus: u32, nodes: u32, prio: u32) -> JobSpec {
        let mut spec = JobSpec::new(name, QUEUE, share, "u", "g", gpus, nodes);
        spec.priority = prio;
        spec
    }

    /// Submits a job and gives it a name.
    pub fn submit(&mut self, spec: JobSpec) -> JobId {
        let name = spec.name.to_string();
        let Outcome::Submitted { job, .. } = self.apply(Command::Submit(spec)) else {
            panic!("a submit answers Submitted");
        };
        self.ids.insert(name.clone(), job);
        self.names.insert(job, name);
        job
    }

    /// A RUNNABLE job of `gpus` per node on `nodes` nodes.
    pub fn waiting(&mut self, name: &str, share: &str, gpus: u32, nodes: u32, prio: u32) -> JobId {
        let spec = self.spec(name, share, gpus, nodes, prio);
        let id = self.submit(spec);
        self.tick(1);
        id
    }

    /// A RUNNING job on exactly these GPUs (`(node, indices)` per node), placed by a
    /// hand-made plan. `borrowed` is worked out from the share's usage.
    pub fn running(&mut self, name: &str, share: &str, prio: u32, on: &[(&str, &[u32])]) -> JobId {
        self.running_as(name, share, prio, None, on)
    }

    /// [`H::running`] for a job that declares `--checkpoint-every every_s`.
    pub fn running_every(
        &mut self,
        name: &str,
        share: &str,
        every_s: u64,
        on: &[(&str, &[u32])],
    ) -> JobId {
        self.running_as(name, share, 0, Some(every_s), on)
    }

    fn running_as(
        &mut self,
        name: &str,
        share: &str,
        prio: u32,
        every_s: Option<u64>,
        on: &[(&str, &[u32])],
    ) -> JobId {
        let gpus = on[0].1.len() as u32;
        let mut spec = self.spec(name, share, gpus, on.len() as u32, prio);
        spec.checkpoint.every_s = every_s;
        let id = self.submit(spec);
        let s = self.st.shares[&ShareName(share.into())].clone();
        let used = self.st.share_used(&s.name, &Unit("g".into()));
        let borrowed = used + gpus * on.len() as u32 > s.max_for(&Unit("g".into()));
        self.place(id, on, borrowed);
        self.tick(1);
        id
    }

    /// The running job reports a checkpoint now.
    pub fn checkpoint(&mut self, name: &str) {
        let id = self.ids[name];
        let attempt = self.st.jobs[&id].attempts.len() as u32;
        self.apply(Command::JobProgress {
            job: id,
            attempt,
            event: Progress::Checkpointed,
        });
    }

    /// Places job `id` on these GPUs and reports it running.
    pub fn place(&mut self, id: JobId, on: &[(&str, &[u32])], borrowed: bool) {
        let plan = Plan {
            actions: vec![Action::Place {
                job: id,
                allocation: on
                    .iter()
                    .map(|(n, g)| NodeAlloc {
                        node: NodeName(n.to_string()),
                        gpus: g.iter().map(|&i| GpuIndex(i)).collect(),
                    })
                    .collect(),
                borrowed,
                reason: "placed by the test".into(),
            }],
            reasons: vec![],
            next_wakeup: None,
        };
        self.apply_whole(plan);
    }

    fn started(&mut self, id: JobId) {
        let attempt = self.st.jobs[&id].attempts.len() as u32;
        for event in [Progress::Starting, Progress::Running] {
            self.apply(Command::JobProgress {
                job: id,
                attempt,
                event,
            });
        }
    }

    /// The job's current attempt ends with exit code 0 (every member of a gang).
    pub fn exit(&mut self, name: &str) {
        let id = self.ids[name];
        let attempt = self.st.jobs[&id].attempts.len() as u32;
        let members = self.st.jobs[&id]
            .current_attempt()
            .map_or(1, |a| a.allocation.len());
        for _ in 0..members {
            self.apply(Command::JobProgress {
                job: id,
                attempt,
                event: Progress::Exited {
                    code: Some(0),
                    reason: None,
                },
            });
        }
    }

    pub fn id(&self, name: &str) -> JobId {
        self.ids[name]
    }

    pub fn name(&self, id: JobId) -> String {
        self.names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("job{id}"))
    }

    /// Runs one pass at the current time and returns its actions as lines. The pass
    /// that looks at every job on its own must plan the same.
    pub fn plan(&mut self) -> Vec<String> {
        let plan = tranche_sched::plan(&self.st, self.now);
        let each = tranche_sched::plan_each(&self.st, self.now);
        let by_class = tranche_sched::plan_by_class(&self.st, self.now);
        assert!(
            plan.same_as(&each) && by_class.same_as(&each),
            "the pass by classes and the pass over every job differ:\n{plan:?}\n{each:?}"
        );
        let lines = plan.actions.iter().map(|a| self.line(a)).collect();
        self.last = Some(plan);
        lines
    }

    /// The pending reasons the last pass set, by job name, rendered at the current time.
    pub fn reasons(&self) -> BTreeMap<String, String> {
        self.last
            .as_ref()
            .expect("plan() first")
            .reasons
            .iter()
            .map(|(id, r)| (self.name(*id), r.render(self.now)))
            .collect()
    }

    /// Applies the last plan, which must apply whole, and reports what it placed
    /// running.
    pub fn commit(&mut self) {
        let plan = self.last.take().expect("plan() first");
        self.apply_whole(plan);
    }

    /// Applies a plan that must apply whole and reports what it placed running.
    fn apply_whole(&mut self, plan: Plan) {
        let placed: Vec<JobId> = plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Place { job, .. } => Some(*job),
                _ => None,
            })
            .collect();
        let Outcome::Plan(out) = self.apply(Command::ApplyPlan(plan)) else {
            panic!("a plan answers Plan");
        };
        assert!(
            out.rejected.is_empty(),
            "plan refused in part: {:?}",
            out.rejected
        );
        for id in placed {
            self.started(id);
        }
    }

    fn line(&self, a: &Action) -> String {
        match a {
            Action::Place {
                job,
                allocation,
                borrowed,
                ..
            } => {
                let at: Vec<String> = allocation
                    .iter()
                    .map(|n| {
                        let g: Vec<String> = n.gpus.iter().map(|g| g.0.to_string()).collect();
                        format!("{}[{}]", n.node, g.join(","))
                    })
                    .collect();
                format!(
                    "place {} {}{}",
                    self.name(*job),
                    at.join(" "),
                    if *borrowed { " borrowed" } else { "" }
                )
            }
            Action::Preempt { job, kind, .. } => {
                let (k, f) = match kind {
                    StopKind::Reclaim { for_job } => ("reclaim", Some(*for_job)),
                    StopKind::InShare { for_job } => ("in-share", Some(*for_job)),
                    _ => ("other", None),
                };
                match f {
                    Some(f) => format!("preempt {} {k} for {}", self.name(*job), self.name(f)),
                    None => format!("preempt {} {k}", self.name(*job)),
                }
            }
            Action::Hold { job, hold: None } => format!("release {}", self.name(*job)),
            Action::Hold { job, hold: Some(h) } => {
                let at: Vec<String> = h.nodes.iter().map(|(n, c)| format!("{n}:{c}")).collect();
                format!("hold {} {}", self.name(*job), at.join(" "))
            }
        }
    }
}
