//! One scheduling pass. See the crate docs for the order of work; each rule of
//! `docs/design.md` §3 is marked where it lives.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use tranche_model::*;
use tranche_state::*;

type Ux = usize;

/// Most victims in-share preemption examines for one job in one pass.
pub const INSHARE_LOOK_LIMIT: usize = 512;
type Nx = u32;

/// Computes the plan for `st` at time `now`.
pub fn plan(st: &State, now: Millis) -> Plan {
    let mut pass = Pass::new(st, now);
    let mut queues: Vec<&JobQueue> = st.queues.values().collect();
    queues.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    for q in queues {
        pass.queue(q);
    }
    pass.plan.next_wakeup = pass.wakeup;
    let mut plan = pass.plan;
    drop_noop_holds(&mut plan, st);
    plan
}

/// A holder whose hold the pass released and then took again, unchanged, has nothing
/// to apply: its hold actions are dropped, so that a settled cluster gets an empty plan
/// (and a plan that changes nothing is never proposed again and again).
fn drop_noop_holds(plan: &mut Plan, st: &State) {
    use std::collections::BTreeMap;
    let mut last: BTreeMap<JobId, Option<&tranche_model::Hold>> = BTreeMap::new();
    let mut other: BTreeSet<JobId> = BTreeSet::new();
    for a in &plan.actions {
        match a {
            Action::Hold { job, hold } => {
                last.insert(*job, hold.as_ref());
            }
            Action::Place { job, .. } => {
                other.insert(*job);
            }
            Action::Preempt { .. } => {}
        }
    }
    let noop: BTreeSet<JobId> = last
        .into_iter()
        .filter(|(job, hold)| {
            !other.contains(job) && st.job(*job).is_some_and(|j| j.hold.as_ref() == *hold)
        })
        .map(|(job, _)| job)
        .collect();
    if !noop.is_empty() {
        plan.actions
            .retain(|a| !matches!(a, Action::Hold { job, .. } if noop.contains(job)));
    }
}

/// GPUs of one unit on one node, as the pass sees them.
struct NodeUnit {
    unit: Ux,
    /// Free GPUs, lowest index first; placements take from the front.
    free: Vec<GpuIndex>,
    /// GPUs of this node held for preemptors (a count: any free GPU will do).
    held: u32,
    /// Pools (environment × unit) this node is in.
    pools: Vec<usize>,
}

impl NodeUnit {
    /// Free GPUs others may take: free minus held.
    fn avail(&self) -> u32 {
        (self.free.len() as u32).saturating_sub(self.held)
    }
}

struct NodeView<'a> {
    name: &'a NodeName,
    usable: bool,
    units: Vec<NodeUnit>,
}

impl NodeView<'_> {
    fn nu(&self, u: Ux) -> Option<&NodeUnit> {
        self.units.iter().find(|x| x.unit == u)
    }
    fn nu_mut(&mut self, u: Ux) -> Option<&mut NodeUnit> {
        self.units.iter_mut().find(|x| x.unit == u)
    }
}

/// The usable nodes of one environment that have GPUs of one unit, bucketed by how many
/// GPUs each has available, so best-fit is the first node of the first bucket that fits.
struct Pool {
    buckets: Vec<BTreeSet<Nx>>,
    total_avail: u32,
}

impl Pool {
    fn fitting_nodes(&self, g: u32) -> u32 {
        self.buckets
            .iter()
            .skip(g as usize)
            .map(|b| b.len() as u32)
            .sum()
    }
    /// Best fit: `k` nodes with at least `g` available, fewest left over, then by name.
    fn find(&self, g: u32, k: u32, exclude: &[Nx]) -> Option<Vec<Nx>> {
        let mut out = Vec::with_capacity(k as usize);
        for b in self.buckets.iter().skip(g as usize) {
            for &n in b {
                if !exclude.contains(&n) {
                    out.push(n);
                    if out.len() == k as usize {
                        return Some(out);
                    }
                }
            }
        }
        None
    }
}

struct EnvView<'a> {
    name: &'a EnvName,
    enabled: bool,
    /// Per unit: the environment's cap, GPUs in use, GPUs being stopped, GPUs held.
    cap: Vec<Option<u32>>,
    used: Vec<u32>,
    stopping: Vec<u32>,
    holds: Vec<u32>,
    pool: Vec<Option<usize>>,
}

struct ShareView<'a> {
    q: &'a QuotaShare,
    queue: usize,
    env: Option<usize>,
    max: Vec<u32>,
    ceiling: Vec<Option<u64>>,
    used: Vec<u32>,
    /// GPUs of jobs being stopped (they still count in `used` until they exit).
    stopping: Vec<u32>,
    /// GPUs held for this share's waiting preemptors.
    held: Vec<u32>,
}

impl ShareView<'_> {
    fn enabled(&self) -> bool {
        self.q.state == ObjState::Enabled
    }
    /// Idle GPUs a RESERVE share keeps for itself.
    fn reserve_idle(&self, u: Ux) -> u32 {
        if self.q.resource_sharing.strategy == Strategy::Reserve && self.enabled() {
            self.max[u].saturating_sub(self.used[u] + self.held[u])
        } else {
            0
        }
    }
    /// GPUs over max that are not already being given back (negative: room left).
    fn excess(&self, u: Ux) -> i64 {
        self.used[u] as i64 - self.stopping[u] as i64 - self.max[u] as i64
    }
}

/// A running job that may be chosen as a victim.
#[derive(Clone)]
struct Cand {
    id: JobId,
    share: usize,
    prio: u32,
    total: u32,
    nodes: Vec<(Nx, u32)>,
    protected_until: Millis,
    grace: Millis,
}

enum Mode {
    /// Cross-share reclaim: victims' shares must still be over max when picked.
    Reclaim,
    /// In-share: victims of strictly lower priority than this.
    InShare(u32),
}

/// The job being scheduled.
#[derive(Clone, Copy)]
struct Ask<'a> {
    id: JobId,
    w: &'a Waiting,
    s: usize,
    u: Ux,
    prio: u32,
}

impl Ask<'_> {
    fn need(&self) -> u32 {
        self.w.gpus_per_node * self.w.nodes
    }
}

/// Why a placement attempt failed, as a reason borrowed from the state.
type Why<'a> = PendingReasonOf<&'a str>;

struct Pass<'a> {
    st: &'a State,
    now: Millis,
    units: Vec<&'a str>,
    unit_ix: HashMap<&'a str, Ux>,
    nodes: Vec<NodeView<'a>>,
    node_ix: HashMap<&'a str, Nx>,
    pools: Vec<Pool>,
    envs: Vec<EnvView<'a>>,
    env_ix: HashMap<&'a str, usize>,
    shares: Vec<ShareView<'a>>,
    share_ix: HashMap<&'a str, usize>,
    queue_ix: HashMap<&'a str, usize>,
    /// Preemptor → (victims still stopping, latest kill deadline).
    victims_of: HashMap<JobId, (u32, Millis)>,
    taken: HashSet<JobId>,
    /// Victim lists, built once per pass when first needed, with the index of the
    /// first victim not yet taken (victims are taken front to back).
    reclaim_cands: HashMap<(usize, Ux), (Vec<Cand>, usize)>,
    inshare_cands: HashMap<(usize, Ux), (Vec<Cand>, usize)>,
    reclaim_failed: HashMap<(usize, Ux), Vec<(u32, u32)>>,
    inshare_failed: HashMap<(usize, Ux), Vec<(u32, u32, u32)>>,
    wakeup: Option<Millis>,
    plan: Plan,
}

impl<'a> Pass<'a> {
    fn new(st: &'a State, now: Millis) -> Pass<'a> {
        let mut units: Vec<&'a str> = vec![];
        let mut unit_ix: HashMap<&'a str, Ux> = HashMap::default();
        let mut intern = |u: &'a Unit| -> Ux {
            *unit_ix.entry(u.as_str()).or_insert_with(|| {
                units.push(u.as_str());
                units.len() - 1
            })
        };
        for s in st.shares.values() {
            for l in &s.capacity_limits {
                intern(&l.unit);
            }
        }
        for e in st.environments.values() {
            for l in &e.capacity_limits {
                intern(&l.unit);
            }
        }
        let mut nodes = Vec::with_capacity(st.nodes.len());
        for n in st.nodes.values() {
            let mut nus: Vec<NodeUnit> = vec![];
            for (g, a) in n.inventory.gpus.iter().zip(&n.allocated) {
                let u = intern(&g.unit);
                let pos = match nus.iter().position(|x| x.unit == u) {
                    Some(p) => p,
                    None => {
                        nus.push(NodeUnit {
                            unit: u,
                            free: vec![],
                            held: 0,
                            pools: vec![],
                        });
                        nus.len() - 1
                    }
                };
                if a.is_none() && g.healthy {
                    nus[pos].free.push(g.index);
                }
            }
            for nu in &mut nus {
                nu.free.sort();
            }
            nodes.push(NodeView {
                name: n.name(),
                usable: n.schedulable(),
                units: nus,
            });
        }
        let nu_count = units.len();
        let node_ix = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i as Nx))
            .collect();
        let queue_ix = st
            .queues
            .keys()
            .enumerate()
            .map(|(i, q)| (q.as_str(), i))
            .collect();
        let mut envs = vec![];
        let mut env_ix = HashMap::default();
        for (i, e) in st.environments.values().enumerate() {
            env_ix.insert(e.name.as_str(), i);
            let mut cap = vec![None; nu_count];
            for l in &e.capacity_limits {
                cap[unit_ix[l.unit.as_str()]] = Some(l.max);
            }
            let used = (0..nu_count)
                .map(|u| st.env_used(&e.name, &Unit::new(units[u])))
                .collect();
            envs.push(EnvView {
                name: &e.name,
                enabled: e.state == ObjState::Enabled,
                cap,
                used,
                stopping: vec![0; nu_count],
                holds: vec![0; nu_count],
                pool: vec![None; nu_count],
            });
        }
        let mut pass = Pass {
            st,
            now,
            units,
            unit_ix,
            nodes,
            node_ix,
            pools: vec![],
            envs,
            env_ix,
            shares: vec![],
            share_ix: HashMap::default(),
            queue_ix,
            victims_of: HashMap::default(),
            taken: HashSet::default(),
            reclaim_cands: HashMap::default(),
            inshare_cands: HashMap::default(),
            reclaim_failed: HashMap::default(),
            inshare_failed: HashMap::default(),
            wakeup: None,
            plan: Plan::default(),
        };
        for (i, s) in st.shares.values().enumerate() {
            pass.share_ix.insert(s.name.as_str(), i);
            let env = st
                .queues
                .get(&s.queue)
                .and_then(|q| pass.env_ix.get(q.environment.as_str()).copied());
            let mut max = vec![0; nu_count];
            let mut ceiling = vec![Some(0); nu_count];
            let mut used = vec![0; nu_count];
            for u in 0..nu_count {
                let unit = Unit::new(pass.units[u]);
                max[u] = s.max_for(&unit);
                ceiling[u] = s.ceiling_for(&unit);
                used[u] = st.share_used(&s.name, &unit);
            }
            pass.shares.push(ShareView {
                q: s,
                queue: pass
                    .queue_ix
                    .get(s.queue.as_str())
                    .copied()
                    .unwrap_or(usize::MAX),
                env,
                max,
                ceiling,
                used,
                stopping: vec![0; nu_count],
                held: vec![0; nu_count],
            });
        }
        pass.build_pools();
        pass.account_stopping_and_holds();
        pass
    }

    fn build_pools(&mut self) {
        let st = self.st;
        for (ei, e) in st.environments.values().enumerate() {
            for (ni, n) in st.nodes.values().enumerate() {
                if !self.nodes[ni].usable || !e.selects(&n.inventory.labels) {
                    continue;
                }
                for k in 0..self.nodes[ni].units.len() {
                    let u = self.nodes[ni].units[k].unit;
                    let pi = match self.envs[ei].pool[u] {
                        Some(p) => p,
                        None => {
                            self.pools.push(Pool {
                                buckets: vec![BTreeSet::new(); MAX_GPUS_PER_NODE_INVENTORY + 1],
                                total_avail: 0,
                            });
                            self.envs[ei].pool[u] = Some(self.pools.len() - 1);
                            self.pools.len() - 1
                        }
                    };
                    self.nodes[ni].units[k].pools.push(pi);
                }
            }
        }
        for ni in 0..self.nodes.len() {
            for k in 0..self.nodes[ni].units.len() {
                let a = self.nodes[ni].units[k].avail();
                for &pi in &self.nodes[ni].units[k].pools {
                    self.pools[pi].buckets[a as usize].insert(ni as Nx);
                    self.pools[pi].total_avail += a;
                }
            }
        }
    }

    /// Moves node `n`'s entry for unit `u` after `f` changed its free or held GPUs.
    fn touch(&mut self, n: Nx, u: Ux, f: impl FnOnce(&mut NodeUnit)) {
        let Some(nu) = self.nodes[n as usize].nu_mut(u) else {
            return;
        };
        let before = nu.avail();
        f(nu);
        let after = nu.avail();
        if before != after {
            for &pi in &nu.pools {
                let p = &mut self.pools[pi];
                p.buckets[before as usize].remove(&n);
                p.buckets[after as usize].insert(n);
                p.total_avail = p.total_avail + after - before;
            }
        }
    }

    fn account_stopping_and_holds(&mut self) {
        let st = self.st;
        for job in st.stopping_jobs() {
            let Some(&s) = self.share_ix.get(job.spec.share.as_str()) else {
                continue;
            };
            let Some(&u) = self.unit_ix.get(job.spec.request.unit.as_str()) else {
                continue;
            };
            let total = job.spec.request.total_gpus();
            self.shares[s].stopping[u] += total;
            if let Some(e) = self.shares[s].env {
                self.envs[e].stopping[u] += total;
            }
            if let Some(stop) = &job.stop {
                if let Some(f) = stop.kind.for_job() {
                    let v = self.victims_of.entry(f).or_insert((0, 0));
                    v.0 += 1;
                    v.1 = v.1.max(stop.deadline);
                }
            }
        }
        for job in st.holding_jobs() {
            let (Some(&s), Some(&u), Some(hold)) = (
                self.share_ix.get(job.spec.share.as_str()),
                self.unit_ix.get(job.spec.request.unit.as_str()),
                &job.hold,
            ) else {
                continue;
            };
            let need = job.spec.request.total_gpus();
            self.shares[s].held[u] += need;
            if let Some(e) = self.shares[s].env {
                self.envs[e].holds[u] += need;
            }
            for (node, count) in &hold.nodes {
                if let Some(&n) = self.node_ix.get(node.as_str()) {
                    let c = *count;
                    self.touch(n, u, |nu| nu.held += c);
                }
            }
        }
    }

    fn reason(&mut self, id: JobId, w: &Waiting, why: Why<'_>) {
        if w.reason.as_ref().map(|r| r.borrowed()) != Some(why.clone()) {
            self.plan.reasons.push((id, why.to_owned_reason()));
        }
    }

    // ---- one queue -----------------------------------------------------------------

    fn queue(&mut self, q: &'a JobQueue) {
        let st = self.st;
        let shares: Vec<usize> = st
            .shares
            .values()
            .enumerate()
            .filter(|(_, s)| s.queue == q.name)
            .map(|(i, _)| i)
            .collect();
        let env = self.env_ix.get(q.environment.as_str()).copied();
        let blocked: Option<Why<'a>> = if q.state != ObjState::Enabled {
            Some(PendingReasonOf::QueueDisabled {
                queue: q.name.as_str(),
            })
        } else {
            match env {
                Some(e) if self.envs[e].enabled => None,
                _ => Some(PendingReasonOf::EnvironmentDisabled {
                    env: q.environment.as_str(),
                }),
            }
        };
        // Rule 1 and 2: the own-capacity pass, visiting shares by their head job's
        // priority, then lowest usage ratio, then the head's age.
        let mut iters = vec![];
        let mut heap = BinaryHeap::new();
        for &s in &shares {
            let sv = &self.shares[s];
            let mut it = st.runnable_in(&sv.q.name).peekable();
            let why = blocked.clone().or_else(|| {
                (!sv.enabled()).then_some(PendingReasonOf::ShareDisabled {
                    share: sv.q.name.as_str(),
                })
            });
            if let Some(why) = why {
                for (k, w) in it {
                    self.reason(k.id, w, why.clone());
                }
                continue;
            }
            if let Some((k, w)) = it.peek() {
                heap.push((self.heap_key(s, k, w), iters.len()));
            }
            iters.push((s, it));
        }
        let mut deferred: Vec<(Millis, JobId, &'a Waiting, usize, u32)> = vec![];
        while let Some((_, i)) = heap.pop() {
            let s = iters[i].0;
            let (k, w) = iters[i].1.next().expect("peeked");
            self.own(k, w, s, &mut deferred);
            if let Some((k, w)) = iters[i].1.peek() {
                heap.push((self.heap_key(s, k, w), i));
            }
        }
        // Rule 5: the borrow pass, FIFO by submit time across shares.
        deferred.sort_by_key(|d| (d.0, d.1));
        for (_, id, w, s, prio) in deferred {
            self.borrow(id, w, s, prio);
        }
    }

    fn heap_key(
        &self,
        s: usize,
        k: &RunKey,
        w: &Waiting,
    ) -> (u32, Reverse<u64>, Reverse<Millis>, Reverse<usize>) {
        let sv = &self.shares[s];
        let ratio = match self.unit_ix.get(w.unit.as_str()) {
            Some(&u) if sv.max[u] > 0 => {
                (sv.used[u] + sv.held[u]) as u64 * 1_000_000 / sv.max[u] as u64
            }
            _ => u64::MAX,
        };
        (
            k.priority.0,
            Reverse(ratio),
            Reverse(k.submitted_at),
            Reverse(s),
        )
    }

    /// The own-capacity pass for one job (rules 2, 3, 4).
    fn own(
        &mut self,
        k: &RunKey,
        w: &'a Waiting,
        s: usize,
        deferred: &mut Vec<(Millis, JobId, &'a Waiting, usize, u32)>,
    ) {
        let Some(&u) = self.unit_ix.get(w.unit.as_str()) else {
            let env = self.shares[s]
                .env
                .map(|e| self.envs[e].name.as_str())
                .unwrap_or("");
            self.reason(
                k.id,
                w,
                PendingReasonOf::NoNodes {
                    unit: w.unit.as_str(),
                    env,
                },
            );
            return;
        };
        let ask = Ask {
            id: k.id,
            w,
            s,
            u,
            prio: k.priority.0,
        };
        if w.has_hold && self.holder(ask) {
            return;
        }
        let sv = &self.shares[s];
        let need = ask.need();
        if sv.used[u] + sv.held[u] + need <= sv.max[u] {
            let why = match self.try_place(ask, false, None) {
                Ok(()) => return,
                Err(why) => why,
            };
            // Rule 3: reclaim from over-max shares; rule 4: in-share preemption.
            let mut protect = None;
            if self.try_preempt(ask, Mode::Reclaim, &mut protect) {
                return;
            }
            if self.shares[s].q.in_share_preemption
                && self.try_preempt(ask, Mode::InShare(ask.prio), &mut protect)
            {
                return;
            }
            let why = match protect {
                Some(until) => PendingReasonOf::MinRuntime { until },
                None => why,
            };
            self.reason(k.id, w, why);
        } else if sv.q.borrows() {
            deferred.push((k.submitted_at, k.id, w, s, k.priority.0));
        } else {
            let mut protect = None;
            if sv.q.in_share_preemption
                && self.try_preempt(ask, Mode::InShare(ask.prio), &mut protect)
            {
                return;
            }
            let sv = &self.shares[s];
            let why = match protect {
                Some(until) => PendingReasonOf::MinRuntime { until },
                None => PendingReasonOf::AtMaxNoBorrow {
                    share: sv.q.name.as_str(),
                    used: sv.used[u] + sv.held[u],
                    max: sv.max[u],
                    need,
                    unit: w.unit.as_str(),
                    strategy: strategy_str(sv.q.resource_sharing.strategy),
                },
            };
            self.reason(k.id, w, why);
        }
    }

    /// The borrow pass for one job (rule 5): up to the share's ceiling, on idle GPUs,
    /// never by preempting another share.
    fn borrow(&mut self, id: JobId, w: &'a Waiting, s: usize, prio: u32) {
        let u = self.unit_ix[w.unit.as_str()];
        let ask = Ask { id, w, s, u, prio };
        let sv = &self.shares[s];
        let need = ask.need();
        let have = sv.used[u] + sv.held[u];
        let why = match sv.ceiling[u] {
            Some(limit) if (have + need) as u64 > limit => PendingReasonOf::BorrowLimit {
                used: have,
                limit,
                need,
                unit: w.unit.as_str(),
            },
            _ => match self.try_place(ask, true, None) {
                Ok(()) => return,
                Err(why) => why,
            },
        };
        let mut protect = None;
        if self.shares[s].q.in_share_preemption
            && self.try_preempt(ask, Mode::InShare(prio), &mut protect)
        {
            return;
        }
        self.reason(id, w, why);
    }

    /// A job that holds GPUs while its victims exit. Returns true when it is dealt with
    /// (placed, or still waiting); false when its hold was released and it should be
    /// scheduled like any other job.
    fn holder(&mut self, ask: Ask<'a>) -> bool {
        let st = self.st;
        let Some(hold) = st.jobs.get(&ask.id).and_then(|j| j.hold.as_ref()) else {
            return false;
        };
        let u = ask.u;
        let mut valid = true;
        let mut ready = true;
        let mut targets = vec![];
        for (node, count) in &hold.nodes {
            let nu = self.node_ix.get(node.as_str()).and_then(|&n| {
                let nv = &self.nodes[n as usize];
                nv.nu(u)
                    .filter(|nu| nv.usable && !nu.pools.is_empty())
                    .map(|nu| (n, nu))
            });
            match nu {
                None => valid = false,
                Some((n, nu)) => {
                    // Our own hold is part of `held`; the rest belongs to others.
                    let others = nu.held.saturating_sub(*count);
                    if (nu.free.len() as u32).saturating_sub(others) < *count {
                        ready = false;
                    }
                    targets.push((n, *count));
                }
            }
        }
        let victims = self.victims_of.get(&ask.id).copied();
        if valid && ready {
            // A hold won by in-share preemption in the borrow pass may start above max.
            let sv = &self.shares[ask.s];
            let borrowed = sv.used[u] + ask.need() > sv.max[u];
            match self.try_place(ask, borrowed, Some(&targets)) {
                Ok(()) => return true,
                // Blocked by the cap or a reserve with no victim left to wait for: keep
                // the hold and say why.
                Err(why) if victims.is_none() && Self::waits_on_cap_or_reserve(&why) => {
                    self.reason(ask.id, ask.w, why);
                    return true;
                }
                Err(_) => {}
            }
        }
        // Still waiting for victims (say, its own share's, to get under max).
        if let (true, Some((jobs, grace_ends_at))) = (valid, victims) {
            self.reason(
                ask.id,
                ask.w,
                PendingReasonOf::WaitingForPreempted {
                    jobs,
                    grace_ends_at,
                },
            );
            return true;
        }
        // The hold no longer leads anywhere: give its GPUs back.
        self.plan.actions.push(Action::Hold {
            job: ask.id,
            hold: None,
        });
        self.release_hold(ask.s, u, ask.need(), &targets);
        false
    }

    /// The job waits on the environment's cap or a RESERVE share's idle GPUs, which a
    /// hold keeps covering, rather than on GPUs that will not come.
    fn waits_on_cap_or_reserve(why: &Why<'_>) -> bool {
        matches!(
            why,
            PendingReasonOf::EnvironmentCap { .. } | PendingReasonOf::ReserveHeld { .. }
        )
    }

    fn release_hold(&mut self, s: usize, u: Ux, need: u32, targets: &[(Nx, u32)]) {
        self.shares[s].held[u] -= need.min(self.shares[s].held[u]);
        if let Some(e) = self.shares[s].env {
            self.envs[e].holds[u] -= need.min(self.envs[e].holds[u]);
        }
        for &(n, c) in targets {
            self.touch(n, u, |nu| nu.held -= c.min(nu.held));
        }
    }

    /// Reserve idle GPUs of RESERVE shares other than `s` in environment `e`, and the
    /// share holding the most of them (for the reason).
    fn reserve_others(&self, e: usize, u: Ux, s: usize) -> (u32, Option<usize>) {
        let mut total = 0;
        let mut top: Option<(u32, usize)> = None;
        for (t, sv) in self.shares.iter().enumerate() {
            if t == s || sv.env != Some(e) {
                continue;
            }
            let r = sv.reserve_idle(u);
            if r > 0 {
                total += r;
                if top.is_none_or(|(m, _)| r > m) {
                    top = Some((r, t));
                }
            }
        }
        (total, top.map(|(_, t)| t))
    }

    /// Places the job now if it fits: environment cap (rule 7), RESERVE shares' idle
    /// GPUs (rule 2/5), best-fit nodes, gangs whole (rule 8). `held` places a holder on
    /// its held GPUs.
    fn try_place(
        &mut self,
        ask: Ask<'a>,
        borrowed: bool,
        held: Option<&[(Nx, u32)]>,
    ) -> Result<(), Why<'a>> {
        let (s, u, w) = (ask.s, ask.u, ask.w);
        let need = ask.need();
        let unit = w.unit.as_str();
        // The share's own limit, counted as the state machine will re-verify it: GPUs of
        // jobs still stopping count until they have exited.
        let sv = &self.shares[s];
        let limit = if borrowed {
            sv.ceiling[u]
        } else {
            Some(sv.max[u] as u64)
        };
        if let Some(limit) = limit.filter(|l| (sv.used[u] + need) as u64 > *l) {
            return Err(if borrowed {
                PendingReasonOf::BorrowLimit {
                    used: sv.used[u],
                    limit,
                    need,
                    unit,
                }
            } else {
                PendingReasonOf::AtMaxNoBorrow {
                    share: sv.q.name.as_str(),
                    used: sv.used[u],
                    max: sv.max[u],
                    need,
                    unit,
                    strategy: strategy_str(sv.q.resource_sharing.strategy),
                }
            });
        }
        let Some(e) = self.shares[s].env else {
            return Err(PendingReasonOf::EnvironmentDisabled { env: "" });
        };
        let env = &self.envs[e];
        let Some(pi) = env.pool[u] else {
            return Err(PendingReasonOf::NoNodes {
                unit,
                env: env.name.as_str(),
            });
        };
        let pool = &self.pools[pi];
        let (reserved, rshare) = self.reserve_others(e, u, s);
        let from_pool = if held.is_some() { 0 } else { need };
        if reserved > 0 && pool.total_avail >= from_pool && pool.total_avail < from_pool + reserved
        {
            let r = rshare.expect("a share holds the reserve");
            return Err(PendingReasonOf::ReserveHeld {
                share: self.shares[r].q.name.as_str(),
                idle: reserved,
                unit,
            });
        }
        let targets: Vec<(Nx, u32)> = match held {
            Some(t) => t.to_vec(),
            None => match pool.find(w.gpus_per_node, w.nodes, &[]) {
                Some(ns) => ns.into_iter().map(|n| (n, w.gpus_per_node)).collect(),
                None => {
                    return Err(PendingReasonOf::NoCapacity {
                        need_per_node: w.gpus_per_node,
                        nodes: w.nodes,
                        unit,
                        free: pool.total_avail,
                        fitting_nodes: pool.fitting_nodes(w.gpus_per_node),
                    })
                }
            },
        };
        // The cap is checked last, so that a full cluster reads as "no node has room"
        // and the cap is named only when it is what stops the job.
        let env = &self.envs[e];
        let own_hold = if held.is_some() { need } else { 0 };
        if let Some(cap) = env.cap[u] {
            let committed = env.used[u] + env.holds[u] - own_hold;
            if committed + need > cap {
                return Err(PendingReasonOf::EnvironmentCap {
                    env: env.name.as_str(),
                    used: committed,
                    cap,
                    need,
                    unit,
                });
            }
        }
        // Commit in the pass's view.
        let mut allocation = Vec::with_capacity(targets.len());
        for &(n, c) in &targets {
            let mut gpus = vec![];
            let is_holder = held.is_some();
            self.touch(n, u, |nu| {
                gpus = nu.free.drain(..c as usize).collect();
                if is_holder {
                    nu.held -= c.min(nu.held);
                }
            });
            allocation.push(NodeAlloc {
                node: self.nodes[n as usize].name.clone(),
                gpus,
            });
        }
        if held.is_some() {
            self.shares[s].held[u] -= need.min(self.shares[s].held[u]);
            self.envs[e].holds[u] -= need.min(self.envs[e].holds[u]);
        }
        let sv = &mut self.shares[s];
        sv.used[u] += need;
        self.envs[e].used[u] += need;
        let reason = if borrowed {
            format!(
                "borrowed: share {} at {}/{} {unit}",
                sv.q.name, sv.used[u], sv.max[u]
            )
        } else {
            format!(
                "within max: share {} at {}/{} {unit}",
                sv.q.name, sv.used[u], sv.max[u]
            )
        };
        self.plan.actions.push(Action::Place {
            job: ask.id,
            allocation,
            borrowed,
            reason,
        });
        Ok(())
    }

    // ---- preemption ----------------------------------------------------------------

    /// Victims for reclaim in queue `qi`: running jobs of shares over their max, lowest
    /// priority first, then most recently started.
    fn candidates(&mut self, key: (usize, Ux), mode_reclaim: bool) -> (Vec<Cand>, usize) {
        let cache = if mode_reclaim {
            &mut self.reclaim_cands
        } else {
            &mut self.inshare_cands
        };
        if let Some(c) = cache.remove(&key) {
            return c;
        }
        let st = self.st;
        let (qi_or_s, u) = key;
        let mut out = vec![];
        for (t, sv) in self.shares.iter().enumerate() {
            let relevant = if mode_reclaim {
                sv.queue == qi_or_s && sv.excess(u) > 0
            } else {
                t == qi_or_s
            };
            if !relevant {
                continue;
            }
            for job in st.active_in(&sv.q.name) {
                if job.stop.is_some() || job.spec.request.unit.as_str() != self.units[u] {
                    continue;
                }
                let started = job.started_at().unwrap_or(0);
                let nodes = job
                    .allocation()
                    .iter()
                    .filter_map(|a| {
                        self.node_ix
                            .get(a.node.as_str())
                            .map(|&n| (n, a.gpus.len() as u32))
                    })
                    .collect();
                out.push((
                    (job.spec.priority, Reverse(started), Reverse(job.id)),
                    Cand {
                        id: job.id,
                        share: t,
                        prio: job.spec.priority,
                        total: job.spec.request.total_gpus(),
                        nodes,
                        protected_until: started + sv.q.min_runtime_s * SECOND,
                        grace: job.spec.grace_s(Some(sv.q)) * SECOND,
                    },
                ));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        (out.into_iter().map(|(_, c)| c).collect(), 0)
    }

    /// Rules 3 and 4: picks victims in order until the job would fit, keeps the
    /// smallest subset that still fits, marks them preempting and holds their GPUs for
    /// the job. Records in `protect` when victims were passed over for `min_runtime_s`.
    fn try_preempt(&mut self, ask: Ask<'a>, mode: Mode, protect: &mut Option<Millis>) -> bool {
        let (s, u) = (ask.s, ask.u);
        let (g, k) = (ask.w.gpus_per_node, ask.w.nodes);
        let Some(e) = self.shares[s].env else {
            return false;
        };
        let Some(pi) = self.envs[e].pool[u] else {
            return false;
        };
        let reclaim = matches!(mode, Mode::Reclaim);
        let key = if reclaim {
            (self.shares[s].queue, u)
        } else {
            (s, u)
        };
        // A failure for a smaller request (and, in-share, a higher priority) means this
        // one fails too: victims only become fewer during a pass.
        let failed = if reclaim {
            self.reclaim_failed
                .get(&key)
                .is_some_and(|f| f.iter().any(|&(k0, g0)| k >= k0 && g >= g0))
        } else {
            self.inshare_failed.get(&key).is_some_and(|f| {
                f.iter()
                    .any(|&(k0, g0, p0)| k >= k0 && g >= g0 && ask.prio <= p0)
            })
        };
        if failed {
            return false;
        }
        if reclaim
            && !self
                .shares
                .iter()
                .any(|sv| sv.queue == key.0 && sv.excess(u) > 0)
        {
            return false;
        }
        let (cands, mut start) = self.candidates(key, reclaim);
        let need = ask.need();
        let env = &self.envs[e];
        let (reserved, _) = self.reserve_others(e, u, s);
        let free_allowance = self.pools[pi].total_avail.saturating_sub(reserved);
        let mut deficit: i64 = 0;
        if let Some(cap) = env.cap[u] {
            deficit = deficit
                .max((env.used[u] - env.stopping[u] + env.holds[u] + need) as i64 - cap as i64);
        }
        if !reclaim {
            let sv = &self.shares[s];
            let limit = if sv.used[u] + sv.held[u] + need <= sv.max[u] {
                Some(sv.max[u] as u64)
            } else {
                sv.ceiling[u]
            };
            if let Some(limit) = limit {
                deficit = deficit
                    .max((sv.used[u] - sv.stopping[u] + sv.held[u] + need) as i64 - limit as i64);
            }
        }
        let local = k == 1;
        let mut node_excess: HashMap<(Nx, usize), i64> = HashMap::default();
        let mut excess: HashMap<usize, i64> = HashMap::default();
        let mut freed: HashMap<Nx, u32> = HashMap::default();
        let mut fitting: Vec<Nx> = vec![];
        let mut picked: Vec<usize> = vec![];
        let mut total: i64 = 0;
        let mut found = None;
        while start < cands.len() && self.taken.contains(&cands[start].id) {
            start += 1;
        }
        let mut looked = 0usize;
        for (ci, c) in cands.iter().enumerate().skip(start) {
            if self.taken.contains(&c.id) {
                continue;
            }
            // In-share preemption looks at a bounded number of victims per job and pass,
            // lowest priority first, as Slurm's schedulers bound their looks; reclaim is
            // never bounded, so lent capacity always comes back.
            looked += 1;
            if !reclaim && looked > INSHARE_LOOK_LIMIT {
                break;
            }
            match mode {
                // A single-node job needs room on one node, so a share's excess is
                // counted per node: victims elsewhere must not use up the excess that
                // would have made a victim on the right node eligible.
                Mode::Reclaim if local => {
                    let share_ex = self.shares[c.share].excess(u);
                    if !c
                        .nodes
                        .iter()
                        .any(|&(n, _)| *node_excess.entry((n, c.share)).or_insert(share_ex) > 0)
                    {
                        continue;
                    }
                }
                Mode::Reclaim => {
                    let ex = *excess
                        .entry(c.share)
                        .or_insert_with(|| self.shares[c.share].excess(u));
                    if ex <= 0 {
                        continue;
                    }
                }
                Mode::InShare(p) => {
                    if c.prio >= p {
                        break;
                    }
                }
            }
            if c.protected_until > self.now {
                *protect =
                    Some(protect.map_or(c.protected_until, |p: Millis| p.min(c.protected_until)));
                continue;
            }
            picked.push(ci);
            total += c.total as i64;
            if let Some(ex) = excess.get_mut(&c.share) {
                *ex -= c.total as i64;
            }
            for &(n, cnt) in &c.nodes {
                if local && reclaim {
                    let share_ex = self.shares[c.share].excess(u);
                    let ex = node_excess.entry((n, c.share)).or_insert(share_ex);
                    if *ex <= 0 {
                        continue;
                    }
                    *ex -= c.total as i64;
                }
                let f = freed.entry(n).or_default();
                let before = *f;
                *f += cnt;
                // Track the nodes where the job would now fit, so each check looks only
                // at those and stays cheap however many small victims the walk passes.
                let fits = |f: u32| {
                    self.nodes[n as usize].nu(u).is_some_and(|nu| {
                        nu.pools.contains(&pi) && g.saturating_sub(f) <= nu.avail()
                    })
                };
                // A node enters the list when first touched (it may have fit on free
                // GPUs alone, which a reserve or the cap did not allow) or when it starts
                // to fit.
                if fits(before + cnt) && (before == 0 || !fits(before)) {
                    fitting.push(n);
                }
            }
            if total >= deficit
                && fitting.len() + self.pools[pi].fitting_nodes(g) as usize >= k as usize
            {
                if let Some(t) = self.fit(pi, g, k, free_allowance, &freed, &fitting) {
                    found = Some(t);
                    break;
                }
            }
        }
        if let Some(until) = *protect {
            self.wakeup = Some(self.wakeup.map_or(until, |w| w.min(until)));
        }
        let Some(targets) = found else {
            // Remember the failure unless an earlier one already covers it, and forget the
            // ones it covers, so the list stays as short as the distinct request shapes.
            if reclaim {
                let f = self.reclaim_failed.entry(key).or_default();
                f.retain(|&(k0, g0)| !(k0 >= k && g0 >= g));
                f.push((k, g));
            } else {
                let f = self.inshare_failed.entry(key).or_default();
                f.retain(|&(k0, g0, p0)| !(k0 >= k && g0 >= g && p0 <= ask.prio));
                f.push((k, g, ask.prio));
            }
            let cache = if reclaim {
                &mut self.reclaim_cands
            } else {
                &mut self.inshare_cands
            };
            cache.insert(key, (cands, start));
            return false;
        };
        *protect = None;
        // Keep only victims on the target nodes, plus (in pick order) any needed to meet
        // the count deficit; then drop the highest-priority ones that are not needed.
        let on_target = |c: &Cand| c.nodes.iter().any(|(n, _)| targets.contains(n));
        let mut kept: Vec<usize> = picked
            .iter()
            .copied()
            .filter(|&ci| on_target(&cands[ci]))
            .collect();
        let mut kept_total: i64 = kept.iter().map(|&ci| cands[ci].total as i64).sum();
        for &ci in &picked {
            if kept_total >= deficit {
                break;
            }
            let c = &cands[ci];
            // Added only while its share is still over max counting what is kept.
            let share_kept: i64 = kept
                .iter()
                .filter(|&&k| cands[k].share == c.share)
                .map(|&k| cands[k].total as i64)
                .sum();
            if reclaim && self.shares[c.share].excess(u) - share_kept <= 0 {
                continue;
            }
            if !kept.contains(&ci) {
                kept.push(ci);
                kept_total += c.total as i64;
            }
        }
        kept.sort();
        for i in (0..kept.len()).rev() {
            let mut trial = kept.clone();
            let removed = trial.remove(i);
            let trial_total = kept_total - cands[removed].total as i64;
            if trial_total >= deficit
                && self.fits_on(u, g, free_allowance, &targets, &trial, &cands)
            {
                kept = trial;
                kept_total = trial_total;
            }
        }
        self.commit_preemption(ask, mode, e, &targets, &kept, &cands);
        let cache = if reclaim {
            &mut self.reclaim_cands
        } else {
            &mut self.inshare_cands
        };
        cache.insert(key, (cands, start));
        true
    }

    /// Whether the victims `set` free enough on `targets` (each needs `g`), taking at most
    /// `allowance` GPUs that are free now.
    fn fits_on(
        &self,
        u: Ux,
        g: u32,
        allowance: u32,
        targets: &[Nx],
        set: &[usize],
        cands: &[Cand],
    ) -> bool {
        let mut from_free = 0;
        for &n in targets {
            let freed: u32 = set
                .iter()
                .flat_map(|&ci| cands[ci].nodes.iter())
                .filter(|(m, _)| *m == n)
                .map(|(_, c)| c)
                .sum();
            let avail = self.nodes[n as usize].nu(u).map_or(0, |nu| nu.avail());
            let take = g.saturating_sub(freed);
            if take > avail {
                return false;
            }
            from_free += take;
        }
        from_free <= allowance
    }

    /// Chooses `k` target nodes given GPUs `freed` by victims so far, or None.
    /// `fitting` lists the nodes where the victims in `freed` make room for `g`.
    #[allow(clippy::too_many_arguments)]
    fn fit(
        &self,
        pi: usize,
        g: u32,
        k: u32,
        allowance: u32,
        freed: &HashMap<Nx, u32>,
        fitting: &[Nx],
    ) -> Option<Vec<Nx>> {
        let mut opts: Vec<(u32, Nx)> = fitting
            .iter()
            .map(|&n| (g.saturating_sub(freed[&n]), n))
            .collect();
        opts.sort();
        opts.truncate(k as usize);
        let mut chosen: Vec<Nx> = opts.iter().map(|o| o.1).collect();
        let mut from_free: u32 = opts.iter().map(|o| o.0).sum();
        if chosen.len() < k as usize {
            let more = self.pools[pi].find(g, k - chosen.len() as u32, &chosen)?;
            from_free += g * more.len() as u32;
            chosen.extend(more);
        }
        (from_free <= allowance).then_some(chosen)
    }

    fn commit_preemption(
        &mut self,
        ask: Ask<'a>,
        mode: Mode,
        e: usize,
        targets: &[Nx],
        kept: &[usize],
        cands: &[Cand],
    ) {
        let (s, u) = (ask.s, ask.u);
        let need = ask.need();
        let sname = self.shares[s].q.name.as_str();
        let unit = self.units[u];
        let mut deadline = 0;
        for &ci in kept {
            let c = &cands[ci];
            self.taken.insert(c.id);
            let vs = &self.shares[c.share];
            let (kind, reason) = match mode {
                Mode::Reclaim => (
                    StopKind::Reclaim { for_job: ask.id },
                    format!(
                        "reclaim: share {} over max {}/{} {unit}; job {} of share {sname} is within max",
                        vs.q.name,
                        vs.used[u] - vs.stopping[u],
                        vs.max[u],
                        ask.id
                    ),
                ),
                Mode::InShare(p) => (
                    StopKind::InShare { for_job: ask.id },
                    format!("in-share preemption by job {} (priority {p} > {})", ask.id, c.prio),
                ),
            };
            self.plan.actions.push(Action::Preempt {
                job: c.id,
                kind,
                reason,
            });
            self.shares[c.share].stopping[u] += c.total;
            self.envs[e].stopping[u] += c.total;
            deadline = deadline.max(self.now + c.grace);
        }
        let g = ask.w.gpus_per_node;
        for &n in targets {
            self.touch(n, u, |nu| nu.held += g);
        }
        self.shares[s].held[u] += need;
        self.envs[e].holds[u] += need;
        let hold = Hold {
            nodes: targets
                .iter()
                .map(|&n| (self.nodes[n as usize].name.clone(), g))
                .collect(),
            since: self.now,
        };
        self.plan.actions.push(Action::Hold {
            job: ask.id,
            hold: Some(hold),
        });
        self.victims_of
            .insert(ask.id, (kept.len() as u32, deadline));
        let why = if kept.is_empty() {
            // The held GPUs are free already; the job starts on the next pass.
            PendingReasonOf::NotYetScheduled
        } else {
            PendingReasonOf::WaitingForPreempted {
                jobs: kept.len() as u32,
                grace_ends_at: deadline,
            }
        };
        self.reason(ask.id, ask.w, why);
    }
}

fn strategy_str(s: Strategy) -> &'static str {
    match s {
        Strategy::Reserve => "RESERVE",
        Strategy::Lend => "LEND",
        Strategy::LendAndBorrow => "LEND_AND_BORROW",
    }
}
