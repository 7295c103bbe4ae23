//! One scheduling pass. See the crate docs for the order of work; each rule of
//! `docs/design.md` §3 is marked where it lives.
//!
//! - `view`: the pass's views of nodes, pools, environments and shares, and the
//!   indexes that keep best fit cheap, built once per pass from the state;
//! - `order`: the order of work (queues, the own-capacity pass, the borrow pass,
//!   holders) and the pending reasons;
//! - `place`: placement (the share's limit, RESERVE shares' idle GPUs, best fit,
//!   gangs whole, the environment's cap);
//! - `victims`: victim selection for reclaim and in-share preemption (ordering,
//!   eligibility, the search and its pruning) and the holds it leaves.

mod classes;
mod each;
mod groups;
mod holds;
mod order;
mod place;
mod victims;
mod view;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use tranche_model::*;
use tranche_state::*;

use victims::{Cand, Mode};
use view::{EnvView, NodeView, NuFlat, Pool, ShareView};

type Ux = usize;

/// Own-capacity order: priority, then lowest usage ratio, then age, then share.
type HeapKey = (
    u32,
    std::cmp::Reverse<u64>,
    std::cmp::Reverse<Millis>,
    std::cmp::Reverse<usize>,
);

/// Most victims in-share preemption examines for one job in one pass.
pub const INSHARE_LOOK_LIMIT: usize = 512;
type Nx = u32;
/// A reclaim search that failed: (nodes, GPUs per node), and the earliest time a
/// victim it passed over for `min_runtime_s` becomes eligible.
type ReclaimFailure = (u32, u32, Option<Millis>);
/// An in-share search that failed: (nodes, GPUs per node, priority), and as above.
type InShareFailure = (u32, u32, u32, Option<Millis>);

/// How a pass walks a queue's waiting jobs: by class (see [`classes`]), job by job
/// (see [`each`]), or by class where the queue's classes hold on average at least
/// [`CLASS_WALK_MIN_JOBS`] jobs. All three give the same plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Walk {
    Auto,
    Each,
    Classes,
}

/// The fewest waiting jobs per class, on average over a queue, at which a pass walks
/// the queue by class: below it, most classes' jobs are judged one by one anyway, and
/// the walk by class costs more per job than the walk job by job.
pub const CLASS_WALK_MIN_JOBS: usize = 8;

/// Computes the plan for `st` at time `now`: one pass, in which a class of alike jobs
/// (see [`classes`]) is judged once while nothing changes. [`crate::Scheduler`] also
/// skips a pass nothing changed.
pub fn plan(st: &State, now: Millis) -> Plan {
    plan_with(st, now, &mut vec![])
}

/// As [`plan`], with the fair-share usage of past hours kept in `past` between passes
/// (see [`crate::fair`]); the plan is the same.
pub fn plan_with(st: &State, now: Millis, past: &mut Vec<crate::fair::Past>) -> Plan {
    run(st, now, Walk::Auto, &crate::fair::Usage::at(st, now, past))
}

/// As [`plan`], with every waiting job looked at on its own: the reference that the
/// pass by classes is tested against, giving the same plan.
pub fn plan_each(st: &State, now: Millis) -> Plan {
    run(
        st,
        now,
        Walk::Each,
        &crate::fair::Usage::at(st, now, &mut vec![]),
    )
}

/// As [`plan`], walking every queue by class however short its classes (for tests).
#[doc(hidden)]
pub fn plan_by_class(st: &State, now: Millis) -> Plan {
    run(
        st,
        now,
        Walk::Classes,
        &crate::fair::Usage::at(st, now, &mut vec![]),
    )
}

fn run(st: &State, now: Millis, walk: Walk, usage: &crate::fair::Usage) -> Plan {
    let mut pass = Pass::new(st, now, walk, usage);
    // Most waiting jobs get a new reason on a full pass: room for them all up front
    // spares the growing list its copies. Room never used is never touched, so it costs
    // no memory; giving it back would copy the list once more.
    pass.plan.reasons.reserve(st.runnable_count());
    // So for actions: a pass that preempts tens of thousands of jobs grew this list by
    // doubling, copying it each time into freshly faulted pages.
    pass.plan.actions.reserve(st.runnable_count());
    let mut queues: Vec<&JobQueue> = st.queues.values().collect();
    queues.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    for q in queues {
        pass.queue(q);
    }
    pass.plan.next_wakeup = pass.wakeup;
    let mut plan = pass.plan;
    plan.reasons.shrink_to_fit();
    drop_noop_holds(&mut plan, st);
    plan
}

/// A holder whose hold the pass released and then took again, unchanged, has nothing
/// to apply: its hold actions are dropped, so that a settled cluster gets an empty plan
/// (and a plan that changes nothing is never proposed again and again).
///
/// Only a job that holds GPUs in the state can take its hold again (a hold is released
/// only by its holder), so the plan is searched for those alone, and not at all when
/// no job holds GPUs.
fn drop_noop_holds(plan: &mut Plan, st: &State) {
    let holders: HashSet<JobId> = st.holding_jobs().map(|j| j.id).collect();
    if holders.is_empty() {
        return;
    }
    let mut last: HashMap<JobId, Option<&tranche_model::Hold>> = HashMap::default();
    let mut other: HashSet<JobId> = HashSet::default();
    for a in &plan.actions {
        match a {
            Action::Hold { job, hold } if holders.contains(job) => {
                last.insert(*job, hold.as_ref());
            }
            Action::Place { job, .. } if holders.contains(job) => {
                other.insert(*job);
            }
            _ => {}
        }
    }
    let noop: HashSet<JobId> = last
        .into_iter()
        .filter(|(job, hold)| {
            !other.contains(job) && st.job(*job).is_some_and(|j| j.hold.as_ref() == *hold)
        })
        .map(|(job, _)| job)
        .collect();
    if !noop.is_empty() {
        plan.actions
            .retain(|a| !matches!(a, Action::Hold { job, .. } if noop.contains(job)));
    }
}

/// Asks the CPU to start loading `r` into its cache, for a value the pass reads a
/// little later: a pass reads 100,000 waiting jobs' entries, spread over the state's
/// memory, and each first read would otherwise wait for memory. Only a hint: it
/// changes no result.
#[inline(always)]
fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = (r as *const T).cast::<i8>();
        let n = std::mem::size_of::<T>();
        let mut off = 0;
        while off < n {
            // SAFETY: `p + off` lies within `*r`; a prefetch reads nothing the program
            // sees and cannot fault.
            unsafe { _mm_prefetch(p.add(off), _MM_HINT_T0) };
            off += 64;
        }
        if n > 0 {
            // SAFETY: as above (the last byte of `*r`).
            unsafe { _mm_prefetch(p.add(n - 1), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// A set of job ids as a bitmap: the victim search asks it for every victim it
/// looks at, and job ids are dense.
#[derive(Default)]
struct JobBits(Vec<u64>);

impl JobBits {
    fn contains(&self, id: &JobId) -> bool {
        let i = id.0 as usize;
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn insert(&mut self, id: JobId) {
        let i = id.0 as usize;
        if self.0.len() <= i / 64 {
            self.0.resize(i / 64 + 1, 0);
        }
        self.0[i / 64] |= 1 << (i % 64);
    }
}

/// The job being scheduled.
#[derive(Clone, Copy)]
struct Ask<'a> {
    id: JobId,
    w: &'a Waiting,
    s: usize,
    u: Ux,
    prio: u32,
}

impl Ask<'_> {
    fn need(&self) -> u32 {
        self.w.gpus_per_node * self.w.nodes
    }
}

/// Why a placement attempt failed: a reason whose names are the pass's shared copies
/// (see [`Pass::unit_names`] and [`ShareView::name`]), so that giving it to a job
/// copies no string.
type Why = PendingReason;

struct Pass<'a> {
    st: &'a State,
    now: Millis,
    units: Vec<&'a str>,
    unit_ix: HashMap<&'a str, Ux>,
    /// Each unit's name as reasons share it.
    unit_names: Vec<SharedStr>,
    /// The pass's unit for each unit number of the state's waiting entries
    /// ([`State::unit_names`]); `None` for a unit no share, environment or node has.
    unit_of_id: Vec<Option<Ux>>,
    nodes: Vec<NodeView<'a>>,
    /// The nodes by name, made when first asked (see [`Pass::node_ix`]).
    node_by_name: std::cell::OnceCell<HashMap<&'a str, Nx>>,
    /// Per (node, unit), `node * units + unit`: see [`NuFlat`]. Empty where there are
    /// more pools than its bitmask holds.
    nu_flat: Vec<NuFlat>,
    /// The pass's node for each node number of the state's [`Running`] records.
    nx_of_number: Vec<Nx>,
    pools: Vec<Pool>,
    envs: Vec<EnvView>,
    env_ix: HashMap<&'a str, usize>,
    shares: Vec<ShareView<'a>>,
    share_ix: HashMap<&'a str, usize>,
    /// Groups of shares (see [`groups`]), and each one's group.
    groups: Vec<groups::GroupView>,
    group_parent: Vec<Option<usize>>,
    /// While the borrow pass of a queue with groups takes only the borrowers whose
    /// lenders are inside a group at least this deep (see [`Pass::borrow_depth`]);
    /// `None`: every borrower.
    borrow_reach: Option<u32>,
    /// Jobs placed in this pass.
    placed: JobBits,
    queue_ix: HashMap<&'a str, usize>,
    /// Preemptor → (victims still stopping, latest kill deadline).
    victims_of: HashMap<JobId, (u32, Millis)>,
    /// Jobs taken as victims in this pass, a bit per job id.
    taken: JobBits,
    /// The holds as the pass has them now: the state's, less those given back, plus
    /// those taken (see [`holds`]).
    holds: HashMap<JobId, holds::Held>,
    /// Holders whose hold another share's within-max job took over in this pass, and
    /// how many times that happened (the only change to a share's usage ratio that
    /// another share's job makes).
    hold_lost: JobBits,
    takeovers: u32,
    /// How the pass walks a queue's waiting jobs.
    walk: Walk,
    /// Victim lists, built once per pass when first needed, with the index of the
    /// first victim not yet taken (victims are taken front to back).
    reclaim_cands: HashMap<(usize, Ux), (Vec<Cand>, usize)>,
    inshare_cands: HashMap<(usize, Ux), (Vec<Cand>, usize)>,
    /// Per node, GPUs the victims picked so far free: scratch for the victim search,
    /// all zero between searches.
    freed: Vec<u32>,
    /// Scratch for the victim walks: nodes touched, nodes that fit, victims picked
    /// (see [`Pass::walk_node_victims`]), empty between walks.
    walk_bufs: (Vec<Nx>, Vec<Nx>, Vec<usize>),
    reclaim_failed: HashMap<(usize, Ux), Vec<ReclaimFailure>>,
    inshare_failed: HashMap<(usize, Ux), Vec<InShareFailure>>,
    /// Per array with a `%` limit: its tasks holding or about to hold GPUs.
    array_taken: HashMap<JobId, u32>,
    wakeup: Option<Millis>,
    plan: Plan,
}

fn strategy_str(s: Strategy) -> &'static str {
    match s {
        Strategy::Reserve => "RESERVE",
        Strategy::Lend => "LEND",
        Strategy::LendAndBorrow => "LEND_AND_BORROW",
    }
}
