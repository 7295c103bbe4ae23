//! The reconcile's cases, each stated on the actions `decide` returns.

use std::collections::BTreeMap;
use std::time::Duration;

use tranche_model::Progress;
use tranche_model::{GpuIndex, JobId, JobStatus};
use tranche_proto::{GpuBinding, NodeWork, Rendezvous, StopOrder, WorkItem};

use super::{decide, Action, AttemptKey, AttemptView, Here, RunningReport};
use crate::daemon::ORPHAN_GRACE;
use crate::exec::AttemptNo;

/// The controllers' time in every work list below.
const NOW: u64 = 1_000_000;

fn key(job: u64, attempt: u32) -> AttemptKey {
    AttemptKey {
        job: JobId(job),
        attempt: AttemptNo(attempt),
    }
}

/// A work item for attempt `attempt` of job `job` on GPUs `gpus`, as the controllers
/// send it once the attempt is placed.
fn item(job: u64, attempt: u32, gpus: &[u32]) -> WorkItem {
    WorkItem {
        job: JobId(job),
        attempt,
        status: JobStatus::Scheduled,
        share: "research".into(),
        restarts: 0,
        image: "host".into(),
        command: vec!["sleep".into(), "60".into()],
        env: BTreeMap::new(),
        cpus: 1,
        memory_mb: 0,
        gpus: gpus
            .iter()
            .map(|&i| GpuBinding {
                index: GpuIndex(i),
                uuid: format!("GPU-{i}"),
            })
            .collect(),
        time_limit_s: None,
        scheduled_at: NOW - 1_000,
        started_at: None,
        signal: "SIGTERM".into(),
        stop: None,
        user: "alice".into(),
        cwd: None,
        rendezvous: Rendezvous {
            nodes: vec!["n1".into()],
            rank: 0,
            gpus_per_node: gpus.len() as u32,
            master_addr: "127.0.0.1".into(),
            master_port: 20_000,
        },
        name: "train".into(),
        array: None,
        output: None,
        error: None,
        sagemaker: None,
    }
}

/// The same item once its RUNNING report is applied.
fn running(mut item: WorkItem) -> WorkItem {
    item.status = JobStatus::Running;
    item.started_at = Some(NOW - 5_000);
    item
}

fn work(items: Vec<WorkItem>) -> NodeWork {
    NodeWork {
        applied: 7,
        now: NOW,
        registered: true,
        items,
    }
}

/// An attempt started here on `gpus`, running, its RUNNING report delivered.
fn attempt(gpus: &[u32]) -> AttemptView {
    AttemptView {
        gpus: gpus.iter().map(|&i| GpuIndex(i)).collect(),
        signal: "SIGTERM".into(),
        stopping: false,
        ended: false,
        running: RunningReport::Sent,
        time_limit_set: false,
    }
}

fn here(attempts: Vec<(AttemptKey, AttemptView)>) -> Here {
    Here {
        node: "n1".into(),
        attempts: attempts.into_iter().collect(),
        ..Here::default()
    }
}

#[test]
fn new_work_starts() {
    let a = item(1, 1, &[0]);
    let b = item(2, 1, &[1]);
    assert_eq!(
        decide(&work(vec![a.clone(), b.clone()]), &here(vec![])),
        vec![Action::Start(Box::new(a)), Action::Start(Box::new(b))],
        "attempts on other GPUs start side by side"
    );
}

#[test]
fn work_already_running_is_left_alone() {
    let w = work(vec![running(item(1, 1, &[0]))]);
    assert_eq!(decide(&w, &here(vec![(key(1, 1), attempt(&[0]))])), vec![]);
}

#[test]
fn an_attempt_being_started_is_not_started_again() {
    let w = work(vec![item(1, 1, &[0])]);
    let mut h = here(vec![]);
    h.starting.insert(key(1, 1), vec![GpuIndex(0)]);
    assert_eq!(decide(&w, &h), vec![]);
}

#[test]
fn an_attempt_no_longer_placed_here_is_stopped_with_its_signal_and_the_orphan_grace() {
    let mut a = attempt(&[0]);
    a.signal = "SIGUSR1".into();
    let actions = decide(&work(vec![]), &here(vec![(key(1, 1), a.clone())]));
    assert_eq!(
        actions,
        vec![Action::StopUnplaced {
            key: key(1, 1),
            signal: "SIGUSR1".into(),
            grace: ORPHAN_GRACE,
        }]
    );
    // Once: a stop on its way, or an attempt already ended, is not signalled again.
    let stopping = AttemptView {
        stopping: true,
        ..a.clone()
    };
    let ended = AttemptView { ended: true, ..a };
    assert_eq!(
        decide(&work(vec![]), &here(vec![(key(1, 1), stopping)])),
        vec![]
    );
    assert_eq!(
        decide(&work(vec![]), &here(vec![(key(1, 1), ended)])),
        vec![]
    );
}

#[test]
fn a_stop_order_is_carried_out_once_with_the_jobs_signal_and_its_whole_grace() {
    let mut it = running(item(1, 1, &[0]));
    it.signal = "SIGINT".into();
    it.stop = Some(StopOrder {
        why: "cancelled".into(),
        deadline_ms: NOW + 4_000,
        grace_ms: 5_000,
    });
    let w = work(vec![it.clone()]);
    assert_eq!(
        decide(&w, &here(vec![(key(1, 1), attempt(&[0]))])),
        vec![Action::Stop {
            key: key(1, 1),
            signal: "SIGINT".into(),
            grace: Duration::from_secs(5),
        }]
    );
    // A stop already on its way is not asked again, and neither is a RUNNING report
    // sent for an attempt being stopped.
    let stopping = AttemptView {
        stopping: true,
        running: RunningReport::Unsent,
        ..attempt(&[0])
    };
    assert_eq!(decide(&w, &here(vec![(key(1, 1), stopping)])), vec![]);
    // The grace counts from this node's signal, not by the controllers' clocks: a
    // deadline already past by their time (one of them minutes ahead, or this node
    // told late) still leaves the job its whole grace.
    it.stop.as_mut().unwrap().deadline_ms = NOW - 1;
    assert_eq!(
        decide(&work(vec![it]), &here(vec![(key(1, 1), attempt(&[0]))])),
        vec![Action::Stop {
            key: key(1, 1),
            signal: "SIGINT".into(),
            grace: Duration::from_secs(5),
        }]
    );
}

#[test]
fn an_attempt_stopped_before_it_started_is_reported_ended_without_a_signal() {
    let mut it = item(1, 1, &[0]);
    it.stop = Some(StopOrder {
        why: "cancelled".into(),
        deadline_ms: NOW + 1_000,
        grace_ms: 1_000,
    });
    assert_eq!(
        decide(&work(vec![it]), &here(vec![])),
        vec![Action::Report {
            key: key(1, 1),
            event: Progress::Exited {
                code: None,
                reason: Some("stopped before it started".into()),
            },
        }]
    );
}

#[test]
fn an_undelivered_running_report_is_sent_again_and_one_on_its_way_is_not() {
    let w = work(vec![item(1, 1, &[0])]);
    let with = |running, ended| {
        let a = AttemptView {
            running,
            ended,
            ..attempt(&[0])
        };
        decide(&w, &here(vec![(key(1, 1), a)]))
    };
    assert_eq!(
        with(RunningReport::Unsent, false),
        vec![Action::ReportRunning(key(1, 1))]
    );
    assert_eq!(with(RunningReport::Sending, false), vec![]);
    assert_eq!(with(RunningReport::Sent, false), vec![]);
    // An attempt that has ended is not reported running: its exit is on its way.
    assert_eq!(with(RunningReport::Unsent, true), vec![]);
}

#[test]
fn an_ended_attempt_is_left_to_its_exit_report() {
    // Its end is known here and its exit report is the monitor's to send: the
    // reconcile neither reports it running, nor stops it, placed here or not.
    let ended = AttemptView {
        ended: true,
        running: RunningReport::Unsent,
        ..attempt(&[0])
    };
    let h = here(vec![(key(1, 1), ended)]);
    assert_eq!(decide(&work(vec![running(item(1, 1, &[0]))]), &h), vec![]);
    assert_eq!(decide(&work(vec![]), &h), vec![]);
    // Nor does it hold its GPUs any more.
    let next = item(2, 1, &[0]);
    assert_eq!(
        decide(&work(vec![next.clone()]), &h),
        vec![Action::Start(Box::new(next))]
    );
}

#[test]
fn a_started_attempt_with_no_trace_here_is_reported_lost_once() {
    let w = work(vec![running(item(1, 1, &[0]))]);
    assert_eq!(
        decide(&w, &here(vec![])),
        vec![Action::Report {
            key: key(1, 1),
            event: Progress::Lost {
                reason: "the agent on n1 has no record of this attempt".into(),
            },
        }]
    );
    // Once the controllers have its end, it is reported no more.
    let mut h = here(vec![]);
    h.ended_here.insert(key(1, 1));
    assert_eq!(decide(&w, &h), vec![]);
}

#[test]
fn a_gang_member_that_ended_here_is_neither_started_again_nor_reported_lost() {
    // Rank 1 of a two-node gang ended on this node; rank 0 runs on another, so the
    // controllers still place the attempt here.
    let mut it = running(item(1, 1, &[0]));
    it.rendezvous.nodes = vec!["n0".into(), "n1".into()];
    it.rendezvous.rank = 1;
    let mut h = here(vec![]);
    h.ended_here.insert(key(1, 1));
    assert_eq!(decide(&work(vec![it.clone()]), &h), vec![]);
    // Still scheduled (the other member's report not yet applied): not started either.
    let scheduled = WorkItem {
        status: JobStatus::Scheduled,
        ..it
    };
    assert_eq!(decide(&work(vec![scheduled]), &h), vec![]);
    // Once the gang has ended everywhere it is no longer placed here, and forgotten.
    assert_eq!(
        decide(&work(vec![]), &h),
        vec![Action::ForgetEnded(key(1, 1))]
    );
}

#[test]
fn an_acknowledged_attempt_is_neither_stopped_nor_reported_lost() {
    // Its exit is delivered and it is no longer held here, while the controllers'
    // work list still names it (or no longer does).
    let mut h = here(vec![]);
    h.ended_here.insert(key(1, 1));
    assert_eq!(decide(&work(vec![running(item(1, 1, &[0]))]), &h), vec![]);
    assert_eq!(
        decide(&work(vec![]), &h),
        vec![Action::ForgetEnded(key(1, 1))]
    );
}

#[test]
fn an_adopted_attempt_takes_the_jobs_signal_its_time_limit_and_is_reported_running() {
    // After a restart the agent holds what its executors adopted from the spool: the
    // default signal, no time limit counted, no RUNNING report sent.
    let adopted = AttemptView {
        running: RunningReport::Unsent,
        ..attempt(&[0])
    };
    let mut it = running(item(1, 1, &[0]));
    it.signal = "SIGUSR1".into();
    it.time_limit_s = Some(60);
    it.started_at = Some(NOW - 20_000);
    assert_eq!(
        decide(
            &work(vec![it.clone()]),
            &here(vec![(key(1, 1), adopted.clone())])
        ),
        vec![
            Action::SetSignal {
                key: key(1, 1),
                signal: "SIGUSR1".into(),
            },
            Action::SetTimeLimit {
                key: key(1, 1),
                limit: Duration::from_secs(60),
                left: Duration::from_secs(40),
            },
            Action::ReportRunning(key(1, 1)),
        ]
    );
    // A limit already past ends at once; one already counted is kept.
    it.started_at = Some(NOW - 90_000);
    assert_eq!(
        decide(
            &work(vec![it.clone()]),
            &here(vec![(key(1, 1), adopted.clone())])
        )[1],
        Action::SetTimeLimit {
            key: key(1, 1),
            limit: Duration::from_secs(60),
            left: Duration::ZERO,
        }
    );
    let counted = AttemptView {
        time_limit_set: true,
        signal: "SIGUSR1".into(),
        ..adopted.clone()
    };
    assert_eq!(
        decide(&work(vec![it]), &here(vec![(key(1, 1), counted)])),
        vec![Action::ReportRunning(key(1, 1))]
    );
    // An adopted attempt the controllers no longer place here is stopped.
    assert_eq!(
        decide(&work(vec![]), &here(vec![(key(1, 1), adopted)])),
        vec![Action::StopUnplaced {
            key: key(1, 1),
            signal: "SIGTERM".into(),
            grace: ORPHAN_GRACE,
        }]
    );
}

#[test]
fn an_attempt_no_longer_placed_is_stopped_before_a_new_one_on_its_gpus_waits() {
    // The node was DOWN: attempt 1 of job 1 was requeued, and attempt 2 is placed on
    // the same GPU. The old one is stopped first, and the new one waits for its GPU.
    let w = work(vec![item(1, 2, &[0, 1])]);
    let old = here(vec![(key(1, 1), attempt(&[1]))]);
    assert_eq!(
        decide(&w, &old),
        vec![
            Action::StopUnplaced {
                key: key(1, 1),
                signal: "SIGTERM".into(),
                grace: ORPHAN_GRACE,
            },
            Action::WaitForGpus {
                key: key(1, 2),
                holders: vec![key(1, 1)],
            },
        ]
    );
    // While it is being stopped, the new one still waits.
    let stopping = here(vec![(
        key(1, 1),
        AttemptView {
            stopping: true,
            ..attempt(&[1])
        },
    )]);
    assert_eq!(
        decide(&w, &stopping),
        vec![Action::WaitForGpus {
            key: key(1, 2),
            holders: vec![key(1, 1)],
        }]
    );
    // Once it has ended, the new one starts.
    let ended = here(vec![(
        key(1, 1),
        AttemptView {
            ended: true,
            stopping: true,
            ..attempt(&[1])
        },
    )]);
    assert_eq!(
        decide(&w, &ended),
        vec![Action::Start(Box::new(w.items[0].clone()))]
    );
}

#[test]
fn an_attempt_being_started_holds_its_gpus() {
    let a = item(1, 1, &[0]);
    let b = item(2, 1, &[0]);
    // Two attempts on one GPU in one work list: the second waits for the first.
    assert_eq!(
        decide(&work(vec![a.clone(), b.clone()]), &here(vec![])),
        vec![
            Action::Start(Box::new(a.clone())),
            Action::WaitForGpus {
                key: key(2, 1),
                holders: vec![key(1, 1)],
            },
        ]
    );
    // The first still being started at the next reconcile: the second still waits.
    let mut h = here(vec![]);
    h.starting.insert(key(1, 1), vec![GpuIndex(0)]);
    assert_eq!(
        decide(&work(vec![a, b]), &h),
        vec![Action::WaitForGpus {
            key: key(2, 1),
            holders: vec![key(1, 1)],
        }]
    );
}

#[test]
fn a_fenced_node_starts_nothing_but_still_reports() {
    let mut h = here(vec![]);
    h.fenced = true;
    assert_eq!(decide(&work(vec![item(1, 1, &[0])]), &h), vec![]);
    let actions = decide(&work(vec![running(item(2, 1, &[1]))]), &h);
    assert!(
        matches!(
            &actions[..],
            [Action::Report {
                event: Progress::Lost { .. },
                ..
            }]
        ),
        "{actions:?}"
    );
}
