//! A controller's service layer with no Raft node, no transport and no data dir, for
//! tests of the adapters built on it (the HTTP API, the AWS endpoint) and of the
//! service itself. Compiled only for this crate's tests and with the `testing`
//! feature, which other crates enable in their dev-dependencies; a daemon never has it.
//!
//! [`Rig`] is a [`Service`] over an in-memory applied state, with a stand-in node task
//! in place of the Raft node: it **applies each write directly to the state** (as one
//! controller that leads a cluster of one would, without the log), at the wall clock's
//! time (recording its events for the event stream), records the command in
//! [`Rig::written`], and answers read barriers and membership changes at once.
//! Nothing is scheduled: no planner runs, so a submitted
//! job stays waiting unless a test applies a plan itself ([`Rig::plan`]).
//!
//! [`demo_state`] is a small cluster's state to start from: the demo objects, node
//! `n1`, and job 1 of `alice` placed on `n1`.

use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::mpsc;
use tranche_model::{JobId, JobSpec};
use tranche_state::{Command, State};

use crate::liveness::Beats;
use crate::mailbox::{wall_ms, NodeMsg, Shared, SharedRef, WorkWatch};
use crate::service::Service;

/// This rig's controller id; it is its own leader.
pub const CONTROLLER_ID: u64 = 1;

/// A service over an in-memory state whose writes are applied directly (see the
/// module docs).
pub struct Rig {
    pub service: Arc<Service>,
    /// The applied state the service reads, shared with the stand-in node task.
    pub shared: SharedRef,
    /// Every command that reached the node task, in order (applied or refused).
    pub written: Arc<Mutex<Vec<Command>>>,
}

impl Rig {
    /// A rig over `state`. Must be called within a tokio runtime (the node task is
    /// spawned on it).
    pub fn new(state: State) -> Rig {
        Rig::with(state, |s| s)
    }

    /// A rig over `state` whose service is first passed through `build` (to set a key
    /// secret or pinned labels, say).
    pub fn with(state: State, build: impl FnOnce(Service) -> Service) -> Rig {
        let mut shared = Shared::new(CONTROLLER_ID);
        shared.state = state;
        shared.status.leader = Some(CONTROLLER_ID);
        let shared: SharedRef = Arc::new(RwLock::new(shared));
        let written = Arc::new(Mutex::new(Vec::new()));
        let node = spawn_node(shared.clone(), written.clone());
        let service = Service::new(
            node,
            Arc::new(WorkWatch::default()),
            shared.clone(),
            Arc::new(Beats::default()),
            None,
        );
        Rig {
            service: Arc::new(build(service)),
            shared,
            written,
        }
    }

    /// Runs a scheduling pass over the current state and applies its plan, as the
    /// leader's planner would.
    pub fn plan(&self) {
        let mut sh = self.shared.write().unwrap();
        let now = wall_ms().max(sh.last_now);
        let plan = tranche_sched::plan(&sh.state, now);
        apply(&mut sh, None, &Command::ApplyPlan(plan), now).expect("the planner's plan applies");
    }

    /// The number of commands that reached the node task so far.
    pub fn writes(&self) -> usize {
        self.written.lock().unwrap().len()
    }
}

/// Applies `cmd` as the next entry, with its events for the event stream, and wakes
/// the streams, as the node task does for a committed entry.
fn apply(
    sh: &mut Shared,
    request: Option<&tranche_state::RequestId>,
    cmd: &Command,
    now: tranche_model::Millis,
) -> Result<tranche_state::Outcome, tranche_state::ApplyError> {
    let index = sh.applied + 1;
    let before = sh.events.before(&sh.state, cmd, index);
    let result = sh.state.apply_request(request, cmd, now).result;
    sh.events
        .after(&sh.state, index, before, result.as_ref().ok());
    sh.applied = index;
    sh.last_now = now;
    sh.status.applied = index;
    sh.status.commit = index;
    sh.events.notifier().send_replace(index);
    result
}

/// The stand-in node task: applies writes to `shared` and records them in `written`.
fn spawn_node(shared: SharedRef, written: Arc<Mutex<Vec<Command>>>) -> mpsc::Sender<NodeMsg> {
    let (tx, mut rx) = mpsc::channel::<NodeMsg>(16);
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            match m {
                NodeMsg::Write {
                    cmd,
                    request,
                    reply,
                } => {
                    let result = {
                        let mut sh = shared.write().unwrap();
                        let now = wall_ms().max(sh.last_now);
                        apply(&mut sh, request.as_ref(), &cmd, now)
                    };
                    written.lock().unwrap().push(cmd);
                    let _ = reply.send(Ok(result));
                }
                NodeMsg::ReadBarrier { reply } | NodeMsg::Membership { reply, .. } => {
                    let _ = reply.send(Ok(()));
                }
                NodeMsg::Peer { .. } | NodeMsg::Plan { .. } => {}
            }
        }
    });
    tx
}

/// A state with the demo policy (environment `gpu` of 8 `h100`, policy `fifo`, queue
/// `q`, shares `lend` and `private` (whose only member is `alice`)), node `n1` with
/// one `h100`, and job 1 of `alice` in `lend` placed on `n1`, made at times 0 to 2.
pub fn demo_state() -> State {
    demo_state_at(0)
}

/// [`demo_state`] made at times `t0` to `t0 + 2` (milliseconds since the epoch). A
/// [`Rig`] applies writes at the wall clock's time, and the state accounts for every
/// hour in between, so a rig starts from `demo_state_at(wall_ms())`.
pub fn demo_state_at(t0: tranche_model::Millis) -> State {
    let mut st = State::new();
    let objects = [
        "[[environments]]\nname = \"gpu\"\ncapacity_limits = [ { unit = \"h100\", max = 8 } ]\n",
        "[[policies]]\nname = \"fifo\"\n",
        "[[queues]]\nname = \"q\"\nenvironment = \"gpu\"\npolicy = \"fifo\"\n",
        "[[shares]]\nname = \"lend\"\nqueue = \"q\"\ncapacity_limits = [ { unit = \"h100\", max = 8 } ]\nstrategy = \"LEND\"\n",
        "[[shares]]\nname = \"private\"\nqueue = \"q\"\ncapacity_limits = [ { unit = \"h100\", max = 8 } ]\nstrategy = \"LEND\"\nmembers = [\"alice\"]\n",
    ]
    .concat();
    let f = tranche_model::policy_file::parse(&objects).unwrap();
    for e in f.environments {
        st.apply(&Command::PutEnvironment(e), t0).unwrap();
    }
    for p in f.policies {
        st.apply(&Command::PutPolicy(p), t0).unwrap();
    }
    for q in f.queues {
        st.apply(&Command::PutQueue(q), t0).unwrap();
    }
    for s in f.shares {
        st.apply(&Command::PutShare(s), t0).unwrap();
    }
    let inv = tranche_model::NodeInventory {
        name: "n1".into(),
        address: "127.0.0.1".into(),
        labels: Default::default(),
        gpus: vec![tranche_model::Gpu {
            index: tranche_model::GpuIndex(0),
            uuid: "GPU-0".into(),
            unit: "h100".into(),
            memory_mb: 1,
            healthy: true,
        }],
        cpus: 4,
        memory_mb: 1024,
    };
    st.apply(&Command::RegisterNode(inv), t0).unwrap();
    st.apply(&Command::Submit(spec("alice", "lend")), t0 + 1)
        .unwrap();
    let plan = tranche_sched::plan(&st, t0 + 2);
    st.apply(&Command::ApplyPlan(plan), t0 + 2).unwrap();
    assert!(st.job(JobId(1)).unwrap().status.is_active());
    st
}

/// A job of `user` in `share` (queue `q`): one `h100`, running `true`.
pub fn spec(user: &str, share: &str) -> JobSpec {
    let mut s = JobSpec::new("j", "q", share, user, "h100", 1, 1);
    s.command = vec!["true".into()];
    s
}
