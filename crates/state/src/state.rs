//! The state itself, its derived indexes, read helpers and snapshots.

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use tranche_model::*;

use crate::waiting::Waiters;

/// A user's submits to a share in one minute of entry time (minutes counted from the
/// epoch, so every controller cuts them alike).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitWindow {
    pub minute: u64,
    pub submits: u32,
}

/// Order of RUNNABLE jobs inside a share: priority descending, then submit time
/// ascending (a requeued job keeps its original submit time), then id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunKey {
    pub priority: Reverse<u32>,
    pub submitted_at: Millis,
    pub id: JobId,
}

impl RunKey {
    pub fn of(job: &Job) -> RunKey {
        RunKey {
            priority: Reverse(job.spec.priority),
            submitted_at: job.submitted_at,
            id: job.id,
        }
    }
}

/// What the scheduler needs of a RUNNABLE job, kept beside its [`RunKey`] so that a
/// pass over 100,000 waiting jobs reads one ordered map and never looks jobs up.
///
/// In declared order (`repr(C)`): what a pass reads of every job comes first and
/// together, so that reading an entry costs one cache miss rather than one per field.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Waiting {
    /// The unit's number in [`State::unit_names`]: a pass maps it to its own units
    /// without reading (or hashing) the name.
    pub unit_id: u32,
    pub gpus_per_node: u32,
    pub nodes: u32,
    pub has_hold: bool,
    /// For a task of an array with a `%` limit: the array and the limit.
    pub array_limit: Option<(JobId, u32)>,
    pub reason: Option<PendingReason>,
    pub unit: Unit,
}

/// Compares what the entry says of the job; the unit's number is left out, as it is
/// local to one copy of the state (see [`UnitIds`]).
impl PartialEq for Waiting {
    fn eq(&self, o: &Waiting) -> bool {
        (
            &self.unit,
            self.gpus_per_node,
            self.nodes,
            self.has_hold,
            &self.reason,
            self.array_limit,
        ) == (
            &o.unit,
            o.gpus_per_node,
            o.nodes,
            o.has_hold,
            &o.reason,
            o.array_limit,
        )
    }
}

impl Eq for Waiting {}

impl Waiting {
    pub(crate) fn of(job: &Job, units: &mut UnitIds) -> Waiting {
        Waiting {
            unit: job.spec.request.unit.clone(),
            unit_id: units.id(&job.spec.request.unit),
            gpus_per_node: job.spec.request.gpus_per_node,
            nodes: job.spec.request.nodes,
            has_hold: job.hold.is_some(),
            reason: job.pending_reason.clone(),
            array_limit: job
                .array
                .as_ref()
                .and_then(|a| a.max_running.map(|m| (a.array, m))),
        }
    }
}

/// One shared copy of each name a pending reason shows (shares, queues, environments,
/// units, strategies). The scheduler builds its reasons from these copies, and the
/// state stores those reasons, so a pass compares a stored reason with its new one by
/// pointer rather than by text. Local to one copy of the state, like [`Numbering`]; it
/// grows by the objects ever put in this copy, and a name deleted stays.
#[derive(Debug, Clone)]
pub(crate) struct SharedNames(BTreeSet<SharedStr>);

impl Default for SharedNames {
    /// The strategies' names, which every share shows.
    fn default() -> Self {
        SharedNames(
            ["RESERVE", "LEND", "LEND_AND_BORROW"]
                .into_iter()
                .map(SharedStr::from)
                .collect(),
        )
    }
}

impl SharedNames {
    pub(crate) fn add(&mut self, name: &str) {
        if !self.0.contains(name) {
            self.0.insert(name.into());
        }
    }

    /// Every name an object shows in reasons.
    pub(crate) fn add_share(&mut self, s: &QuotaShare) {
        self.add(s.name.as_str());
        for l in &s.capacity_limits {
            self.add(l.unit.as_str());
        }
    }

    pub(crate) fn add_environment(&mut self, e: &ServiceEnvironment) {
        self.add(e.name.as_str());
        for l in &e.capacity_limits {
            self.add(l.unit.as_str());
        }
    }

    pub(crate) fn add_node(&mut self, inv: &NodeInventory) {
        for g in &inv.gpus {
            self.add(g.unit.as_str());
        }
    }
}

/// Names numbered in the order this copy of the state first met them: units of
/// waiting and active jobs, and nodes. The numbering is local: it is neither
/// replicated nor compared, and a restored state numbers afresh. It only grows, by
/// the distinct units met since the last restore, and by each node registered.
#[derive(Debug, Clone)]
pub(crate) struct Numbering<K> {
    names: Vec<K>,
    ids: BTreeMap<K, u32>,
}

impl<K> Default for Numbering<K> {
    fn default() -> Self {
        Numbering {
            names: vec![],
            ids: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone> Numbering<K> {
    pub(crate) fn id(&mut self, k: &K) -> u32 {
        if let Some(&i) = self.ids.get(k) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(k.clone());
        self.ids.insert(k.clone(), i);
        i
    }

    pub(crate) fn name(&self, i: u32) -> Option<&K> {
        self.names.get(i as usize)
    }
}

pub(crate) type UnitIds = Numbering<Unit>;

/// What victim selection needs of an active job, kept in the index beside the share's
/// other active jobs, so that a pass builds its victim lists from one map per share
/// without looking jobs up or reading names. (`stopping` repeats [`Index::stopping`]
/// for the same reason.) Records of two copies of a state are compared by name.
#[derive(Debug, Clone)]
pub struct Running {
    pub priority: u32,
    /// The unit's number in [`State::unit_names`].
    pub unit_id: u32,
    /// GPUs in all.
    pub gpus: u32,
    /// When the current attempt started running (or was scheduled, until it runs).
    pub started_at: Millis,
    /// Whether the job is being stopped.
    pub stopping: bool,
    /// Whether its attempt was placed above its share's max (borrowed).
    pub borrowed: bool,
    /// The job's own grace period, if it set one (else its share's default).
    pub grace_s: Option<u64>,
    /// The attempt's latest reported checkpoint, and the job's declared interval: where
    /// its work would resume from ([`tranche_model::resume_point`]).
    pub checkpointed_at: Option<Millis>,
    pub checkpoint_every_s: Option<u64>,
    /// The first node of its allocation (its number, see [`State::node_numbers`]) and
    /// its GPUs there; `more` holds a gang's further nodes.
    pub first: Option<(u32, u32)>,
    pub more: Vec<(u32, u32)>,
}

impl Running {
    pub(crate) fn of(job: &Job, ix: &mut Index) -> Running {
        let attempt = job.attempts.last().filter(|a| a.end.is_none());
        let mut nodes = attempt
            .into_iter()
            .flat_map(|a| &a.allocation)
            .map(|a| (ix.nodes.id(&a.node), a.gpus.len() as u32));
        let first = nodes.next();
        let more = nodes.collect();
        Running {
            priority: job.spec.priority,
            unit_id: ix.units.id(&job.spec.request.unit),
            gpus: job.spec.request.total_gpus(),
            started_at: attempt.map_or(0, |a| a.started_at.unwrap_or(a.scheduled_at)),
            stopping: job.stop.is_some(),
            borrowed: attempt.is_some_and(|a| a.borrowed),
            grace_s: job.spec.checkpoint.grace_s,
            checkpointed_at: attempt.and_then(|a| a.checkpointed_at),
            checkpoint_every_s: job.spec.checkpoint.every_s,
            first,
            more,
        }
    }

    /// The record with names for numbers, to compare records of two copies of a state.
    fn named<'a>(&self, ix: &'a Index) -> impl PartialEq + std::fmt::Debug + 'a {
        let node = |&(n, g): &(u32, u32)| (ix.nodes.name(n).cloned(), g);
        (
            self.priority,
            ix.units.name(self.unit_id).cloned(),
            self.gpus,
            self.started_at,
            self.stopping,
            self.borrowed,
            self.grace_s,
            self.checkpointed_at,
            self.checkpoint_every_s,
            self.first
                .iter()
                .chain(&self.more)
                .map(node)
                .collect::<Vec<_>>(),
        )
    }
}

/// Indexes derived from the replicated fields; rebuilt on restore, never serialized.
/// `State::check_index` compares two of them part by part.
#[derive(Debug, Clone, Default)]
pub(crate) struct Index {
    /// RUNNABLE jobs per share in scheduling order.
    pub runnable: BTreeMap<ShareName, Waiters>,
    /// Jobs holding GPUs (SCHEDULED, STARTING, RUNNING), overall and per share.
    pub active: BTreeSet<JobId>,
    pub active_by_share: BTreeMap<ShareName, BTreeMap<JobId, Running>>,
    /// Active jobs that are being stopped.
    pub stopping: BTreeSet<JobId>,
    /// RUNNABLE jobs that hold GPUs for themselves while their victims exit.
    pub holding: BTreeSet<JobId>,
    /// GPUs held by active jobs, per (share, unit) and per (queue, unit).
    pub share_used: BTreeMap<(ShareName, Unit), u32>,
    pub queue_used: BTreeMap<(QueueName, Unit), u32>,
    /// Job → the PENDING jobs with a dependency on it.
    pub dependents: BTreeMap<JobId, BTreeSet<JobId>>,
    /// GPUs held per (user, unit, placed on borrowed GPUs), for the ledger.
    pub user_used: BTreeMap<(UserName, Unit, bool), u32>,
    /// GPUs of registered nodes that are not DOWN, per unit.
    pub capacity: BTreeMap<Unit, u32>,
    /// Numbers for waiting and active jobs' units, and for nodes.
    pub units: UnitIds,
    /// The names reasons show, one copy each.
    pub names: SharedNames,
    pub nodes: Numbering<NodeName>,
    /// Per unit, the registered nodes with GPUs of it (DOWN or not), most GPUs first:
    /// a submit finds the largest node of its unit in its environment without reading
    /// every node's inventory.
    pub node_units: BTreeMap<Unit, BTreeSet<(Reverse<u32>, NodeName)>>,
    /// Jobs not yet ended per (share, user), for the share's job limits.
    pub owned: BTreeMap<(ShareName, UserName), Owned>,
    /// Jobs not yet ended per share.
    pub share_jobs: BTreeMap<ShareName, u32>,
    /// Tasks not yet ended per array.
    pub array_open: BTreeMap<JobId, u32>,
    /// Ended retention entries (a job, or an array whose tasks have all ended, by its
    /// id) by the time the entry ended: see [`crate::retention`].
    pub ended: BTreeSet<(Millis, JobId)>,
    /// How many jobs have ended.
    pub ended_jobs: u64,
    /// What the entries in `ended` weigh (see [`crate::retention::Retention`]).
    pub ended_bytes: u64,
}

/// A user's jobs in a share that have not ended: waiting (SUBMITTED, PENDING,
/// RUNNABLE), all, and arrays with a task not ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Owned {
    pub waiting: u32,
    pub jobs: u32,
    pub arrays: u32,
}

/// Who holds an active job's GPUs, for the ledger: its user, unit, and whether its
/// attempt was placed on borrowed GPUs.
pub(crate) fn holder_of(job: &Job) -> (UserName, Unit, bool) {
    (
        job.spec.user.clone(),
        job.spec.request.unit.clone(),
        job.attempts.last().is_some_and(|a| a.borrowed),
    )
}

/// A node's GPUs per unit, DOWN or not.
pub(crate) fn node_units(n: &Node) -> BTreeMap<Unit, u32> {
    let mut out = BTreeMap::new();
    for g in &n.inventory.gpus {
        *out.entry(g.unit.clone()).or_default() += 1;
    }
    out
}

/// What a node adds to the capacity: its GPUs per unit, unless it is DOWN.
pub(crate) fn node_capacity(n: &Node) -> BTreeMap<Unit, u32> {
    if n.down.is_none() {
        node_units(n)
    } else {
        BTreeMap::new()
    }
}

impl Index {
    /// Adds (or, with `add` false, takes away) what `job` in `status` counts for the
    /// job limits: nothing once ended.
    pub(crate) fn count_job(&mut self, job: &Job, status: JobStatus, add: bool) {
        if status.is_terminal() {
            return;
        }
        fn step(v: &mut u32, add: bool) {
            if add {
                *v += 1;
            } else {
                *v = v.saturating_sub(1);
            }
        }
        let spec = &job.spec;
        let key = (spec.share.clone(), spec.user.clone());
        let o = self.owned.entry(key.clone()).or_default();
        step(&mut o.jobs, add);
        if !status.is_active() {
            step(&mut o.waiting, add);
        }
        if let Some(a) = &job.array {
            let open = self.array_open.entry(a.array).or_default();
            let was = *open;
            step(open, add);
            let now = *open;
            if now == 0 {
                self.array_open.remove(&a.array);
            }
            if (was == 0) != (now == 0) {
                step(&mut o.arrays, add);
            }
        }
        if *o == Owned::default() {
            self.owned.remove(&key);
        }
        let n = self.share_jobs.entry(spec.share.clone()).or_default();
        step(n, add);
        if *n == 0 {
            self.share_jobs.remove(&spec.share);
        }
    }

    /// Moves `job`'s counts from status `from` to `to`, when that changes them.
    pub(crate) fn recount_job(&mut self, job: &Job, from: JobStatus, to: JobStatus) {
        let class = |s: JobStatus| (s.is_terminal(), s.is_active());
        if class(from) != class(to) {
            self.count_job(job, from, false);
            self.count_job(job, to, true);
        }
    }

    /// Entries are removed when they empty, so an index kept up step by step equals
    /// one rebuilt from the data (`State::check_index` compares them as they are).
    pub(crate) fn remove_runnable(&mut self, share: &ShareName, key: &RunKey) {
        if let Some(set) = self.runnable.get_mut(share) {
            set.remove(key);
            if set.is_empty() {
                self.runnable.remove(share);
            }
        }
    }

    /// Counts `job` as active: its GPUs, and its record among its share's active jobs
    /// (from its current attempt, which must be in place).
    pub(crate) fn activate(&mut self, job: &Job) {
        let (spec, req) = (&job.spec, &job.spec.request);
        let gpus = req.total_gpus();
        *self.user_used.entry(holder_of(job)).or_default() += gpus;
        self.active.insert(job.id);
        let rec = Running::of(job, self);
        self.active_by_share
            .entry(spec.share.clone())
            .or_default()
            .insert(job.id, rec);
        *self
            .share_used
            .entry((spec.share.clone(), req.unit.clone()))
            .or_default() += gpus;
        *self
            .queue_used
            .entry((spec.queue.clone(), req.unit.clone()))
            .or_default() += gpus;
    }

    /// The record of active job `id` of `share`, to change it in step with the job.
    pub(crate) fn running_mut(&mut self, share: &ShareName, id: JobId) -> Option<&mut Running> {
        self.active_by_share.get_mut(share)?.get_mut(&id)
    }

    /// Moves node `name` in [`Index::node_units`] from its GPUs per unit `before` to
    /// those `after` (see [`node_units`]).
    pub(crate) fn recount_node_units(
        &mut self,
        name: &NodeName,
        before: BTreeMap<Unit, u32>,
        after: BTreeMap<Unit, u32>,
    ) {
        for (u, g) in before {
            if let Some(set) = self.node_units.get_mut(&u) {
                set.remove(&(Reverse(g), name.clone()));
                if set.is_empty() {
                    self.node_units.remove(&u);
                }
            }
        }
        for (u, g) in after {
            self.node_units
                .entry(u)
                .or_default()
                .insert((Reverse(g), name.clone()));
        }
    }

    /// A node's part of the capacity changed from `before` to `after`.
    pub(crate) fn recount_capacity(
        &mut self,
        before: BTreeMap<Unit, u32>,
        after: BTreeMap<Unit, u32>,
    ) {
        for (u, g) in before {
            if let Some(c) = self.capacity.get_mut(&u) {
                *c -= g.min(*c);
                if *c == 0 {
                    self.capacity.remove(&u);
                }
            }
        }
        for (u, g) in after {
            *self.capacity.entry(u).or_default() += g;
        }
    }

    pub(crate) fn deactivate(
        &mut self,
        id: JobId,
        share: &ShareName,
        queue: &QueueName,
        unit: &Unit,
        gpus: u32,
        holder: (UserName, Unit, bool),
    ) {
        self.active.remove(&id);
        self.stopping.remove(&id);
        if let Some(set) = self.active_by_share.get_mut(share) {
            set.remove(&id);
            if set.is_empty() {
                self.active_by_share.remove(share);
            }
        }
        fn sub<K: Ord + Clone>(m: &mut BTreeMap<K, u32>, k: K, n: u32) {
            if let Some(v) = m.get_mut(&k) {
                *v -= n;
                if *v == 0 {
                    m.remove(&k);
                }
            }
        }
        sub(&mut self.share_used, (share.clone(), unit.clone()), gpus);
        sub(&mut self.user_used, holder, gpus);
        sub(&mut self.queue_used, (queue.clone(), unit.clone()), gpus);
    }
}

/// All quota-share, job and node state of one cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct State {
    /// Number of commands that changed the state.
    pub version: u64,
    pub environments: BTreeMap<EnvName, ServiceEnvironment>,
    pub policies: BTreeMap<PolicyName, SchedulingPolicy>,
    pub queues: BTreeMap<QueueName, JobQueue>,
    pub shares: BTreeMap<ShareName, QuotaShare>,
    pub nodes: BTreeMap<NodeName, Node>,
    /// Stored with each distinct spec once (see [`stored_jobs`]).
    #[serde(with = "stored_jobs")]
    pub jobs: BTreeMap<JobId, Job>,
    /// (user, client token) → the job the first submit created.
    pub tokens: BTreeMap<(UserName, String), JobId>,
    pub next_job_id: u64,
    /// Client sessions by (identity, client id): the answers to requests a client may
    /// still retry.
    pub sessions: BTreeMap<(String, u64), crate::session::Session>,
    /// When idle sessions were last looked for (entry time).
    pub sessions_swept_at: Millis,
    /// GPU time per share, user and unit, by hour (see [`crate::ledger`]).
    pub ledger: crate::ledger::Ledger,
    /// Access keys by id (no secrets: see [`tranche_model::AccessKey`]): the
    /// credentials of the AWS Batch-compatible endpoint, each acting as one identity.
    pub keys: BTreeMap<String, AccessKey>,
    /// Each object's tags by its resource name (`quota-share/QS1`, `job-queue/q`,
    /// `service-environment/e`, `scheduling-policy/p`). Stored right after `keys`, as
    /// the fields of the former `aws` record were: the bytes are the same.
    pub tags: BTreeMap<String, BTreeMap<String, String>>,
    /// Submits per (share, user) in the current minute of entry time, for
    /// [`JobLimits::submits_per_user_per_minute`].
    pub submit_rate: BTreeMap<(ShareName, UserName), SubmitWindow>,
    /// Groups of quota shares (nested quotas), by name.
    pub groups: BTreeMap<ShareName, ShareGroup>,
    #[serde(skip)]
    pub(crate) index: Index,
}

impl PartialEq for State {
    /// Compares the replicated fields; indexes are derived from them.
    fn eq(&self, o: &Self) -> bool {
        self.version == o.version
            && self.environments == o.environments
            && self.policies == o.policies
            && self.queues == o.queues
            && self.shares == o.shares
            && self.nodes == o.nodes
            && self.jobs == o.jobs
            && self.tokens == o.tokens
            && self.next_job_id == o.next_job_id
            && self.sessions == o.sessions
            && self.sessions_swept_at == o.sessions_swept_at
            && self.ledger == o.ledger
            && self.keys == o.keys
            && self.tags == o.tags
            && self.submit_rate == o.submit_rate
            && self.groups == o.groups
    }
}
impl Eq for State {}

/// A snapshot that could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("snapshot cannot be decoded: {0}")]
pub struct SnapshotError(String);

impl State {
    pub fn new() -> State {
        State {
            next_job_id: 1,
            ..Default::default()
        }
    }

    /// Encodes the replicated fields (bincode, standard config).
    pub fn snapshot(&self) -> Vec<u8> {
        crate::codec::encode(self)
    }

    /// Decodes a snapshot and rebuilds the indexes.
    pub fn restore(bytes: &[u8]) -> Result<State, SnapshotError> {
        let mut s: State = crate::codec::decode(bytes).map_err(SnapshotError)?;
        s.rebuild_index();
        Ok(s)
    }

    /// Makes the tasks of each array share one spec where their specs are equal (a
    /// state read from a format that stored a spec per job).
    pub(crate) fn share_array_specs(&mut self) {
        let mut last: Option<(JobId, std::sync::Arc<JobSpec>)> = None;
        for j in self.jobs.values_mut() {
            let Some(a) = &j.array else { continue };
            match &last {
                Some((array, spec)) if *array == a.array && **spec == *j.spec => {
                    j.spec = spec.clone();
                }
                _ => last = Some((a.array, j.spec.clone())),
            }
        }
    }

    pub(crate) fn rebuild_index(&mut self) {
        let mut ix = Index::default();
        for sh in self.shares.values() {
            ix.names.add_share(sh);
        }
        for q in self.queues.values() {
            ix.names.add(q.name.as_str());
        }
        for g in self.groups.values() {
            ix.names.add(g.name.as_str());
        }
        for e in self.environments.values() {
            ix.names.add_environment(e);
        }
        for n in self.nodes.values() {
            ix.names.add_node(&n.inventory);
            for (u, g) in node_capacity(n) {
                *ix.capacity.entry(u).or_default() += g;
            }
            ix.recount_node_units(n.name(), BTreeMap::new(), node_units(n));
            ix.nodes.id(n.name());
        }
        for job in self.jobs.values() {
            ix.count_job(job, job.status, true);
            for d in &job.deps {
                ix.dependents.entry(d.job).or_default().insert(job.id);
            }
            if job.status == JobStatus::Runnable {
                ix.runnable
                    .entry(job.spec.share.clone())
                    .or_default()
                    .insert(RunKey::of(job), Waiting::of(job, &mut ix.units));
                if job.hold.is_some() {
                    ix.holding.insert(job.id);
                }
            }
            if job.status.is_active() {
                ix.activate(job);
                if job.stop.is_some() {
                    ix.stopping.insert(job.id);
                }
            }
        }
        self.index = ix;
        self.rebuild_ended();
    }

    /// RUNNABLE jobs of a share in scheduling order.
    pub fn runnable_in(&self, share: &ShareName) -> impl Iterator<Item = (RunKey, &Waiting)> + '_ {
        self.index
            .runnable
            .get(share)
            .into_iter()
            .flat_map(|w| w.iter())
    }

    /// RUNNABLE jobs of a share by class, highest priority first.
    pub fn waiting_in(&self, share: &ShareName) -> Option<&Waiters> {
        self.index.runnable.get(share)
    }

    /// Unit names by the number each [`Waiting`] entry's `unit_id` gives.
    /// The shared copy of `name` that stored reasons use, or a new one for a name no
    /// object shows (see [`SharedNames`]).
    pub fn shared_name(&self, name: &str) -> SharedStr {
        self.index
            .names
            .0
            .get(name)
            .cloned()
            .unwrap_or_else(|| name.into())
    }

    pub fn unit_names(&self) -> &[Unit] {
        &self.index.units.names
    }

    /// Active jobs of a share.
    pub fn active_in(&self, share: &ShareName) -> impl Iterator<Item = &Job> + '_ {
        self.running_in(share).map(|(id, _)| &self.jobs[id])
    }

    /// Active jobs of a share as victim selection reads them, by id.
    pub fn running_in(&self, share: &ShareName) -> impl Iterator<Item = (&JobId, &Running)> + '_ {
        self.index.active_by_share.get(share).into_iter().flatten()
    }

    /// How many jobs of a share are active.
    pub fn running_count_in(&self, share: &ShareName) -> usize {
        self.index.active_by_share.get(share).map_or(0, |m| m.len())
    }

    /// `user`'s jobs in `share` that have not ended.
    pub fn owned_in(&self, share: &ShareName, user: &UserName) -> Owned {
        self.index
            .owned
            .get(&(share.clone(), user.clone()))
            .copied()
            .unwrap_or_default()
    }

    /// How many jobs of `share` have not ended.
    pub fn share_job_count(&self, share: &ShareName) -> u32 {
        self.index.share_jobs.get(share).copied().unwrap_or(0)
    }

    /// Each node's number (as [`Running`] records give it), in the order of
    /// [`State::nodes`]; `u32::MAX` for a node without one (never, while every
    /// registered node is numbered).
    pub fn node_numbers(&self) -> Vec<u32> {
        let ids = &self.index.nodes.ids;
        // Every registered node is numbered and nodes are never removed: the two maps
        // have the same names, in the same order.
        if ids.len() == self.nodes.len() {
            return ids.values().copied().collect();
        }
        self.nodes
            .keys()
            .map(|n| ids.get(n).copied().unwrap_or(u32::MAX))
            .collect()
    }

    /// RUNNABLE jobs holding GPUs for themselves.
    pub fn holding_jobs(&self) -> impl Iterator<Item = &Job> + '_ {
        self.index.holding.iter().map(|id| &self.jobs[id])
    }

    /// Active jobs that are being stopped (preempted, cancelled, drained).
    pub fn stopping_jobs(&self) -> impl Iterator<Item = &Job> + '_ {
        self.index.stopping.iter().map(|id| &self.jobs[id])
    }

    /// How many jobs of a share are RUNNABLE.
    pub fn runnable_count_in(&self, share: &ShareName) -> usize {
        self.index.runnable.get(share).map_or(0, |m| m.len())
    }

    pub fn runnable_count(&self) -> usize {
        self.index.runnable.values().map(|s| s.len()).sum()
    }

    /// Ids of jobs that hold GPUs.
    /// How many jobs hold GPUs (SCHEDULED, STARTING, RUNNING).
    pub fn active_count(&self) -> usize {
        self.index.active.len()
    }

    pub fn active_jobs(&self) -> impl Iterator<Item = &Job> + '_ {
        self.index.active.iter().map(|id| &self.jobs[id])
    }

    /// GPUs of `unit` held by the share's active jobs.
    pub fn share_used(&self, share: &ShareName, unit: &Unit) -> u32 {
        self.index
            .share_used
            .get(&(share.clone(), unit.clone()))
            .copied()
            .unwrap_or(0)
    }

    /// GPUs of `unit` held by active jobs of queues placed on environment `env`.
    pub fn env_used(&self, env: &EnvName, unit: &Unit) -> u32 {
        self.queues
            .values()
            .filter(|q| &q.environment == env)
            .map(|q| {
                self.index
                    .queue_used
                    .get(&(q.name.clone(), unit.clone()))
                    .copied()
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Shares of a queue, by name.
    /// The group that lists the share or group `member`, if any.
    pub fn group_of(&self, member: &ShareName) -> Option<&ShareName> {
        self.groups
            .values()
            .find(|g| g.shares.contains(member) || g.groups.contains(member))
            .map(|g| &g.name)
    }

    /// The groups above share (or group) `member`, nearest first.
    pub fn groups_above(&self, member: &ShareName) -> Vec<&ShareGroup> {
        let mut out: Vec<&ShareGroup> = vec![];
        let mut at = member;
        while let Some(g) = self.group_of(at).and_then(|n| self.groups.get(n)) {
            if out.len() > MAX_GROUP_DEPTH {
                break;
            }
            out.push(g);
            at = &g.name;
        }
        out
    }

    /// GPUs of `unit` the shares below group `g`, at any depth, use.
    pub fn group_used(&self, g: &ShareGroup, unit: &Unit) -> u32 {
        let mut used: u32 = g.shares.iter().map(|s| self.share_used(s, unit)).sum();
        for m in &g.groups {
            if let Some(c) = self.groups.get(m).filter(|c| c.name != g.name) {
                used += self.group_used(c, unit);
            }
        }
        used
    }

    pub fn shares_of<'a>(
        &'a self,
        queue: &'a QueueName,
    ) -> impl Iterator<Item = &'a QuotaShare> + 'a {
        self.shares.values().filter(move |s| &s.queue == queue)
    }

    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Checks that the derived indexes agree with the replicated fields (for tests).
    pub fn check_index(&self) -> Result<(), String> {
        let mut fresh = self.clone();
        fresh.rebuild_index();
        let (a, b) = (&self.index, &fresh.index);
        let same_waiting = a.runnable.len() == b.runnable.len()
            && a.runnable
                .iter()
                .zip(&b.runnable)
                .all(|((sa, wa), (sb, wb))| {
                    sa == sb && wa.len() == wb.len() && wa.iter().eq(wb.iter())
                });
        if !same_waiting {
            return Err("runnable index differs".into());
        }
        for w in a.runnable.values() {
            w.check()?;
        }
        if (&a.active, &a.stopping, &a.holding) != (&b.active, &b.stopping, &b.holding) {
            return Err("active, stopping or holding index differs".into());
        }
        fn records(ix: &Index) -> Vec<(&ShareName, JobId, &Running)> {
            ix.active_by_share
                .iter()
                .flat_map(|(s, m)| m.iter().map(move |(id, r)| (s, *id, r)))
                .collect()
        }
        let (ra, rb) = (records(a), records(b));
        if ra.len() != rb.len()
            || ra
                .iter()
                .zip(&rb)
                .any(|(x, y)| (x.0, x.1) != (y.0, y.1) || x.2.named(a) != y.2.named(b))
        {
            return Err("active jobs' records differ".into());
        }
        if a.dependents != b.dependents {
            return Err("dependents index differs".into());
        }
        if a.user_used != b.user_used || a.capacity != b.capacity {
            return Err(format!(
                "ledger indexes differ: {:?} vs {:?}, {:?} vs {:?}",
                a.user_used, b.user_used, a.capacity, b.capacity
            ));
        }
        if a.node_units != b.node_units {
            return Err("node units index differs".into());
        }
        if (&a.owned, &a.share_jobs, &a.array_open) != (&b.owned, &b.share_jobs, &b.array_open) {
            return Err(format!(
                "job counts differ: {:?} {:?} vs {:?} {:?}",
                a.owned, a.share_jobs, b.owned, b.share_jobs
            ));
        }
        if (&a.ended, a.ended_jobs, a.ended_bytes) != (&b.ended, b.ended_jobs, b.ended_bytes) {
            return Err(format!(
                "ended index differs: {} entries, {} jobs, {} bytes vs {} entries, {} jobs, {} bytes",
                a.ended.len(),
                a.ended_jobs,
                a.ended_bytes,
                b.ended.len(),
                b.ended_jobs,
                b.ended_bytes
            ));
        }
        if a.share_used != b.share_used || a.queue_used != b.queue_used {
            return Err(format!(
                "usage index differs: {:?} vs {:?}",
                a.share_used, b.share_used
            ));
        }
        // Every allocated GPU belongs to an active job that lists it, and vice versa.
        let mut seen = 0usize;
        for node in self.nodes.values() {
            for (g, a) in node.inventory.gpus.iter().zip(&node.allocated) {
                if let Some(id) = a {
                    let job = self
                        .jobs
                        .get(id)
                        .ok_or(format!("gpu held by unknown job {id}"))?;
                    if !job.status.is_active() {
                        return Err(format!(
                            "gpu {}:{} held by {} job {id}",
                            node.name(),
                            g.index,
                            job.status
                        ));
                    }
                    if !job
                        .allocation()
                        .iter()
                        .any(|na| &na.node == node.name() && na.gpus.contains(&g.index))
                    {
                        return Err(format!(
                            "gpu {}:{} held by job {id} that does not list it",
                            node.name(),
                            g.index
                        ));
                    }
                    seen += 1;
                }
            }
        }
        let listed: usize = self
            .active_jobs()
            .map(|j| j.allocation().iter().map(|a| a.gpus.len()).sum::<usize>())
            .sum();
        if listed != seen {
            return Err(format!(
                "active jobs list {listed} GPUs, nodes show {seen} allocated"
            ));
        }
        Ok(())
    }
}

/// How a state image holds the jobs (format 6): each distinct spec once, then each job
/// with the number of its spec. The tasks of an array share one spec in memory
/// ([`Job::spec`] is an `Arc`); an image that wrote the spec per job would multiply
/// it by the array's size on every snapshot sent, install and restart. Reading an
/// image shares each spec again between the jobs that name it.
pub mod stored_jobs {
    use super::*;
    use serde::{Deserializer, Serializer};
    use std::collections::HashMap;
    use std::sync::Arc;

    #[derive(Serialize)]
    struct JobsOut<'a> {
        specs: Vec<&'a JobSpec>,
        jobs: Vec<JobOut<'a>>,
    }

    /// A job as stored: [`Job`]'s fields in order, its spec by number.
    #[derive(Serialize)]
    struct JobOut<'a> {
        id: JobId,
        spec: u32,
        status: JobStatus,
        submitted_at: Millis,
        attempts: &'a Vec<Attempt>,
        transitions: &'a Vec<Transition>,
        stop: &'a Option<Stop>,
        hold: &'a Option<Hold>,
        pending_reason: &'a Option<PendingReason>,
        preemptions: u32,
        failures: u32,
        array: &'a Option<ArrayTask>,
        deps: &'a Vec<Dep>,
        held: bool,
    }

    #[derive(Deserialize)]
    struct JobsIn {
        specs: Vec<JobSpec>,
        jobs: Vec<JobIn>,
    }

    #[derive(Deserialize)]
    struct JobIn {
        id: JobId,
        spec: u32,
        status: JobStatus,
        submitted_at: Millis,
        attempts: Vec<Attempt>,
        transitions: Vec<Transition>,
        stop: Option<Stop>,
        hold: Option<Hold>,
        pending_reason: Option<PendingReason>,
        preemptions: u32,
        failures: u32,
        array: Option<ArrayTask>,
        deps: Vec<Dep>,
        held: bool,
    }

    pub fn serialize<S: Serializer>(jobs: &BTreeMap<JobId, Job>, s: S) -> Result<S::Ok, S::Error> {
        let mut numbers: HashMap<*const JobSpec, u32> = HashMap::new();
        let mut specs = Vec::new();
        let mut out = Vec::with_capacity(jobs.len());
        for j in jobs.values() {
            let n = *numbers.entry(Arc::as_ptr(&j.spec)).or_insert_with(|| {
                specs.push(&*j.spec);
                specs.len() as u32 - 1
            });
            out.push(JobOut {
                id: j.id,
                spec: n,
                status: j.status,
                submitted_at: j.submitted_at,
                attempts: &j.attempts,
                transitions: &j.transitions,
                stop: &j.stop,
                hold: &j.hold,
                pending_reason: &j.pending_reason,
                preemptions: j.preemptions,
                failures: j.failures,
                array: &j.array,
                deps: &j.deps,
                held: j.held,
            });
        }
        JobsOut { specs, jobs: out }.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<JobId, Job>, D::Error> {
        let JobsIn { specs, jobs } = JobsIn::deserialize(d)?;
        let specs: Vec<Arc<JobSpec>> = specs.into_iter().map(Arc::new).collect();
        jobs.into_iter()
            .map(|j| {
                let spec = specs.get(j.spec as usize).cloned().ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "job {} names spec {} of {}",
                        j.id,
                        j.spec,
                        specs.len()
                    ))
                })?;
                Ok((
                    j.id,
                    Job {
                        id: j.id,
                        spec,
                        status: j.status,
                        submitted_at: j.submitted_at,
                        attempts: j.attempts,
                        transitions: j.transitions,
                        stop: j.stop,
                        hold: j.hold,
                        pending_reason: j.pending_reason,
                        preemptions: j.preemptions,
                        failures: j.failures,
                        array: j.array,
                        deps: j.deps,
                        held: j.held,
                    },
                ))
            })
            .collect()
    }
}
