//! Nested shares (`docs/design.md` §3, "Nested shares"): groups of a queue's shares,
//! as the pass sees them. A queue without groups reads none of this: every share's
//! chain is empty, so borrowing has no group ceiling, a RESERVE share's idle GPUs are
//! kept as in a flat queue, every borrower is 0 levels out and every victim 0 close.
//!
//! A group's use is read from its shares' views each time (at most
//! [`MAX_SHARES_PER_QUEUE`] shares), so it is always as the pass has it now.

use super::*;

/// A group of shares as the pass sees it.
pub(super) struct GroupView {
    /// `group NAME`, as reasons name it.
    pub(super) label: SharedStr,
    pub(super) strategy: SharedStr,
    pub(super) reserve: bool,
    /// LEND_AND_BORROW: its shares may borrow from outside it.
    pub(super) borrows: bool,
    pub(super) queue: usize,
    /// Levels from the top of its queue: 1 for a group in no group.
    pub(super) depth: u32,
    /// Per unit; `None` for a unit the group has no limit for (it does not bound it).
    pub(super) max: Vec<Option<u32>>,
    pub(super) ceiling: Vec<Option<u64>>,
    /// Its members: shares and groups (pass indexes).
    pub(super) shares: Vec<usize>,
    pub(super) groups: Vec<usize>,
    /// Every share below it, at any depth.
    pub(super) below: Vec<usize>,
}

/// A queue's top-level entry: a share in no group, or a group in no group.
#[derive(Clone, Copy)]
enum Entry {
    Share(usize),
    Group(usize),
}

impl<'a> Pass<'a> {
    /// Builds the groups' views and each share's chain of groups (nearest first).
    pub(super) fn build_groups(&mut self) {
        let st = self.st;
        if st.groups.is_empty() {
            return;
        }
        let nu = self.units.len();
        let gix: HashMap<&str, usize> = st
            .groups
            .keys()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        let mut parent: Vec<Option<usize>> = vec![None; st.groups.len()];
        for (i, g) in st.groups.values().enumerate() {
            for m in &g.groups {
                if let Some(&c) = gix.get(m.as_str()) {
                    parent[c] = Some(i);
                }
            }
        }
        for (i, g) in st.groups.values().enumerate() {
            let mut depth = 1;
            let mut at = i;
            while let Some(p) = parent[at] {
                depth += 1;
                at = p;
                if depth > MAX_GROUP_DEPTH as u32 + 1 {
                    break;
                }
            }
            let units: Vec<Unit> = (0..nu).map(|u| Unit::new(self.units[u])).collect();
            self.groups.push(GroupView {
                label: format!("group {}", g.name).into(),
                strategy: st.shared_name(strategy_str(g.resource_sharing.strategy)),
                reserve: g.resource_sharing.strategy == Strategy::Reserve,
                borrows: g.resource_sharing.strategy == Strategy::LendAndBorrow,
                queue: self
                    .queue_ix
                    .get(g.queue.as_str())
                    .copied()
                    .unwrap_or(usize::MAX),
                depth,
                max: units.iter().map(|u| g.max_for(u)).collect(),
                ceiling: units.iter().map(|u| g.ceiling_for(u)).collect(),
                shares: g
                    .shares
                    .iter()
                    .filter_map(|s| self.share_ix.get(s.as_str()).copied())
                    .collect(),
                groups: g
                    .groups
                    .iter()
                    .filter_map(|m| gix.get(m.as_str()).copied())
                    .collect(),
                below: vec![],
            });
            self.group_parent.push(parent[i]);
        }
        // Each share's chain, and each group's shares at any depth.
        for gi in 0..self.groups.len() {
            for s in self.groups[gi].shares.clone() {
                let mut chain = vec![gi];
                let mut at = gi;
                while let Some(p) = self.group_parent[at] {
                    chain.push(p);
                    at = p;
                }
                for &g in &chain {
                    self.groups[g].below.push(s);
                }
                self.shares[s].chain = chain;
            }
        }
    }

    /// GPUs of unit `u` the group's shares use and hold.
    pub(super) fn group_use(&self, g: usize, u: Ux) -> u32 {
        self.groups[g]
            .below
            .iter()
            .map(|&s| self.shares[s].used[u] + self.shares[s].held[u])
            .sum()
    }

    /// Where a job of share `s` needing `need` GPUs of `u` that borrows would take a
    /// group of the share above its ceiling: that group's reason.
    pub(super) fn group_ceiling(&self, s: usize, u: Ux, need: u32) -> Option<Why> {
        for &g in &self.shares[s].chain {
            let gv = &self.groups[g];
            let have = self.group_use(g, u);
            let Some(limit) = gv.ceiling[u] else { continue };
            if (have + need) as u64 <= limit {
                continue;
            }
            return Some(if !gv.borrows {
                PendingReasonOf::AtMaxNoBorrow {
                    share: gv.label.clone(),
                    used: have,
                    max: gv.max[u].unwrap_or(0),
                    need,
                    unit: self.unit_names[u].clone(),
                    strategy: gv.strategy.clone(),
                }
            } else {
                PendingReasonOf::BorrowLimit {
                    used: have,
                    limit,
                    need,
                    unit: self.unit_names[u].clone(),
                }
            });
        }
        None
    }

    /// Where a job of share `s` needing `need` GPUs of `u` borrows: the depth of the
    /// nearest group of the share whose max holds it with its shares' use (its lenders
    /// are inside that group), or 0 where it borrows from the queue at large (always,
    /// for a share in no group). The borrow pass takes the deepest first.
    pub(super) fn borrow_depth(&self, s: usize, u: Ux, need: u32) -> u32 {
        self.shares[s]
            .chain
            .iter()
            .find(|&&g| self.groups[g].max[u].is_some_and(|m| self.group_use(g, u) + need <= m))
            .map_or(0, |&g| self.groups[g].depth)
    }

    /// How close shares `a` and `b` are: the depth of the deepest group holding both
    /// (0 when only their queue does). Reclaim takes from the least close first.
    pub(super) fn closeness(&self, a: usize, b: usize) -> u32 {
        let (ca, cb) = (&self.shares[a].chain, &self.shares[b].chain);
        ca.iter()
            .find(|g| cb.contains(g))
            .map_or(0, |&g| self.groups[g].depth)
    }

    /// Whether queue `q` has groups.
    pub(super) fn queue_has_groups(&self, q: usize) -> bool {
        self.groups.iter().any(|g| g.queue == q)
    }

    /// The depth of the deepest group of queue `q` (0 without groups).
    pub(super) fn deepest_group(&self, q: usize) -> u32 {
        self.groups
            .iter()
            .filter(|g| g.queue == q)
            .map(|g| g.depth)
            .max()
            .unwrap_or(0)
    }

    /// Idle GPUs of unit `u` kept from share `s` in environment `e` by RESERVE shares
    /// and groups that do not contain it, and the share or group keeping the most (its
    /// name, for the reason). What a RESERVE group keeps is its max less its shares'
    /// use, or what its RESERVE members keep where that is more; a group that contains
    /// `s` keeps nothing from it, but its other members keep what they keep.
    pub(super) fn reserve_nested(&self, e: usize, u: Ux, s: usize) -> (u32, Option<SharedStr>) {
        let mut total = 0;
        let mut top: Option<(u32, SharedStr)> = None;
        for entry in self.top_entries(e) {
            let k = self.kept(entry, u, s);
            if k > 0 {
                total += k;
                if top.as_ref().is_none_or(|(m, _)| k > *m) {
                    let name = match entry {
                        Entry::Share(t) => self.shares[t].name.clone(),
                        Entry::Group(g) => self.groups[g].label.clone(),
                    };
                    top = Some((k, name));
                }
            }
        }
        (total, top.map(|(_, n)| n))
    }

    /// The shares and groups in no group, of the queues on environment `e` (read on
    /// every placement: an iterator, nothing allocated).
    fn top_entries(&self, e: usize) -> impl Iterator<Item = Entry> + use<'_, 'a> {
        let shares = self
            .shares
            .iter()
            .enumerate()
            .filter(move |(_, sv)| sv.env == Some(e) && sv.chain.is_empty())
            .map(|(t, _)| Entry::Share(t));
        let groups = self.groups.iter().enumerate().filter_map(move |(g, gv)| {
            let on_env = gv
                .below
                .first()
                .is_some_and(|&t| self.shares[t].env == Some(e));
            (on_env && self.group_parent[g].is_none()).then_some(Entry::Group(g))
        });
        shares.chain(groups)
    }

    fn kept(&self, entry: Entry, u: Ux, s: usize) -> u32 {
        match entry {
            Entry::Share(t) if t == s => 0,
            Entry::Share(t) => self.shares[t].reserve_idle(u),
            Entry::Group(g) => {
                let gv = &self.groups[g];
                let inner: u32 = gv
                    .shares
                    .iter()
                    .map(|&t| self.kept(Entry::Share(t), u, s))
                    .chain(gv.groups.iter().map(|&c| self.kept(Entry::Group(c), u, s)))
                    .sum();
                if !gv.reserve || gv.below.contains(&s) {
                    return inner;
                }
                let using: u32 = gv
                    .below
                    .iter()
                    .map(|&t| {
                        let sv = &self.shares[t];
                        let covered = sv.held[u].min(sv.stopping_own[u]);
                        sv.used[u] + sv.held[u] - covered
                    })
                    .sum();
                gv.max[u].map_or(inner, |m| m.saturating_sub(using).max(inner))
            }
        }
    }
}
