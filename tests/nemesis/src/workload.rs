//! The clients: users who submit, cancel and reprioritize their jobs, and an admin and
//! an operator who move capacity between shares and drain and resume nodes. Every
//! operation goes into the history with its times and outcome.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tranche_client::{Client, ClientError};
use tranche_local::demo;
use tranche_model::{CapacityLimit, JobId, JobRef, JobSpec, JobStatus, Strategy};
use tranche_proto::ClientCommand;
use tranche_proto::{ApiError, JobFilter, Outcome as Applied, Query, Response};

use crate::history::{now_us, History, Op, OpKind, Outcome};

/// GPUs per node, and nodes.
pub const GPUS_PER_NODE: u32 = 4;

/// The policy: environment `gpu` (all GPUs of the nodes), queue `q`, and three shares
/// open to every user: `reserve` (RESERVE), `lend` (LEND) and `borrow`
/// (LEND_AND_BORROW, no borrow cap). `variant` 0 and 1 split the capacity differently:
/// switching between them moves GPUs from `lend` to `reserve` and back.
pub fn policy(nodes: usize, variant: u32) -> Vec<ClientCommand> {
    let total = GPUS_PER_NODE * nodes as u32;
    let third = total / 3;
    let (reserve, lend) = if variant == 0 {
        (third, third)
    } else {
        (third / 2, third + third - third / 2)
    };
    let mut cmds = demo::base(vec![CapacityLimit {
        unit: "h100".into(),
        max: total,
    }]);
    let mut shares = vec![
        demo::share("reserve", Strategy::Reserve, reserve, &[]),
        demo::share("lend", Strategy::Lend, lend, &[]),
        demo::share("borrow", Strategy::LendAndBorrow, total - third * 2, &[]),
    ];
    shares[2].resource_sharing.borrow_limit = Some(-1);
    for s in &mut shares {
        s.default_grace_s = 2;
        s.in_share_preemption = true;
    }
    cmds.extend(shares.into_iter().map(ClientCommand::PutShare));
    cmds
}

/// Only the shares of a policy variant (what the admin client changes).
fn share_updates(nodes: usize, variant: u32) -> Vec<ClientCommand> {
    policy(nodes, variant)
        .into_iter()
        .filter(|c| matches!(c, ClientCommand::PutShare(_)))
        .collect()
}

fn outcome_of(r: &Result<Result<Applied, ApiError>, ClientError>) -> (Outcome, String) {
    match r {
        Ok(Ok(o)) => (Outcome::Ok, format!("{o:?}")),
        Ok(Err(e)) if e.retryable() => (Outcome::Unknown, e.to_string()),
        Ok(Err(e)) => (Outcome::Fail, e.to_string()),
        Err(ClientError::Api(e)) if !e.retryable() => (Outcome::Fail, e.to_string()),
        Err(e) => (Outcome::Unknown, e.to_string()),
    }
}

pub struct Ctx {
    pub history: Arc<History>,
    pub stop: Arc<AtomicBool>,
    pub nodes: Vec<String>,
    /// One job in ten sleeps 15–30 s, so that cut agents have jobs to fence.
    pub long_jobs: bool,
    /// Every job's time limit: none reaches it, unless a skewed clock ends it early.
    pub time_limit_s: Option<u64>,
}

async fn pause(rng: &mut StdRng, lo: u64, hi: u64) {
    tokio::time::sleep(Duration::from_millis(rng.gen_range(lo..hi))).await;
}

/// A user keeps at most this many jobs unfinished, as a researcher with a quota on a
/// shared cluster does: the load stays at what the cluster can run, so that every job
/// can be expected to end once the faults stop.
const MAX_OPEN_PER_USER: usize = 8;

/// How many of `user`'s jobs have not ended (`None` when no controller answered).
async fn open_jobs(client: &Client, user: &str) -> Option<usize> {
    let filter = JobFilter {
        user: Some(user.into()),
        status: JobStatus::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect(),
        ..JobFilter::default()
    };
    match client.read(Query::Jobs(filter), true).await {
        Ok(Response::Jobs(js)) => Some(js.len()),
        _ => None,
    }
}

/// A user: submits short jobs (sleeps of 0.3–2.5 s on one or two GPUs; with
/// `long_jobs`, one in ten of 15–30 s) to the three shares, cancels some, reprioritizes
/// some.
pub async fn user(ctx: Arc<Ctx>, client: Client, n: usize, user: String, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut mine: Vec<u64> = Vec::new();
    let mut seq = 0u32;
    let mut open = 0usize;
    while !ctx.stop.load(Ordering::Relaxed) {
        let p = rng.gen_range(0..10);
        let mut submit = p < 6 || mine.is_empty();
        if submit && open >= MAX_OPEN_PER_USER {
            open = open_jobs(&client, &user).await.unwrap_or(open);
            submit = open < MAX_OPEN_PER_USER || mine.is_empty();
        }
        let invoke_us = now_us();
        if submit {
            seq += 1;
            let name = format!("nem-{n}-{seq}");
            let share = ["reserve", "lend", "borrow"][rng.gen_range(0..3)];
            let gpus = if rng.gen_bool(0.7) { 1 } else { 2 };
            let mut spec = JobSpec::new(&name, "q", share, &user, "h100", gpus, 1);
            spec.client_token = Some(tranche_client::new_token());
            spec.priority = rng.gen_range(0..100);
            let secs = match ctx.long_jobs && rng.gen_bool(0.1) {
                true => rng.gen_range(15.0..30.0),
                false => rng.gen_range(0.3..2.5),
            };
            spec.command = vec!["sleep".into(), format!("{secs:.1}")];
            spec.time_limit_s = ctx.time_limit_s;
            let r = client.submit(spec).await;
            let (outcome, job, detail) = match &r {
                Ok((id, existing)) => (Outcome::Ok, Some(id.0), format!("existing={existing}")),
                Err(ClientError::Api(e)) if !e.retryable() => (Outcome::Fail, None, e.to_string()),
                Err(e) => (Outcome::Unknown, None, e.to_string()),
            };
            if let Some(id) = job {
                mine.push(id);
                open += 1;
            }
            ctx.history.op(Op {
                client: n,
                kind: OpKind::Submit,
                subject: name,
                job,
                value: None,
                invoke_us,
                complete_us: now_us(),
                outcome,
                detail,
            });
        } else {
            // One of the user's latest jobs: most of them have not ended yet.
            let recent = mine.len().saturating_sub(MAX_OPEN_PER_USER);
            let id = mine[rng.gen_range(recent..mine.len())];
            let (kind, value, cmd) = if p < 8 {
                let cmd = ClientCommand::Cancel {
                    job: JobRef::job(JobId(id)),
                    reason: "nemesis".into(),
                };
                (OpKind::Cancel, None, cmd)
            } else {
                let priority = rng.gen_range(0..100);
                let cmd = ClientCommand::UpdatePriority {
                    job: JobRef::job(JobId(id)),
                    priority,
                };
                (OpKind::Priority, Some(priority), cmd)
            };
            let r = client.command(cmd).await;
            let (outcome, detail) = outcome_of(&r);
            ctx.history.op(Op {
                client: n,
                kind,
                subject: format!("job {id}"),
                job: Some(id),
                value,
                invoke_us,
                complete_us: now_us(),
                outcome,
                detail,
            });
        }
        pause(&mut rng, 100, 400).await;
    }
}

/// The admin and the operator: every 1–3 s, switch the policy variant, or drain a node
/// (gracefully or at once), or resume the drained one.
pub async fn operator(ctx: Arc<Ctx>, admin: Client, operator: Client, n: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut variant = 0u32;
    let mut drained: Option<String> = None;
    while !ctx.stop.load(Ordering::Relaxed) {
        pause(&mut rng, 1_000, 3_000).await;
        if ctx.stop.load(Ordering::Relaxed) {
            break;
        }
        let invoke_us = now_us();
        let (kind, subject, value, r) = if let Some(node) = drained.take() {
            let r = operator
                .command(ClientCommand::ResumeNode {
                    node: node.as_str().into(),
                })
                .await;
            (OpKind::Resume, node, None, r)
        } else if rng.gen_bool(0.5) {
            variant = 1 - variant;
            let mut last = None;
            for cmd in share_updates(ctx.nodes.len(), variant) {
                let r = admin.command(cmd).await;
                let failed = !matches!(r, Ok(Ok(_)));
                last = Some(r);
                if failed {
                    break;
                }
            }
            (
                OpKind::Policy,
                "shares".into(),
                Some(variant),
                last.expect("shares"),
            )
        } else {
            let node = ctx.nodes[rng.gen_range(0..ctx.nodes.len())].clone();
            let r = operator
                .command(ClientCommand::DrainNode {
                    node: node.as_str().into(),
                    reason: "nemesis drain".into(),
                    now: rng.gen_bool(0.5),
                })
                .await;
            drained = Some(node.clone());
            (OpKind::Drain, node, None, r)
        };
        let (outcome, detail) = outcome_of(&r);
        ctx.history.op(Op {
            client: n,
            kind,
            subject,
            job: None,
            value,
            invoke_us,
            complete_us: now_us(),
            outcome,
            detail,
        });
    }
}
