//! Victim selection for reclaim (rule 3) and in-share preemption (rule 4): which jobs
//! are eligible and in what order, the search for the smallest set that lets the
//! preemptor fit, and the hold that keeps the freed GPUs for it.

use std::cmp::Reverse;

use super::*;

/// A running job that may be chosen as a victim.
#[derive(Clone)]
pub(super) struct Cand {
    pub(super) id: JobId,
    pub(super) share: usize,
    pub(super) prio: u32,
    pub(super) total: u32,
    /// The job's first node and its GPUs there, kept inline: most victims have one node,
    /// and the victim search reads it for every victim it looks at.
    pub(super) first: Option<(Nx, u32)>,
    /// Further nodes of a gang.
    pub(super) more: Vec<(Nx, u32)>,
    pub(super) protected_until: Millis,
    pub(super) grace: Millis,
}

impl Cand {
    /// The job's nodes and its GPUs on each.
    pub(super) fn nodes(&self) -> impl Iterator<Item = &(Nx, u32)> + '_ {
        self.first.iter().chain(self.more.iter())
    }
}

/// Victim order: in a queue with groups, a reclaim takes first from the shares farthest
/// from the preemptor's (the depth of the deepest group holding both; 0 for every
/// share of a queue without groups); under FAIR_SHARE, the share most above its fair
/// share first (its rank; 0 for every share under FIFO); then priority, then least work
/// lost (the time since the job's last checkpoint, or since it started when it has
/// none: for jobs that never checkpoint, most recently started first), then most
/// recently started, then newest id.
type CandKey = (u32, u32, u32, Millis, Reverse<Millis>, Reverse<JobId>);

/// What a victim search looks for: `k` nodes with room for `g` GPUs of unit `u` each,
/// in pool `pi`, taking at most `allowance` GPUs that are free now, and victims of at
/// least `deficit` GPUs in all (for the environment's cap or the share's limit).
#[derive(Clone, Copy)]
pub(super) struct Shape {
    pub(super) u: Ux,
    pub(super) g: u32,
    pub(super) k: u32,
    pub(super) pi: usize,
    pub(super) allowance: u32,
    pub(super) deficit: i64,
}

/// What [`Pass::look`] says of one victim.
pub(super) enum Look {
    Take,
    Skip,
    Stop,
}

pub(super) enum Mode {
    /// Cross-share reclaim: victims' shares must still be over max when picked.
    Reclaim,
    /// In-share: victims of strictly lower priority than this.
    InShare(u32),
}

/// One unit's victims, and their keys with each one's index, sorted apart from them.
type UnitVictims = (Vec<Option<Cand>>, Vec<(CandKey, u32)>);

impl<'a> Pass<'a> {
    /// Victims in victim order (lowest priority, then most recently started), with the
    /// index of the first one not yet taken. For reclaim, `key` is (queue, unit): the
    /// running jobs of the queue's shares over their max. For in-share preemption it
    /// is (share, unit): the share's running jobs. One scan of the shares' jobs builds
    /// the lists of every unit not built yet, so each job is looked at once per pass.
    pub(super) fn candidates(
        &mut self,
        key: (usize, Ux),
        mode_reclaim: bool,
    ) -> (Vec<Cand>, usize) {
        if let Some(c) = self.take_cached(key, mode_reclaim) {
            return c;
        }
        let cache = if mode_reclaim {
            &self.reclaim_cands
        } else {
            &self.inshare_cands
        };
        let st = self.st;
        let (x, u) = key;
        // A key past the queues names the preemptor's share (see `try_preempt`).
        let (qx, pre) = match x.checked_sub(self.queue_ix.len()) {
            Some(p) if mode_reclaim => (self.shares[p].queue, Some(p)),
            _ => (x, None),
        };
        let units = self.units.len();
        let wanted: Vec<bool> = (0..units)
            .map(|v| v == u || !cache.contains_key(&(x, v)))
            .collect();
        // Per unit: the victims, and their keys with their index, sorted apart so that
        // the sort moves small keys rather than whole victims.
        let mut out: Vec<UnitVictims> = (0..units).map(|_| (vec![], vec![])).collect();
        for (t, sv) in self.shares.iter().enumerate() {
            let relevant = |v: Ux| {
                wanted[v]
                    && if mode_reclaim {
                        sv.queue == qx && sv.excess(v) > 0
                    } else {
                        t == x
                    }
            };
            if !(0..units).any(relevant) {
                continue;
            }
            let count = st.running_count_in(&sv.q.name);
            for (v, (list, keys)) in out.iter_mut().enumerate() {
                if relevant(v) {
                    list.reserve(count);
                    keys.reserve(count);
                }
            }
            let node = |&(i, g): &(u32, u32)| {
                self.nx_of_number
                    .get(i as usize)
                    .filter(|&&n| n != Nx::MAX)
                    .map(|&n| (n, g))
            };
            for (&id, r) in st.running_in(&sv.q.name) {
                if r.stopping {
                    continue;
                }
                let Some(v) = self
                    .unit_of_id
                    .get(r.unit_id as usize)
                    .copied()
                    .flatten()
                    .filter(|&v| relevant(v))
                else {
                    continue;
                };
                let started = r.started_at;
                let resumes =
                    resume_point(started, r.checkpointed_at, r.checkpoint_every_s, self.now);
                let mut nodes = r.first.iter().chain(&r.more).filter_map(node);
                let first = nodes.next();
                let more = nodes.collect();
                let (list, keys) = &mut out[v];
                keys.push((
                    (
                        pre.map_or(0, |p| self.closeness(p, t)),
                        if mode_reclaim { sv.fair_rank } else { 0 },
                        r.priority,
                        self.now.saturating_sub(resumes),
                        Reverse(started),
                        Reverse(id),
                    ),
                    list.len() as u32,
                ));
                // A reclaim takes a job on loan after its share's loan minimum and gives
                // it the recall notice before its grace; in-share preemption neither.
                let grace = r.grace_s.unwrap_or(sv.q.default_grace_s) * SECOND;
                let (min_run, grace) = if mode_reclaim {
                    (
                        sv.q.loan_min_runtime_s(),
                        grace + sv.q.loans.recall_notice_s * SECOND,
                    )
                } else {
                    (sv.q.min_runtime_s, grace)
                };
                list.push(Some(Cand {
                    id,
                    share: t,
                    prio: r.priority,
                    total: r.gpus,
                    first,
                    more,
                    protected_until: started + min_run * SECOND,
                    grace,
                }));
            }
        }
        let mut mine = vec![];
        for (v, (mut list, mut keys)) in out.into_iter().enumerate() {
            if !wanted[v] {
                continue;
            }
            // Keys are distinct (they end with the job id), so the order is the one order.
            keys.sort_unstable_by_key(|a| a.0);
            let list: Vec<Cand> = keys
                .iter()
                .map(|&(_, i)| list[i as usize].take().expect("each victim once"))
                .collect();
            if v == u {
                mine = list;
            } else {
                self.put_cached((x, v), mode_reclaim, (list, 0));
            }
        }
        (mine, 0)
    }

    fn take_cached(&mut self, key: (usize, Ux), reclaim: bool) -> Option<(Vec<Cand>, usize)> {
        if reclaim {
            self.reclaim_cands.remove(&key)
        } else {
            self.inshare_cands.remove(&key)
        }
    }

    fn put_cached(&mut self, key: (usize, Ux), reclaim: bool, c: (Vec<Cand>, usize)) {
        if reclaim {
            self.reclaim_cands.insert(key, c);
        } else {
            self.inshare_cands.insert(key, c);
        }
    }

    /// Rules 3 and 4: picks victims in order until the job would fit, keeps the
    /// smallest subset that still fits, marks them preempting and holds their GPUs for
    /// the job. Records in `protect` when victims were passed over for `min_runtime_s`.
    pub(super) fn try_preempt(
        &mut self,
        ask: Ask<'a>,
        mode: Mode,
        protect: &mut Option<Millis>,
    ) -> bool {
        let (s, u) = (ask.s, ask.u);
        let (g, k) = (ask.w.gpus_per_node, ask.w.nodes);
        let Some(e) = self.shares[s].env else {
            return false;
        };
        let Some(pi) = self.envs[e].pool[u] else {
            return false;
        };
        let reclaim = matches!(mode, Mode::Reclaim);
        let queue = self.shares[s].queue;
        // A reclaim's victims in a queue with groups are in an order of the preemptor's
        // own (farthest first): listed under the preemptor's share.
        let key = match reclaim {
            true if self.queue_has_groups(queue) => (self.queue_ix.len() + s, u),
            true => (queue, u),
            false => (s, u),
        };
        // A failure for a smaller request (and, in-share, a higher priority) means this
        // one fails too: victims only become fewer during a pass. It fails for the same
        // victims kept by `min_runtime_s`, so the job is told the same.
        let failed = if reclaim {
            self.reclaim_failed.get(&key).and_then(|f| {
                f.iter()
                    .find(|&&(k0, g0, _)| k >= k0 && g >= g0)
                    .map(|f| f.2)
            })
        } else {
            self.inshare_failed.get(&key).and_then(|f| {
                f.iter()
                    .find(|&&(k0, g0, p0, _)| k >= k0 && g >= g0 && ask.prio <= p0)
                    .map(|f| f.3)
            })
        };
        if let Some(kept) = failed {
            if let Some(t) = kept {
                *protect = Some(protect.map_or(t, |p| p.min(t)));
            }
            return false;
        }
        if reclaim
            && !self
                .shares
                .iter()
                .any(|sv| sv.queue == queue && sv.excess(u) > 0)
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
            // Room under the cap that other RESERVE shares keep idle is not the job's.
            deficit = deficit.max(
                (env.used[u] - env.stopping[u] + env.holds[u] + need + reserved) as i64
                    - cap as i64,
            );
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
            // A borrower keeps its groups within their ceilings too.
            if sv.used[u] + sv.held[u] + need > sv.max[u] {
                for &gi in &sv.chain {
                    let Some(limit) = self.groups[gi].ceiling[u] else {
                        continue;
                    };
                    let stopping: u32 = self.groups[gi]
                        .below
                        .iter()
                        .map(|&t| self.shares[t].stopping[u])
                        .sum();
                    let have = self.group_use(gi, u) - stopping;
                    deficit = deficit.max((have + need) as i64 - limit as i64);
                }
            }
        }
        while start < cands.len() && self.taken.contains(&cands[start].id) {
            start += 1;
        }
        let shape = Shape {
            u,
            g,
            k,
            pi,
            allowance: free_allowance,
            deficit,
        };
        // What this search passes over for `min_runtime_s`, apart from earlier ones.
        let before = protect.take();
        let (found, picked) = if k > 1 {
            self.gang_victims(shape, &mode, &cands, start, protect)
        } else {
            self.node_victims(shape, &mode, &cands, start, protect)
        };
        let kept = *protect;
        if let Some(b) = before {
            *protect = Some(protect.map_or(b, |p| p.min(b)));
        }
        if let Some(until) = *protect {
            self.wakeup = Some(self.wakeup.map_or(until, |w| w.min(until)));
        }
        let Some(targets) = found else {
            // Remember the failure unless an earlier one already covers it, and forget the
            // ones it covers, so the list stays as short as the distinct request shapes.
            if reclaim {
                let f = self.reclaim_failed.entry(key).or_default();
                f.retain(|&(k0, g0, _)| !(k0 >= k && g0 >= g));
                f.push((k, g, kept));
            } else {
                let f = self.inshare_failed.entry(key).or_default();
                f.retain(|&(k0, g0, p0, _)| !(k0 >= k && g0 >= g && p0 <= ask.prio));
                f.push((k, g, ask.prio, kept));
            }
            self.put_cached(key, reclaim, (cands, start));
            self.walk_bufs.2 = picked;
            return false;
        };
        *protect = None;
        // Keep only victims on the target nodes, plus (in pick order) any needed to meet
        // the count deficit; then drop the highest-priority ones that are not needed.
        let on_target = |c: &Cand| c.nodes().any(|(n, _)| targets.contains(n));
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
        self.walk_bufs.2 = picked;
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
        self.put_cached(key, reclaim, (cands, start));
        true
    }

    /// One step of a walk over victims in victim order (lowest priority, then most
    /// recently started): the one place where eligibility is decided. `Stop` ends the
    /// walk: in-share preemption looks at no more than [`INSHARE_LOOK_LIMIT`] victims
    /// per job and pass (as Slurm's schedulers bound their looks; reclaim is never
    /// bounded, so lent capacity always comes back), and takes only strictly lower
    /// priorities. `Skip` passes over a victim already taken, one whose share is no
    /// longer over its max (reclaim; `over_max` decides), or one younger than its
    /// share's `min_runtime_s` (recorded in `protect`).
    fn look(
        &self,
        c: &Cand,
        mode: &Mode,
        looked: &mut usize,
        protect: &mut Option<Millis>,
        over_max: impl FnOnce(&Cand) -> bool,
    ) -> Look {
        if self.taken.contains(&c.id) {
            return Look::Skip;
        }
        *looked += 1;
        match mode {
            Mode::InShare(_) if *looked > INSHARE_LOOK_LIMIT => return Look::Stop,
            Mode::InShare(p) if c.prio >= *p => return Look::Stop,
            Mode::InShare(_) => {}
            Mode::Reclaim => {
                if !over_max(c) {
                    return Look::Skip;
                }
            }
        }
        if c.protected_until > self.now {
            *protect = Some(protect.map_or(c.protected_until, |p| p.min(c.protected_until)));
            return Look::Skip;
        }
        Look::Take
    }

    /// Victims for a single-node job: see [`Pass::walk_node_victims`]. The GPUs freed
    /// per node are counted in a table kept for the pass, one entry per node, cleared
    /// again after each walk.
    fn node_victims(
        &mut self,
        a: Shape,
        mode: &Mode,
        cands: &[Cand],
        start: usize,
        protect: &mut Option<Millis>,
    ) -> (Option<Vec<Nx>>, Vec<usize>) {
        let mut freed = std::mem::take(&mut self.freed);
        freed.resize(self.nodes.len(), 0);
        let (mut touched, mut fitting, mut picked) = std::mem::take(&mut self.walk_bufs);
        touched.clear();
        fitting.clear();
        picked.clear();
        let found = self.walk_node_victims(
            a,
            mode,
            cands,
            start,
            protect,
            &mut freed,
            (&mut touched, &mut fitting, &mut picked),
        );
        for &n in &touched {
            freed[n as usize] = 0;
        }
        self.freed = freed;
        self.walk_bufs = (touched, fitting, vec![]);
        (found, picked)
    }

    /// Victims for a single-node job: taken in victim order until the job fits on
    /// some node. A share's excess is counted per node: victims elsewhere must not use
    /// up the excess that would have made a victim on the right node eligible. Returns
    /// the target node, or `None`, and the victims picked.
    ///
    /// `freed` (all zero on entry) counts the GPUs the picked victims free per node;
    /// `bufs` (empty on entry) are the nodes it counts on, the nodes where the job would
    /// fit, and the victims picked: buffers kept for the pass, so that the walks, tens
    /// of thousands in a pass, do not grow new lists each time.
    #[allow(clippy::too_many_arguments)]
    fn walk_node_victims(
        &self,
        a: Shape,
        mode: &Mode,
        cands: &[Cand],
        start: usize,
        protect: &mut Option<Millis>,
        freed: &mut [u32],
        bufs: (&mut Vec<Nx>, &mut Vec<Nx>, &mut Vec<usize>),
    ) -> Option<Vec<Nx>> {
        let (touched, fitting, picked) = bufs;
        let Shape {
            u,
            g,
            k,
            pi,
            allowance,
            deficit,
        } = a;
        let reclaim = matches!(mode, Mode::Reclaim);
        let mut node_excess: HashMap<(Nx, usize), i64> = HashMap::default();
        // Nodes that fit on free GPUs alone, for the check after each victim.
        let free_fit = self.pools[pi].fitting_nodes(g) as usize;
        let mut total: i64 = 0;
        let mut looked = 0usize;
        for (ci, c) in cands.iter().enumerate().skip(start) {
            let over_max = |c: &Cand| {
                let share_ex = self.shares[c.share].excess(u);
                c.nodes()
                    .any(|&(n, _)| *node_excess.entry((n, c.share)).or_insert(share_ex) > 0)
            };
            match self.look(c, mode, &mut looked, protect, over_max) {
                Look::Stop => break,
                Look::Skip => continue,
                Look::Take => {}
            }
            picked.push(ci);
            total += c.total as i64;
            for &(n, cnt) in c.nodes() {
                if reclaim {
                    let share_ex = self.shares[c.share].excess(u);
                    let ex = node_excess.entry((n, c.share)).or_insert(share_ex);
                    if *ex <= 0 {
                        continue;
                    }
                    *ex -= c.total as i64;
                }
                let before = freed[n as usize];
                if before == 0 {
                    touched.push(n);
                }
                freed[n as usize] = before + cnt;
                // Track the nodes where the job would now fit, so each check looks only
                // at those and stays cheap however many small victims the walk passes.
                let avail = self.pool_avail(n, u, pi);
                let fits = |f: u32| avail.is_some_and(|a| g.saturating_sub(f) <= a);
                // A node enters the list when first touched (it may have fit on free
                // GPUs alone, which a reserve or the cap did not allow) or when it starts
                // to fit.
                if fits(before + cnt) && (before == 0 || !fits(before)) {
                    fitting.push(n);
                }
            }
            if total >= deficit && fitting.len() + free_fit >= k as usize {
                if let Some(t) = self.fit(pi, g, k, allowance, freed, fitting) {
                    return Some(t);
                }
            }
        }
        None
    }

    /// Victims that free `k` whole nodes for a gang (each with room for `g`), so that
    /// over-max work spread over many nodes still yields whole nodes. Per node, the
    /// shortest run of its eligible victims (in victim order) that makes room; nodes are
    /// taken cheapest first: free ones, then by their dearest victim's priority, then
    /// by the GPUs preempted, then by name. A node is taken only while each of its
    /// victims' shares is still over its max (reclaim). Victims are then added in
    /// victim order while the environment's cap or the share's limit needs more room.
    /// Returns the target nodes, or `None`, and the victims picked.
    fn gang_victims(
        &self,
        a: Shape,
        mode: &Mode,
        cands: &[Cand],
        start: usize,
        protect: &mut Option<Millis>,
    ) -> (Option<Vec<Nx>>, Vec<usize>) {
        let Shape {
            u,
            g,
            k,
            pi,
            allowance,
            deficit,
        } = a;
        let reclaim = matches!(mode, Mode::Reclaim);
        let mut order: Vec<usize> = vec![];
        let mut per_node: HashMap<Nx, Vec<usize>> = HashMap::default();
        let mut looked = 0usize;
        for (ci, c) in cands.iter().enumerate().skip(start) {
            let over_max = |c: &Cand| self.shares[c.share].excess(u) > 0;
            match self.look(c, mode, &mut looked, protect, over_max) {
                Look::Stop => break,
                Look::Skip => continue,
                Look::Take => {}
            }
            order.push(ci);
            for &(n, _) in c.nodes() {
                per_node.entry(n).or_default().push(ci);
            }
        }
        // (dearest victim's priority, GPUs preempted, node) → victims, GPUs from free.
        type NodeOption = ((u32, u32, Nx), Vec<usize>, u32);
        let mut opts: Vec<NodeOption> = vec![];
        // Where the free GPUs the job may take (`allowance`: RESERVE shares keep the
        // rest idle) may not cover every member, a node with room may also be one whose
        // victims free the member's GPUs themselves.
        let scarce = allowance < g * k;
        for (&n, list) in &per_node {
            let Some(avail) = self.pool_avail(n, u, pi) else {
                continue;
            };
            if avail >= g && !scarce {
                continue;
            }
            let goal = if avail >= g { g } else { g - avail };
            let (mut freed, mut dearest, mut gpus, mut vs) = (0u32, 0u32, 0u32, vec![]);
            for &ci in list {
                let c = &cands[ci];
                freed += c
                    .nodes()
                    .filter(|(m, _)| *m == n)
                    .map(|(_, x)| x)
                    .sum::<u32>();
                dearest = dearest.max(c.prio);
                gpus += c.total;
                vs.push(ci);
                if freed >= goal {
                    break;
                }
            }
            if avail + freed >= g {
                opts.push(((dearest, gpus, n), vs, g.saturating_sub(freed)));
            }
        }
        opts.sort_by_key(|o| o.0);
        let mut chosen: Vec<Nx> = vec![];
        let mut picked: Vec<usize> = vec![];
        let mut from_free = 0u32;
        let mut left: HashMap<usize, i64> = HashMap::default();
        // Takes victim `ci` if its share is still over max counting what is taken.
        let take = |ci: usize, left: &mut HashMap<usize, i64>| -> bool {
            let c = &cands[ci];
            if !reclaim {
                return true;
            }
            let l = left
                .entry(c.share)
                .or_insert_with(|| self.shares[c.share].excess(u));
            if *l <= 0 {
                return false;
            }
            *l -= c.total as i64;
            true
        };
        for n in self.pools[pi].find_up_to(g, k, &[]) {
            if from_free + g > allowance {
                break;
            }
            chosen.push(n);
            from_free += g;
        }
        for (key, vs, free_part) in &opts {
            if chosen.len() == k as usize {
                break;
            }
            if from_free + free_part > allowance || chosen.contains(&key.2) {
                continue;
            }
            let mut trial = left.clone();
            let new: Vec<usize> = vs
                .iter()
                .copied()
                .filter(|ci| !picked.contains(ci))
                .collect();
            if !new.iter().all(|&ci| take(ci, &mut trial)) {
                continue;
            }
            left = trial;
            picked.extend(new);
            chosen.push(key.2);
            from_free += free_part;
        }
        if chosen.len() < k as usize {
            return (None, picked);
        }
        let mut total: i64 = picked.iter().map(|&ci| cands[ci].total as i64).sum();
        for &ci in &order {
            if total >= deficit {
                break;
            }
            if !picked.contains(&ci) && take(ci, &mut left) {
                picked.push(ci);
                total += cands[ci].total as i64;
            }
        }
        if total < deficit {
            return (None, picked);
        }
        (Some(chosen), picked)
    }

    /// Whether the victims `set` free enough on `targets` (each needs `g`), taking at most
    /// `allowance` GPUs that are free now.
    pub(super) fn fits_on(
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
                .flat_map(|&ci| cands[ci].nodes())
                .filter(|(m, _)| *m == n)
                .map(|(_, c)| c)
                .sum();
            let avail = self.avail_of(n, u);
            let take = g.saturating_sub(freed);
            if take > avail {
                return false;
            }
            from_free += take;
        }
        from_free <= allowance
    }

    /// Chooses `k` target nodes given GPUs `freed` by victims so far (per node), or None.
    /// `fitting` lists the nodes where the victims in `freed` make room for `g`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fit(
        &self,
        pi: usize,
        g: u32,
        k: u32,
        allowance: u32,
        freed: &[u32],
        fitting: &[Nx],
    ) -> Option<Vec<Nx>> {
        let mut opts: Vec<(u32, Nx)> = fitting
            .iter()
            .map(|&n| (g.saturating_sub(freed[n as usize]), n))
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

    pub(super) fn commit_preemption(
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
                    in_share_reason(ask.id, p, c.prio),
                ),
            };
            self.plan.actions.push(Action::Preempt {
                job: c.id,
                kind,
                reason,
            });
            self.shares[c.share].stopping[u] += c.total;
            if matches!(mode, Mode::InShare(_)) {
                self.shares[c.share].stopping_own[u] += c.total;
            }
            self.envs[e].stopping[u] += c.total;
            deadline = deadline.max(self.now + c.grace);
        }
        let g = ask.w.gpus_per_node;
        let per_node: Vec<(Nx, u32)> = targets.iter().map(|&n| (n, g)).collect();
        self.take_hold(ask.id, s, u, need, &per_node);
        let hold = Hold {
            nodes: targets
                .iter()
                .map(|&n| (NodeName(self.nodes[n as usize].name.to_owned()), g))
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

/// `in-share preemption by job J (priority P > Q)`, its numbers written by `itoa`: a
/// pass writes one per in-share victim, thousands of them, and `format!` costs several
/// times as much for text this simple.
fn in_share_reason(job: JobId, p: u32, q: u32) -> String {
    let mut b = itoa::Buffer::new();
    let mut s = String::with_capacity(64);
    s.push_str("in-share preemption by job ");
    s.push_str(b.format(job.0));
    s.push_str(" (priority ");
    s.push_str(b.format(p));
    s.push_str(" > ");
    s.push_str(b.format(q));
    s.push(')');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_share_reason_reads_as_format_would_write_it() {
        for (j, p, q) in [
            (0, 0, 0),
            (7, 10, 9),
            (u64::MAX, u32::MAX, 1),
            (123_456, 99, 0),
        ] {
            assert_eq!(
                in_share_reason(JobId(j), p, q),
                format!("in-share preemption by job {j} (priority {p} > {q})")
            );
        }
    }
}
