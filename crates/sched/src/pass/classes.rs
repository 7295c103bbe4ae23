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
//! same turn in the borrow pass. Each share keeps its latest judgement only: in a long
//! queue a share's alike jobs mostly come one after another, and once the first of such
//! a run cannot start, the rest of it costs a comparison each.
//!
//! `docs/design.md` ("What a pass may skip") gives the argument in full; the property
//! test `incremental_and_whole_passes_plan_alike` runs every random scenario both ways.

use super::*;

/// Share, unit (`None`: no node has it), GPUs per node, nodes, priority.
pub(super) type ClassKey = (usize, Option<Ux>, u32, u32, u32);

/// Where a judged job's reason is, without a copy: the plan's reasons (it changed), or
/// the job's entry in the state (it was already current).
#[derive(Clone, Copy)]
pub(super) enum WhyAt<'a> {
    Plan(usize),
    State(&'a Why),
}

/// What the pass decided for a job that neither started nor took GPUs.
#[derive(Clone, Copy)]
pub(super) enum Judged<'a> {
    /// Left to the borrow pass.
    Deferred,
    /// This reason; and whether the job waits for room in its share.
    Waits(WhyAt<'a>, bool),
}

/// One share's latest judgement: its class, and the plan's count of actions then. A
/// share's jobs come in its order (priority, then age) in both passes, so alike jobs
/// mostly come one after another.
type Last<J> = Option<(ClassKey, usize, J)>;

/// The latest judgement per share, in each of the two passes.
pub(super) struct Classes<'a> {
    /// Off for a pass that looks at every job on its own ([`crate::plan_each`]).
    on: bool,
    own: Vec<Last<Judged<'a>>>,
    borrow: Vec<Last<WhyAt<'a>>>,
}

impl<'a> Classes<'a> {
    pub(super) fn new(on: bool, shares: usize) -> Classes<'a> {
        Classes {
            on,
            own: vec![None; shares],
            borrow: vec![None; shares],
        }
    }
}

impl<'a> Pass<'a> {
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

    /// The own-capacity pass's judgement of the job's class, if made with as many
    /// actions in the plan as now.
    pub(super) fn own_judged(&self, c: ClassKey) -> Option<Judged<'a>> {
        match self.classes.own[c.0] {
            Some((k, at, j)) if k == c && at == self.plan.actions.len() => Some(j),
            _ => None,
        }
    }

    /// The borrow pass's reason for the job's class, as [`Pass::own_judged`].
    pub(super) fn borrow_judged(&self, c: ClassKey) -> Option<WhyAt<'a>> {
        match self.classes.borrow[c.0] {
            Some((k, at, why)) if k == c && at == self.plan.actions.len() => Some(why),
            _ => None,
        }
    }

    /// Keeps the judgement of job `id` of class `c` (`w` its entry), made since the
    /// plan had `mark` actions and `reasons` reasons, if it made no action: its reason,
    /// and whether it waits; or `deferred`.
    pub(super) fn own_keep(
        &mut self,
        c: ClassKey,
        id: JobId,
        w: &'a Waiting,
        (mark, reasons): (usize, usize),
        deferred: bool,
        waits: bool,
    ) {
        if self.plan.actions.len() != mark {
            return;
        }
        let j = if deferred {
            Some(Judged::Deferred)
        } else {
            self.why_at(id, w, reasons)
                .map(|why| Judged::Waits(why, waits))
        };
        if let Some(j) = j {
            self.classes.own[c.0] = Some((c, mark, j));
        }
    }

    /// As [`Pass::own_keep`], for the borrow pass.
    pub(super) fn borrow_keep(
        &mut self,
        c: ClassKey,
        id: JobId,
        w: &'a Waiting,
        (mark, reasons): (usize, usize),
    ) {
        if self.plan.actions.len() != mark {
            return;
        }
        if let Some(why) = self.why_at(id, w, reasons) {
            self.classes.borrow[c.0] = Some((c, mark, why));
        }
    }

    /// Where the reason job `id` was just given is: the plan's last, if it was pushed
    /// since the plan had `reasons`; else its entry's, which was current.
    fn why_at(&self, id: JobId, w: &'a Waiting, reasons: usize) -> Option<WhyAt<'a>> {
        match self.plan.reasons.last() {
            Some((j, _)) if self.plan.reasons.len() > reasons && *j == id => {
                Some(WhyAt::Plan(self.plan.reasons.len() - 1))
            }
            _ => w.reason.as_ref().map(WhyAt::State),
        }
    }

    /// Gives job `id` (`w` its entry) the reason at `why`.
    pub(super) fn reason_at(&mut self, id: JobId, w: &Waiting, why: WhyAt<'a>) {
        let r = match why {
            WhyAt::Plan(i) => &self.plan.reasons[i].1,
            WhyAt::State(r) => r,
        };
        if w.reason.as_ref() != Some(r) {
            let r = r.clone();
            self.plan.reasons.push((id, r));
        }
    }
}
