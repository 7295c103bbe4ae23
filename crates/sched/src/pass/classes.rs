//! Classes of waiting jobs: jobs that the pass cannot tell apart. Two RUNNABLE jobs of
//! the same share, unit, shape (GPUs per node, nodes) and priority, neither holding
//! GPUs nor a task of an array with a `%` limit, get the same answer from the pass
//! whenever the pass's views are the same when it reaches each: the pass reads of a
//! job only those fields, and its submit time and id only to order jobs and to name
//! them in actions.
//!
//! The views change only with an action (a placement, a preemption, a hold taken or
//! given back): every change to the nodes', shares' and environments' counts is made
//! where an action is pushed, and the one place that pushes an action and takes it
//! back (a holder that tried to start elsewhere) restores the views with it. So when a
//! job's class was judged with no action since, and that judgement made no action,
//! the job gets the same judgement without being looked at: the same reason, or the
//! same turn in the borrow pass. In a long queue most jobs are judged that way: once
//! the first of a class cannot start, the rest of it costs a lookup each.
//!
//! `docs/design.md` ("What a pass may skip") gives the argument in full; the property
//! test `incremental_and_whole_passes_plan_alike` runs every random scenario both ways.

use super::*;

/// Share, unit (`None`: no node has it), GPUs per node, nodes, priority.
pub(super) type ClassKey = (usize, Option<Ux>, u32, u32, u32);

/// What the pass decided for a job that neither started nor took GPUs.
#[derive(Clone)]
pub(super) enum Judged {
    /// Left to the borrow pass.
    Deferred,
    /// This reason; and whether the job waits for room in its share.
    Waits(Why, bool),
}

/// One share's latest judgements, for the priority the pass is at in that share: a
/// share's jobs come in priority order in both passes, so its classes of one priority
/// are judged one after another, and a few entries scanned in place are all a lookup
/// needs.
pub(super) struct ShareJudged<J> {
    prio: u32,
    /// (unit, GPUs per node, nodes), the plan's count of actions then, the judgement.
    at: Vec<((Option<Ux>, u32, u32), usize, J)>,
}

impl<J> Default for ShareJudged<J> {
    fn default() -> Self {
        ShareJudged {
            prio: u32::MAX,
            at: vec![],
        }
    }
}

impl<J: Clone> ShareJudged<J> {
    fn get(&self, c: ClassKey, actions: usize) -> Option<J> {
        if self.prio != c.4 {
            return None;
        }
        self.at
            .iter()
            .find(|(shape, at, _)| *shape == (c.1, c.2, c.3) && *at == actions)
            .map(|e| e.2.clone())
    }

    fn put(&mut self, c: ClassKey, actions: usize, j: J) {
        if self.prio != c.4 {
            self.prio = c.4;
            self.at.clear();
        }
        match self
            .at
            .iter_mut()
            .find(|(shape, ..)| *shape == (c.1, c.2, c.3))
        {
            Some(e) => *e = ((c.1, c.2, c.3), actions, j),
            None => self.at.push(((c.1, c.2, c.3), actions, j)),
        }
    }
}

/// The latest judgement of each class in this pass, with the count of actions the plan
/// had when it was made.
#[derive(Default)]
pub(super) struct Classes {
    /// Off for a pass that looks at every job on its own ([`crate::plan_each`]).
    pub(super) on: bool,
    /// Per share: the own-capacity pass's judgements, and the borrow pass's reasons.
    own: Vec<ShareJudged<Judged>>,
    borrow: Vec<ShareJudged<Why>>,
    /// While a job whose class is kept is judged: its reason is kept here too.
    pub(super) capture: bool,
    pub(super) why: Option<Why>,
}

impl Classes {
    pub(super) fn new(on: bool, shares: usize) -> Classes {
        Classes {
            on,
            own: (0..shares).map(|_| ShareJudged::default()).collect(),
            borrow: (0..shares).map(|_| ShareJudged::default()).collect(),
            ..Classes::default()
        }
    }

    /// The own-capacity pass's judgement of `class`, if made with `actions` actions.
    pub(super) fn own_judged(&self, c: ClassKey, actions: usize) -> Option<Judged> {
        self.own[c.0].get(c, actions)
    }

    pub(super) fn own_put(&mut self, c: ClassKey, actions: usize, j: Judged) {
        self.own[c.0].put(c, actions, j);
    }

    /// The borrow pass's reason for `class`, if given with `actions` actions.
    pub(super) fn borrow_judged(&self, c: ClassKey, actions: usize) -> Option<Why> {
        self.borrow[c.0].get(c, actions)
    }

    pub(super) fn borrow_put(&mut self, c: ClassKey, actions: usize, why: Why) {
        self.borrow[c.0].put(c, actions, why);
    }

    /// Starts keeping the reason the next job is given (when `keep`).
    pub(super) fn start(&mut self, keep: bool) {
        self.capture = keep;
        self.why = None;
    }

    /// The reason kept since [`Classes::start`].
    pub(super) fn stop(&mut self) -> Option<Why> {
        self.capture = false;
        self.why.take()
    }
}

impl Pass<'_> {
    /// The job's class, or `None` where the pass judges it on its own: a holder (its
    /// hold is its own), a task of an array with a `%` limit (the count of its array's
    /// tasks is its own), or every job when classes are off.
    pub(super) fn class_of(
        &self,
        w: &Waiting,
        s: usize,
        u: Option<Ux>,
        prio: u32,
    ) -> Option<ClassKey> {
        (self.classes.on && !w.has_hold && w.array_limit.is_none()).then_some((
            s,
            u,
            w.gpus_per_node,
            w.nodes,
            prio,
        ))
    }
}
