//! A share's RUNNABLE jobs: in scheduling order (priority descending, then submit
//! time, then id), and by class: jobs of the same priority, unit and shape (GPUs per
//! node, nodes) in one list, in submit order. The scheduler judges a class's jobs
//! alike (`docs/design.md`, "What a pass may skip"), so it reads a whole class as one:
//! how many jobs it has, and whether they all give the same pending reason, without
//! reading each job. The entries themselves are kept once, in scheduling order, where
//! a walk job by job reads them one after another.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use tranche_model::*;

use crate::state::{RunKey, Waiting};

/// The class of a waiting job. `alone` marks a job the scheduler judges on its own: one
/// that holds GPUs, or a task of an array with a `%` limit. Classes sort by priority
/// first (highest first), so that a share's classes come level by level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassKey {
    pub priority: Reverse<u32>,
    /// The unit's number in [`crate::State::unit_names`].
    pub unit_id: u32,
    pub gpus_per_node: u32,
    pub nodes: u32,
    pub alone: bool,
}

impl ClassKey {
    pub(crate) fn of(key: &RunKey, w: &Waiting) -> ClassKey {
        ClassKey {
            priority: key.priority,
            unit_id: w.unit_id,
            gpus_per_node: w.gpus_per_node,
            nodes: w.nodes,
            alone: w.has_hold || w.array_limit.is_some(),
        }
    }
}

/// A job's place in its class: submit time, then id.
pub type ClassPos = (Millis, JobId);

/// The waiting jobs of one class, in submit order, with a count of each pending reason
/// they give.
#[derive(Debug, Clone, Default)]
pub struct ClassList {
    jobs: BTreeSet<ClassPos>,
    /// Each reason the jobs give, with how many give it: mostly one.
    reasons: Vec<(Option<PendingReason>, u32)>,
}

impl ClassList {
    /// The class's jobs' places, in submit order.
    pub fn jobs(&self) -> &BTreeSet<ClassPos> {
        &self.jobs
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The reason every job of the class gives, where they all give the same.
    pub fn uniform_reason(&self) -> Option<Option<&PendingReason>> {
        match self.reasons.as_slice() {
            [(r, _)] => Some(r.as_ref()),
            _ => None,
        }
    }

    fn count_reason(&mut self, r: Option<&PendingReason>, add: bool) {
        match self.reasons.iter().position(|(x, _)| x.as_ref() == r) {
            Some(i) if add => self.reasons[i].1 += 1,
            Some(i) => {
                self.reasons[i].1 -= 1;
                if self.reasons[i].1 == 0 {
                    self.reasons.swap_remove(i);
                }
            }
            None if add => self.reasons.push((r.cloned(), 1)),
            None => debug_assert!(false, "a reason not counted"),
        }
    }
}

/// A share's RUNNABLE jobs, in scheduling order and by class.
#[derive(Debug, Clone, Default)]
pub struct Waiters {
    order: BTreeMap<RunKey, Waiting>,
    classes: BTreeMap<ClassKey, ClassList>,
}

fn pos(key: &RunKey) -> ClassPos {
    (key.submitted_at, key.id)
}

/// Adds (or, with `add` false, takes away) the job at `key`, of class `c` and giving
/// `reason`, to its class; a class left empty is dropped.
fn file(
    classes: &mut BTreeMap<ClassKey, ClassList>,
    key: &RunKey,
    c: ClassKey,
    reason: Option<&PendingReason>,
    add: bool,
) {
    let list = classes.entry(c).or_default();
    list.count_reason(reason, add);
    if add {
        list.jobs.insert(pos(key));
    } else {
        list.jobs.remove(&pos(key));
        if list.jobs.is_empty() {
            classes.remove(&c);
        }
    }
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The classes, highest priority first.
    pub fn classes(&self) -> std::collections::btree_map::Iter<'_, ClassKey, ClassList> {
        self.classes.iter()
    }

    /// The entry of the job at `p` of priority `priority`.
    pub fn get(&self, priority: Reverse<u32>, p: ClassPos) -> Option<&Waiting> {
        self.order.get(&RunKey {
            priority,
            submitted_at: p.0,
            id: p.1,
        })
    }

    /// The jobs in scheduling order: priority descending, then submit time, then id.
    pub fn iter(&self) -> impl Iterator<Item = (RunKey, &Waiting)> + '_ {
        self.order.iter().map(|(k, w)| (*k, w))
    }

    fn file(&mut self, key: &RunKey, w: &Waiting, add: bool) {
        file(
            &mut self.classes,
            key,
            ClassKey::of(key, w),
            w.reason.as_ref(),
            add,
        );
    }

    pub(crate) fn insert(&mut self, key: RunKey, w: Waiting) {
        if let Some(old) = self.order.remove(&key) {
            self.file(&key, &old, false);
        }
        self.file(&key, &w, true);
        self.order.insert(key, w);
    }

    pub(crate) fn remove(&mut self, key: &RunKey) -> Option<Waiting> {
        let w = self.order.remove(key)?;
        self.file(key, &w, false);
        Some(w)
    }

    /// Changes the entry at `key` with `f`, moving it to its new class if `f` changed it.
    pub(crate) fn update(&mut self, key: &RunKey, f: impl FnOnce(&mut Waiting)) {
        let Some(w) = self.order.get_mut(key) else {
            return;
        };
        let (before, reason) = (ClassKey::of(key, w), w.reason.clone());
        f(w);
        let after = ClassKey::of(key, w);
        if before != after || w.reason != reason {
            file(&mut self.classes, key, before, reason.as_ref(), false);
            file(&mut self.classes, key, after, w.reason.as_ref(), true);
        }
    }

    /// Gives the entry at `key` the reason `reason`.
    pub(crate) fn set_reason(&mut self, key: &RunKey, reason: &PendingReason) {
        let Some(w) = self.order.get_mut(key) else {
            return;
        };
        if w.reason.as_ref() == Some(reason) {
            return;
        }
        let old = w.reason.replace(reason.clone());
        let c = ClassKey::of(key, w);
        if let Some(list) = self.classes.get_mut(&c) {
            list.count_reason(old.as_ref(), false);
            list.count_reason(Some(reason), true);
        }
    }

    /// Whether the classes hold exactly the jobs in order, each in its class, with
    /// their reasons counted (for tests).
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut fresh = Waiters::default();
        for (k, w) in &self.order {
            fresh.file(k, w, true);
        }
        if fresh.classes.len() != self.classes.len() {
            return Err("the classes differ from the waiting jobs".into());
        }
        for ((ca, la), (cb, lb)) in fresh.classes.iter().zip(&self.classes) {
            let same_reasons = la.reasons.len() == lb.reasons.len()
                && la
                    .reasons
                    .iter()
                    .all(|(r, n)| lb.reasons.iter().any(|(x, m)| x == r && m == n));
            if ca != cb || la.jobs != lb.jobs || !same_reasons {
                return Err("a class holds other jobs or reasons than its own".into());
            }
        }
        Ok(())
    }
}
