//! The client API: QUIC with mutual TLS; one request frame and one response frame per
//! bidirectional stream; every request authorized by the certificate's role and name.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};
use tranche_model::JobId;
use tranche_proto::{frame, ApiError, Query, Request, Response, MAX_CLIENT_FRAME};
use tranche_state::{Command, State};
use tranche_tls::{peer_identity, Identity, Role};

use crate::node::{wall_ms, NodeMsg, SharedRef};
use crate::peer::PeerNet;
use crate::views;

/// QUIC application error codes on the client port.
pub const CLOSE_BAD_FRAME: u32 = 3;
pub const CLOSE_BAD_CERT: u32 = 2;

pub struct Api {
    pub node: mpsc::Sender<NodeMsg>,
    /// The applied index, for answers that wait for the next commit.
    pub applied: tokio::sync::watch::Receiver<u64>,
    pub shared: SharedRef,
    pub net: Arc<PeerNet>,
    pub fault_injection: bool,
}

impl Api {
    pub async fn serve(self: Arc<Self>, endpoint: quinn::Endpoint) {
        while let Some(incoming) = endpoint.accept().await {
            let api = self.clone();
            tokio::spawn(async move {
                let from = incoming.remote_address();
                let conn = match incoming.await {
                    Ok(c) => c,
                    Err(e) => {
                        // A refused certificate (expired, revoked, another CA's) is
                        // worth an operator's attention; other failures are noise.
                        if matches!(&e, quinn::ConnectionError::TransportError(t) if u64::from(t.code) & !0xff == 0x100)
                        {
                            info!(client = %from, "refused a client's TLS handshake: {e}");
                        } else {
                            debug!(client = %from, "client handshake failed: {e}");
                        }
                        return;
                    }
                };
                let who = match peer_identity(&conn) {
                    Ok(i) => i,
                    Err(e) => {
                        conn.close(CLOSE_BAD_CERT.into(), e.to_string().as_bytes());
                        return;
                    }
                };
                while let Ok((send, recv)) = conn.accept_bi().await {
                    let api = api.clone();
                    let who = who.clone();
                    let conn = conn.clone();
                    tokio::spawn(async move { api.stream(conn, who, send, recv).await });
                }
            });
        }
    }

    async fn stream(
        &self,
        conn: quinn::Connection,
        who: Identity,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
    ) {
        let req = match frame::read_payload(&mut recv, MAX_CLIENT_FRAME).await {
            Ok(Some(p)) => frame::decode_payload::<Request>(&p),
            Ok(None) => Err(frame::FrameError::Truncated),
            Err(e) => Err(e),
        };
        let req = match req {
            Ok(r) => r,
            Err(e) => {
                // Tell the client what was wrong, then close its connection: a peer
                // that sends broken frames cannot be trusted to frame the next one.
                warn!(client = %conn.remote_address(), identity = %who, "bad request frame: {e}");
                let msg = format!("{e}");
                let _ = frame::write(
                    &mut send,
                    &Response::Error(ApiError::BadRequest(msg.clone())),
                )
                .await;
                let _ = send.finish();
                let _ = send.stopped().await;
                conn.close(CLOSE_BAD_FRAME.into(), msg.as_bytes());
                return;
            }
        };
        let resp = self.handle(&who, req).await;
        let _ = frame::write(&mut send, &resp).await;
        let _ = send.finish();
    }

    pub async fn handle(&self, who: &Identity, req: Request) -> Response {
        match req {
            Request::Command(_) | Request::Write { .. } => {
                let (cmd, request) = match req {
                    Request::Command(cmd) => (cmd, None),
                    Request::Write { request, command } => (command, Some(request)),
                    _ => unreachable!("matched above"),
                };
                let (tx, rx) = oneshot::channel();
                let msg = NodeMsg::Write {
                    who: who.clone(),
                    cmd,
                    request,
                    reply: tx,
                };
                if self.node.send(msg).await.is_err() {
                    return Response::Error(ApiError::Unavailable(
                        "the controller is stopping".into(),
                    ));
                }
                match rx.await {
                    Ok(Ok(Ok(outcome))) => Response::Applied(outcome),
                    Ok(Ok(Err(rejected))) => Response::Error(ApiError::Rejected(rejected)),
                    Ok(Err(e)) => Response::Error(e),
                    Err(_) => {
                        Response::Error(ApiError::Unavailable("the controller is stopping".into()))
                    }
                }
            }
            Request::Read {
                query: Query::NodeWork { node, after },
                ..
            } => {
                let allowed = match who.role {
                    Role::Agent => node.as_str() == who.name,
                    Role::Admin | Role::Operator => true,
                    _ => false,
                };
                if !allowed {
                    return Response::Error(ApiError::Unauthorized(format!(
                        "{who} may not read the work of node {node}"
                    )));
                }
                // Answered from this controller's applied state (which holds only
                // committed entries), once it is past `after`.
                if let Some(after) = after {
                    let mut rx = self.applied.clone();
                    let wait = async {
                        while *rx.borrow_and_update() <= after {
                            if rx.changed().await.is_err() {
                                break;
                            }
                        }
                    };
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), wait).await;
                }
                let sh = self.shared.read().unwrap();
                let now = wall_ms().max(sh.last_now);
                Response::NodeWork(views::node_work(&sh.state, &node, sh.applied, now))
            }
            Request::Read { query, stale } => {
                if who.role == Role::Agent && !matches!(query, Query::Job(_) | Query::Controllers) {
                    return Response::Error(ApiError::Unauthorized(format!(
                        "{who} may read only its node's jobs and the controllers"
                    )));
                }
                if !stale && !matches!(query, Query::Controllers) {
                    let (tx, rx) = oneshot::channel();
                    if self
                        .node
                        .send(NodeMsg::ReadBarrier { reply: tx })
                        .await
                        .is_err()
                    {
                        return Response::Error(ApiError::Unavailable(
                            "the controller is stopping".into(),
                        ));
                    }
                    match rx.await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return Response::Error(e),
                        Err(_) => {
                            return Response::Error(ApiError::Unavailable(
                                "the controller is stopping".into(),
                            ))
                        }
                    }
                }
                match self.read(&query) {
                    // An agent needs a job's details only for the jobs it runs (or ran).
                    Response::Job(j)
                        if who.role == Role::Agent
                            && !j.attempts.iter().any(|a| {
                                a.allocation.iter().any(|n| n.node.as_str() == who.name)
                            }) =>
                    {
                        Response::Error(ApiError::Unauthorized(format!(
                            "{who} may read only jobs placed on its own node; job {} was not",
                            j.id
                        )))
                    }
                    r => r,
                }
            }
            Request::Membership(change) => {
                if who.role != Role::Admin {
                    return Response::Error(ApiError::Unauthorized(format!(
                        "{who}: only an admin certificate may change the controllers"
                    )));
                }
                let (tx, rx) = oneshot::channel();
                if self
                    .node
                    .send(NodeMsg::Membership { change, reply: tx })
                    .await
                    .is_err()
                {
                    return Response::Error(ApiError::Unavailable(
                        "the controller is stopping".into(),
                    ));
                }
                match rx.await {
                    Ok(Ok(())) => Response::Done,
                    Ok(Err(e)) => Response::Error(e),
                    Err(_) => {
                        Response::Error(ApiError::Unavailable("the controller is stopping".into()))
                    }
                }
            }
            Request::Isolate { from } => {
                if who.role != Role::Admin {
                    return Response::Error(ApiError::Unauthorized(format!(
                        "{who}: only an admin certificate may use the fault-injection switch"
                    )));
                }
                if !self.fault_injection {
                    return Response::Error(ApiError::Unauthorized(
                        "fault injection is disabled in this controller's config (fault_injection = false)".into(),
                    ));
                }
                self.net.set_blocked(&from);
                Response::Done
            }
        }
    }

    fn read(&self, q: &Query) -> Response {
        let sh = self.shared.read().unwrap();
        let now = wall_ms().max(sh.last_now);
        let st = &sh.state;
        match q {
            Query::Jobs(f) => Response::Jobs(views::jobs(st, f, now)),
            Query::Job(id) => match st.job(*id) {
                Some(j) => Response::Job(Box::new(j.clone())),
                None => Response::Error(ApiError::NotFound(format!("job {id} does not exist"))),
            },
            Query::Explain(id) => match st.job(*id) {
                Some(j) => Response::Explain(views::explain(st, j, now)),
                None => Response::Error(ApiError::NotFound(format!("job {id} does not exist"))),
            },
            Query::Shares => Response::Shares(views::shares(st)),
            Query::Queue { limit } => Response::Queue(views::queue(st, *limit, now)),
            Query::Nodes => Response::Nodes(st.nodes.values().cloned().collect()),
            Query::Controllers => Response::Controllers(sh.status.clone()),
            Query::Digest => Response::Digest(views::digest(st, sh.applied)),
            Query::Objects => Response::Objects(views::objects(st)),
            Query::NodeWork { node, .. } => {
                Response::NodeWork(views::node_work(st, node, sh.applied, now))
            }
        }
    }
}

fn deny(msg: String) -> Result<(), ApiError> {
    Err(ApiError::Unauthorized(msg))
}

/// The authorization rules of the client API: whether this certificate may send this
/// command, checked against the applied state (the state machine checks the rest when
/// it applies the command).
pub fn authorize(who: &Identity, cmd: &Command, state: &State) -> Result<(), ApiError> {
    use Command::*;
    let own_job = |job: &JobId| -> Result<(), ApiError> {
        match state.job(*job) {
            None => Err(ApiError::NotFound(format!("job {job} does not exist"))),
            Some(j) if j.spec.user.as_str() == who.name => Ok(()),
            Some(j) => deny(format!(
                "{who} may change only its own jobs; job {job} belongs to {}",
                j.spec.user
            )),
        }
    };
    match (who.role, cmd) {
        (
            Role::Admin,
            PutEnvironment(_) | DeleteEnvironment(_) | PutPolicy(_) | DeletePolicy(_),
        )
        | (Role::Admin, PutQueue(_) | DeleteQueue(_) | PutShare(_) | DeleteShare(_)) => Ok(()),
        (_, PutEnvironment(_) | DeleteEnvironment(_) | PutPolicy(_) | DeletePolicy(_))
        | (_, PutQueue(_) | DeleteQueue(_) | PutShare(_) | DeleteShare(_)) => deny(format!(
            "{who}: only an admin certificate may manage environments, policies, queues and shares"
        )),
        (Role::Admin, Submit(_)) => Ok(()),
        (Role::User, Submit(spec)) => {
            if spec.user.as_str() != who.name {
                return deny(format!(
                    "{who} may submit only as itself; the job names user `{}`",
                    spec.user
                ));
            }
            match state.shares.get(&spec.share) {
                Some(share) if !share.is_member(&spec.user) => {
                    deny(format!("{who} is not a member of share {}", share.name))
                }
                _ => Ok(()),
            }
        }
        (_, Submit(_)) => deny(format!(
            "{who}: only user and admin certificates may submit jobs"
        )),
        (Role::Admin | Role::Operator, Cancel { .. } | UpdatePriority { .. }) => Ok(()),
        (Role::User, Cancel { job, .. } | UpdatePriority { job, .. }) => own_job(job),
        (_, Cancel { .. } | UpdatePriority { .. }) => {
            deny(format!("{who} may not cancel or update jobs"))
        }
        (Role::Admin | Role::Operator, DrainNode { .. } | ResumeNode { .. }) => Ok(()),
        // An agent drains its own node when a GPU turns unhealthy; it never resumes it
        // (an operator does, after the repair) and never stops its jobs that way.
        (
            Role::Agent,
            DrainNode {
                node, now: false, ..
            },
        ) if node.as_str() == who.name => Ok(()),
        (_, DrainNode { .. } | ResumeNode { .. }) => deny(format!(
            "{who}: only operator and admin certificates may drain and resume nodes"
        )),
        (Role::Agent, RegisterNode(inv)) if inv.name.as_str() == who.name => Ok(()),
        (Role::Agent, Heartbeat { node }) if node.as_str() == who.name => Ok(()),
        (Role::Agent, JobProgress { job, attempt, .. }) => match state.job(*job) {
            Some(j)
                if j.attempts.iter().any(|a| {
                    a.number == *attempt && a.allocation.iter().any(|n| n.node.as_str() == who.name)
                }) =>
            {
                Ok(())
            }
            Some(_) => deny(format!(
                "{who} may report only on attempts placed on its own node"
            )),
            None => Err(ApiError::NotFound(format!("job {job} does not exist"))),
        },
        (_, RegisterNode(_) | Heartbeat { .. } | JobProgress { .. }) => deny(format!(
            "{who}: only the agent certificate of that node may speak for it"
        )),
        (_, NodeUnreachable { .. } | NodeDown { .. } | NodeUp { .. } | ApplyPlan(_)) => deny(
            format!("{who}: node liveness and plans are issued only by the leader itself"),
        ),
    }
}
