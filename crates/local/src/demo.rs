//! A small policy for local clusters, tests and benchmarks: one environment of H100s,
//! one FIFO queue, and shares of each strategy.

use std::collections::BTreeMap;

use tranche_model::{
    CapacityLimit, Gpu, GpuIndex, IdleAssignment, JobLimits, JobQueue, JobSpec, NodeInventory,
    ObjState, QuotaShare, ResourceSharing, SchedulingPolicy, ServiceEnvironment, Strategy,
    DEFAULT_MAX_USER_PRIORITY,
};
use tranche_proto::ClientCommand;

/// A share of the demo queue `q` with `max` H100s.
pub fn share(name: &str, strategy: Strategy, max: u32, members: &[&str]) -> QuotaShare {
    QuotaShare {
        weight: None,
        loans: Default::default(),
        name: name.into(),
        queue: "q".into(),
        capacity_limits: vec![CapacityLimit {
            unit: "h100".into(),
            max,
        }],
        resource_sharing: ResourceSharing {
            strategy,
            borrow_limit: None,
        },
        in_share_preemption: false,
        state: ObjState::Enabled,
        members: members.iter().map(|m| (*m).into()).collect(),
        default_grace_s: 30,
        max_grace_s: 600,
        min_runtime_s: 0,
        max_user_priority: DEFAULT_MAX_USER_PRIORITY,
        limits: JobLimits::default(),
    }
}

/// Environment `gpu` (64 H100s), policy `fifo`, queue `q`, and shares `reserve`
/// (RESERVE, 16), `lend` (LEND, 16) and `borrow` (LEND_AND_BORROW, 32) open to every
/// user, and `private` (LEND, 8) open only to `alice`.
pub fn objects() -> Vec<ClientCommand> {
    vec![
        ClientCommand::PutEnvironment(ServiceEnvironment {
            name: "gpu".into(),
            selector: BTreeMap::new(),
            capacity_limits: vec![CapacityLimit {
                unit: "h100".into(),
                max: 64,
            }],
            state: ObjState::Enabled,
        }),
        ClientCommand::PutPolicy(SchedulingPolicy {
            name: "fifo".into(),
            idle_resource_assignment: IdleAssignment::Fifo,
        }),
        ClientCommand::PutQueue(JobQueue {
            name: "q".into(),
            priority: 1,
            state: ObjState::Enabled,
            environment: "gpu".into(),
            policy: "fifo".into(),
        }),
        ClientCommand::PutShare(share("reserve", Strategy::Reserve, 16, &[])),
        ClientCommand::PutShare(share("lend", Strategy::Lend, 16, &[])),
        ClientCommand::PutShare(share("borrow", Strategy::LendAndBorrow, 32, &[])),
        ClientCommand::PutShare(share("private", Strategy::Lend, 8, &["alice"])),
    ]
}

/// The demo's environment `gpu` with these capacity limits, policy `fifo` and queue
/// `q`: everything but the shares.
pub fn base(capacity_limits: Vec<CapacityLimit>) -> Vec<ClientCommand> {
    let mut cmds: Vec<ClientCommand> = objects()
        .into_iter()
        .filter(|c| {
            !matches!(
                c,
                ClientCommand::PutShare(_) | ClientCommand::PutEnvironment(_)
            )
        })
        .collect();
    cmds.insert(
        0,
        ClientCommand::PutEnvironment(ServiceEnvironment {
            name: "gpu".into(),
            selector: BTreeMap::new(),
            capacity_limits,
            state: ObjState::Enabled,
        }),
    );
    cmds
}

/// A one-GPU job in `share` for `user`, with a client token.
pub fn job(share: &str, user: &str, token: &str) -> JobSpec {
    let mut spec = JobSpec::new("demo", "q", share, user, "h100", 1, 1);
    spec.client_token = Some(token.to_string());
    spec.command = vec!["sleep".into(), "1".into()];
    spec
}

/// A node on 127.0.0.1 with `gpus` H100s.
pub fn node(name: &str, gpus: u32) -> NodeInventory {
    NodeInventory {
        name: name.into(),
        address: "127.0.0.1".into(),
        labels: BTreeMap::new(),
        gpus: (0..gpus)
            .map(|i| Gpu {
                index: GpuIndex(i),
                uuid: format!("GPU-{name}-{i}"),
                unit: "h100".into(),
                memory_mb: 80_000,
                healthy: true,
            })
            .collect(),
        cpus: 64,
        memory_mb: 512_000,
    }
}

/// A one-queue policy on `gpus` H100s for preemption stories: `lender` (LEND, half the
/// GPUs) and `borrower` (LEND_AND_BORROW, the other half, no borrow cap, grace
/// `borrower_grace_s`).
pub fn lend_borrow(gpus: u32, borrower_grace_s: u64) -> Vec<ClientCommand> {
    let mut cmds = base(vec![CapacityLimit {
        unit: "h100".into(),
        max: gpus,
    }]);
    cmds.push(ClientCommand::PutShare(share(
        "lender",
        Strategy::Lend,
        gpus / 2,
        &[],
    )));
    let mut b = share("borrower", Strategy::LendAndBorrow, gpus - gpus / 2, &[]);
    b.resource_sharing.borrow_limit = Some(-1);
    b.default_grace_s = borrower_grace_s;
    cmds.push(ClientCommand::PutShare(b));
    cmds
}

/// The `tranche dev` policy: environment `gpu` with 8 H100s and 8 A100s, queue `q`, and
/// three shares, one of each strategy, open to every user: `research` (RESERVE, 4 H100),
/// `vision` (LEND, 4 H100 and 4 A100) and `nlp` (LEND_AND_BORROW, 4 A100, borrowing
/// without cap).
pub fn dev_objects() -> Vec<ClientCommand> {
    let limits = |h: u32, a: u32| {
        let mut v = vec![];
        if h > 0 {
            v.push(CapacityLimit {
                unit: "h100".into(),
                max: h,
            });
        }
        if a > 0 {
            v.push(CapacityLimit {
                unit: "a100".into(),
                max: a,
            });
        }
        v
    };
    let mut cmds = base(limits(8, 8));
    let mut research = share("research", Strategy::Reserve, 4, &[]);
    research.capacity_limits = limits(4, 0);
    let mut vision = share("vision", Strategy::Lend, 4, &[]);
    vision.capacity_limits = limits(4, 4);
    let mut nlp = share("nlp", Strategy::LendAndBorrow, 4, &[]);
    nlp.capacity_limits = limits(0, 4);
    nlp.resource_sharing.borrow_limit = Some(-1);
    cmds.extend([research, vision, nlp].map(ClientCommand::PutShare));
    cmds
}
