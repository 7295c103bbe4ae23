//! The pass's views: nodes, pools (environment × unit, bucketed by available GPUs),
//! environments and shares, built once per pass from the state and kept current as
//! the pass places, preempts and holds.

use std::collections::BTreeSet;

use super::*;

/// GPUs of one unit on one node, as the pass sees them.
pub(super) struct NodeUnit {
    pub(super) unit: Ux,
    /// Free GPUs, lowest index first; placements take from the front.
    pub(super) free: Vec<GpuIndex>,
    /// GPUs of this node held for preemptors (a count: any free GPU will do).
    pub(super) held: u32,
    /// Pools (environment × unit) this node is in.
    pub(super) pools: Vec<usize>,
    /// GPUs of its jobs placed within their share's max, and of its borrowed jobs.
    pub(super) own: u32,
    pub(super) lent: u32,
}

impl NodeUnit {
    /// Free GPUs others may take: free minus held.
    pub(super) fn avail(&self) -> u32 {
        (self.free.len() as u32).saturating_sub(self.held)
    }

    /// Where the node sits in its pools: its available GPUs, whether it has no
    /// borrowed work, whether it has no work within max.
    fn place_key(&self) -> (u32, bool, bool) {
        (self.avail(), self.lent == 0, self.own == 0)
    }
}

/// A node's GPUs of one unit as the victim search reads them, one entry per (node,
/// unit) in one flat table: GPUs available to others, and the pools the node is in as
/// a bitmask. It spares the search the node's own lists for every victim it looks at.
#[derive(Clone, Copy, Default)]
pub(super) struct NuFlat {
    pub(super) avail: u32,
    pub(super) pools: u64,
}

pub(super) struct NodeView<'a> {
    /// The node's name, looked up once here: a plan's allocations and holds copy it,
    /// and going through the state's node each time was one more cold read.
    pub(super) name: &'a str,
    pub(super) usable: bool,
    pub(super) units: Vec<NodeUnit>,
}

impl NodeView<'_> {
    pub(super) fn nu(&self, u: Ux) -> Option<&NodeUnit> {
        self.units.iter().find(|x| x.unit == u)
    }
    pub(super) fn nu_mut(&mut self, u: Ux) -> Option<&mut NodeUnit> {
        self.units.iter_mut().find(|x| x.unit == u)
    }
}

/// The usable nodes of one environment that have GPUs of one unit, bucketed by how many
/// GPUs each has available, so best-fit is the first node of the first bucket that fits.
///
/// Placement keeps borrowed work apart from work within max where it can (DESIGN §3,
/// "placement helps it"), so that reclaim frees whole nodes: `no_lent` holds the same
/// buckets for the nodes without borrowed work, `no_own` for those without work within
/// max (a free node is in both).
pub(super) struct Pool {
    pub(super) buckets: Vec<BTreeSet<Nx>>,
    pub(super) no_lent: Vec<BTreeSet<Nx>>,
    pub(super) no_own: Vec<BTreeSet<Nx>>,
    pub(super) total_avail: u32,
}

impl Pool {
    fn insert(&mut self, n: Nx, (a, no_lent, no_own): (u32, bool, bool)) {
        self.buckets[a as usize].insert(n);
        if no_lent {
            self.no_lent[a as usize].insert(n);
        }
        if no_own {
            self.no_own[a as usize].insert(n);
        }
        self.total_avail += a;
    }

    fn remove(&mut self, n: Nx, (a, no_lent, no_own): (u32, bool, bool)) {
        self.buckets[a as usize].remove(&n);
        if no_lent {
            self.no_lent[a as usize].remove(&n);
        }
        if no_own {
            self.no_own[a as usize].remove(&n);
        }
        self.total_avail -= a;
    }
}

pub(super) struct EnvView {
    /// The name as reasons share it.
    pub(super) name: SharedStr,
    pub(super) enabled: bool,
    /// Per unit: the environment's cap, GPUs in use, GPUs being stopped, GPUs held.
    pub(super) cap: Vec<Option<u32>>,
    pub(super) used: Vec<u32>,
    pub(super) stopping: Vec<u32>,
    pub(super) holds: Vec<u32>,
    pub(super) pool: Vec<Option<usize>>,
}

pub(super) struct ShareView<'a> {
    pub(super) q: &'a QuotaShare,
    /// The share's name and strategy as reasons share them.
    pub(super) name: SharedStr,
    pub(super) strategy: SharedStr,
    pub(super) queue: usize,
    pub(super) env: Option<usize>,
    pub(super) max: Vec<u32>,
    pub(super) ceiling: Vec<Option<u64>>,
    pub(super) used: Vec<u32>,
    /// GPUs of jobs being stopped (they still count in `used` until they exit).
    pub(super) stopping: Vec<u32>,
    /// GPUs held for this share's waiting preemptors.
    pub(super) held: Vec<u32>,
    /// GPUs of this share's jobs being stopped for its own preemptors (in-share): its
    /// holds cover them, so they are not counted twice.
    pub(super) stopping_own: Vec<u32>,
    /// Per unit, during the own-capacity pass: the GPUs its jobs visited so far wait
    /// for (see [`Ahead`]).
    pub(super) ahead: Vec<Ahead>,
    /// Under a FAIR_SHARE policy: its decayed GPU-hours per weight (see
    /// [`crate::fair`]), and its place among its queue's shares, most above its fair
    /// share first (0 under FIFO: every share alike).
    pub(super) fair: Option<f64>,
    pub(super) fair_rank: u32,
    /// The groups the share is in, nearest first (empty in a queue without groups).
    pub(super) chain: Vec<usize>,
}

/// The GPUs a share's waiting jobs want, gathered as the own-capacity pass visits them
/// in rule 1's order (priority descending): a job's room in its share counts those of
/// strictly higher priority, so that the share's lower-priority jobs do not take the
/// room its higher-priority ones wait for.
#[derive(Clone, Copy)]
pub(super) struct Ahead {
    /// The priority of the latest job counted.
    prio: u32,
    /// GPUs of the jobs counted at that priority.
    at_prio: u32,
    /// GPUs of the jobs counted at higher priorities.
    above: u32,
}

impl Ahead {
    pub(super) const NONE: Ahead = Ahead {
        prio: u32::MAX,
        at_prio: 0,
        above: 0,
    };

    fn reach(&mut self, prio: u32) {
        if prio < self.prio {
            *self = Ahead {
                prio,
                at_prio: 0,
                above: self.above + self.at_prio,
            };
        }
    }

    /// GPUs wanted by the waiting jobs of priority above `prio`. Jobs come in
    /// priority order, never higher than one seen before.
    pub(super) fn above(&mut self, prio: u32) -> u32 {
        self.reach(prio);
        self.above
    }

    /// Counts a job of priority `prio` that waits for `need` GPUs.
    pub(super) fn add(&mut self, prio: u32, need: u32) {
        self.reach(prio);
        self.at_prio += need;
    }
}

impl ShareView<'_> {
    pub(super) fn enabled(&self) -> bool {
        self.q.state == ObjState::Enabled
    }
    /// Idle GPUs a RESERVE share keeps for itself: its max less what it uses and holds,
    /// where a hold made by stopping the share's own jobs covers their GPUs (in use
    /// until they exit) rather than adding to them.
    pub(super) fn reserve_idle(&self, u: Ux) -> u32 {
        if self.q.resource_sharing.strategy == Strategy::Reserve && self.enabled() {
            let covered = self.held[u].min(self.stopping_own[u]);
            self.max[u].saturating_sub(self.used[u] + self.held[u] - covered)
        } else {
            0
        }
    }
    /// The most GPUs of unit `u` the share may use: its max, or its ceiling for a job
    /// that borrows (`None`: no ceiling).
    pub(super) fn limit(&self, u: Ux, borrowed: bool) -> Option<u64> {
        if borrowed {
            self.ceiling[u]
        } else {
            Some(self.max[u] as u64)
        }
    }
    /// GPUs over max that are not already being given back (negative: room left).
    pub(super) fn excess(&self, u: Ux) -> i64 {
        self.used[u] as i64 - self.stopping[u] as i64 - self.max[u] as i64
    }
}

impl<'a> Pass<'a> {
    pub(super) fn new(
        st: &'a State,
        now: Millis,
        walk: Walk,
        usage: &crate::fair::Usage,
    ) -> Pass<'a> {
        let mut units: Vec<&'a str> = vec![];
        let mut unit_ix: HashMap<&'a str, Ux> = HashMap::default();
        fn intern<'a>(units: &mut Vec<&'a str>, ix: &mut HashMap<&'a str, Ux>, u: &'a Unit) -> Ux {
            *ix.entry(u.as_str()).or_insert_with(|| {
                units.push(u.as_str());
                units.len() - 1
            })
        }
        for s in st.shares.values() {
            for l in &s.capacity_limits {
                intern(&mut units, &mut unit_ix, &l.unit);
            }
        }
        for e in st.environments.values() {
            for l in &e.capacity_limits {
                intern(&mut units, &mut unit_ix, &l.unit);
            }
        }
        let mut nodes = Vec::with_capacity(st.nodes.len());
        for n in st.nodes.values() {
            let mut nus: Vec<NodeUnit> = vec![];
            for (g, a) in n.inventory.gpus.iter().zip(&n.allocated) {
                // A node's GPUs are mostly of one unit: compare with the node's units
                // before hashing the name.
                let seen = nus.iter().position(|x| units[x.unit] == g.unit.as_str());
                let pos = match seen {
                    Some(p) => p,
                    None => {
                        let u = intern(&mut units, &mut unit_ix, &g.unit);
                        nus.push(NodeUnit {
                            unit: u,
                            free: Vec::with_capacity(n.inventory.gpus.len()),
                            held: 0,
                            pools: vec![],
                            own: 0,
                            lent: 0,
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
                name: n.name().as_str(),
                usable: n.schedulable(),
                units: nus,
            });
        }
        let nu_count = units.len();
        let unit_of_id = st
            .unit_names()
            .iter()
            .map(|u| unit_ix.get(u.as_str()).copied())
            .collect();
        let numbers = st.node_numbers();
        let numbered = numbers.iter().filter(|&&i| i != u32::MAX);
        let mut nx_of_number = vec![Nx::MAX; numbered.map(|&i| i as usize + 1).max().unwrap_or(0)];
        for (ni, &i) in numbers.iter().enumerate() {
            if let Some(slot) = nx_of_number.get_mut(i as usize) {
                *slot = ni as Nx;
            }
        }
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
                name: st.shared_name(e.name.as_str()),
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
            unit_names: units.iter().map(|&u| st.shared_name(u)).collect(),
            units,
            unit_ix,
            unit_of_id,
            nodes,
            node_by_name: Default::default(),
            nx_of_number,
            pools: vec![],
            envs,
            env_ix,
            shares: vec![],
            share_ix: HashMap::default(),
            groups: vec![],
            group_parent: vec![],
            borrow_reach: None,
            placed: JobBits::default(),
            queue_ix,
            victims_of: HashMap::default(),
            taken: JobBits::default(),
            holds: HashMap::default(),
            hold_lost: JobBits::default(),
            takeovers: 0,
            walk,
            reclaim_cands: HashMap::default(),
            inshare_cands: HashMap::default(),
            nu_flat: vec![],
            freed: vec![],
            walk_bufs: Default::default(),
            reclaim_failed: HashMap::default(),
            inshare_failed: HashMap::default(),
            array_taken: HashMap::default(),
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
                fair: usage.standing(st, s).map(|f| f.per_weight),
                fair_rank: 0,
                q: s,
                name: st.shared_name(s.name.as_str()),
                strategy: st.shared_name(strategy_str(s.resource_sharing.strategy)),
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
                stopping_own: vec![0; nu_count],
                ahead: vec![Ahead::NONE; nu_count],
                chain: vec![],
            });
        }
        pass.build_groups();
        pass.rank_fair_shares();
        // Holds first: they count in each node's held GPUs, which the pools are then
        // built from at once, rather than moving every held node in its pools.
        pass.account_stopping_and_holds();
        pass.build_pools();
        pass
    }

    /// Ranks each FAIR_SHARE queue's shares by decayed usage per weight, highest
    /// first; shares that stand alike share a rank.
    fn rank_fair_shares(&mut self) {
        let mut by_queue: HashMap<usize, Vec<(f64, usize)>> = HashMap::default();
        for (i, sv) in self.shares.iter().enumerate() {
            if let Some(f) = sv.fair {
                by_queue.entry(sv.queue).or_default().push((f, i));
            }
        }
        for (_, mut list) in by_queue {
            list.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut rank = 0;
            for k in 0..list.len() {
                if k > 0 && list[k].0 != list[k - 1].0 {
                    rank += 1;
                }
                self.shares[list[k].1].fair_rank = rank;
            }
        }
    }

    /// The queue's shares (those given) in the order a FAIR_SHARE borrow pass visits
    /// them: least decayed usage per weight first, then as given; `None` under FIFO.
    pub(super) fn fair_order(&self, shares: &[usize]) -> Option<Vec<usize>> {
        let first = *shares.first()?;
        self.shares[first].fair?;
        let mut order = shares.to_vec();
        order.sort_by_key(|&s| std::cmp::Reverse(self.shares[s].fair_rank));
        Some(order)
    }

    pub(super) fn build_pools(&mut self) {
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
                                buckets: vec![],
                                no_lent: vec![],
                                no_own: vec![],
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
        // A node's availability never rises above its free GPUs now (a pass only takes
        // free GPUs and gives back holds), so each pool needs buckets up to its
        // largest node's free count: the searches that sum and walk the buckets read
        // those alone.
        self.count_own_and_lent();
        let mut top = vec![0usize; self.pools.len()];
        for nv in &self.nodes {
            for nu in &nv.units {
                for &pi in &nu.pools {
                    top[pi] = top[pi].max(nu.free.len());
                }
            }
        }
        // Each bucket's nodes, gathered in index order, then made into sets at once:
        // a set built from sorted nodes costs far less than one insert per node.
        type Lists = (Vec<Vec<Nx>>, Vec<Vec<Nx>>, Vec<Vec<Nx>>);
        let mut lists: Vec<Lists> = top
            .iter()
            .map(|&t| {
                (
                    vec![vec![]; t + 1],
                    vec![vec![]; t + 1],
                    vec![vec![]; t + 1],
                )
            })
            .collect();
        for (ni, nv) in self.nodes.iter().enumerate() {
            for nu in &nv.units {
                let (a, no_lent, no_own) = nu.place_key();
                for &pi in &nu.pools {
                    let l = &mut lists[pi];
                    l.0[a as usize].push(ni as Nx);
                    if no_lent {
                        l.1[a as usize].push(ni as Nx);
                    }
                    if no_own {
                        l.2[a as usize].push(ni as Nx);
                    }
                    self.pools[pi].total_avail += a;
                }
            }
        }
        for (p, (b, l, o)) in self.pools.iter_mut().zip(lists) {
            let sets = |v: Vec<Vec<Nx>>| v.into_iter().map(BTreeSet::from_iter).collect();
            p.buckets = sets(b);
            p.no_lent = sets(l);
            p.no_own = sets(o);
        }
        // The flat table, where every pool index fits the bitmask.
        if self.pools.len() <= 64 {
            let units = self.units.len();
            self.nu_flat = vec![NuFlat::default(); self.nodes.len() * units];
            for (ni, nv) in self.nodes.iter().enumerate() {
                for nu in &nv.units {
                    let f = &mut self.nu_flat[ni * units + nu.unit];
                    f.avail = nu.avail();
                    f.pools = nu.pools.iter().fold(0, |m, &pi| m | 1 << pi);
                }
            }
        }
    }

    /// Counts each node's GPUs of running jobs placed within max and borrowed.
    fn count_own_and_lent(&mut self) {
        let st = self.st;
        for sh in st.shares.values() {
            for (_, r) in st.running_in(&sh.name) {
                let Some(u) = self.unit_of_id.get(r.unit_id as usize).copied().flatten() else {
                    continue;
                };
                for &(i, g) in r.first.iter().chain(&r.more) {
                    let Some(&n) = self.nx_of_number.get(i as usize).filter(|&&n| n != Nx::MAX)
                    else {
                        continue;
                    };
                    if let Some(nu) = self.nodes[n as usize].nu_mut(u) {
                        if r.borrowed {
                            nu.lent += g;
                        } else {
                            nu.own += g;
                        }
                    }
                }
            }
        }
    }

    /// The pass's index of node `name`.
    pub(super) fn node_ix(&self, name: &NodeName) -> Option<Nx> {
        // Holds name their nodes; a pass with thousands of holders looks names up by
        // hash rather than by comparing names along a binary search.
        let ix = self.node_by_name.get_or_init(|| {
            self.nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name, i as Nx))
                .collect()
        });
        ix.get(name.as_str()).copied()
    }

    /// GPUs of unit `u` available to others on node `n`, if the node is in pool `pi`.
    pub(super) fn pool_avail(&self, n: Nx, u: Ux, pi: usize) -> Option<u32> {
        if self.nu_flat.is_empty() {
            return self.nodes[n as usize]
                .nu(u)
                .filter(|nu| nu.pools.contains(&pi))
                .map(|nu| nu.avail());
        }
        let f = self.nu_flat[n as usize * self.units.len() + u];
        (f.pools >> pi & 1 == 1).then_some(f.avail)
    }

    /// GPUs of unit `u` available to others on node `n` (0 where it has none).
    pub(super) fn avail_of(&self, n: Nx, u: Ux) -> u32 {
        match self.nu_flat.get(n as usize * self.units.len() + u) {
            Some(f) => f.avail,
            None => self.nodes[n as usize].nu(u).map_or(0, |nu| nu.avail()),
        }
    }

    /// Moves node `n`'s entry for unit `u` after `f` changed its free or held GPUs.
    pub(super) fn touch(&mut self, n: Nx, u: Ux, f: impl FnOnce(&mut NodeUnit)) {
        let Some(nu) = self.nodes[n as usize].nu_mut(u) else {
            return;
        };
        let before = nu.place_key();
        f(nu);
        let after = nu.place_key();
        if before != after {
            let units = self.units.len();
            if let Some(flat) = self.nu_flat.get_mut(n as usize * units + u) {
                flat.avail = after.0;
            }
            for &pi in &nu.pools {
                let p = &mut self.pools[pi];
                p.remove(n, before);
                p.insert(n, after);
            }
        }
    }

    pub(super) fn account_stopping_and_holds(&mut self) {
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
                if matches!(stop.kind, StopKind::InShare { .. }) {
                    self.shares[s].stopping_own[u] += total;
                }
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
            let targets: Vec<(Nx, u32)> = hold
                .nodes
                .iter()
                .filter_map(|(node, count)| self.node_ix(node).map(|n| (n, *count)))
                .collect();
            self.take_hold(job.id, s, u, need, &targets);
        }
    }
}
