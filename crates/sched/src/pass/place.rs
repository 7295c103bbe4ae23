//! Placement: the share's limit, RESERVE shares' idle GPUs, best fit on the
//! environment's usable nodes, gangs whole or not at all, and the environment's cap
//! (rules 2, 5, 7 and 8).

use std::collections::BTreeSet;

use super::*;

impl Pool {
    pub(super) fn fitting_nodes(&self, g: u32) -> u32 {
        self.buckets
            .iter()
            .skip(g as usize)
            .map(|b| b.len() as u32)
            .sum()
    }
    /// Best fit: `k` nodes with at least `g` available, fewest left over, then by name.
    pub(super) fn find(&self, g: u32, k: u32, exclude: &[Nx]) -> Option<Vec<Nx>> {
        // Too few nodes fit at all: no list to build (most failed placements end here).
        if self.fitting_nodes(g) < k {
            return None;
        }
        let out = self.find_up_to(g, k, exclude);
        (out.len() == k as usize).then_some(out)
    }

    /// Best fit, apart: first the nodes without the other kind of work (for borrowed
    /// work, nodes without work within max; for work within max, nodes without
    /// borrowed work), then any.
    pub(super) fn find_apart(&self, g: u32, k: u32, borrowed: bool) -> Option<Vec<Nx>> {
        if self.fitting_nodes(g) < k {
            return None;
        }
        let apart = if borrowed {
            &self.no_own
        } else {
            &self.no_lent
        };
        let mut out = up_to(apart, g, k, &[]);
        if out.len() < k as usize {
            let more = up_to(&self.buckets, g, k - out.len() as u32, &out);
            out.extend(more);
        }
        (out.len() == k as usize).then_some(out)
    }

    /// Up to `k` nodes with at least `g` available, in best-fit order.
    pub(super) fn find_up_to(&self, g: u32, k: u32, exclude: &[Nx]) -> Vec<Nx> {
        up_to(&self.buckets, g, k, exclude)
    }
}

/// Up to `k` nodes of `buckets` with at least `g` available, in best-fit order.
fn up_to(buckets: &[BTreeSet<Nx>], g: u32, k: u32, exclude: &[Nx]) -> Vec<Nx> {
    let mut out = Vec::with_capacity(k as usize);
    for b in buckets.iter().skip(g as usize) {
        for &n in b {
            if out.len() == k as usize {
                return out;
            }
            if !exclude.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

impl<'a> Pass<'a> {
    /// Reserve idle GPUs of RESERVE shares (and groups) other than `s`'s in environment
    /// `e`, and the name of the one holding the most of them (for the reason).
    pub(super) fn reserve_others(&self, e: usize, u: Ux, s: usize) -> (u32, Option<SharedStr>) {
        if !self.groups.is_empty() {
            return self.reserve_nested(e, u, s);
        }
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
        (total, top.map(|(_, t)| self.shares[t].name.clone()))
    }

    /// Places the job now if it fits: environment cap (rule 7), RESERVE shares' idle
    /// GPUs (rule 2/5), best-fit nodes, gangs whole (rule 8). `held` places a holder on
    /// its held GPUs.
    pub(super) fn try_place(
        &mut self,
        ask: Ask<'a>,
        borrowed: bool,
        held: Option<&[(Nx, u32)]>,
    ) -> Result<(), Why> {
        let (s, u, w) = (ask.s, ask.u, ask.w);
        let need = ask.need();
        let unit = self.unit_names[u].clone();
        // The share's own limit, counted as the state machine will re-verify it: GPUs of
        // jobs still stopping count until they have exited.
        let sv = &self.shares[s];
        if let Some(limit) = sv
            .limit(u, borrowed)
            .filter(|l| (sv.used[u] + need) as u64 > *l)
        {
            return Err(if borrowed {
                PendingReasonOf::BorrowLimit {
                    used: sv.used[u],
                    limit,
                    need,
                    unit: unit.clone(),
                }
            } else {
                PendingReasonOf::AtMaxNoBorrow {
                    share: sv.name.clone(),
                    used: sv.used[u],
                    max: sv.max[u],
                    need,
                    unit: unit.clone(),
                    strategy: sv.strategy.clone(),
                }
            });
        }
        // A borrower keeps each group of its share within the group's ceiling.
        if borrowed {
            if let Some(why) = self.group_ceiling(s, u, need) {
                return Err(why);
            }
        }
        let Some(e) = self.shares[s].env else {
            return Err(PendingReasonOf::EnvironmentDisabled { env: "".into() });
        };
        let env = &self.envs[e];
        let Some(pi) = env.pool[u] else {
            return Err(PendingReasonOf::NoNodes {
                unit: unit.clone(),
                env: env.name.clone(),
            });
        };
        let pool = &self.pools[pi];
        let (reserved, rshare) = self.reserve_others(e, u, s);
        let from_pool = if held.is_some() { 0 } else { need };
        if reserved > 0 && pool.total_avail >= from_pool && pool.total_avail < from_pool + reserved
        {
            return Err(PendingReasonOf::ReserveHeld {
                share: rshare.expect("a share holds the reserve"),
                idle: reserved,
                unit: unit.clone(),
            });
        }
        let targets: Vec<(Nx, u32)> = match held {
            Some(t) => t.to_vec(),
            None => match pool.find_apart(w.gpus_per_node, w.nodes, borrowed) {
                Some(ns) => ns.into_iter().map(|n| (n, w.gpus_per_node)).collect(),
                None => {
                    return Err(PendingReasonOf::NoCapacity {
                        need_per_node: w.gpus_per_node,
                        nodes: w.nodes,
                        unit: unit.clone(),
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
            // GPUs in use now, plus what other holders will take beyond the GPUs being
            // given back: a hold on a stopping victim's GPUs is counted once, in `used`.
            // So the job fits now, and every holder still fits once its victims exit.
            let committed = env.used[u] + (env.holds[u] - own_hold).saturating_sub(env.stopping[u]);
            if committed + need > cap {
                return Err(PendingReasonOf::EnvironmentCap {
                    env: env.name.clone(),
                    used: committed,
                    cap,
                    need,
                    unit: unit.clone(),
                });
            }
            // Under the cap too, a RESERVE share's idle GPUs stay its own: where the cap
            // binds before the nodes do, what the reserve keeps is room under the cap.
            if held.is_none() && reserved > 0 && committed + need + reserved > cap {
                return Err(PendingReasonOf::ReserveHeld {
                    share: rshare.expect("a share holds the reserve"),
                    idle: reserved,
                    unit: unit.clone(),
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
                if borrowed {
                    nu.lent += c;
                } else {
                    nu.own += c;
                }
            });
            allocation.push(NodeAlloc {
                node: NodeName(self.nodes[n as usize].name.to_owned()),
                gpus,
            });
        }
        if held.is_some() {
            self.holds.remove(&ask.id);
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
        self.placed.insert(ask.id);
        self.plan.actions.push(Action::Place {
            job: ask.id,
            allocation,
            borrowed,
            reason,
        });
        Ok(())
    }
}
