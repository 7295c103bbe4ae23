//! The order of work in one queue, job by job: what [`super::classes`] computes by
//! class, spelled out for [`crate::plan_each`] (against which the pass by classes is
//! tested) and used where a queue's classes are short. The rules are those of
//! [`super::order`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::classes::{key_of, Judged, WhyAt};
use super::*;

/// A job the own-capacity pass leaves to the borrow pass: (submitted, id, waiting,
/// share, priority, unit).
type Deferred<'a> = (Millis, JobId, &'a Waiting, usize, u32, Ux);

/// How many of a share's jobs ahead of the one being judged are being loaded into
/// cache (see [`prefetch`]).
const LOOKAHEAD: usize = 4;

/// A job's unit, GPUs per node, nodes and priority: what makes it alike another of
/// its share (see [`super::classes`]).
type Alike = (u32, u32, u32, u32);

impl<'a> Pass<'a> {
    /// Both passes over the queue's shares `shares` (not blocked), one job at a time.
    pub(super) fn queue_each(&mut self, shares: &[usize]) {
        let st = self.st;
        // The own-capacity pass: the share whose next job has the highest key (its
        // usage ratio as it is now) goes next. The share whose job comes first takes
        // turns until its next job no longer comes before every other share's: the
        // heap is touched when the turn passes, not once per job. An action that
        // changes another share's ratio (a hold taken over) puts that share back with
        // its new key; its old entry is passed over (`version`).
        let mut iters: Vec<_> = shares
            .iter()
            .filter_map(|&s| {
                let w = st.waiting_in(&self.shares[s].q.name)?;
                // A second walk runs a few jobs ahead, loading their entries (see
                // `prefetch`), so that each is in cache by its turn.
                let mut ahead = w.iter();
                for (_, w) in ahead.by_ref().take(LOOKAHEAD) {
                    prefetch(w);
                }
                Some((s, w.iter().peekable(), ahead))
            })
            .collect();
        let mut version = vec![0u32; iters.len()];
        let mut ratio = vec![0u64; iters.len()];
        let mut heap = BinaryHeap::new();
        for (i, (s, it, _)) in iters.iter_mut().enumerate() {
            if let Some((k, _)) = it.peek() {
                ratio[i] = self.share_ratio(*s);
                heap.push((
                    key_of(*s, k.priority.0, (k.submitted_at, k.id), ratio[i]),
                    i,
                    0,
                ));
            }
        }
        // Room for all of a share's jobs up front (what is never used is never touched).
        let mut deferred: Vec<Vec<Deferred<'a>>> = self.shares.iter().map(|_| vec![]).collect();
        for &s in shares {
            deferred[s].reserve(st.runnable_count_in(&self.shares[s].q.name));
        }
        let mut last = vec![None; self.shares.len()];
        while let Some((_, i, v)) = heap.pop() {
            if v != version[i] {
                continue;
            }
            let s = iters[i].0;
            loop {
                let (k, w) = iters[i].1.next().expect("peeked");
                if let Some((_, w)) = iters[i].2.next() {
                    prefetch(w);
                }
                let mark = (self.plan.actions.len(), self.takeovers);
                self.own_each(&k, w, s, &mut deferred, &mut last);
                if self.plan.actions.len() != mark.0 {
                    ratio[i] = self.share_ratio(s);
                }
                if self.takeovers != mark.1 {
                    for (x, (sx, it, _)) in iters.iter_mut().enumerate() {
                        let Some((k, _)) = it.peek().filter(|_| x != i) else {
                            continue;
                        };
                        let r = self.share_ratio(*sx);
                        if r != ratio[x] {
                            ratio[x] = r;
                            version[x] += 1;
                            let key = key_of(*sx, k.priority.0, (k.submitted_at, k.id), r);
                            heap.push((key, x, version[x]));
                        }
                    }
                }
                let Some((k, _)) = iters[i].1.peek() else {
                    break;
                };
                let key = key_of(s, k.priority.0, (k.submitted_at, k.id), ratio[i]);
                while heap.peek().is_some_and(|t| t.2 != version[t.1]) {
                    heap.pop();
                }
                if heap.peek().is_some_and(|top| top.0 > key) {
                    heap.push((key, i, version[i]));
                    break;
                }
            }
        }
        // The borrow pass; with groups in rounds, nearest borrowers first (see
        // [`Pass::queue`]).
        let deepest = shares
            .first()
            .map_or(0, |&s| self.deepest_group(self.shares[s].queue));
        for d in (0..=deepest).rev() {
            self.borrow_reach = (d > 0).then_some(d);
            self.borrow_pass_each(shares, &deferred);
        }
        self.borrow_reach = None;
    }

    /// One round of the borrow pass (rule 5), job by job.
    fn borrow_pass_each(&mut self, shares: &[usize], deferred: &[Vec<Deferred<'a>>]) {
        // The borrow pass under FAIR_SHARE: share by share, least decayed usage per
        // weight first.
        if let Some(order) = self.fair_order(shares) {
            let mut last = vec![None; self.shares.len()];
            for s in order {
                for &(_, id, w, s, prio, u) in &deferred[s] {
                    self.borrow_each((id, w, s, prio, u), &mut last);
                }
            }
            return;
        }
        // The borrow pass: shares' lists merged by their heads' submit time; a share
        // keeps its turn while its next job still comes first.
        let mut next = vec![0usize; deferred.len()];
        let mut heads: BinaryHeap<Reverse<(Millis, JobId, usize)>> = deferred
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.first().map(|d| Reverse((d.0, d.1, i))))
            .collect();
        let mut last = vec![None; self.shares.len()];
        while let Some(Reverse((_, _, i))) = heads.pop() {
            loop {
                let (_, id, w, s, prio, u) = deferred[i][next[i]];
                next[i] += 1;
                self.borrow_each((id, w, s, prio, u), &mut last);
                let Some(d) = deferred[i].get(next[i]) else {
                    break;
                };
                let key = (d.0, d.1, i);
                if heads.peek().is_some_and(|Reverse(top)| *top < key) {
                    heads.push(Reverse(key));
                    break;
                }
            }
        }
    }

    /// The own-capacity pass for one job (rules 2, 3, 4). Outside [`crate::plan_each`]
    /// a job of the class its share's previous job was of, with no action since, gets
    /// that job's judgement (see [`super::classes`]): in a long queue a share's alike
    /// jobs often come one after another.
    fn own_each(
        &mut self,
        k: &RunKey,
        w: &'a Waiting,
        s: usize,
        deferred: &mut [Vec<Deferred<'a>>],
        last: &mut [Option<(Alike, usize, Judged<'a>)>],
    ) {
        let u = self.unit_of_id.get(w.unit_id as usize).copied().flatten();
        let class = self.alike(w, k.priority.0);
        let epoch = self.plan.actions.len();
        let (waits, defer) = match last[s] {
            Some((c, at, j)) if Some(c) == class && at == epoch => match j {
                // A job left to the borrow pass waits for room in its share too.
                Judged::Deferred => (true, true),
                Judged::Waits(why, waits) => {
                    self.reason_at(k.id, w, why);
                    (waits, false)
                }
            },
            _ => {
                if self.array_full(k.id, w) {
                    return;
                }
                let mut defer = false;
                let reasons = self.plan.reasons.len();
                let waits = self.own_job(k, w, s, u, &mut defer);
                self.array_count(k.id, w, epoch);
                if let (Some(c), true) = (class, self.plan.actions.len() == epoch) {
                    let j = if defer {
                        Some(Judged::Deferred)
                    } else {
                        self.why_at(k.id, w, reasons)
                            .map(|why| Judged::Waits(why, waits))
                    };
                    last[s] = j.map(|j| (c, epoch, j));
                }
                (waits, defer)
            }
        };
        if defer {
            let u = u.expect("a deferred job has a unit");
            deferred[s].push((k.submitted_at, k.id, w, s, k.priority.0, u));
        }
        if waits {
            self.count_ahead(s, u, k.priority.0, w, 1);
        }
    }

    /// The borrow pass for one job (rule 5), as [`Pass::own_each`] for its share's
    /// previous job's judgement.
    fn borrow_each(
        &mut self,
        (id, w, s, prio, u): (JobId, &'a Waiting, usize, u32, Ux),
        last: &mut [Option<(Alike, usize, WhyAt<'a>)>],
    ) {
        let class = self.alike(w, prio);
        let epoch = self.plan.actions.len();
        match last[s] {
            Some((c, at, why)) if Some(c) == class && at == epoch => self.reason_at(id, w, why),
            _ => {
                let why = self.borrow_event(id, w, s, prio, u, class.is_none());
                last[s] = why.map(|why| (class.expect("kept for a class"), epoch, why));
            }
        }
    }

    /// What makes a job alike another of its share, or `None` where it is judged on its
    /// own (a holder, a task of an array with a `%` limit; every job in
    /// [`crate::plan_each`]).
    fn alike(&self, w: &Waiting, prio: u32) -> Option<Alike> {
        (self.walk != Walk::Each && !w.has_hold && w.array_limit.is_none()).then_some((
            w.unit_id,
            w.gpus_per_node,
            w.nodes,
            prio,
        ))
    }
}
