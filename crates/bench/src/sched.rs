//! `tranche bench sched`: times full scheduling passes over a large synthetic cluster
//! built through the real state machine.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;
use tranche_model::*;
use tranche_state::*;

use super::stats::{print_json, Spread};

/// The workload a scheduler benchmark times.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// A nearly full cluster (60,000 running jobs): most of the pass goes to
    /// preemptions and their victim searches.
    Preemption,
    /// A mostly free cluster (2,000 running jobs): the pass places tens of thousands.
    Placement,
    /// Every GPU busy and 1,000,000 jobs waiting; one job ends, and the pass that
    /// follows is timed.
    Backlog,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::Preemption => "preemption",
            Mix::Placement => "placement",
            Mix::Backlog => "backlog",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct SchedArgs {
    /// The workload: `preemption` (a nearly full cluster) or `placement` (a mostly
    /// free one).
    #[arg(long, value_enum, default_value_t = Mix::Preemption)]
    mix: Mix,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 10_000)]
    nodes: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Capacity units (GPU classes); node i has unit i mod units.
    #[arg(long, default_value_t = 4)]
    units: u32,
    /// Quota shares in the queue.
    #[arg(long, default_value_t = 20)]
    shares: u32,
    /// RUNNABLE jobs waiting when the pass runs (default: 100,000; 1,000,000 for the
    /// backlog mix).
    #[arg(long)]
    pending: Option<u32>,
    /// Jobs submitted to run before the others (default: 60,000 for the preemption
    /// mix, 2,000 for the placement mix, a GPU's worth each of every GPU for the
    /// backlog mix, which fills the cluster and leaves the rest waiting).
    #[arg(long)]
    running: Option<u32>,
    /// Timed passes; the median is reported.
    #[arg(long, default_value_t = 7)]
    runs: u32,
    /// Seed of the job mix.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// A state snapshot to time instead of building the cluster: read from FILE when
    /// it exists, else built with the other options and written there (for profiling
    /// the pass without the minute-long set-up each time).
    #[arg(long, value_name = "FILE")]
    state: Option<std::path::PathBuf>,
}

impl SchedArgs {
    fn pending(&self) -> u32 {
        self.pending.unwrap_or(match self.mix {
            Mix::Backlog => 1_000_000,
            _ => 100_000,
        })
    }
}

/// xorshift64*: a tiny deterministic generator for the job mix.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn apply(st: &mut State, cmd: Command, now: Millis) -> Outcome {
    match st.apply(&cmd, now) {
        Ok(o) => o,
        Err(e) => panic!("benchmark setup command refused: {e}"),
    }
}

/// Builds the cluster, places the running jobs with the scheduler itself, then queues
/// the pending ones.
fn build(a: &SchedArgs, running: u32) -> State {
    let mut st = State::new();
    let units: Vec<Unit> = ["h100", "a100", "l40s", "h200", "b200", "mi300"]
        .iter()
        .cycle()
        .take(a.units.max(1) as usize)
        .enumerate()
        .map(|(i, u)| {
            if i < 6 {
                Unit::new(*u)
            } else {
                Unit(format!("{u}-{i}"))
            }
        })
        .collect();
    let per_unit: Vec<u32> = (0..units.len() as u32)
        .map(|u| {
            (0..a.nodes).filter(|n| n % units.len() as u32 == u).count() as u32 * a.gpus_per_node
        })
        .collect();
    let limits = |f: &dyn Fn(u32) -> u32| -> Vec<CapacityLimit> {
        units
            .iter()
            .zip(&per_unit)
            .take(MAX_CAPACITY_LIMITS)
            .map(|(u, t)| CapacityLimit {
                unit: u.clone(),
                max: f(*t).max(1),
            })
            .collect()
    };
    apply(
        &mut st,
        Command::PutEnvironment(ServiceEnvironment {
            name: "bench".into(),
            selector: BTreeMap::new(),
            capacity_limits: limits(&|t| t),
            state: ObjState::Enabled,
        }),
        0,
    );
    apply(
        &mut st,
        Command::PutPolicy(SchedulingPolicy {
            name: "fifo".into(),
            idle_resource_assignment: IdleAssignment::Fifo,
        }),
        0,
    );
    apply(
        &mut st,
        Command::PutQueue(JobQueue {
            name: "q".into(),
            priority: 0,
            state: ObjState::Enabled,
            environment: "bench".into(),
            policy: "fifo".into(),
        }),
        0,
    );
    let shares = a.shares.clamp(1, MAX_SHARES_PER_QUEUE as u32);
    for i in 0..shares {
        let (strategy, borrow_limit) = match i % 5 {
            0 => (Strategy::Reserve, None),
            1 | 2 => (Strategy::Lend, None),
            3 => (Strategy::LendAndBorrow, Some(-1)),
            _ => (Strategy::LendAndBorrow, Some(50)),
        };
        apply(
            &mut st,
            Command::PutShare(QuotaShare {
                weight: None,
                loans: Default::default(),
                name: ShareName(format!("team{i:02}")),
                queue: "q".into(),
                capacity_limits: limits(&|t| t / shares),
                resource_sharing: ResourceSharing {
                    strategy,
                    borrow_limit,
                },
                in_share_preemption: i % 5 == 4,
                state: ObjState::Enabled,
                members: vec![],
                default_grace_s: 60,
                max_grace_s: 600,
                min_runtime_s: 0,
                max_user_priority: tranche_model::MAX_JOB_PRIORITY,
                limits: tranche_model::JobLimits::widest(),
            }),
            0,
        );
    }
    for n in 0..a.nodes {
        let unit = units[(n as usize) % units.len()].clone();
        let name = NodeName(format!("node{n:05}"));
        let gpus = (0..a.gpus_per_node)
            .map(|g| Gpu {
                index: GpuIndex(g),
                uuid: format!("GPU-{n}-{g}"),
                unit: unit.clone(),
                memory_mb: 81_559,
                healthy: true,
            })
            .collect();
        apply(
            &mut st,
            Command::RegisterNode(NodeInventory {
                name,
                address: "10.0.0.1".into(),
                labels: BTreeMap::new(),
                gpus,
                cpus: 128,
                memory_mb: 2 << 20,
            }),
            0,
        );
    }
    let mut rng = Rng(a.seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let used_units = units.len().min(MAX_CAPACITY_LIMITS);
    let mut submit = |st: &mut State, i: u32, running: bool, now: Millis| {
        let share = format!("team{:02}", rng.below(shares as u64));
        let unit = units[rng.below(used_units as u64) as usize]
            .as_str()
            .to_string();
        let roll = rng.below(100);
        let (gpus, nodes) = if running {
            match roll {
                0..=84 => (1, 1),
                85..=94 => (2, 1),
                _ => (4, 1),
            }
        } else {
            match roll {
                0..=49 => (1, 1),
                50..=69 => (2, 1),
                70..=84 => (4, 1),
                85..=94 => (8, 1),
                _ => (8, 2),
            }
        };
        let mut spec = JobSpec::new(
            &format!("job{i}"),
            "q",
            &share,
            "bench",
            &unit,
            gpus.min(a.gpus_per_node),
            nodes,
        );
        spec.priority = if running {
            rng.below(50) as u32
        } else {
            rng.below(100) as u32
        };
        apply(st, Command::Submit(spec), now);
    };
    for i in 0..running {
        submit(&mut st, i, true, 0);
    }
    // The scheduler places the running jobs; they start.
    for _ in 0..20 {
        let plan = tranche_sched::plan(&st, 1);
        if plan.actions.is_empty() {
            break;
        }
        apply(&mut st, Command::ApplyPlan(plan), 1);
    }
    let placed: Vec<(JobId, u32)> = st
        .active_jobs()
        .map(|j| (j.id, j.attempts.len() as u32))
        .collect();
    for (id, attempt) in placed {
        apply(
            &mut st,
            Command::JobProgress {
                job: id,
                attempt,
                event: Progress::Running,
            },
            2,
        );
    }
    for i in 0..a.pending() {
        submit(&mut st, running + i, false, 3 + i as Millis);
    }
    st
}

fn time_passes(
    st: &State,
    now: Millis,
    runs: u32,
    pass: fn(&State, Millis) -> Plan,
) -> (Vec<f64>, Plan) {
    let mut times = vec![];
    let mut last = Plan::default();
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let plan = pass(st, now);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        last = plan;
    }
    (times, last)
}

/// Applies `plan`, then the scheduler's plans, until a pass has nothing to do; returns
/// the passes it took (at most 20).
fn settle(st: &mut State, plan: Plan, now: Millis) -> u32 {
    let mut plan = plan;
    for n in 1..=20 {
        apply(st, Command::ApplyPlan(plan), now);
        plan = tranche_sched::plan(st, now);
        if plan.is_empty() {
            return n;
        }
    }
    20
}

/// Times the scheduler's answer for a state nothing changed since an empty plan.
fn time_unchanged(st: &State, now: Millis, runs: u32) -> Vec<f64> {
    let mut sched = tranche_sched::Scheduler::new();
    let first = sched.plan(st, now);
    assert!(first.is_empty(), "the state is settled");
    (0..runs.max(1))
        .map(|_| {
            let t = Instant::now();
            let plan = sched.plan(st, now);
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            assert!(plan.is_empty());
            ms
        })
        .collect()
}

pub fn sched(a: &SchedArgs) -> ExitCode {
    let t0 = Instant::now();
    let running = a.running.unwrap_or(match a.mix {
        Mix::Preemption => 60_000,
        Mix::Placement => 2_000,
        Mix::Backlog => a.nodes * a.gpus_per_node,
    });
    let mut st = match &a.state {
        Some(p) if p.exists() => match std::fs::read(p)
            .map_err(|e| e.to_string())
            .and_then(|b| State::restore(&b).map_err(|e| e.to_string()))
        {
            Ok(st) => st,
            Err(e) => {
                eprintln!(
                    "tranche bench sched: cannot read the state {}: {e}",
                    p.display()
                );
                return ExitCode::FAILURE;
            }
        },
        Some(p) => {
            let st = build(a, running);
            if let Err(e) = std::fs::write(p, st.snapshot()) {
                eprintln!(
                    "tranche bench sched: cannot write the state {}: {e}",
                    p.display()
                );
                return ExitCode::FAILURE;
            }
            st
        }
        None => build(a, running),
    };
    if a.mix == Mix::Backlog {
        return backlog(a, st, t0);
    }
    let setup_s = t0.elapsed().as_secs_f64();
    let running = st.active_jobs().count();
    let runnable = st.runnable_count();
    let now = 10_000_000;
    // Cold: every waiting job's reason is new to the pass. The pass over every job
    // first, then the pass by classes, which must plan the same.
    let (each, each_plan) = time_passes(&st, now, a.runs, tranche_sched::plan_each);
    let (cold, plan) = time_passes(&st, now, a.runs, tranche_sched::plan);
    assert!(
        each_plan.same_as(&plan),
        "the pass by classes plans as the pass over every job"
    );
    // Settled: the plan applied (victims stopping, holds taken) and the passes that
    // follow applied until one has nothing to do; then a whole pass that finds
    // nothing, and the scheduler's answer when nothing changed since.
    let settling = settle(&mut st, plan.clone(), now);
    let (settled, _) = time_passes(&st, now, a.runs, tranche_sched::plan);
    let unchanged = time_unchanged(&st, now, a.runs);
    let cold_spread = Spread::of(&cold);
    let full_pass_ms = cold_spread.p50;
    let each_pass_ms = Spread::of(&each).p50;
    let settled_pass_ms = Spread::of(&settled).p50;
    let unchanged_ms = Spread::of(&unchanged).p50;
    let placements = plan.placements();
    let placements_per_s = placements as f64 / (full_pass_ms / 1000.0);
    if a.json {
        let j = serde_json::json!({
            "mix": a.mix.name(),
            "nodes": a.nodes, "gpus_per_node": a.gpus_per_node, "units": a.units, "shares": a.shares,
            "runnable": runnable, "running": running, "runs": a.runs,
            "full_pass_ms": full_pass_ms, "every_job_pass_ms": each_pass_ms,
            "placements": placements, "placements_per_s": placements_per_s,
            "preemptions": plan.preemptions(), "reasons": plan.reasons.len(),
            "settling_passes": settling, "settled_pass_ms": settled_pass_ms,
            "steady_pass_ms": unchanged_ms,
            "setup_s": setup_s,
        });
        print_json(j);
    } else {
        println!(
            "{} mix: {} nodes x {} GPUs in {} units, {} shares; {runnable} RUNNABLE, {running} running (setup {setup_s:.1} s)",
            a.mix.name(),
            a.nodes,
            a.gpus_per_node,
            a.units,
            a.shares
        );
        println!(
            "full pass:   median {full_pass_ms:.1} ms over {} runs (min {:.1}, max {:.1}); {placements} placements, {} preemptions, {} reasons",
            a.runs,
            cold_spread.min,
            cold_spread.max,
            plan.preemptions(),
            plan.reasons.len()
        );
        println!("placements/s: {placements_per_s:.0}");
        println!("every job on its own: median {each_pass_ms:.1} ms (the same plan)");
        println!(
            "settled pass: median {settled_pass_ms:.1} ms (a whole pass with nothing to do, after {settling} passes applied)"
        );
        println!("steady pass: median {unchanged_ms:.3} ms (nothing changed since an empty plan)");
    }
    ExitCode::SUCCESS
}

/// The backlog mix: the cluster settled (the passes applied until one has nothing to
/// do), then one running job ends; times the pass that follows.
fn backlog(a: &SchedArgs, mut st: State, t0: Instant) -> ExitCode {
    let now = 10_000_000;
    let first = tranche_sched::plan(&st, now);
    let settling = settle(&mut st, first, now);
    let Some((job, attempt)) = st
        .active_jobs()
        .find(|j| j.stop.is_none())
        .map(|j| (j.id, j.attempts.len() as u32))
    else {
        eprintln!("tranche bench sched: no running job to end");
        return ExitCode::FAILURE;
    };
    apply(
        &mut st,
        Command::JobProgress {
            job,
            attempt,
            event: Progress::Exited {
                code: Some(0),
                reason: None,
            },
        },
        now,
    );
    let setup_s = t0.elapsed().as_secs_f64();
    let (times, plan) = time_passes(&st, now, a.runs, tranche_sched::plan);
    let spread = Spread::of(&times);
    let (runnable, running) = (st.runnable_count(), st.active_count());
    if a.json {
        print_json(serde_json::json!({
            "mix": a.mix.name(),
            "nodes": a.nodes, "gpus_per_node": a.gpus_per_node, "units": a.units, "shares": a.shares,
            "runnable": runnable, "running": running, "runs": a.runs,
            "settling_passes": settling,
            "after_one_end_pass_ms": spread.p50,
            "placements": plan.placements(), "preemptions": plan.preemptions(),
            "reasons": plan.reasons.len(),
            "setup_s": setup_s,
        }));
    } else {
        println!(
            "backlog mix: {} nodes x {} GPUs in {} units, {} shares; {runnable} RUNNABLE, {running} running (setup {setup_s:.1} s, {settling} passes to settle)",
            a.nodes, a.gpus_per_node, a.units, a.shares
        );
        println!(
            "one job ended: the next pass median {:.1} ms over {} runs (min {:.1}, max {:.1}); {} placements, {} preemptions, {} reasons",
            spread.p50,
            a.runs,
            spread.min,
            spread.max,
            plan.placements(),
            plan.preemptions(),
            plan.reasons.len()
        );
    }
    ExitCode::SUCCESS
}
