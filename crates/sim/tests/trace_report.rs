//! A tiny trace simulated, and its report's figures, checked against numbers worked
//! out by hand.

use tranche_model::{JobStatus, Strategy};
use tranche_sim::policy;
use tranche_sim::report::{figures, AttemptRun, JobRun, Setup, ShareInfo};
use tranche_sim::trace::{parse, Columns};
use tranche_sim::tracesim::simulate;

/// One node of 4 GPUs; a borrows, b only lends.
const POLICY: &str = r#"
[[shares]]
name = "a"
capacity_limits = [{ unit = "h100", max = 2 }]
strategy = "LEND_AND_BORROW"
default_grace_s = 10
[[shares]]
name = "b"
capacity_limits = [{ unit = "h100", max = 2 }]
strategy = "LEND"
default_grace_s = 10
"#;

/// By hand:
/// - j1 (a, 4 GPUs, 100 s) starts at 0, borrowing 2 of b's GPUs;
/// - j2 (b, 2 GPUs, 50 s) arrives at 10 within b's max: j1 is reclaimed, exits at
///   once, and j2 starts at 10 (ends at 60); j1 waits again for 4 GPUs;
/// - j3 (b, 2 GPUs, 20 s) arrives at 30 with b at its max and LEND never borrows: it
///   waits until j2 ends at 60, and goes first then (within max, while j1 would
///   borrow); it ends at 80;
/// - j1 starts again at 80 and runs its 100 s: ends at 180.
const TRACE: &str = "name,submit_s,share,gpus,duration_s\n\
                     j1,0,a,4,100\n\
                     j2,10,b,2,50\n\
                     j3,30,b,2,20\n";

const S: u64 = 1000;

fn run() -> (Setup, Vec<JobRun>) {
    let sc = policy::load(POLICY, Some(policy::parse_nodes("1 x 4 h100").unwrap())).unwrap();
    let jobs = parse(TRACE, &Columns::default()).unwrap();
    let out = simulate(&sc, &jobs).unwrap();
    (Setup::of(&sc), out.runs)
}

fn at(start: u64, end: u64, preempted: bool) -> AttemptRun {
    AttemptRun {
        start: start * S,
        end: Some(end * S),
        preempted,
        saved: 0,
    }
}

#[test]
fn the_tiny_trace_runs_as_worked_out() {
    let (_, runs) = run();
    let by = |n: &str| runs.iter().find(|r| r.name == n).unwrap();
    assert_eq!(by("j1").attempts, [at(0, 10, true), at(80, 180, false)]);
    assert_eq!(by("j2").attempts, [at(10, 60, false)]);
    assert_eq!(by("j3").attempts, [at(60, 80, false)]);
    assert!(runs.iter().all(|r| r.status == JobStatus::Succeeded));
}

#[test]
fn the_figures_of_the_tiny_trace() {
    let (setup, runs) = run();
    let f = figures(&setup, &runs, 18);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert_eq!((f.jobs, f.succeeded, f.never_started), (3, 3, 0));
    assert_eq!(f.makespan_ms, 180 * S);
    // GPU-seconds: j1 4×10 + j2 2×50 + j3 2×20 + j1 again 4×100 = 580, of 4 × 180.
    assert!(close(f.utilization, 580.0 / 720.0), "{}", f.utilization);
    // Someone waits during [10, 80): j2 runs on 2 GPUs, then j3 on 2.
    assert_eq!(f.waiting_ms, 70 * S);
    assert!(close(f.utilization_while_waiting, 140.0 / 280.0));
    // Waits 0, 0 and 30 s: mean 10 s, nearest-rank p50 0 s and p99 30 s.
    assert!(close(f.wait.mean, 10_000.0));
    assert_eq!((f.wait.p50, f.wait.p99, f.wait.max), (0, 30 * S, 30 * S));
    let (a, b) = (&f.shares[0], &f.shares[1]);
    assert_eq!((a.jobs, b.jobs), (1, 2));
    assert!(close(b.wait.mean, 15_000.0));
    // j1's first attempt: 4 GPUs × 10 s lost.
    assert_eq!((f.preempted_attempts, a.preempted_attempts), (1, 1));
    assert!(close(f.lost_gpu_hours, 40.0 / 3600.0));
    // No checkpoints: all of it is work lost.
    assert!(close(f.work_lost_gpu_hours, f.lost_gpu_hours));
    // a above its max by 2 GPUs during [0, 10) and [80, 180): 220 GPU-seconds, all
    // of them b's idle GPUs.
    assert!(close(a.borrowed_gpu_hours, 220.0 / 3600.0));
    assert!(close(b.lent_gpu_hours, 220.0 / 3600.0));
    assert!(close(a.lent_gpu_hours, 0.0) && close(b.borrowed_gpu_hours, 0.0));
    // Only j2 had room at arrival (j1 needs 4 of a's 2, j3 finds b at its max), and it
    // started at once.
    assert_eq!((f.room_at_arrival, f.started_late), (1, 0));
    assert_eq!((b.room_at_arrival, a.room_at_arrival), (1, 0));
    // Series: 18 buckets of 10 s. In [10, 20) a holds nothing, b 2 within its max; in
    // [80, 90) a holds 2 within max and 2 borrowed; 1 job waits in [10, 20), 2 in
    // [30, 40).
    let sr = &f.series;
    assert_eq!(sr.bucket_ms, 10 * S);
    assert_eq!(
        (sr.own[0][1], sr.own[1][1], sr.borrowed[0][1]),
        (0.0, 2.0, 0.0)
    );
    assert_eq!((sr.own[0][8], sr.borrowed[0][8]), (2.0, 2.0));
    assert_eq!(sr.queued[0][1] + sr.queued[1][1], 1.0);
    assert_eq!(sr.queued[0][3] + sr.queued[1][3], 2.0);
    assert_eq!(sr.preemptions[1], 1);
    assert_eq!(sr.preemptions.iter().sum::<u64>(), 1);
}

#[test]
fn a_job_with_room_that_waits_past_its_grace_started_late() {
    let setup = Setup {
        shares: vec![ShareInfo {
            name: "a".into(),
            max: 4,
            strategy: Strategy::Reserve,
            grace_s: 10,
        }],
        total_gpus: 4,
        nodes: Default::default(),
    };
    let job = |name: &str, gpus, submit: u64, start: u64, end: u64| JobRun {
        name: name.into(),
        share: "a".into(),
        gpus,
        priority: 0,
        submit: submit * S,
        attempts: vec![at(start, end, false)],
        status: JobStatus::Succeeded,
        unit: "g".into(),
        placements: vec![],
    };
    // x has room (0 + 2 ≤ 4) and starts after 11 s: within grace + 1 s. y has room
    // (2 used + 2 ≤ 4) and starts after 12 s: late. z arrives with x and y holding
    // all 4: no room.
    let runs = [
        job("x", 2, 0, 11, 100),
        job("y", 2, 1, 13, 100),
        job("z", 1, 20, 100, 110),
    ];
    let f = figures(&setup, &runs, 10);
    assert_eq!((f.room_at_arrival, f.started_late), (2, 1));
    assert_eq!(f.longest_wait_with_room_ms, 12 * S);
}

#[test]
fn a_higher_priority_job_submitted_at_the_same_instant_is_ahead_of_a_job() {
    let setup = Setup {
        shares: vec![ShareInfo {
            name: "a".into(),
            max: 4,
            strategy: Strategy::LendAndBorrow,
            grace_s: 10,
        }],
        total_gpus: 8,
        nodes: Default::default(),
    };
    let job = |name: &str, gpus, priority, start: u64| JobRun {
        name: name.into(),
        share: "a".into(),
        gpus,
        priority,
        submit: 0,
        attempts: vec![at(start, 100, false)],
        status: JobStatus::Succeeded,
        unit: "g".into(),
        placements: vec![],
    };
    // Both arrive at 0, x first in the trace. y's priority puts it ahead of x (rule
    // 1), and y takes the share's 4: x has no room, so its wait of 30 s is not late.
    // With equal priorities x is ahead of y: both have room (0 + 2 and 2 + 2 ≤ 4), and
    // x, started after 30 s, is late.
    let runs = [job("x", 2, 0, 30), job("y", 4, 5, 0)];
    let f = figures(&setup, &runs, 10);
    assert_eq!((f.room_at_arrival, f.started_late), (1, 0));
    let runs = [job("x", 2, 0, 30), job("y", 2, 0, 0)];
    let f = figures(&setup, &runs, 10);
    assert_eq!((f.room_at_arrival, f.started_late), (2, 1));
}

#[test]
fn a_share_the_policy_does_not_have_names_its_line() {
    let sc = policy::load(POLICY, Some(policy::parse_nodes("1 x 4 h100").unwrap())).unwrap();
    let jobs = parse(
        "submit_s,share,gpus,duration_s\n0,a,1,1\n5,c,1,1\n",
        &Columns::default(),
    )
    .unwrap();
    let e = tranche_sim::tracesim::specs(&sc, &jobs).unwrap_err();
    assert_eq!((e.line(), e.column()), (3, Some("share")));
    assert!(
        e.to_string()
            .contains("not in the policy (its shares: a, b)"),
        "{e}"
    );
    let jobs = parse(
        "submit_s,share,gpus,duration_s\n0,a,6,1\n",
        &Columns::default(),
    )
    .unwrap();
    let e = tranche_sim::tracesim::specs(&sc, &jobs).unwrap_err();
    assert_eq!((e.line(), e.column()), (2, Some("gpus")));
}

#[test]
fn the_comparison_policies_run_the_same_trace() {
    let sc = policy::load(POLICY, Some(policy::parse_nodes("1 x 4 h100").unwrap())).unwrap();
    let jobs = parse(TRACE, &Columns::default()).unwrap();
    // Static: j1 can never have 4 GPUs of a RESERVE share of 2: it waits forever, and
    // the run ends when nothing else is left to happen.
    let out = simulate(&policy::static_partition(&sc), &jobs).unwrap();
    assert!(out.runs[0].attempts.is_empty());
    assert_eq!(out.runs[0].status, JobStatus::Runnable);
    assert_eq!(out.end, 80 * S);
    let setup = Setup::of(&policy::static_partition(&sc));
    assert_eq!(figures(&setup, &out.runs, 10).never_started, 1);
    // Pooled: one share of 4, no preemption: j1 runs 0-100, j2 100-150, j3 100-120.
    let out = simulate(&policy::pooled(&sc), &policy::pooled_trace(&jobs)).unwrap();
    let by = |n: &str| {
        out.runs
            .iter()
            .find(|r| r.name == n)
            .unwrap()
            .attempts
            .clone()
    };
    assert_eq!(by("j1"), [at(0, 100, false)]);
    assert_eq!(by("j2"), [at(100, 150, false)]);
    assert_eq!(by("j3"), [at(100, 120, false)]);
}

#[test]
fn the_plots_draw_as_svg_and_png() {
    use tranche_sim::plot::{use_font, Plot};
    let path = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
    let bytes = std::fs::read(path)
        .unwrap_or_else(|e| panic!("the plots' test needs {path} (fonts-dejavu-core): {e}"));
    use_font(Box::leak(bytes.into_boxed_slice())).unwrap();
    let (setup, runs) = run();
    let f = figures(&setup, &runs, 18);
    let pair = [("policy", &f)];
    for p in [
        Plot::Usage(&setup, &f),
        Plot::Queue(&setup, &f),
        Plot::Waits(&setup, &f),
        Plot::Preemptions(&f),
        Plot::CompareWaits(&pair),
        Plot::CompareUsage(&pair),
    ] {
        let svg = p.svg().unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains(p.title()),
            "{}",
            p.name()
        );
        let png = p.png().unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{}", p.name());
    }
    // The legend names each share that had jobs.
    let svg = Plot::Usage(&setup, &f).svg().unwrap();
    assert!(svg.contains("\na\n") && svg.contains("\nb\n"));
}

/// Two nodes of 8 GPUs and three shares: `a` (max 8), `b` and `c` as each case sets.
fn two_nodes(b_max: u32, c_max: u32) -> Setup {
    let share = |name: &str, max| ShareInfo {
        name: name.into(),
        max,
        strategy: Strategy::LendAndBorrow,
        grace_s: 10,
    };
    Setup {
        shares: vec![share("a", 8), share("b", b_max), share("c", c_max)],
        total_gpus: 16,
        nodes: [("n1", ("g", 8)), ("n2", ("g", 8))]
            .into_iter()
            .map(|(n, (u, g))| (n.to_string(), (u.to_string(), g)))
            .collect(),
    }
}

/// A job of `share` on `placed` (node, GPUs), from 0 to 1,000 s.
fn placed(name: &str, share: &str, placed: &[(&str, u32)]) -> JobRun {
    JobRun {
        name: name.into(),
        share: share.into(),
        gpus: placed.iter().map(|p| p.1).sum(),
        priority: 0,
        submit: 0,
        attempts: vec![at(0, 1000, false)],
        status: JobStatus::Succeeded,
        unit: "g".into(),
        placements: vec![placed.iter().map(|(n, g)| (n.to_string(), *g)).collect()],
    }
}

/// `a`'s job of `gpus` (on one node, or a gang of two), arriving at 5 s with room and
/// started at 500 s: late.
fn late_a(gpus: u32) -> JobRun {
    let nodes: &[(&str, u32)] = if gpus > 8 {
        &[("n1", 8), ("n2", 8)]
    } else {
        &[("n1", 8)]
    };
    JobRun {
        submit: 5 * S,
        attempts: vec![at(500, 600, false)],
        ..placed("late", "a", nodes)
    }
}

#[test]
fn a_late_job_that_a_reclaim_could_have_started_is_named_with_the_instant() {
    // b borrows both nodes (16 of its max 8): taking b1 frees n1 for a's 8.
    let runs = [
        placed("b1", "b", &[("n1", 8)]),
        placed("b2", "b", &[("n2", 8)]),
        late_a(8),
    ];
    let f = figures(&two_nodes(8, 0), &runs, 10);
    assert_eq!(f.started_late, 1);
    let l = &f.late_jobs[0];
    assert_eq!((l.name.as_str(), l.waited_ms), ("late", 495 * S));
    assert_eq!(l.reclaim_at, Some(5 * S));
}

#[test]
fn a_late_job_no_reclaim_could_have_started_is_proved_so() {
    // n1: b's 4 (2 over its max) and c's 4 (within); n2: c's 8 (within). Taking b's 4
    // frees 4 of n1's 8: no node can be freed for a's 8.
    let runs = [
        placed("b1", "b", &[("n1", 4)]),
        placed("c1", "c", &[("n1", 4)]),
        placed("c2", "c", &[("n2", 8)]),
        late_a(8),
    ];
    let f = figures(&two_nodes(2, 12), &runs, 10);
    let l = &f.late_jobs[0];
    assert_eq!((l.reclaim_at, l.undecided_at), (None, None));
    // A gang of two nodes: b is 8 over its max on each node's 8, but taking one node's
    // brings b down to its max, so the other cannot be taken; each node alone could.
    let runs = [
        placed("b1", "b", &[("n1", 8)]),
        placed("b2", "b", &[("n2", 8)]),
        JobRun {
            gpus: 16,
            ..late_a(16)
        },
    ];
    let mut setup = two_nodes(8, 0);
    setup.shares[0].max = 16;
    let f = figures(&setup, &runs, 10);
    let l = &f.late_jobs[0];
    assert_eq!((l.reclaim_at, l.undecided_at), (None, None));
}
