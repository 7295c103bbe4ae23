//! In-share preemption examines at most `INSHARE_LOOK_LIMIT` victims per job and pass
//! (`docs/design.md` §3, rule 4); reclaim is not bounded. These tests lay
//! out running jobs by hand so that the victim set that makes the preemptor fit is
//! found exactly at the limit, or one look past it, and assert on the plan.

use tranche_model::*;
use tranche_sched::INSHARE_LOOK_LIMIT;
use tranche_sim::scenario::*;
use tranche_sim::Sim;
use tranche_state::{Action, Command, Outcome, Plan};

/// `nodes` nodes of 2 h100 in one share `s` (max 2 × nodes, in-share preemption on).
fn cluster(nodes: u32) -> Sim {
    let text = format!(
        r#"
[[nodes]]
name = "n"
count = {nodes}
unit = "h100"
gpus = 2

[[shares]]
name = "s"
capacity_limits = [ {{ unit = "h100", max = {max} }} ]
strategy = "LEND"
in_share_preemption = true
"#,
        max = nodes * 2
    );
    Sim::new(&Scenario::parse(&text).unwrap()).unwrap()
}

fn submit(sim: &mut Sim, name: &str, gpus: u32, priority: u32) -> JobId {
    let mut spec = JobSpec::new(
        name,
        tranche_sim::engine::QUEUE,
        "s",
        "sim",
        "h100",
        gpus,
        1,
    );
    spec.priority = priority;
    match sim.state.apply(&Command::Submit(spec), 0).unwrap() {
        Outcome::Submitted { job, .. } => job,
        other => panic!("submit answered {other:?}"),
    }
}

/// Starts `job` on GPU `gpu` of node `node` by a hand-made plan, at time `at` ms.
fn place(sim: &mut Sim, job: JobId, node: &str, gpu: u32, at: Millis) {
    let plan = Plan {
        actions: vec![Action::Place {
            job,
            allocation: vec![NodeAlloc {
                node: NodeName(node.into()),
                gpus: vec![GpuIndex(gpu)],
            }],
            borrowed: false,
            reason: "placed by the test".into(),
        }],
        reasons: vec![],
        next_wakeup: None,
    };
    match sim.state.apply(&Command::ApplyPlan(plan), at).unwrap() {
        Outcome::Plan(p) => assert!(p.rejected.is_empty(), "{:?}", p.rejected),
        other => panic!("plan answered {other:?}"),
    }
}

/// Every node holds one priority-0 job and one priority-5 job. A priority-9 job of two
/// GPUs looks at victims lowest priority first: every priority-0 job (one per node,
/// none of which frees a node alone), then a priority-5 job, which completes a node.
/// So the victim set is complete at look `nodes + 1`.
fn preemptions_with(nodes: u32) -> Vec<JobId> {
    let mut sim = cluster(nodes);
    let mut t = 1;
    // The priority-5 jobs start first, so the priority-0 ones are the most recently
    // started; among equals the order does not matter here.
    for i in 1..=nodes {
        let j = submit(&mut sim, &format!("high{i}"), 1, 5);
        place(&mut sim, j, &format!("n{i}"), 0, t);
        t += 1;
    }
    for i in 1..=nodes {
        let j = submit(&mut sim, &format!("low{i}"), 1, 0);
        place(&mut sim, j, &format!("n{i}"), 1, t);
        t += 1;
    }
    submit(&mut sim, "urgent", 2, 9);
    let plan = tranche_sched::plan(&sim.state, 100_000);
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Preempt { job, .. } => Some(*job),
            _ => None,
        })
        .collect()
}

#[test]
fn a_victim_set_found_at_the_last_allowed_look_is_taken() {
    // nodes + 1 == INSHARE_LOOK_LIMIT: the set completes on the last allowed look.
    let n = INSHARE_LOOK_LIMIT as u32 - 1;
    let victims = preemptions_with(n);
    assert_eq!(
        victims.len(),
        2,
        "the two jobs of one node are preempted, found {victims:?}"
    );
}

#[test]
fn a_victim_set_needing_one_look_more_than_the_limit_is_not_taken() {
    // nodes + 1 == INSHARE_LOOK_LIMIT + 1: the completing victim is one look too far.
    let n = INSHARE_LOOK_LIMIT as u32;
    let victims = preemptions_with(n);
    assert!(
        victims.is_empty(),
        "in-share preemption stops looking after {INSHARE_LOOK_LIMIT} victims, yet preempted {victims:?}"
    );
}
