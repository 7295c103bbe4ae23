//! Classes of waiting jobs: jobs that the pass cannot tell apart. Two RUNNABLE jobs of
//! the same share, unit, shape (GPUs per node, nodes) and priority, neither holding
//! GPUs nor a task of an array with a `%` limit, get the same answer from the pass
//! whenever the pass's views are the same when it reaches each: the pass reads of a
//! job only those fields, and its submit time and id only to order jobs and to name
//! them in actions. The state keeps each share's waiting jobs by class
//! ([`tranche_state::Waiters`]).
//!
//! The views change only with an action (a placement, a preemption, a hold taken or
//! given back): every change to the nodes', shares' and environments' counts is made
//! where an action is pushed, and the one place that pushes an action and takes it
//! back (a holder that tried to start elsewhere) restores the views with it. So once a
//! class's job was judged without an action, every later job of the class gets the
//! same judgement until the next action: the same reason, or the same turn in the
//! borrow pass. The pass therefore walks a share's priority level class by class: it
//! judges the first job of each class, in the pass's order, and leaves the rest of a
//! judged class to be *settled* (given the class's judgement) later, all at once:
//!
//! - when an action is made, the judged classes' jobs that come before it in the
//!   pass's order are settled, and the rest of each class is judged again;
//! - when a share's next job to judge is at a lower priority, its levels above are
//!   settled (a lower priority reads what they want);
//! - when the pass ends, every judged class is settled.
//!
//! A judgement that reads nothing a priority changes is given to the same shape at
//! the share's lower priorities without judging them (see [`Pass::holds_below`]).
//!
//! Settling the rest of a class whose jobs all give the class's reason costs nothing
//! per job (the state counts each class's reasons); otherwise each job is given the
//! reason. So a pass over a queue in which nothing can start costs per class, not per
//! job. Giving a job its reason commutes with every other step of the pass (no step
//! reads the plan's reasons), and so does counting what a level's waiting jobs want
//! (read only by lower levels): settling late changes nothing but the order of the
//! plan's reasons, one per job as before.
//!
//! `docs/design.md` ("What a pass may skip") gives the argument in full; the property
//! test `incremental_and_whole_passes_plan_alike` runs every random scenario both ways.

use std::iter::Peekable;

use super::*;

/// Where a judged job's reason is, without a copy: the plan's reasons (it changed), or
/// the job's entry in the state (it was already current).
#[derive(Clone, Copy)]
pub(super) enum WhyAt<'a> {
    Plan(usize),
    State(&'a Why),
}

/// What the own-capacity pass decided for a job that neither started nor took GPUs.
#[derive(Clone, Copy)]
pub(super) enum Judged<'a> {
    /// Left to the borrow pass.
    Deferred,
    /// This reason; and whether the job waits for room in its share.
    Waits(WhyAt<'a>, bool),
}

type Rest<'a> = Peekable<std::collections::btree_set::Range<'a, ClassPos>>;

/// One class of a share's priority level, as the own-capacity pass walks it.
pub(super) struct Cls<'a> {
    pub(super) key: ClassKey,
    list: &'a ClassList,
    /// The share's waiting jobs, where the class's jobs' entries are.
    all: &'a Waiters,
    /// Its jobs not yet judged or settled, and how many; the first with its entry,
    /// once looked up.
    rest: Rest<'a>,
    cur: Option<(ClassPos, &'a Waiting)>,
    left: usize,
    pub(super) u: Option<Ux>,
    /// Its judgement, and the plan's count of actions then.
    memo: Option<(usize, Judged<'a>)>,
    /// Its entry in the share's deferred level, once it has one.
    dix: Option<usize>,
}

/// The entry of the job at `p` of class `key` in `all`.
fn entry<'a>(all: &'a Waiters, key: &ClassKey, p: ClassPos) -> &'a Waiting {
    all.get(key.priority, p).expect("a class's job waits")
}

impl<'a> Cls<'a> {
    fn head(&mut self) -> Option<(ClassPos, &'a Waiting)> {
        if self.cur.is_none() {
            let p = **self.rest.peek()?;
            self.cur = Some((p, entry(self.all, &self.key, p)));
        }
        self.cur
    }

    fn take(&mut self) {
        self.rest.next();
        self.cur = None;
        self.left -= 1;
    }

    fn judged_at(&self, epoch: usize) -> bool {
        self.left > 0 && self.memo.is_some_and(|(at, _)| at == epoch)
    }

    fn last(&self) -> Option<ClassPos> {
        self.list.jobs().last().copied()
    }
}

/// What a share left to the borrow pass: per priority level, per class, its jobs in
/// submit order, one by one or as the rest of the class from a position on.
pub(super) struct DLevel<'a> {
    pub(super) prio: u32,
    pub(super) classes: Vec<DClass<'a>>,
}

pub(super) struct DClass<'a> {
    key: ClassKey,
    list: &'a ClassList,
    all: &'a Waiters,
    u: Ux,
    items: Vec<DItem<'a>>,
}

enum DItem<'a> {
    One(ClassPos, &'a Waiting),
    /// The class's jobs from this position on (so many).
    Rest(ClassPos, usize),
}

/// A share's walk through its levels in the own-capacity pass.
pub(super) struct ShareWalk<'a> {
    pub(super) s: usize,
    waiters: &'a Waiters,
    /// The levels not yet loaded.
    classes: Peekable<std::collections::btree_map::Iter<'a, ClassKey, ClassList>>,
    /// The loaded levels with jobs left, highest priority first: all but the last hold
    /// only judged classes.
    levels: Vec<(u32, Vec<Cls<'a>>)>,
    pub(super) deferred: Vec<DLevel<'a>>,
    /// The share's next job to judge, found at the plan's count of actions given,
    /// with the share's usage ratio then.
    next: Option<(usize, u64, Option<OwnEvent>)>,
    /// Whether a class of the share was judged since the last action.
    judged: bool,
    /// The level the last search for its next event stopped at, with the plan's count
    /// of actions then.
    scan: Option<(usize, u32)>,
    /// Judgements that hold for every lower priority too (see [`Pass::holds_below`]),
    /// by shape, with the plan's count of actions they were made at.
    below: Vec<Below<Judged<'a>>>,
}

/// A judgement that holds for the jobs of one shape at every lower priority: the
/// shape (unit, GPUs per node, nodes), the plan's count of actions then, and it.
type Below<J> = ((u32, u32, u32), usize, J);

fn shape(c: &ClassKey) -> (u32, u32, u32) {
    (c.unit_id, c.gpus_per_node, c.nodes)
}

fn keep_below<J>(below: &mut Vec<Below<J>>, sh: (u32, u32, u32), at: usize, j: J) {
    match below.iter_mut().find(|b| b.0 == sh) {
        Some(b) => *b = (sh, at, j),
        None => below.push((sh, at, j)),
    }
}

/// The judgement a class of a lower priority takes from `below`, if one holds now.
fn below<'a>(below: &[Below<Judged<'a>>], c: &Cls<'a>, epoch: usize) -> Option<Judged<'a>> {
    if c.key.alone || c.left == 0 {
        return None;
    }
    let sh = shape(&c.key);
    below
        .iter()
        .find(|b| b.0 == sh && b.1 == epoch)
        .map(|b| b.2)
}

/// A job the own-capacity pass is to judge: its key, level and class.
#[derive(Clone, Copy)]
pub(super) struct OwnEvent {
    pub(super) key: HeapKey,
    level: usize,
    class: usize,
}

impl<'a> ShareWalk<'a> {
    pub(super) fn new(s: usize, w: &'a Waiters) -> ShareWalk<'a> {
        ShareWalk {
            s,
            waiters: w,
            classes: w.classes().peekable(),
            levels: vec![],
            deferred: vec![],
            next: None,
            judged: false,
            scan: None,
            below: vec![],
        }
    }
}

impl<'a> Pass<'a> {
    /// The share's next job whose class has no judgement that holds now, loading
    /// levels as the share's judged ones run out; cached until the share's next event
    /// or action.
    pub(super) fn own_next(&mut self, sw: &mut ShareWalk<'a>) -> Option<OwnEvent> {
        let epoch = self.plan.actions.len();
        if let Some((at, _, e)) = sw.next {
            if at == epoch {
                return e;
            }
        }
        while sw
            .levels
            .first()
            .is_some_and(|l| l.1.iter().all(|c| c.left == 0))
        {
            sw.levels.remove(0);
        }
        let ratio = self.share_ratio(sw.s);
        // Levels above the one the last search at this count of actions stopped at
        // hold judged classes only: judgements are only added until the next action.
        let mut l = match sw.scan {
            Some((at, prio)) if at == epoch => sw.levels.iter().take_while(|x| x.0 > prio).count(),
            _ => 0,
        };
        let e = loop {
            if l == sw.levels.len() {
                let Some((c, _)) = sw.classes.peek() else {
                    break None;
                };
                let p = c.priority;
                let mut level = vec![];
                while let Some((c, list)) = sw.classes.next_if(|(c, _)| c.priority == p) {
                    level.push(Cls {
                        key: *c,
                        list,
                        all: sw.waiters,
                        rest: list.jobs().range(..).peekable(),
                        cur: None,
                        left: list.len(),
                        u: self.unit_of_id.get(c.unit_id as usize).copied().flatten(),
                        memo: None,
                        dix: None,
                    });
                }
                sw.levels.push((p.0, level));
            }
            let (prio, level) = &mut sw.levels[l];
            let mut best: Option<(usize, ClassPos)> = None;
            for (i, c) in level.iter_mut().enumerate() {
                if c.judged_at(epoch) {
                    continue;
                }
                if let Some(j) = below(&sw.below, c, epoch) {
                    c.memo = Some((epoch, j));
                    sw.judged = true;
                    continue;
                }
                if let Some((p, _)) = c.head() {
                    if best.is_none_or(|(_, b)| p < b) {
                        best = Some((i, p));
                    }
                }
            }
            sw.scan = Some((epoch, *prio));
            if let Some((class, p)) = best {
                break Some(OwnEvent {
                    key: key_of(sw.s, *prio, p, ratio),
                    level: l,
                    class,
                });
            }
            l += 1;
        };
        sw.next = Some((epoch, ratio, e));
        e
    }

    /// Judges the share's next event `e` (see [`Pass::own_next`]). Where it makes an
    /// action, every share's judged jobs that come before it are settled first.
    pub(super) fn own_step(&mut self, walks: &mut [ShareWalk<'a>], j: usize, e: OwnEvent) {
        let epoch = self.plan.actions.len();
        // The share's levels above the event's hold judged jobs only, all before it:
        // settled now, as lower levels read what they want.
        let sw = &mut walks[j];
        for l in 0..e.level {
            for i in 0..sw.levels[l].1.len() {
                self.settle_own(sw, l, i, None);
            }
        }
        sw.levels.drain(..e.level);
        sw.next = None;
        let pos = sw.levels[0].1[e.class].head().expect("a job left").0;
        self.own_event(sw, e.class);
        if self.plan.actions.len() == epoch {
            return;
        }
        // The action changes the views: the judged jobs before it keep their
        // judgement, the rest are judged again. A share with no judged job keeps its
        // next event, unless the action changed its usage ratio (a hold taken over).
        let now = self.plan.actions.len();
        for (k, sw) in walks.iter_mut().enumerate() {
            // The ratio that ordered the share's jobs before the action.
            let ratio = match sw.next {
                Some((at, r, _)) if at == epoch => r,
                _ => self.share_ratio(sw.s),
            };
            if k != j && !sw.judged {
                sw.next = match sw.next {
                    Some((at, r, e)) if at == epoch && self.share_ratio(sw.s) == r => {
                        Some((now, r, e))
                    }
                    _ => None,
                };
                continue;
            }
            for l in 0..sw.levels.len() {
                let prio = sw.levels[l].0;
                let upto = if k == j {
                    Some(pos)
                } else {
                    // Jobs of share k come before the event where their key is higher.
                    match (prio, std::cmp::Reverse(ratio)).cmp(&(e.key.0, e.key.1)) {
                        std::cmp::Ordering::Greater => None,
                        std::cmp::Ordering::Less => Some((0, JobId(0))),
                        std::cmp::Ordering::Equal => {
                            let at = e.key.2 .0;
                            Some(if sw.s < e.key.3 .0 {
                                (at + 1, JobId(0))
                            } else {
                                (at, JobId(0))
                            })
                        }
                    }
                };
                for i in 0..sw.levels[l].1.len() {
                    if sw.levels[l].1[i].judged_at(epoch) {
                        self.settle_own(sw, l, i, upto);
                    }
                }
            }
            sw.judged = false;
            sw.next = None;
        }
    }

    /// Settles every judged job left (the end of the own-capacity pass).
    pub(super) fn own_finish(&mut self, sw: &mut ShareWalk<'a>) {
        for l in 0..sw.levels.len() {
            for i in 0..sw.levels[l].1.len() {
                self.settle_own(sw, l, i, None);
            }
        }
    }

    /// A share's usage ratio, which orders shares of the same priority in the
    /// own-capacity pass: GPUs used and held over its max, in the unit where that is
    /// highest (`u64::MAX` for a share with no max anywhere).
    pub(super) fn share_ratio(&self, s: usize) -> u64 {
        let sv = &self.shares[s];
        (0..sv.max.len())
            .filter(|&u| sv.max[u] > 0)
            .map(|u| (sv.used[u] + sv.held[u]) as u64 * 1_000_000 / sv.max[u] as u64)
            .max()
            .unwrap_or(u64::MAX)
    }

    /// Judges the next job of class `i` of the share's first level in the
    /// own-capacity pass, keeping the judgement where it made no action.
    fn own_event(&mut self, sw: &mut ShareWalk<'a>, i: usize) {
        let prio = sw.levels[0].0;
        let c = &mut sw.levels[0].1[i];
        let (p, w) = c.head().expect("a job left");
        c.take();
        let (s, u) = (sw.s, c.u);
        let k = RunKey {
            priority: std::cmp::Reverse(prio),
            submitted_at: p.0,
            id: p.1,
        };
        if self.array_full(k.id, w) {
            return;
        }
        let mark = (self.plan.actions.len(), self.plan.reasons.len());
        let mut defer = false;
        let waits = self.own_job(&k, w, s, u, &mut defer);
        self.array_count(k.id, w, mark.0);
        if defer {
            self.defer(sw, 0, i, DItem::One(p, w));
        }
        let c = &sw.levels[0].1[i];
        if !c.key.alone && self.plan.actions.len() == mark.0 {
            let j = if defer {
                Some(Judged::Deferred)
            } else {
                self.why_at(k.id, w, mark.1)
                    .map(|why| Judged::Waits(why, waits))
            };
            sw.levels[0].1[i].memo = j.map(|j| (mark.0, j));
            sw.judged |= j.is_some();
            if let Some(j) = j.filter(|j| self.holds_below(s, *j)) {
                let c = &sw.levels[0].1[i];
                keep_below(&mut sw.below, shape(&c.key), mark.0, j);
            }
        }
        if waits {
            self.count_ahead(s, u, prio, w, 1);
        }
    }

    /// Whether an own-capacity judgement of share `s` holds for the same shape at every
    /// lower priority until the next action: one that reads nothing a priority
    /// changes. A job left to the borrow pass is above its room, which only shrinks at
    /// lower priorities (rule 2 counts the higher priorities' waiting jobs); a job
    /// above its share's ceiling, or of a unit no node has, is so at any priority; a
    /// share that does not borrow and has no in-share preemption tells a job at its
    /// max only that.
    fn holds_below(&self, s: usize, j: Judged<'a>) -> bool {
        match j {
            Judged::Deferred => true,
            Judged::Waits(why, _) => match self.why(why) {
                PendingReasonOf::AboveCeiling { .. } | PendingReasonOf::NoNodes { .. } => true,
                PendingReasonOf::AtMaxNoBorrow { .. } => !self.shares[s].q.in_share_preemption,
                _ => false,
            },
        }
    }

    /// Counts `n` jobs like `w` of priority `prio` as waiting for room in share `s`.
    pub(super) fn count_ahead(&mut self, s: usize, u: Option<Ux>, prio: u32, w: &Waiting, n: u32) {
        // Only a share that may borrow reads what its waiting jobs want (rule 2), and
        // only a job its max could ever hold waits for room there: one that can only
        // ever borrow keeps nothing from the others.
        let Some(u) = u else {
            return;
        };
        let sv = &mut self.shares[s];
        let need = w.gpus_per_node * w.nodes;
        if sv.q.borrows() && need <= sv.max[u] {
            sv.ahead[u].add(prio, need * n);
        }
    }

    fn defer(&mut self, sw: &mut ShareWalk<'a>, l: usize, i: usize, item: DItem<'a>) {
        let prio = sw.levels[l].0;
        if sw.deferred.last().is_none_or(|d| d.prio != prio) {
            sw.deferred.push(DLevel {
                prio,
                classes: vec![],
            });
        }
        let level = sw.deferred.last_mut().expect("pushed");
        let c = &mut sw.levels[l].1[i];
        let d = match c.dix {
            Some(d) => d,
            None => {
                level.classes.push(DClass {
                    key: c.key,
                    list: c.list,
                    all: c.all,
                    u: c.u.expect("a deferred job has a unit"),
                    items: vec![],
                });
                c.dix = Some(level.classes.len() - 1);
                level.classes.len() - 1
            }
        };
        level.classes[d].items.push(item);
    }

    /// Settles the jobs of class `i` of level `l` before `upto` (all of them: `None`)
    /// with its judgement.
    fn settle_own(&mut self, sw: &mut ShareWalk<'a>, l: usize, i: usize, upto: Option<ClassPos>) {
        let Some((_, j)) = sw.levels[l].1[i].memo else {
            return;
        };
        let (s, prio) = (sw.s, sw.levels[l].0);
        let c = &mut sw.levels[l].1[i];
        let Some((from, w)) = c.head() else {
            return;
        };
        let u = c.u;
        if upto.is_none_or(|up| c.last().is_some_and(|last| last < up)) {
            let all = match j {
                Judged::Deferred => true,
                Judged::Waits(why, _) => c.list.uniform_reason() == Some(Some(self.why(why))),
            };
            if all {
                let n = c.left;
                c.rest = c.list.jobs().range(..(0, JobId(0))).peekable();
                c.cur = None;
                c.left = 0;
                // A job left to the borrow pass waits for room in its share too.
                let waits = match j {
                    Judged::Deferred => {
                        self.defer(sw, l, i, DItem::Rest(from, n));
                        true
                    }
                    Judged::Waits(_, waits) => waits,
                };
                if waits {
                    self.count_ahead(s, u, prio, w, n as u32);
                }
                return;
            }
        }
        while let Some((p, w)) = sw.levels[l].1[i].head() {
            if upto.is_some_and(|up| p >= up) {
                break;
            }
            sw.levels[l].1[i].take();
            let waits = match j {
                Judged::Deferred => {
                    self.defer(sw, l, i, DItem::One(p, w));
                    true
                }
                Judged::Waits(why, waits) => {
                    self.reason_at(p.1, w, why);
                    waits
                }
            };
            if waits {
                self.count_ahead(s, u, prio, w, 1);
            }
        }
    }

    fn why(&self, why: WhyAt<'a>) -> &Why {
        match why {
            WhyAt::Plan(i) => &self.plan.reasons[i].1,
            WhyAt::State(r) => r,
        }
    }

    /// Where the reason job `id` was just given is: the plan's last, if it was pushed
    /// since the plan had `reasons`; else its entry's, which was current.
    pub(super) fn why_at(&self, id: JobId, w: &'a Waiting, reasons: usize) -> Option<WhyAt<'a>> {
        match self.plan.reasons.last() {
            Some((j, _)) if self.plan.reasons.len() > reasons && *j == id => {
                Some(WhyAt::Plan(self.plan.reasons.len() - 1))
            }
            _ => w.reason.as_ref().map(WhyAt::State),
        }
    }

    /// Gives job `id` (`w` its entry) the reason at `why`.
    pub(super) fn reason_at(&mut self, id: JobId, w: &Waiting, why: WhyAt<'a>) {
        if self.borrow_reach.is_some() || self.placed.contains(&id) {
            return;
        }
        let r = self.why(why);
        if w.reason.as_ref() != Some(r) {
            let r = r.clone();
            self.plan.reasons.push((id, r));
        }
    }
}

/// The own-capacity pass's key for the job at `p` of share `s` at priority `prio`,
/// the share's usage ratio being `ratio`.
pub(super) fn key_of(s: usize, prio: u32, p: ClassPos, ratio: u64) -> HeapKey {
    (
        prio,
        std::cmp::Reverse(ratio),
        std::cmp::Reverse(p.0),
        std::cmp::Reverse(s),
    )
}

// ---- the borrow pass ---------------------------------------------------------------

/// A deferred class as the borrow pass walks it.
struct BCls<'a, 'd> {
    d: &'d DClass<'a>,
    /// The next item, and within a `Rest` item the jobs left of it.
    item: usize,
    rest: Option<(Rest<'a>, usize)>,
    left: usize,
    memo: Option<(usize, WhyAt<'a>)>,
}

impl<'a, 'd> BCls<'a, 'd> {
    fn new(d: &'d DClass<'a>) -> BCls<'a, 'd> {
        let left = d
            .items
            .iter()
            .map(|i| match i {
                DItem::One(..) => 1,
                DItem::Rest(_, n) => *n,
            })
            .sum();
        BCls {
            d,
            item: 0,
            rest: None,
            left,
            memo: None,
        }
    }

    /// The position of the next job, without looking its entry up.
    fn head_pos(&mut self) -> Option<ClassPos> {
        loop {
            if let Some((r, n)) = &mut self.rest {
                if *n > 0 {
                    return r.peek().map(|p| **p);
                }
                self.rest = None;
                self.item += 1;
            }
            match self.d.items.get(self.item)? {
                DItem::One(p, _) => return Some(*p),
                DItem::Rest(from, n) => {
                    self.rest = Some((self.d.list.jobs().range(*from..).peekable(), *n));
                }
            }
        }
    }

    /// The next job and its entry.
    fn head(&mut self) -> Option<(ClassPos, &'a Waiting)> {
        let p = self.head_pos()?;
        match (&self.rest, &self.d.items[self.item]) {
            (None, DItem::One(_, w)) => Some((p, *w)),
            _ => Some((p, entry(self.d.all, &self.d.key, p))),
        }
    }

    fn take(&mut self) {
        if self.head_pos().is_none() {
            return;
        }
        self.left -= 1;
        match &mut self.rest {
            Some((r, n)) => {
                r.next();
                *n -= 1;
            }
            None => self.item += 1,
        }
    }

    fn judged_at(&self, epoch: usize) -> bool {
        self.left > 0 && self.memo.is_some_and(|(at, _)| at == epoch)
    }

    /// The last position of the class's deferred jobs.
    fn last(&self) -> Option<ClassPos> {
        match self.d.items.last()? {
            DItem::One(p, _) => Some(*p),
            DItem::Rest(..) => self.d.list.jobs().last().copied(),
        }
    }
}

/// A share's deferred jobs as the borrow pass walks them.
struct BShare<'a, 'd> {
    s: usize,
    levels: Vec<(u32, Vec<BCls<'a, 'd>>)>,
    /// Per level, the latest position among the share's deferred jobs of the levels
    /// before it (`None` for the first).
    before: Vec<Option<ClassPos>>,
    /// The first level with jobs left.
    lo: usize,
    /// The classes judged since the last action: (level, class).
    judged: Vec<(usize, usize)>,
    /// The level the last search for its next event stopped at, with the plan's count
    /// of actions then.
    scan: (usize, usize),
    /// Borrow judgements that hold for every lower priority too, by shape.
    below: Vec<Below<WhyAt<'a>>>,
}

/// The borrow pass's next job to judge: its order key (see [`Pass::borrow_walk`]),
/// share, level and class.
#[derive(Clone, Copy)]
struct BEvent {
    key: ClassPos,
    b: usize,
    level: usize,
    class: usize,
}

impl<'a, 'd> BShare<'a, 'd> {
    /// The share's next job whose class has no judgement that holds at `epoch`.
    fn next_event(&mut self, b: usize, epoch: usize) -> Option<BEvent> {
        while self.lo < self.levels.len() && self.levels[self.lo].1.iter().all(|c| c.left == 0) {
            self.lo += 1;
        }
        // Levels before the one the last search at this count of actions stopped at
        // hold judged classes only.
        let from = match self.scan {
            (at, l) if at == epoch => l.max(self.lo),
            _ => self.lo,
        };
        for l in from..self.levels.len() {
            self.scan = (epoch, l);
            let mut best: Option<(usize, ClassPos)> = None;
            for (i, c) in self.levels[l].1.iter_mut().enumerate() {
                if c.left == 0 || c.judged_at(epoch) {
                    continue;
                }
                if !c.d.key.alone {
                    let sh = shape(&c.d.key);
                    if let Some(b) = self.below.iter().find(|b| b.0 == sh && b.1 == epoch) {
                        c.memo = Some((epoch, b.2));
                        self.judged.push((l, i));
                        continue;
                    }
                }
                if let Some(p) = c.head_pos() {
                    if best.is_none_or(|(_, q)| p < q) {
                        best = Some((i, p));
                    }
                }
            }
            if let Some((i, p)) = best {
                return Some(BEvent {
                    key: self.before[l].map_or(p, |m| m.max(p)),
                    b,
                    level: l,
                    class: i,
                });
            }
        }
        None
    }
}

impl<'a> Pass<'a> {
    /// The borrow pass (rule 5): FIFO by submit time across shares, and inside a share
    /// in rule 1's order. Shares' lists are merged by their heads' submit time, which
    /// puts a job after every job of another share whose submit time is below the
    /// latest its own share reached by then: its order key is the latest position of
    /// its share's jobs up to it.
    pub(super) fn borrow_walk(&mut self, deferred: &[(usize, Vec<DLevel<'a>>)]) {
        let mut shares: Vec<BShare<'a, '_>> = deferred
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(s, levels)| {
                let mut before = vec![];
                let mut latest: Option<ClassPos> = None;
                let levels: Vec<(u32, Vec<BCls<'a, '_>>)> = levels
                    .iter()
                    .map(|l| {
                        before.push(latest);
                        let cls: Vec<BCls> = l.classes.iter().map(BCls::new).collect();
                        for c in &cls {
                            latest = latest.max(c.last());
                        }
                        (l.prio, cls)
                    })
                    .collect();
                BShare {
                    s: *s,
                    levels,
                    before,
                    lo: 0,
                    judged: vec![],
                    scan: (usize::MAX, 0),
                    below: vec![],
                }
            })
            .collect();
        let mut next: Vec<Option<(usize, Option<BEvent>)>> = vec![None; shares.len()];
        loop {
            let epoch = self.plan.actions.len();
            let mut ev: Option<BEvent> = None;
            for (b, sh) in shares.iter_mut().enumerate() {
                let e = match next[b] {
                    Some((at, e)) if at == epoch => e,
                    _ => {
                        let e = sh.next_event(b, epoch);
                        next[b] = Some((epoch, e));
                        e
                    }
                };
                if let Some(e) = e {
                    if ev.is_none_or(|x| e.key < x.key) {
                        ev = Some(e);
                    }
                }
            }
            let Some(e) = ev else {
                break;
            };
            next[e.b] = None;
            let sh = &mut shares[e.b];
            let (prio, c) = (sh.levels[e.level].0, &mut sh.levels[e.level].1[e.class]);
            let (p, w) = c.head().expect("a job left");
            c.take();
            let (s, u, alone) = (sh.s, c.d.u, c.d.key.alone);
            if let Some(why) = self.borrow_event(p.1, w, s, prio, u, alone) {
                let sh = &mut shares[e.b];
                sh.levels[e.level].1[e.class].memo = Some((epoch, why));
                sh.judged.push((e.level, e.class));
                // Without in-share preemption a borrow reads nothing a priority
                // changes: the judgement holds for the shape at lower priorities.
                if !self.shares[s].q.in_share_preemption {
                    let k = shape(&sh.levels[e.level].1[e.class].d.key);
                    keep_below(&mut sh.below, k, epoch, why);
                }
            }
            if self.plan.actions.len() != epoch {
                // The classes judged before the action: their jobs before it are
                // settled; the rest of each is judged again.
                let now = self.plan.actions.len();
                for (b, sh) in shares.iter_mut().enumerate() {
                    // A share with no judged class keeps its next event.
                    if sh.judged.is_empty() && b != e.b {
                        if let Some((at, ev)) = next[b] {
                            if at == epoch {
                                next[b] = Some((now, ev));
                            }
                        }
                        continue;
                    }
                    for (l, i) in std::mem::take(&mut sh.judged) {
                        let before = sh.before[l];
                        let c = &mut sh.levels[l].1[i];
                        if !c.judged_at(epoch) {
                            continue;
                        }
                        let upto = if b == e.b {
                            match l.cmp(&e.level) {
                                std::cmp::Ordering::Less => None,
                                std::cmp::Ordering::Equal => Some(p),
                                std::cmp::Ordering::Greater => Some((0, JobId(0))),
                            }
                        } else if before.is_some_and(|m| m > e.key) {
                            Some((0, JobId(0)))
                        } else {
                            Some(e.key)
                        };
                        self.settle_borrow(c, upto);
                    }
                }
            }
        }
        for sh in &mut shares {
            for l in sh.lo..sh.levels.len() {
                for c in &mut sh.levels[l].1 {
                    self.settle_borrow(c, None);
                }
            }
        }
    }

    /// Settles the class's jobs before `upto` (all: `None`) with its judgement.
    fn settle_borrow(&mut self, c: &mut BCls<'a, '_>, upto: Option<ClassPos>) {
        let Some((_, why)) = c.memo else {
            return;
        };
        if upto.is_none_or(|up| c.last().is_some_and(|l| l < up))
            && c.d.list.uniform_reason() == Some(Some(self.why(why)))
        {
            c.left = 0;
            c.item = c.d.items.len();
            c.rest = None;
            return;
        }
        while let Some(p) = c.head_pos() {
            if upto.is_some_and(|up| p >= up) {
                break;
            }
            let (_, w) = c.head().expect("a job left");
            c.take();
            self.reason_at(p.1, w, why);
        }
    }
}
