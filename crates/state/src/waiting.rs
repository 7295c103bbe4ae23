//! A share's RUNNABLE jobs, kept by class: jobs of the same priority, unit and shape
//! (GPUs per node, nodes) in one list, in submit order. The scheduler judges a class's
//! jobs alike (`docs/design.md`, "What a pass may skip"), so it reads a whole class as
//! one: how many jobs it has, and whether they all give the same pending reason,
//! without reading each job.
//!
//! A share's scheduling order (priority descending, then submit time, then id) is the
//! merge of its classes, level by level: [`Waiters::iter`] gives it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

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
    jobs: BTreeMap<ClassPos, Waiting>,
    /// Each reason the jobs give, with how many give it: mostly one.
    reasons: Vec<(Option<PendingReason>, u32)>,
}

impl ClassList {
    pub fn jobs(&self) -> &BTreeMap<ClassPos, Waiting> {
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

    /// Gives the job at `p` the reason `reason`; false where the class has no job there.
    fn set_reason(&mut self, p: ClassPos, reason: &PendingReason) -> bool {
        let Some(w) = self.jobs.get_mut(&p) else {
            return false;
        };
        if w.reason.as_ref() != Some(reason) {
            let old = w.reason.replace(reason.clone());
            self.count_reason(old.as_ref(), false);
            self.count_reason(Some(reason), true);
        }
        true
    }

    /// Whether the counts of reasons are those of the jobs (for tests).
    fn counts_hold(&self) -> bool {
        let mut fresh = ClassList::default();
        for w in self.jobs.values() {
            fresh.count_reason(w.reason.as_ref(), true);
        }
        fresh.reasons.len() == self.reasons.len()
            && fresh
                .reasons
                .iter()
                .all(|(r, n)| self.reasons.iter().any(|(x, m)| x == r && m == n))
    }
}

/// A share's RUNNABLE jobs, by class.
#[derive(Debug, Clone, Default)]
pub struct Waiters {
    classes: BTreeMap<ClassKey, ClassList>,
    len: usize,
}

fn pos(key: &RunKey) -> ClassPos {
    (key.submitted_at, key.id)
}

impl Waiters {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The classes by key, highest priority first.
    pub fn class_map(&self) -> &BTreeMap<ClassKey, ClassList> {
        &self.classes
    }

    /// The classes, highest priority first.
    pub fn classes(&self) -> impl Iterator<Item = (&ClassKey, &ClassList)> + '_ {
        self.classes.iter()
    }

    pub(crate) fn insert(&mut self, key: RunKey, w: Waiting) {
        let list = self.classes.entry(ClassKey::of(&key, &w)).or_default();
        list.count_reason(w.reason.as_ref(), true);
        if let Some(old) = list.jobs.insert(pos(&key), w) {
            list.count_reason(old.reason.as_ref(), false);
        } else {
            self.len += 1;
        }
    }

    /// The class of the job at `key`: `hint` where it holds the job (the class its
    /// job's fields give), else found among the classes of its priority.
    fn class_of(&self, key: &RunKey, hint: Option<ClassKey>) -> Option<ClassKey> {
        let p = pos(key);
        if let Some(c) = hint {
            if self
                .classes
                .get(&c)
                .is_some_and(|l| l.jobs.contains_key(&p))
            {
                return Some(c);
            }
        }
        let lo = ClassKey {
            priority: key.priority,
            unit_id: 0,
            gpus_per_node: 0,
            nodes: 0,
            alone: false,
        };
        self.classes
            .range(lo..)
            .take_while(|(c, _)| c.priority == key.priority)
            .find(|(_, l)| l.jobs.contains_key(&p))
            .map(|(c, _)| *c)
    }

    pub(crate) fn remove(&mut self, key: &RunKey) -> Option<Waiting> {
        let c = self.class_of(key, None)?;
        let list = self.classes.get_mut(&c)?;
        let w = list.jobs.remove(&pos(key))?;
        list.count_reason(w.reason.as_ref(), false);
        if list.jobs.is_empty() {
            self.classes.remove(&c);
        }
        self.len -= 1;
        Some(w)
    }

    /// Changes the entry at `key` with `f`, moving it to its new class if `f` changed it.
    pub(crate) fn update(&mut self, key: &RunKey, f: impl FnOnce(&mut Waiting)) {
        if let Some(mut w) = self.remove(key) {
            f(&mut w);
            self.insert(*key, w);
        }
    }

    /// Gives the entry at `key` (of class `hint`, where known) the reason `reason`:
    /// kept in its class.
    pub(crate) fn set_reason(
        &mut self,
        key: &RunKey,
        hint: Option<ClassKey>,
        reason: &PendingReason,
    ) {
        let p = pos(key);
        // The hinted class first; else the class found by search.
        if let Some(list) = hint.and_then(|c| self.classes.get_mut(&c)) {
            if list.set_reason(p, reason) {
                return;
            }
        }
        if let Some(c) = self.class_of(key, None) {
            if let Some(list) = self.classes.get_mut(&c) {
                list.set_reason(p, reason);
            }
        }
    }

    /// The jobs in scheduling order: priority descending, then submit time, then id.
    pub fn iter(&self) -> Merged<'_> {
        Merged {
            classes: self.classes.iter().peekable(),
            prio: Reverse(0),
            level: vec![],
            heads: BinaryHeap::new(),
            next: vec![],
            hint: |_| {},
        }
    }

    /// Whether every class holds only jobs of its class, with their reasons counted
    /// (for tests).
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut n = 0;
        for (c, l) in &self.classes {
            if l.jobs.is_empty() {
                return Err("an empty class is kept".into());
            }
            for ((at, id), w) in &l.jobs {
                let key = RunKey {
                    priority: c.priority,
                    submitted_at: *at,
                    id: *id,
                };
                if ClassKey::of(&key, w) != *c {
                    return Err(format!("job {id} is kept in another class than its own"));
                }
            }
            if !l.counts_hold() {
                return Err("a class's reasons are miscounted".into());
            }
            n += l.jobs.len();
        }
        if n != self.len {
            return Err(format!("{n} waiting jobs counted as {}", self.len));
        }
        Ok(())
    }
}

type ClassIter<'a> = std::collections::btree_map::Iter<'a, ClassPos, Waiting>;

/// A share's waiting jobs in scheduling order: its classes merged, one priority level
/// at a time, by their next jobs' positions.
pub struct Merged<'a> {
    classes: std::iter::Peekable<std::collections::btree_map::Iter<'a, ClassKey, ClassList>>,
    prio: Reverse<u32>,
    /// The level's classes with jobs left, and their next jobs, earliest first.
    level: Vec<ClassIter<'a>>,
    heads: BinaryHeap<Reverse<(ClassPos, usize)>>,
    next: Vec<Option<&'a Waiting>>,
    /// Called with each entry as it becomes its class's second next, some jobs before
    /// it is given out (see [`Merged::with_hint`]).
    hint: fn(&Waiting),
}

impl<'a> Merged<'a> {
    /// Calls `hint` with each entry as it becomes the one after its class's next (and
    /// with a level's first two of each class): a reader that visits many entries can
    /// ask the CPU to load each before it is given out.
    pub fn with_hint(mut self, hint: fn(&Waiting)) -> Merged<'a> {
        self.hint = hint;
        self
    }
}

impl<'a> Iterator for Merged<'a> {
    type Item = (RunKey, &'a Waiting);

    fn next(&mut self) -> Option<Self::Item> {
        if self.heads.is_empty() {
            let (c, _) = self.classes.peek()?;
            self.prio = c.priority;
            self.level.clear();
            self.next.clear();
            let p = self.prio;
            while let Some((_, l)) = self.classes.next_if(|(c, _)| c.priority == p) {
                let mut it = l.jobs.iter();
                if let Some((pos, w)) = it.next() {
                    (self.hint)(w);
                    if let Some((_, after)) = it.clone().next() {
                        (self.hint)(after);
                    }
                    self.heads.push(Reverse((*pos, self.level.len())));
                    self.next.push(Some(w));
                    self.level.push(it);
                }
            }
        }
        let Reverse((pos, i)) = self.heads.pop()?;
        let w = self.next[i].take().expect("a head has its entry");
        if let Some((p, nw)) = self.level[i].next() {
            // The hint goes a job further on in the class, for a level of few classes.
            if let Some((_, after)) = self.level[i].clone().next() {
                (self.hint)(after);
            }
            self.heads.push(Reverse((*p, i)));
            self.next[i] = Some(nw);
        }
        Some((
            RunKey {
                priority: self.prio,
                submitted_at: pos.0,
                id: pos.1,
            },
            w,
        ))
    }
}
