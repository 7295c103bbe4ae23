//! The controller's service layer: who may ask what, the reads, and the write path.
//! It takes an identity and a [`ClientRequest`] and returns a [`Response`]; it knows
//! nothing of QUIC or HTTP. The client port (`quic.rs`) is one adapter on it.
//!
//! Writes are authorized here against the applied state, then turned into the
//! replicated command and handed to the Raft node task; the state machine checks the
//! rest when it applies them. Heartbeats are answered here, from the leader's memory.
//!
//! Each rule is written once, here, and every surface (the QUIC client port, the HTTP
//! API, the AWS Batch-compatible endpoint) goes through it: [`authorize`] for writes,
//! [`job_visibility`] for what a read shows of a job.
//!
//! ## Who sees what of a job
//!
//! | caller | its own jobs | other users' jobs |
//! |---|---|---|
//! | admin, operator (and controller) | everything | everything |
//! | user | everything | the summary |
//! | agent | everything of the jobs placed on its node | refused |
//!
//! "Everything" is the whole record: spec (image, command, env, working directory,
//! output and error paths, tags, the SageMaker request), attempts and transitions.
//! "The summary" is the same record with those spec parts emptied
//! ([`tranche_model::Job::redacted`], [`tranche_model::REDACTED_FIELDS`]): id, name,
//! user, share, queue, state, request (GPUs), priority, times, attempts, transitions
//! and reasons. Job lists (`Jobs`, `Queue`, `Explain`, the event stream, the AWS
//! `ListServiceJobs`) carry only summaries, which every role but agents reads. A job's
//! output (the HTTP log relay) is for those who see everything of it, agents and
//! controllers excepted ([`may_read_output`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tranche_model::{AccessKey, Job, JobId, JobRef, KeyRole, UserName, ValidationError};
use tranche_proto::{
    ApiError, ClientCommand, ClientRequest, HistoryFilter, HistoryPage, JobFilter, JobSummary,
    Query, Refusal, Response, MAX_NODE_WORK_WAIT_MS,
};
use tranche_state::State;
use tranche_tls::{Identity, Role};

use crate::liveness::Beats;
use crate::mailbox::{wall_ms, NodeMsg, SharedRef, WorkWatch};
use crate::{views, wire};
use tranche_tls::keys::{new_key_id, KeySecret};

/// The test switch that drops controller-to-controller traffic (the peer transport).
pub trait Isolation: Send + Sync {
    fn set_blocked(&self, ids: &[u64]);
}

pub struct Service {
    node: mpsc::Sender<NodeMsg>,
    /// Per node, when its work last changed, for long polls.
    work: Arc<WorkWatch>,
    shared: SharedRef,
    beats: Arc<Beats>,
    /// Present only where the controller's config enables `fault_injection`.
    isolation: Option<Arc<dyn Isolation>>,
    /// The cluster's key secret (`[aws] key_secret_file`), from which access keys'
    /// secrets are derived; `None`: no keys can be issued or checked here.
    key_secret: Option<Arc<KeySecret>>,
    /// The latest standings of the waiting jobs, with the applied index and the
    /// second they are of (see [`Service::standings`]).
    standings: std::sync::Mutex<Option<((u64, u64), Arc<Standings>)>>,
    /// Node labels set by the controllers' config (`[agents.labels]`), and whether
    /// only those are taken (`labels_from_config_only`).
    pinned_labels: std::collections::BTreeMap<String, Labels>,
    labels_from_config_only: bool,
}

type Labels = std::collections::BTreeMap<String, String>;

/// The prefix of the labels an agent sets about itself (its log and rendezvous ports),
/// which no environment selects.
const AGENT_LABEL_PREFIX: &str = "tranche.";

/// Every waiting job's standing (position and estimated start).
pub type Standings = std::collections::BTreeMap<JobId, tranche_model::Standing>;

/// What an issue of an access key answers where no key secret file is configured.
pub const NO_KEY_SECRET: &str =
    "this cluster has no [aws] key_secret_file; access keys cannot be issued";

/// Where a request comes from. A client (the QUIC client port, the HTTP API) sends
/// what it likes; this controller's AWS Batch-compatible endpoint builds a job's
/// SageMaker part itself, only from its catalog (`[aws.images]`, `[aws.file_systems]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Client,
    AwsEndpoint,
}

/// How long an access key signs requests after it is issued (AWS advises rotating
/// keys every 90 days); `tranche keys issue` again for a new one.
pub const ACCESS_KEY_TTL_DAYS: u32 = 90;

/// How long the answer to a submit over a job limit waits (see [`Service::write`]).
pub const OVER_LIMIT_DELAY: Duration = Duration::from_secs(1);

fn stopping() -> Response {
    Response::Error(ApiError::Unavailable("the controller is stopping".into()))
}

impl Service {
    pub fn new(
        node: mpsc::Sender<NodeMsg>,
        work: Arc<WorkWatch>,
        shared: SharedRef,
        beats: Arc<Beats>,
        isolation: Option<Arc<dyn Isolation>>,
    ) -> Service {
        Service {
            node,
            work,
            shared,
            beats,
            isolation,
            key_secret: None,
            standings: Default::default(),
            pinned_labels: Default::default(),
            labels_from_config_only: false,
        }
    }

    /// The service with the cluster's key secret (`[aws] key_secret_file`, loaded at
    /// start), so that it issues access keys and knows their secrets.
    pub fn with_key_secret(mut self, secret: Option<KeySecret>) -> Service {
        self.key_secret = secret.map(Arc::new);
        self
    }

    /// The service with node labels set by the controllers' config (`[agents.labels]`,
    /// node name → labels): a registration of such a node gets those labels, whatever
    /// its agent declares (but its own `tranche.` ones).
    /// `only`: a node not named in `labels` gets no selectable labels.
    pub fn with_pinned_labels(
        mut self,
        labels: std::collections::BTreeMap<String, Labels>,
        only: bool,
    ) -> Service {
        self.pinned_labels = labels;
        self.labels_from_config_only = only;
        self
    }

    /// A registration with the labels the config sets for its node, if any.
    fn pin_labels(&self, command: ClientCommand) -> ClientCommand {
        let ClientCommand::RegisterNode(mut inv) = command else {
            return command;
        };
        let empty = Labels::new();
        let pinned = match self.pinned_labels.get(inv.name.as_str()) {
            Some(p) => p,
            None if self.labels_from_config_only => &empty,
            None => return ClientCommand::RegisterNode(inv),
        };
        let (own, declared) = split_labels(&inv.labels);
        if &declared != pinned {
            tracing::warn!(
                node = %inv.name,
                declared = ?declared,
                pinned = ?pinned,
                "a node's agent declares other labels than the config's [agents.labels]; the config's are kept"
            );
        }
        inv.labels = pinned.clone();
        inv.labels.extend(own);
        ClientCommand::RegisterNode(inv)
    }

    /// The cluster's key secret, where one is configured.
    pub fn key_secret(&self) -> Option<&KeySecret> {
        self.key_secret.as_deref()
    }

    /// An access key that may sign now (it exists in this controller's applied state
    /// and is not revoked) and its secret: what a SigV4 check needs
    /// (the `secret_of` of the AWS endpoint's signature check). `None` also where no key secret is
    /// configured.
    pub fn active_access_key(&self, id: &str) -> Option<(AccessKey, String)> {
        let secret = self.key_secret.as_ref()?;
        let sh = self.shared.read().unwrap();
        let key = sh.state.keys.get(id)?;
        if key.revoked_at.is_some() {
            return None;
        }
        Some((key.clone(), secret.secret_of(id)))
    }

    /// Every waiting job's standing in `sh`'s state at `now`. Estimating them looks at
    /// the whole queue, so it is done at most once per applied index and second, and
    /// every read in between (`Explain`, `Jobs` with standings, the dashboard) gets
    /// the same answer.
    pub fn standings(
        &self,
        sh: &crate::mailbox::Shared,
        now: tranche_model::Millis,
    ) -> Arc<Standings> {
        let key = (sh.applied, now / 1000);
        let mut cached = self.standings.lock().unwrap();
        if let Some((k, s)) = cached.as_ref() {
            if *k == key {
                return s.clone();
            }
        }
        let s = Arc::new(tranche_sched::estimate::standings(&sh.state, now));
        *cached = Some((key, s.clone()));
        s
    }

    /// Waits until this controller has applied every write committed before the call
    /// (a Raft read index), so that a read of its state after it is linearizable.
    pub async fn barrier(&self) -> Result<(), ApiError> {
        let (tx, rx) = oneshot::channel();
        if self
            .node
            .send(NodeMsg::ReadBarrier { reply: tx })
            .await
            .is_err()
        {
            return Err(ApiError::Unavailable("the controller is stopping".into()));
        }
        match rx.await {
            Ok(r) => r,
            Err(_) => Err(ApiError::Unavailable("the controller is stopping".into())),
        }
    }

    /// Answers one request of `who`, sent by a client.
    pub async fn handle(&self, who: &Identity, req: ClientRequest) -> Response {
        self.handle_from(who, Origin::Client, req).await
    }

    /// Answers one request of `who` that came through `origin`.
    pub async fn handle_from(
        &self,
        who: &Identity,
        origin: Origin,
        req: ClientRequest,
    ) -> Response {
        self.handle_cert(who, origin, None, req).await
    }

    /// [`handle_from`](Self::handle_from) for a caller whose certificate's serial
    /// (lower-case hex) is known: an access key it issues records it, so that
    /// revoking the certificate ends the key too.
    pub async fn handle_cert(
        &self,
        who: &Identity,
        origin: Origin,
        serial: Option<String>,
        req: ClientRequest,
    ) -> Response {
        match req {
            ClientRequest::Write { request, command } => {
                self.write(who, origin, serial, request, command).await
            }
            ClientRequest::Read {
                query:
                    Query::NodeWork {
                        node,
                        after,
                        wait_ms,
                    },
                ..
            } => self.node_work(who, node, after, wait_ms).await,
            ClientRequest::Read { query, stale } => self.read(who, query, stale).await,
            ClientRequest::Membership(change) => {
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
                    return stopping();
                }
                match rx.await {
                    Ok(Ok(())) => Response::Done,
                    Ok(Err(e)) => Response::Error(e),
                    Err(_) => stopping(),
                }
            }
            ClientRequest::Isolate { from } => {
                if who.role != Role::Admin {
                    return Response::Error(ApiError::Unauthorized(format!(
                        "{who}: only an admin certificate may use the fault-injection switch"
                    )));
                }
                match &self.isolation {
                    Some(i) => {
                        i.set_blocked(&from);
                        Response::Done
                    }
                    None => Response::Error(ApiError::Unauthorized(
                        "fault injection is disabled in this controller's config (fault_injection = false)".into(),
                    )),
                }
            }
            ClientRequest::Heartbeat { node } => self.heartbeat(who, node),
        }
    }

    async fn write(
        &self,
        who: &Identity,
        origin: Origin,
        serial: Option<String>,
        request: Option<tranche_state::RequestId>,
        command: ClientCommand,
    ) -> Response {
        let command = self.pin_labels(command);
        // Job limits are checked as the applied state stands: a submit over one is
        // refused here, not committed to the log to be refused there. Its answer waits
        // OVER_LIMIT_DELAY, so that a client that retries at once (a loop, or a hostile
        // one) sends a request a second per stream, not thousands.
        let (denied, over_limit) = {
            let sh = self.shared.read().unwrap();
            match authorize(who, origin, &command, &sh.state) {
                Err(e) => (Some(e), None),
                Ok(()) => match &command {
                    ClientCommand::Submit(spec) => {
                        (None, sh.state.check_submit_limits(spec, wall_ms()).err())
                    }
                    _ => (None, None),
                },
            }
        };
        if let Some(e) = denied {
            return Response::Error(e);
        }
        if let Some(e) = over_limit {
            tokio::time::sleep(OVER_LIMIT_DELAY).await;
            return Response::Error(ApiError::Rejected(wire::refusal(e)));
        }
        // The session is the caller's: whatever identity the client wrote is replaced.
        let request = request.map(|r| tranche_state::RequestId {
            identity: who.to_string(),
            ..r
        });
        // An access key gets its id here, so `wire::command` never sees the request.
        let command = match command {
            ClientCommand::IssueAccessKey { user, role } => {
                return self.issue_access_key(user, role, serial).await
            }
            ClientCommand::Submit(mut spec) => {
                self.share_defaults(&mut spec);
                if let Err(e) = self.settle_archived_deps(&mut spec) {
                    return Response::Error(e);
                }
                wire::command(ClientCommand::Submit(spec))
            }
            ClientCommand::RegisterNode(inv) => {
                let inv = {
                    let sh = self.shared.read().unwrap();
                    settle_registration(who, inv, &sh.state)
                };
                wire::command(ClientCommand::RegisterNode(inv))
            }
            c => wire::command(c),
        };
        self.propose(command, request).await
    }

    /// A submit that leaves its queue or unit empty gets its share's: the share's
    /// queue, and the unit of its first capacity limit, as this controller has applied
    /// them (on the leader, every acknowledged write). The state machine checks the
    /// submit against the share as it is when the entry applies, so a stale view can
    /// only make it refuse; a share this controller does not know leaves the fields
    /// empty, and the submit is refused naming them.
    fn share_defaults(&self, spec: &mut tranche_model::JobSpec) {
        if !spec.queue.as_str().is_empty() && !spec.request.unit.as_str().is_empty() {
            return;
        }
        let sh = self.shared.read().unwrap();
        let Some(share) = sh.state.shares.get(&spec.share) else {
            return;
        };
        if spec.queue.as_str().is_empty() {
            spec.queue = share.queue.clone();
        }
        if spec.request.unit.as_str().is_empty() {
            if let Some(l) = share.capacity_limits.first() {
                spec.request.unit = l.unit.clone();
            }
        }
    }

    /// Proposes a replicated command (the leader's node task forwards it from a
    /// follower) and answers with its outcome.
    async fn propose(
        &self,
        cmd: tranche_state::Command,
        request: Option<tranche_state::RequestId>,
    ) -> Response {
        let (tx, rx) = oneshot::channel();
        let msg = NodeMsg::Write {
            cmd,
            request,
            reply: tx,
        };
        if self.node.send(msg).await.is_err() {
            return stopping();
        }
        match rx.await {
            Ok(Ok(Ok(outcome))) => Response::Applied(wire::outcome(outcome)),
            Ok(Ok(Err(rejected))) => Response::Error(ApiError::Rejected(wire::refusal(rejected))),
            Ok(Err(e)) => Response::Error(e),
            Err(_) => stopping(),
        }
    }

    /// Issues an access key (already authorized): a new id, proposed as
    /// `PutAccessKey`, answered with the key and its secret, derived here from the key
    /// secret file every controller shares. It goes without the client's request id:
    /// a retry with the same id would be answered with the first outcome while naming
    /// a key id of its own; without it, a retry issues a second key instead.
    /// Issues a key that expires after [`ACCESS_KEY_TTL_DAYS`] and records the serial
    /// of the issuing certificate, when known.
    async fn issue_access_key(
        &self,
        user: UserName,
        role: KeyRole,
        issuer_serial: Option<String>,
    ) -> Response {
        let Some(master) = self.key_secret.clone() else {
            return Response::Error(ApiError::BadRequest(NO_KEY_SECRET.into()));
        };
        let key = AccessKey {
            id: new_key_id(),
            user,
            role,
            created_at: 0,
            revoked_at: None,
            issuer_serial,
            expires_at: Some(wall_ms() + u64::from(ACCESS_KEY_TTL_DAYS) * 86_400_000),
        };
        match self
            .propose(tranche_state::Command::PutAccessKey(key.clone()), None)
            .await
        {
            Response::Applied(_) => {
                // The applied record has the entry's time; a follower may not have
                // applied it yet, then this controller's clock stands in for it.
                let applied = self.shared.read().unwrap().state.keys.get(&key.id).cloned();
                let key = applied.unwrap_or(AccessKey {
                    created_at: wall_ms(),
                    ..key
                });
                let secret = master.secret_of(&key.id);
                Response::AccessKey { key, secret }
            }
            other => other,
        }
    }

    fn access_keys(&self, who: &Identity, user: Option<&UserName>) -> Response {
        if who.role != Role::Admin && user.is_some_and(|u| u.as_str() != who.name) {
            return Response::Error(ApiError::Unauthorized(format!(
                "{who} may list only its own access keys"
            )));
        }
        let sh = self.shared.read().unwrap();
        let mut keys: Vec<AccessKey> = sh
            .state
            .keys
            .values()
            .filter(|k| user.is_none_or(|u| &k.user == u))
            .filter(|k| who.role == Role::Admin || owns_key(who, k))
            .cloned()
            .collect();
        keys.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Response::AccessKeys(keys)
    }

    fn heartbeat(&self, who: &Identity, node: tranche_model::NodeName) -> Response {
        if who.role != Role::Agent || node.as_str() != who.name {
            return Response::Error(ApiError::Unauthorized(format!(
                "{who}: only the agent certificate of node {node} may heartbeat for it"
            )));
        }
        if !self.beats.note(&node) {
            let sh = self.shared.read().unwrap();
            let leader = sh.status.leader.and_then(|l| sh.members.get(&l).cloned());
            return Response::Error(ApiError::NotLeader { leader });
        }
        let registered = self.shared.read().unwrap().state.nodes.contains_key(&node);
        Response::Heartbeat { registered }
    }

    async fn node_work(
        &self,
        who: &Identity,
        node: tranche_model::NodeName,
        after: Option<u64>,
        wait_ms: u32,
    ) -> Response {
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
        // Answered from this controller's applied state (which holds only committed
        // entries), once this node's work changed after `after` (or the wait ends).
        if let Some(after) = after {
            let mut rx = self.work.subscribe(&node);
            let wait = async {
                while *rx.borrow_and_update() <= after {
                    if rx.changed().await.is_err() {
                        break;
                    }
                }
            };
            let wait_for = Duration::from_millis(wait_ms.min(MAX_NODE_WORK_WAIT_MS) as u64);
            let _ = tokio::time::timeout(wait_for, wait).await;
        }
        let sh = self.shared.read().unwrap();
        let now = wall_ms().max(sh.last_now);
        Response::NodeWork(views::node_work(&sh.state, &node, sh.applied, now))
    }

    /// Whether `who` may ask `query`, and (unless `stale`) the read barrier after which
    /// this controller's state has every write acknowledged before the call.
    async fn before_read(
        &self,
        who: &Identity,
        query: &Query,
        stale: bool,
    ) -> Result<(), ApiError> {
        if who.role == Role::Agent && !matches!(query, Query::Job(_) | Query::Controllers) {
            return Err(ApiError::Unauthorized(format!(
                "{who} may read only its node's jobs and the controllers"
            )));
        }
        // A pass over the whole state, to compare controllers: not for every user.
        if who.role == Role::User && matches!(query, Query::Digest) {
            return Err(ApiError::Unauthorized(format!(
                "{who}: the state digest (a pass over the whole state, to compare \
                 controllers) is for operators and admins"
            )));
        }
        if !stale && !matches!(query, Query::Controllers) {
            self.barrier().await?;
        }
        Ok(())
    }

    async fn read(&self, who: &Identity, query: Query, stale: bool) -> Response {
        if let Err(e) = self.before_read(who, &query, stale).await {
            return Response::Error(e);
        }
        if let Query::AccessKeys { user } = &query {
            return self.access_keys(who, user.as_ref());
        }
        if let Query::History(f) = &query {
            return match self.history_page(f) {
                Ok(p) => Response::History(p),
                Err(e) => Response::Error(e),
            };
        }
        self.answer(who, &query)
    }

    /// This controller's history store.
    fn history(&self) -> Option<Arc<crate::history::History>> {
        self.shared.read().unwrap().history.clone()
    }

    /// The job `r` names, from the history store `history` (the shared state's, which
    /// a caller holding that state's lock passes rather than locking it again: a
    /// second read lock waits behind a waiting writer, which waits for the first).
    fn archived(
        history: Option<&Arc<crate::history::History>>,
        r: &JobRef,
    ) -> Result<Job, ApiError> {
        let missing = || ApiError::NotFound(format!("job {r} does not exist"));
        let history = history.ok_or_else(missing)?;
        history
            .find(r)
            .map_err(ApiError::Unavailable)?
            .ok_or_else(missing)
    }

    /// A page of ended jobs: see [`crate::history_reads`].
    fn history_page(&self, f: &HistoryFilter) -> Result<HistoryPage, ApiError> {
        crate::history_reads::page(&self.shared, f)
    }

    /// A submit's dependencies on jobs that have left the state are settled here,
    /// from the history store: one whose condition the ended job met is dropped (as
    /// the state machine drops a satisfied one), one it can never meet refuses the
    /// submit, naming the job and how it ended.
    fn settle_archived_deps(&self, spec: &mut tranche_model::JobSpec) -> Result<(), ApiError> {
        if spec.dependency.after.is_empty() {
            return Ok(());
        }
        let Some(history) = self.history() else {
            return Ok(());
        };
        let missing: Vec<JobRef> = {
            let sh = self.shared.read().unwrap();
            spec.dependency
                .after
                .iter()
                .flat_map(|(_, refs)| refs)
                .filter(|r| sh.state.resolve(r).is_err())
                .copied()
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let mut ended = std::collections::BTreeMap::new();
        for r in &missing {
            if let Some(jobs) = crate::history_reads::ended_jobs_of(&history, r)? {
                ended.insert(*r, jobs);
            }
        }
        for (kind, refs) in &mut spec.dependency.after {
            let mut refused = None;
            refs.retain(|r| match ended.get(r) {
                None => true,
                Some(jobs) => {
                    for (id, status) in jobs {
                        let dep = tranche_model::Dep {
                            kind: *kind,
                            job: *id,
                        };
                        if dep.state(*status) == tranche_model::DepState::Never {
                            refused.get_or_insert(format!(
                                "job {r} ended {status} and has left the controllers' state; \
                                 {} on it can never be met",
                                kind.as_str()
                            ));
                        }
                    }
                    false
                }
            });
            if let Some(rule) = refused {
                return Err(invalid("dependency", rule));
            }
        }
        spec.dependency.after.retain(|(_, refs)| !refs.is_empty());
        Ok(())
    }

    /// A page of the job list: the jobs with ids above `after` that `filter` keeps, at
    /// most `filter.limit` of them (the summary of each, which every role but agents
    /// reads). Only the page is built under the state lock.
    pub async fn jobs_after(
        &self,
        who: &Identity,
        filter: JobFilter,
        after: JobId,
    ) -> Result<Vec<JobSummary>, ApiError> {
        let query = Query::Jobs(filter);
        self.before_read(who, &query, false).await?;
        let Query::Jobs(f) = query else {
            unreachable!("built above")
        };
        let sh = self.shared.read().unwrap();
        let now = wall_ms().max(sh.last_now);
        let standings = f.standing.then(|| self.standings(&sh, now));
        Ok(views::jobs(&sh.state, &f, after, now, standings.as_deref()))
    }

    fn answer(&self, who: &Identity, q: &Query) -> Response {
        let sh = self.shared.read().unwrap();
        let now = wall_ms().max(sh.last_now);
        let st = &sh.state;
        // A job that has left the state is read from the history store.
        let find = |r: &JobRef| -> Result<std::borrow::Cow<'_, Job>, ApiError> {
            match st
                .resolve(r)
                .ok()
                .and_then(|ids| ids.first().and_then(|id| st.job(*id)))
            {
                Some(j) => Ok(std::borrow::Cow::Borrowed(j)),
                None => Self::archived(sh.history.as_ref(), r).map(std::borrow::Cow::Owned),
            }
        };
        match q {
            Query::Jobs(f) => {
                let standings = f.standing.then(|| self.standings(&sh, now));
                Response::Jobs(views::jobs(st, f, JobId(0), now, standings.as_deref()))
            }
            Query::Job(r) => match find(r).and_then(|j| job_as_seen_by(who, &j)) {
                Ok(j) => Response::Job(Box::new(j)),
                Err(e) => Response::Error(e),
            },
            Query::Explain(r) => match find(r) {
                Ok(j) => Response::Explain(views::explain(st, &j, now, &self.standings(&sh, now))),
                Err(e) => Response::Error(e),
            },
            Query::Shares => Response::Shares(views::shares(st, now)),
            Query::Queue { limit } => Response::Queue(views::queue(st, *limit, now)),
            Query::Nodes => Response::Nodes(st.nodes.values().cloned().collect()),
            Query::Controllers => Response::Controllers(sh.status.clone()),
            Query::Digest => Response::Digest(views::digest(st, sh.applied)),
            Query::Objects => Response::Objects(views::objects(st)),
            Query::Groups => Response::Groups(st.groups.values().cloned().collect()),
            Query::NodeWork { node, .. } => {
                Response::NodeWork(views::node_work(st, node, sh.applied, now))
            }
            // Answered in `read`, by who asks.
            Query::History(_) => Response::Error(ApiError::BadRequest(
                "the history is read outside the state lock".into(),
            )),
            Query::AccessKeys { .. } => Response::Error(ApiError::BadRequest(
                "access keys are listed per caller".into(),
            )),
            Query::Report { from, to } => {
                // Nothing is counted beyond now; an empty range is refused.
                let to = to.unwrap_or(now).min(now);
                if *from >= to {
                    return Response::Error(ApiError::BadRequest(
                        "the report's range must start before it ends, and before now".into(),
                    ));
                }
                Response::Report(Box::new(tranche_proto::LedgerReport {
                    from: *from,
                    to,
                    counting_since: st.ledger.since,
                    totals: wire::ledger_totals(st.ledger_between(*from, to)),
                }))
            }
        }
    }
}

fn deny(msg: String) -> Result<(), ApiError> {
    Err(ApiError::Unauthorized(msg))
}

/// How much of a job a caller sees (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobVisibility {
    /// The whole record.
    Full,
    /// The record without [`tranche_model::REDACTED_FIELDS`].
    Summary,
}

/// How much of `job` `who` sees: the one rule for every read of a job, whatever the
/// surface. An agent is refused the jobs never placed on its node.
pub fn job_visibility(who: &Identity, job: &Job) -> Result<JobVisibility, ApiError> {
    let placed_here = || {
        job.attempts
            .iter()
            .any(|a| a.allocation.iter().any(|n| n.node.as_str() == who.name))
    };
    match who.role {
        Role::Admin | Role::Operator | Role::Controller => Ok(JobVisibility::Full),
        Role::User if job.spec.user.as_str() == who.name => Ok(JobVisibility::Full),
        Role::User => Ok(JobVisibility::Summary),
        Role::Agent if placed_here() => Ok(JobVisibility::Full),
        Role::Agent => Err(ApiError::Unauthorized(format!(
            "{who} may read only jobs placed on its own node; job {} was not",
            job.job_ref()
        ))),
    }
}

/// `job` as `who` may see it ([`job_visibility`]).
pub fn job_as_seen_by(who: &Identity, job: &Job) -> Result<Job, ApiError> {
    Ok(match job_visibility(who, job)? {
        JobVisibility::Full => job.clone(),
        JobVisibility::Summary => job.redacted(),
    })
}

/// Whether `who` may read `job`'s output: a person (admin, operator, user) who sees
/// everything of it.
pub fn may_read_output(who: &Identity, job: &Job) -> Result<(), ApiError> {
    let seen = job_visibility(who, job)?;
    match (who.role, seen) {
        (Role::Admin | Role::Operator | Role::User, JobVisibility::Full) => Ok(()),
        (Role::User, JobVisibility::Summary) => deny(format!(
            "{who} may read only its own jobs' output; job {} belongs to {}",
            job.job_ref(),
            job.spec.user
        )),
        _ => deny(format!("{who} may not read jobs' output")),
    }
}

fn invalid(field: &str, rule: String) -> ApiError {
    ApiError::Rejected(Refusal::Invalid(ValidationError::new(field, rule)))
}

/// The rule on a command's content that depends on the surface it came through: only
/// the AWS endpoint sets a job's SageMaker part. (Sizes and reasons are checked by
/// [`within_limits`], the same for every surface.)
fn check_content(origin: Origin, cmd: &ClientCommand) -> Result<(), ApiError> {
    match cmd {
        ClientCommand::Submit(spec)
            if spec.sagemaker.is_some() && origin != Origin::AwsEndpoint =>
        {
            Err(invalid(
                "sagemaker",
                "is set only by the AWS Batch-compatible endpoint (SubmitServiceJob), which \
                 takes images from [aws.images] and channels from [aws.file_systems]; submit \
                 the job without it"
                    .into(),
            ))
        }
        _ => Ok(()),
    }
}

/// A node's labels as (the agent's own `tranche.` labels, its ports; the others, which
/// environments select).
fn split_labels(labels: &Labels) -> (Labels, Labels) {
    labels
        .clone()
        .into_iter()
        .partition(|(k, _)| k.starts_with(AGENT_LABEL_PREFIX))
}

/// What of an agent's registration is taken. A node that holds jobs keeps the labels
/// environments select and its GPUs while they run: it may lose GPUs or report them
/// unhealthy, but a registration that relabels it or adds GPUs is taken with the
/// labels and GPUs it had, so that no agent steers other tenants' jobs to itself by
/// declaring what their environments select. The change is taken once the node holds
/// no jobs and its agent registers again (drain the node, then restart its agent).
/// The registration itself is never refused for it: an agent waits for its
/// registration before it heartbeats, and its node would go DOWN with its jobs. Every
/// change is logged.
fn settle_registration(
    who: &Identity,
    mut inv: tranche_model::NodeInventory,
    state: &State,
) -> tranche_model::NodeInventory {
    let Some(old) = state.nodes.get(&inv.name) else {
        return inv;
    };
    let key = |g: &tranche_model::Gpu| (g.index, g.uuid.clone(), g.unit.clone());
    let before: std::collections::BTreeSet<_> = old.inventory.gpus.iter().map(key).collect();
    let gained: Vec<String> = inv
        .gpus
        .iter()
        .filter(|g| !before.contains(&key(g)))
        .map(|g| format!("{} {} ({})", g.index, g.unit, g.uuid))
        .collect();
    let (own, selectable) = split_labels(&inv.labels);
    let (_, selectable_before) = split_labels(&old.inventory.labels);
    let relabelled = selectable != selectable_before;
    let lost = old.inventory.gpus.len() > inv.gpus.len() - gained.len();
    if !relabelled && gained.is_empty() && !lost {
        return inv;
    }
    let holds = old.allocated.iter().flatten().count();
    tracing::warn!(
        node = %inv.name,
        agent = %who,
        labels_before = ?old.inventory.labels,
        labels_now = ?inv.labels,
        gpus_before = old.inventory.gpus.len(),
        gpus_now = inv.gpus.len(),
        gained = ?gained,
        holds,
        "a node's agent declares other labels or GPUs than before"
    );
    if holds > 0 && (relabelled || !gained.is_empty()) {
        tracing::warn!(
            node = %inv.name,
            holds,
            "the node holds GPUs of running jobs: its new labels and GPUs are not taken \
             until it holds none (drain it, then restart its agent)"
        );
        inv.labels = selectable_before;
        inv.labels.extend(own);
        inv.gpus.retain(|g| before.contains(&key(g)));
    }
    inv
}

/// The roles a key of this identity may have: a user's only `user`, an operator's
/// `operator` or `user`, an admin's any; agents and controllers have none.
fn key_roles(who: &Identity) -> &'static [KeyRole] {
    match who.role {
        Role::Admin => &[KeyRole::User, KeyRole::Operator, KeyRole::Admin],
        Role::Operator => &[KeyRole::User, KeyRole::Operator],
        Role::User => &[KeyRole::User],
        _ => &[],
    }
}

/// Whether `key` is one `who` may issue for itself (and so revoke and list).
fn owns_key(who: &Identity, key: &AccessKey) -> bool {
    key.user.as_str() == who.name && key_roles(who).contains(&key.role)
}

/// The sizes and priorities a command may carry, checked before it is proposed, so
/// that an oversize command never reaches the log (the state machine checks the
/// sizes again when it applies a command). A user may give a job a priority up to its
/// share's `max_user_priority`, at submit and update; operators and admins up to
/// [`tranche_model::MAX_JOB_PRIORITY`]. Replicated commands carry no role, so the
/// priority cap is kept here, where every surface (QUIC, HTTP, the AWS endpoint)
/// authorizes its writes.
fn within_limits(who: &Identity, cmd: &ClientCommand, state: &State) -> Result<(), ApiError> {
    use ClientCommand::*;
    let invalid = |e: tranche_model::ValidationError| ApiError::Rejected(Refusal::Invalid(e));
    let capped = |share: &tranche_model::ShareName, priority: u32| {
        let Some(share) = state.shares.get(share) else {
            return Ok(());
        };
        if who.role == Role::User && priority > share.max_user_priority {
            return Err(invalid(tranche_model::ValidationError::new(
                "priority",
                format!(
                    "a user may set at most share {}'s max_user_priority ({}), got {priority}; operators and admins may set up to {}",
                    share.name,
                    share.max_user_priority,
                    tranche_model::MAX_JOB_PRIORITY
                ),
            )));
        }
        Ok(())
    };
    match cmd {
        Submit(spec) => {
            spec.validate_sizes().map_err(invalid)?;
            capped(&spec.share, spec.priority)
        }
        UpdatePriority { job, priority } => {
            let first = state.resolve(job).ok().and_then(|ids| ids.first().copied());
            match first.and_then(|id| state.job(id)) {
                Some(j) => capped(&j.spec.share, *priority),
                None => Ok(()),
            }
        }
        Cancel { reason, .. } | DrainNode { reason, .. } => {
            tranche_model::validate_reason(reason).map_err(invalid)
        }
        _ => Ok(()),
    }
}

/// The authorization rules: whether this certificate may send this command, checked
/// against the applied state (the state machine checks the rest when it applies the
/// command). Leader-only commands have no client form, so they need no rule.
pub fn authorize(
    who: &Identity,
    origin: Origin,
    cmd: &ClientCommand,
    state: &State,
) -> Result<(), ApiError> {
    permitted(who, origin, cmd, state)?;
    within_limits(who, cmd, state)
}

/// Whether this role and name may send this command at all, from this surface.
fn permitted(
    who: &Identity,
    origin: Origin,
    cmd: &ClientCommand,
    state: &State,
) -> Result<(), ApiError> {
    use ClientCommand::*;
    check_content(origin, cmd)?;
    // What the caller holds, as its refusals name it.
    let credential = match origin {
        Origin::Client => "certificate",
        Origin::AwsEndpoint => "access key",
    };
    let own_job = |job: &JobRef| -> Result<(), ApiError> {
        let first = state.resolve(job).ok().and_then(|ids| ids.first().copied());
        match first.and_then(|id| state.job(id)) {
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
        | (Role::Admin, PutQueue(_) | DeleteQueue(_) | PutShare(_) | DeleteShare(_))
        | (Role::Admin, PutGroup(_) | DeleteGroup(_)) => Ok(()),
        (_, PutEnvironment(_) | DeleteEnvironment(_) | PutPolicy(_) | DeletePolicy(_))
        | (_, PutQueue(_) | DeleteQueue(_) | PutShare(_) | DeleteShare(_))
        | (_, PutGroup(_) | DeleteGroup(_)) => deny(format!(
            "{who}: only an admin {credential} may manage environments, policies, queues, shares and groups"
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
            "{who}: only user and admin {credential}s may submit jobs"
        )),
        (
            Role::Admin | Role::Operator,
            Cancel { .. } | UpdatePriority { .. } | Hold { .. } | Release { .. },
        ) => Ok(()),
        (
            Role::User,
            Cancel { job, .. } | UpdatePriority { job, .. } | Hold { job } | Release { job },
        ) => own_job(job),
        (_, Cancel { .. } | UpdatePriority { .. } | Hold { .. } | Release { .. }) => deny(format!(
            "{who} may not cancel, update, hold or release jobs"
        )),
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
            "{who}: only operator and admin {credential}s may drain and resume nodes"
        )),
        (Role::Agent, RegisterNode(inv)) if inv.name.as_str() == who.name => Ok(()),
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
        (_, RegisterNode(_) | JobProgress { .. }) => deny(format!(
            "{who}: only the agent certificate of that node may speak for it"
        )),
        (Role::Admin, TagResource { .. } | UntagResource { .. }) => Ok(()),
        (_, TagResource { .. } | UntagResource { .. }) => deny(format!(
            "{who}: only an admin may tag environments, policies, queues and shares"
        )),
        (Role::Admin, IssueAccessKey { .. } | RevokeAccessKey { .. }) => Ok(()),
        (Role::User | Role::Operator, IssueAccessKey { user, role }) => {
            if user.as_str() != who.name {
                deny(format!(
                    "{who} may issue access keys only for itself, not for `{user}` (an admin \
                     may for anyone)"
                ))
            } else if !key_roles(who).contains(role) {
                deny(format!(
                    "{who} may not issue a key with role {role}: {} may have only {}",
                    who.role,
                    key_roles(who)
                        .iter()
                        .map(|r| r.as_str())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ))
            } else {
                Ok(())
            }
        }
        (Role::User | Role::Operator, RevokeAccessKey { id }) => match state.keys.get(id) {
            None => Err(ApiError::NotFound(format!(
                "access key {id} does not exist"
            ))),
            Some(k) if owns_key(who, k) => Ok(()),
            Some(k) => deny(format!(
                "{who} may revoke only its own access keys; {id} acts as {} {}",
                k.role, k.user
            )),
        },
        (_, IssueAccessKey { .. } | RevokeAccessKey { .. }) => deny(format!(
            "{who}: only users, operators and admins have access keys"
        )),
    }
}

#[cfg(test)]
mod tests {
    //! The service layer with no transport and no Raft: a stand-in node task that
    //! records what reaches it and accepts it.

    use std::sync::{Mutex, RwLock};
    use tranche_model::JobId;

    use tranche_model::NodeName;
    use tranche_proto::MembershipChange;
    use tranche_state::{Command, Outcome};

    use super::*;
    use crate::mailbox::Shared;
    use crate::testing::{demo_state as state, spec};

    struct Rig {
        service: Service,
        /// The commands that reached the node task.
        written: Arc<Mutex<Vec<Command>>>,
        beats: Arc<Beats>,
        isolated: Arc<Mutex<Vec<u64>>>,
    }

    struct Switch(Arc<Mutex<Vec<u64>>>);
    impl Isolation for Switch {
        fn set_blocked(&self, ids: &[u64]) {
            *self.0.lock().unwrap() = ids.to_vec();
        }
    }

    fn rig(fault_injection: bool) -> Rig {
        let (tx, mut rx) = mpsc::channel::<NodeMsg>(16);
        let written = Arc::new(Mutex::new(Vec::new()));
        let w = written.clone();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                match m {
                    NodeMsg::Write { cmd, reply, .. } => {
                        w.lock().unwrap().push(cmd);
                        let _ = reply.send(Ok(Ok(Outcome::Done)));
                    }
                    NodeMsg::ReadBarrier { reply } | NodeMsg::Membership { reply, .. } => {
                        let _ = reply.send(Ok(()));
                    }
                    _ => {}
                }
            }
        });
        let mut shared = Shared::new(1);
        shared.state = state();
        let beats = Arc::new(Beats::default());
        let isolated = Arc::new(Mutex::new(Vec::new()));
        let isolation =
            fault_injection.then(|| Arc::new(Switch(isolated.clone())) as Arc<dyn Isolation>);
        Rig {
            service: Service::new(
                tx,
                Arc::new(WorkWatch::default()),
                Arc::new(RwLock::new(shared)),
                beats.clone(),
                isolation,
            ),
            written,
            beats,
            isolated,
        }
    }

    fn who(role: Role, name: &str) -> Identity {
        Identity {
            role,
            name: name.into(),
        }
    }

    fn write(c: ClientCommand) -> ClientRequest {
        ClientRequest::Write {
            request: None,
            command: c,
        }
    }

    async fn expect_denied(r: &Rig, id: &Identity, c: ClientCommand, text: &str) {
        let before = r.written.lock().unwrap().len();
        match r.service.handle(id, write(c.clone())).await {
            Response::Error(ApiError::Unauthorized(m)) => assert!(m.contains(text), "{m}"),
            other => panic!("{id} {c:?}: {other:?}"),
        }
        assert_eq!(
            r.written.lock().unwrap().len(),
            before,
            "a denied write went on"
        );
    }

    async fn expect_written(r: &Rig, id: &Identity, c: ClientCommand) {
        match r.service.handle(id, write(c.clone())).await {
            Response::Applied(tranche_proto::Outcome::Done) => {}
            other => panic!("{id} {c:?}: {other:?}"),
        }
        assert_eq!(
            r.written.lock().unwrap().last(),
            Some(&wire::command(c)),
            "the write reached the node as its replicated command"
        );
    }

    /// The write is refused as invalid, naming `field` and with `text` in its rule,
    /// and nothing reaches the node task.
    async fn expect_invalid(
        r: &Rig,
        id: &Identity,
        origin: Origin,
        c: ClientCommand,
        field: &str,
        text: &str,
    ) {
        let before = r.written.lock().unwrap().len();
        match r.service.handle_from(id, origin, write(c.clone())).await {
            Response::Error(ApiError::Rejected(Refusal::Invalid(v))) => {
                assert_eq!(v.field, field, "{v}");
                assert!(v.rule.contains(text), "{v}");
            }
            other => panic!("{id} {c:?}: {other:?}"),
        }
        assert_eq!(
            r.written.lock().unwrap().len(),
            before,
            "a refused write went on"
        );
    }

    #[tokio::test]
    async fn h3_another_users_job_is_read_as_its_summary_by_every_query() {
        let r = rig(false);
        {
            let mut sh = r.service.shared.write().unwrap();
            let j = sh.state.jobs.get_mut(&JobId(1)).unwrap();
            std::sync::Arc::make_mut(&mut j.spec)
                .env
                .insert("HF_TOKEN".into(), "secret".into());
            std::sync::Arc::make_mut(&mut j.spec).cwd = Some("/home/alice".into());
        }
        let read = |q: Query| ClientRequest::Read {
            query: q,
            stale: false,
        };
        let seen = |resp: Response| match resp {
            Response::Job(j) => *j,
            other => panic!("{other:?}"),
        };
        for id in [
            who(Role::User, "alice"),
            who(Role::Operator, "ops"),
            who(Role::Admin, "root"),
            who(Role::Agent, "n1"),
        ] {
            let j = seen(
                r.service
                    .handle(&id, read(Query::Job(JobId(1).into())))
                    .await,
            );
            assert_eq!(j.spec.env["HF_TOKEN"], "secret", "{id}");
            assert!(!j.spec.is_redacted(), "{id}");
        }
        let bob = who(Role::User, "bob");
        let j = seen(
            r.service
                .handle(&bob, read(Query::Job(JobId(1).into())))
                .await,
        );
        assert!(j.spec.is_redacted());
        assert!(j.spec.env.is_empty() && j.spec.command.is_empty() && j.spec.cwd.is_none());
        assert_eq!(
            (j.id, j.spec.user.as_str(), j.status),
            (JobId(1), "alice", j.status)
        );
        // The output is for those who see everything of the job.
        let job = r
            .service
            .shared
            .read()
            .unwrap()
            .state
            .job(JobId(1))
            .unwrap()
            .clone();
        assert!(may_read_output(&who(Role::User, "alice"), &job).is_ok());
        assert!(may_read_output(&who(Role::Operator, "ops"), &job).is_ok());
        assert!(
            matches!(may_read_output(&bob, &job), Err(ApiError::Unauthorized(m)) if m.contains("belongs to alice"))
        );
        assert!(may_read_output(&who(Role::Agent, "n1"), &job).is_err());
    }

    #[tokio::test]
    async fn l12_reads_do_bounded_work_under_the_state_lock() {
        let r = rig(false);
        let read = |q: Query| ClientRequest::Read {
            query: q,
            stale: false,
        };
        // The digest serializes the whole state: operators and admins only.
        let alice = who(Role::User, "alice");
        assert!(matches!(
            r.service.handle(&alice, read(Query::Digest)).await,
            Response::Error(ApiError::Unauthorized(m)) if m.contains("operators and admins")
        ));
        assert!(matches!(
            r.service
                .handle(&who(Role::Operator, "ops"), read(Query::Digest))
                .await,
            Response::Digest(_)
        ));
        // A page starts at its cursor and stops at its limit.
        for n in 0..5 {
            let mut sh = r.service.shared.write().unwrap();
            sh.state
                .apply(&Command::Submit(spec("alice", "lend")), 10 + n)
                .unwrap();
        }
        let page = |after: u64, limit: u32| {
            let f = JobFilter {
                limit: Some(limit),
                ..Default::default()
            };
            let sh = r.service.shared.read().unwrap();
            views::jobs(&sh.state, &f, JobId(after), 20, None)
                .iter()
                .map(|j| j.id.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(page(0, 2), [1, 2]);
        assert_eq!(page(2, 2), [3, 4]);
        assert_eq!(page(5, 10), [6]);
        // Standings are estimated once per applied index and second.
        let sh = r.service.shared.read().unwrap();
        let a = r.service.standings(&sh, 5_000);
        let b = r.service.standings(&sh, 5_999);
        let c = r.service.standings(&sh, 6_000);
        assert!(Arc::ptr_eq(&a, &b) && !Arc::ptr_eq(&a, &c));
    }

    /// A submit that depends on jobs that have left the state is settled from the
    /// history store: a met condition is dropped, one never met refuses the submit.
    #[tokio::test]
    async fn dependencies_on_archived_jobs_are_settled_from_history() {
        let r = rig(false);
        let alice = who(Role::User, "alice");
        let dir = tempfile::tempdir().unwrap();
        let history = crate::history::History::open(&dir.path().join("h.redb"), false).unwrap();
        let ended = |id: u64, status: tranche_model::JobStatus| {
            let mut j = r.service.shared.read().unwrap().state.jobs[&JobId(1)].clone();
            j.id = JobId(id);
            j.status = status;
            j
        };
        let (ok, failed) = (
            ended(900, tranche_model::JobStatus::Succeeded),
            ended(901, tranche_model::JobStatus::Failed),
        );
        history.append([(5, &ok), (6, &failed)]).unwrap();
        r.service.shared.write().unwrap().history = Some(Arc::new(history));
        let with_dep = |text: &str| {
            let mut s = spec("alice", "lend");
            s.dependency = tranche_model::Dependency::parse(text).unwrap();
            s
        };
        // afterok on a SUCCEEDED job: met, so dropped; the submit goes on without it.
        match r
            .service
            .handle(
                &alice,
                write(ClientCommand::Submit(with_dep("afterok:900"))),
            )
            .await
        {
            Response::Applied(_) => {}
            other => panic!("{other:?}"),
        }
        match r.written.lock().unwrap().last() {
            Some(Command::Submit(s)) => assert!(s.dependency.is_empty(), "{:?}", s.dependency),
            other => panic!("{other:?}"),
        }
        // afterok on a FAILED job can never be met: refused, naming it, nothing written.
        let before = r.written.lock().unwrap().len();
        match r
            .service
            .handle(
                &alice,
                write(ClientCommand::Submit(with_dep("afterok:901"))),
            )
            .await
        {
            Response::Error(e) => assert!(
                e.to_string().contains("job 901 ended FAILED") && e.to_string().contains("afterok"),
                "{e}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.written.lock().unwrap().len(), before);
    }

    #[tokio::test]
    async fn h2_a_submit_over_a_job_limit_is_refused_before_it_is_proposed() {
        let r = rig(false);
        let alice = who(Role::User, "alice");
        // Alice's running job 1 fills her place in `lend`.
        r.service
            .shared
            .write()
            .unwrap()
            .state
            .shares
            .get_mut(&tranche_model::ShareName::from("lend"))
            .unwrap()
            .limits
            .max_jobs_per_user = 1;
        let before = r.written.lock().unwrap().len();
        match r
            .service
            .handle(&alice, write(ClientCommand::Submit(spec("alice", "lend"))))
            .await
        {
            Response::Error(ApiError::Rejected(e)) => {
                let text = e.to_string();
                assert!(text.contains("max_jobs_per_user"), "{text}");
            }
            other => panic!("accepted: {other:?}"),
        }
        assert_eq!(
            r.written.lock().unwrap().len(),
            before,
            "a refused submit reached the node task"
        );
        // Bob has room in the same share.
        expect_written(
            &r,
            &who(Role::User, "bob"),
            ClientCommand::Submit(spec("bob", "lend")),
        )
        .await;
    }

    #[tokio::test]
    async fn m2_sagemaker_only_from_the_aws_endpoint_and_reasons_capped_for_every_origin() {
        let r = rig(false);
        let alice = who(Role::User, "alice");
        let mut sm = spec("alice", "lend");
        sm.sagemaker = Some(Box::new(tranche_model::SageMakerJob {
            training_job_name: "t".into(),
            hyperparameters: Default::default(),
            channels: [("x".to_string(), "/".to_string())].into(),
            payload: "{}".into(),
            instance_type: "ml.p5.48xlarge".into(),
        }));
        let submit = ClientCommand::Submit(sm);
        expect_invalid(
            &r,
            &alice,
            Origin::Client,
            submit.clone(),
            "sagemaker",
            "AWS Batch-compatible endpoint",
        )
        .await;
        match r
            .service
            .handle_from(&alice, Origin::AwsEndpoint, write(submit))
            .await
        {
            Response::Applied(_) => {}
            other => panic!("{other:?}"),
        }
        let cancel = |n: usize| ClientCommand::Cancel {
            job: JobId(1).into(),
            reason: "x".repeat(n),
        };
        for origin in [Origin::Client, Origin::AwsEndpoint] {
            expect_invalid(
                &r,
                &alice,
                origin,
                cancel(tranche_model::MAX_REASON_BYTES + 1),
                "reason",
                "at most 1024 bytes, got 1025",
            )
            .await;
        }
        expect_written(&r, &alice, cancel(tranche_model::MAX_REASON_BYTES)).await;
        let drain = ClientCommand::DrainNode {
            node: "n1".into(),
            reason: "r".repeat(2000),
            now: false,
        };
        expect_invalid(
            &r,
            &who(Role::Operator, "ops"),
            Origin::Client,
            drain,
            "reason",
            "got 2000",
        )
        .await;
    }

    #[tokio::test]
    async fn m9_labels_pinned_in_the_config_replace_what_the_agent_declares() {
        let mut r = rig(false);
        let pinned: Labels = [("pool".to_string(), "batch".to_string())].into();
        r.service = r
            .service
            .with_pinned_labels([("n1".to_string(), pinned.clone())].into(), true);
        let n1 = who(Role::Agent, "n1");
        let mut inv = r.service.shared.read().unwrap().state.nodes[&NodeName::from("n1")]
            .inventory
            .clone();
        r.service
            .shared
            .write()
            .unwrap()
            .state
            .nodes
            .get_mut(&NodeName::from("n1"))
            .unwrap()
            .inventory
            .labels = pinned.clone();
        inv.labels.insert("pool".into(), "prod".into());
        inv.labels
            .insert("tranche.logs".into(), "127.0.0.1:1".into());
        match r
            .service
            .handle(&n1, write(ClientCommand::RegisterNode(inv)))
            .await
        {
            Response::Applied(_) => {}
            other => panic!("{other:?}"),
        }
        let last = r.written.lock().unwrap().last().cloned();
        match last {
            Some(Command::RegisterNode(i)) => {
                assert_eq!(i.labels["pool"], "batch");
                assert_eq!(i.labels["tranche.logs"], "127.0.0.1:1");
                assert_eq!(i.labels.len(), 2);
            }
            other => panic!("{other:?}"),
        }
        // With `labels_from_config_only`, a node the config does not name gets none
        // of the labels its agent declares, but its own `tranche.` ones.
        let n9 = who(Role::Agent, "n9");
        let mut other = inv_named("n9");
        other.labels.insert("pool".into(), "prod".into());
        other
            .labels
            .insert("tranche.logs".into(), "127.0.0.1:2".into());
        match r
            .service
            .handle(&n9, write(ClientCommand::RegisterNode(other)))
            .await
        {
            Response::Applied(_) => {}
            other => panic!("{other:?}"),
        }
        let last = r.written.lock().unwrap().last().cloned();
        match last {
            Some(Command::RegisterNode(i)) => assert_eq!(
                i.labels,
                [("tranche.logs".to_string(), "127.0.0.1:2".to_string())].into()
            ),
            other => panic!("{other:?}"),
        }
    }

    fn inv_named(name: &str) -> tranche_model::NodeInventory {
        tranche_model::NodeInventory {
            name: name.into(),
            address: "127.0.0.1".into(),
            labels: Default::default(),
            gpus: vec![],
            cpus: 1,
            memory_mb: 1,
        }
    }

    #[tokio::test]
    async fn m9_a_node_that_holds_jobs_keeps_its_labels_and_gpus() {
        let r = rig(false);
        let n1 = who(Role::Agent, "n1");
        let inv = r.service.shared.read().unwrap().state.nodes[&NodeName::from("n1")]
            .inventory
            .clone();
        // The same inventory again (an agent restart), or a GPU lost or unhealthy: taken.
        expect_written(&r, &n1, ClientCommand::RegisterNode(inv.clone())).await;
        let mut sick = inv.clone();
        sick.gpus[0].healthy = false;
        expect_written(&r, &n1, ClientCommand::RegisterNode(sick)).await;
        let mut lost = inv.clone();
        lost.gpus.clear();
        expect_written(&r, &n1, ClientCommand::RegisterNode(lost)).await;
        // New labels or new GPUs while job 1 runs there: the registration is taken
        // without them (the agent goes on heartbeating its running job).
        let taken = |c: ClientCommand| {
            let r = &r;
            let n1 = &n1;
            async move {
                match r.service.handle(n1, write(c)).await {
                    Response::Applied(_) => {}
                    other => panic!("{other:?}"),
                }
                match r.written.lock().unwrap().last().cloned() {
                    Some(Command::RegisterNode(i)) => i,
                    other => panic!("{other:?}"),
                }
            }
        };
        let mut relabel = inv.clone();
        relabel.labels.insert("env".into(), "prod".into());
        relabel
            .labels
            .insert("tranche.logs".into(), "127.0.0.1:2".into());
        let got = taken(ClientCommand::RegisterNode(relabel)).await;
        assert_eq!(got.labels.get("env"), None, "{got:?}");
        assert_eq!(
            got.labels["tranche.logs"], "127.0.0.1:2",
            "its own labels are taken"
        );
        let mut more = inv.clone();
        more.gpus.push(tranche_model::Gpu {
            index: tranche_model::GpuIndex(1),
            uuid: "GPU-1".into(),
            ..inv.gpus[0].clone()
        });
        assert_eq!(
            taken(ClientCommand::RegisterNode(more)).await.gpus,
            inv.gpus
        );
        // A node that holds nothing may change what it declares (and it is logged).
        let mut idle = inv.clone();
        idle.name = "n2".into();
        r.service
            .shared
            .write()
            .unwrap()
            .state
            .apply(&Command::RegisterNode(idle.clone()), 5)
            .unwrap();
        idle.labels.insert("env".into(), "prod".into());
        expect_written(
            &r,
            &who(Role::Agent, "n2"),
            ClientCommand::RegisterNode(idle),
        )
        .await;
    }

    fn share_cmd() -> ClientCommand {
        ClientCommand::DeleteShare("lend".into())
    }

    #[tokio::test]
    async fn a_submit_without_queue_or_unit_gets_its_shares() {
        let r = rig(false);
        let alice = who(Role::User, "alice");
        let mut bare = spec("alice", "private");
        bare.queue = "".into();
        bare.request.unit = "".into();
        match r
            .service
            .handle(&alice, write(ClientCommand::Submit(bare.clone())))
            .await
        {
            Response::Applied(tranche_proto::Outcome::Done) => {}
            other => panic!("{other:?}"),
        }
        let filled = spec("alice", "private");
        assert_eq!(
            r.written.lock().unwrap().last(),
            Some(&Command::Submit(filled)),
            "the share's queue and first unit filled in"
        );
        // An unknown share: nothing to fill in, the submit goes on as it was (and the
        // state machine refuses it, naming the fields).
        let mut unknown = bare.clone();
        unknown.share = "nosuch".into();
        r.service
            .handle(
                &who(Role::Admin, "root"),
                write(ClientCommand::Submit(unknown.clone())),
            )
            .await;
        assert_eq!(
            r.written.lock().unwrap().last(),
            Some(&Command::Submit(unknown))
        );
    }

    #[tokio::test]
    async fn admins_manage_objects_and_others_may_not() {
        let r = rig(false);
        expect_written(&r, &who(Role::Admin, "root"), share_cmd()).await;
        for role in [Role::Operator, Role::User, Role::Agent, Role::Controller] {
            expect_denied(&r, &who(role, "x"), share_cmd(), "only an admin").await;
        }
    }

    #[tokio::test]
    async fn users_submit_as_themselves_into_their_shares_and_touch_only_their_jobs() {
        let r = rig(false);
        let alice = who(Role::User, "alice");
        let bob = who(Role::User, "bob");
        expect_written(&r, &alice, ClientCommand::Submit(spec("alice", "private"))).await;
        expect_denied(
            &r,
            &alice,
            ClientCommand::Submit(spec("bob", "lend")),
            "only as itself",
        )
        .await;
        expect_denied(
            &r,
            &bob,
            ClientCommand::Submit(spec("bob", "private")),
            "not a member",
        )
        .await;
        let cancel = ClientCommand::Cancel {
            job: JobId(1).into(),
            reason: "x".into(),
        };
        expect_written(&r, &alice, cancel.clone()).await;
        expect_denied(&r, &bob, cancel.clone(), "only its own jobs").await;
        expect_written(&r, &who(Role::Operator, "ops"), cancel.clone()).await;
        expect_denied(&r, &who(Role::Agent, "n1"), cancel, "may not cancel").await;
        expect_denied(
            &r,
            &who(Role::Operator, "ops"),
            ClientCommand::Submit(spec("ops", "lend")),
            "only user and admin",
        )
        .await;
        // A job that does not exist is named.
        match r
            .service
            .handle(
                &alice,
                write(ClientCommand::UpdatePriority {
                    job: JobId(99).into(),
                    priority: 1,
                }),
            )
            .await
        {
            Response::Error(ApiError::NotFound(m)) => assert!(m.contains("job 99"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn operators_drain_and_agents_speak_only_for_their_node() {
        let r = rig(false);
        let drain = |node: &str, now| ClientCommand::DrainNode {
            node: node.into(),
            reason: "repair".into(),
            now,
        };
        expect_written(&r, &who(Role::Operator, "ops"), drain("n1", true)).await;
        expect_denied(
            &r,
            &who(Role::User, "alice"),
            drain("n1", false),
            "only operator",
        )
        .await;
        let n1 = who(Role::Agent, "n1");
        let n2 = who(Role::Agent, "n2");
        expect_written(&r, &n1, drain("n1", false)).await;
        expect_denied(&r, &n1, drain("n1", true), "only operator").await;
        expect_denied(&r, &n2, drain("n1", false), "only operator").await;
        let progress = ClientCommand::JobProgress {
            job: JobId(1).into(),
            attempt: 1,
            event: tranche_state::Progress::Running,
        };
        expect_written(&r, &n1, progress.clone()).await;
        expect_denied(&r, &n2, progress, "its own node").await;
        let inv = |n: &str| {
            let mut i = r.service.shared.read().unwrap().state.nodes[&NodeName::from("n1")]
                .inventory
                .clone();
            i.name = n.into();
            ClientCommand::RegisterNode(i)
        };
        expect_written(&r, &n1, inv("n1")).await;
        expect_denied(&r, &n1, inv("n2"), "only the agent certificate").await;
        expect_denied(&r, &who(Role::Admin, "root"), inv("n1"), "only the agent").await;
    }

    #[tokio::test]
    async fn heartbeats_are_answered_by_the_leader_from_memory_and_never_written() {
        let r = rig(false);
        let n1 = who(Role::Agent, "n1");
        let beat = |n: &str| ClientRequest::Heartbeat { node: n.into() };
        // Not leading: the agent is sent to the leader.
        assert!(matches!(
            r.service.handle(&n1, beat("n1")).await,
            Response::Error(ApiError::NotLeader { .. })
        ));
        r.beats.lead();
        assert_eq!(
            r.service.handle(&n1, beat("n1")).await,
            Response::Heartbeat { registered: true }
        );
        let n9 = who(Role::Agent, "n9");
        assert_eq!(
            r.service.handle(&n9, beat("n9")).await,
            Response::Heartbeat { registered: false },
            "an unknown node is told to register"
        );
        assert!(r.beats.view().1.contains_key(&NodeName::from("n1")));
        for (id, node) in [(&n1, "n9"), (&who(Role::Admin, "root"), "n1")] {
            match r.service.handle(id, beat(node)).await {
                Response::Error(ApiError::Unauthorized(m)) => {
                    assert!(m.contains("may heartbeat for it"), "{m}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(
            r.written.lock().unwrap().is_empty(),
            "a heartbeat was written"
        );
    }

    #[tokio::test]
    async fn reads_follow_the_role() {
        let r = rig(false);
        let read = |q: Query| ClientRequest::Read {
            query: q,
            stale: false,
        };
        for role in [Role::Admin, Role::Operator, Role::User] {
            assert!(matches!(
                r.service.handle(&who(role, "alice"), read(Query::Shares)).await,
                Response::Shares(ref s) if s.len() == 2
            ));
        }
        let n1 = who(Role::Agent, "n1");
        let n2 = who(Role::Agent, "n2");
        assert!(matches!(
            r.service
                .handle(&n1, read(Query::Job(JobId(1).into())))
                .await,
            Response::Job(_)
        ));
        for (id, q) in [
            (&n2, Query::Job(JobId(1).into())),
            (&n1, Query::Shares),
            (&n1, Query::Jobs(Default::default())),
        ] {
            assert!(
                matches!(
                    r.service.handle(id, read(q.clone())).await,
                    Response::Error(ApiError::Unauthorized(_))
                ),
                "{id} {q:?}"
            );
        }
        let work = |n: &str| Query::NodeWork {
            node: n.into(),
            after: None,
            wait_ms: 0,
        };
        match r.service.handle(&n1, read(work("n1"))).await {
            Response::NodeWork(w) => assert_eq!(w.items.len(), 1),
            other => panic!("{other:?}"),
        }
        for id in [&n2, &who(Role::User, "alice")] {
            assert!(matches!(
                r.service.handle(id, read(work("n1"))).await,
                Response::Error(ApiError::Unauthorized(_))
            ));
        }
        assert!(matches!(
            r.service
                .handle(&who(Role::Operator, "ops"), read(work("n1")))
                .await,
            Response::NodeWork(_)
        ));
    }

    #[tokio::test]
    async fn membership_and_the_fault_switch_are_for_admins_where_enabled() {
        let r = rig(true);
        let change = ClientRequest::Membership(MembershipChange::Remove { id: 3 });
        assert_eq!(
            r.service
                .handle(&who(Role::Admin, "root"), change.clone())
                .await,
            Response::Done
        );
        assert!(matches!(
            r.service.handle(&who(Role::Operator, "ops"), change).await,
            Response::Error(ApiError::Unauthorized(_))
        ));
        let iso = ClientRequest::Isolate { from: vec![2] };
        assert!(matches!(
            r.service
                .handle(&who(Role::User, "alice"), iso.clone())
                .await,
            Response::Error(ApiError::Unauthorized(_))
        ));
        assert_eq!(
            r.service
                .handle(&who(Role::Admin, "root"), iso.clone())
                .await,
            Response::Done
        );
        assert_eq!(*r.isolated.lock().unwrap(), vec![2]);
        let off = rig(false);
        match off.service.handle(&who(Role::Admin, "root"), iso).await {
            Response::Error(ApiError::Unauthorized(m)) => assert!(m.contains("fault_injection")),
            other => panic!("{other:?}"),
        }
    }

    fn key_rig() -> Rig {
        let mut r = rig(false);
        r.service = r
            .service
            .with_key_secret(Some(KeySecret::from_bytes(vec![9; 32]).unwrap()));
        r
    }

    fn put_key(r: &Rig, id: &str, user: &str, role: KeyRole, at: u64) {
        let k = AccessKey {
            id: id.into(),
            user: user.into(),
            role,
            created_at: 0,
            revoked_at: None,
            issuer_serial: None,
            expires_at: None,
        };
        let mut sh = r.service.shared.write().unwrap();
        sh.state.apply(&Command::PutAccessKey(k), at).unwrap();
    }

    async fn issue(r: &Rig, id: &Identity, user: &str, role: KeyRole) -> Response {
        let c = ClientCommand::IssueAccessKey {
            user: user.into(),
            role,
        };
        r.service.handle(id, write(c)).await
    }

    #[tokio::test]
    async fn access_keys_are_issued_with_a_new_id_and_the_derived_secret() {
        let r = key_rig();
        let root = who(Role::Admin, "root");
        let Response::AccessKey { key, secret } = issue(&r, &root, "bob", KeyRole::Operator).await
        else {
            panic!("no key")
        };
        assert!(key.id.starts_with("TK") && key.id.len() == 20, "{}", key.id);
        assert_eq!((key.user.as_str(), key.role), ("bob", KeyRole::Operator));
        assert!(key.created_at > 0);
        assert_eq!(
            secret,
            tranche_tls::keys::derive_secret(&[9; 32], &key.id),
            "the secret is derived from the key secret and the id"
        );
        match r.written.lock().unwrap().last() {
            Some(Command::PutAccessKey(k)) => {
                assert_eq!((&k.id, &k.user, k.role), (&key.id, &key.user, key.role))
            }
            other => panic!("{other:?}"),
        }
        let Response::AccessKey { key: again, .. } =
            issue(&r, &root, "bob", KeyRole::Operator).await
        else {
            panic!("no key")
        };
        assert_ne!(again.id, key.id);
        // The id the service picks never comes from `wire::command`, whose stand-in the
        // state machine refuses.
        let stand_in = wire::command(ClientCommand::IssueAccessKey {
            user: "bob".into(),
            role: KeyRole::User,
        });
        assert!(State::new().apply(&stand_in, 1).is_err());
    }

    #[tokio::test]
    async fn who_may_issue_which_keys() {
        let r = key_rig();
        let alice = who(Role::User, "alice");
        let ops = who(Role::Operator, "ops");
        assert!(matches!(
            issue(&r, &alice, "alice", KeyRole::User).await,
            Response::AccessKey { .. }
        ));
        assert!(matches!(
            issue(&r, &ops, "ops", KeyRole::Operator).await,
            Response::AccessKey { .. }
        ));
        assert!(matches!(
            issue(&r, &ops, "ops", KeyRole::User).await,
            Response::AccessKey { .. }
        ));
        let issue_cmd = |user: &str, role| ClientCommand::IssueAccessKey {
            user: user.into(),
            role,
        };
        expect_denied(
            &r,
            &alice,
            issue_cmd("bob", KeyRole::User),
            "only for itself",
        )
        .await;
        expect_denied(
            &r,
            &alice,
            issue_cmd("alice", KeyRole::Operator),
            "role operator",
        )
        .await;
        expect_denied(&r, &ops, issue_cmd("ops", KeyRole::Admin), "role admin").await;
        expect_denied(
            &r,
            &ops,
            issue_cmd("alice", KeyRole::User),
            "only for itself",
        )
        .await;
        for role in [Role::Agent, Role::Controller] {
            expect_denied(
                &r,
                &who(role, "n1"),
                issue_cmd("n1", KeyRole::User),
                "have access keys",
            )
            .await;
        }
        // Without a key secret file nothing is issued, and the answer says why.
        let plain = rig(false);
        let before = plain.written.lock().unwrap().len();
        match issue(&plain, &who(Role::Admin, "root"), "bob", KeyRole::User).await {
            Response::Error(ApiError::BadRequest(m)) => assert_eq!(m, NO_KEY_SECRET),
            other => panic!("{other:?}"),
        }
        assert_eq!(plain.written.lock().unwrap().len(), before);
        assert!(plain.service.active_access_key("TKX").is_none());
    }

    #[tokio::test]
    async fn keys_are_revoked_by_admins_and_owners_and_listed_per_caller() {
        let r = key_rig();
        put_key(&r, "TKALICE", "alice", KeyRole::User, 10);
        put_key(&r, "TKBOB", "bob", KeyRole::User, 20);
        put_key(&r, "TKOPS", "ops", KeyRole::Operator, 30);
        let alice = who(Role::User, "alice");
        let revoke = |id: &str| ClientCommand::RevokeAccessKey { id: id.into() };
        expect_written(&r, &alice, revoke("TKALICE")).await;
        expect_denied(&r, &alice, revoke("TKBOB"), "only its own").await;
        // A user named like an operator does not own the operator's key.
        expect_denied(&r, &who(Role::User, "ops"), revoke("TKOPS"), "only its own").await;
        expect_written(&r, &who(Role::Operator, "ops"), revoke("TKOPS")).await;
        expect_written(&r, &who(Role::Admin, "root"), revoke("TKBOB")).await;
        match r.service.handle(&alice, write(revoke("TKNONE"))).await {
            Response::Error(ApiError::NotFound(m)) => assert!(m.contains("TKNONE"), "{m}"),
            other => panic!("{other:?}"),
        }
        let list = |user: Option<&str>| ClientRequest::Read {
            query: Query::AccessKeys {
                user: user.map(Into::into),
            },
            stale: false,
        };
        let ids = |resp: Response| match resp {
            Response::AccessKeys(k) => k.into_iter().map(|k| k.id).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        let root = who(Role::Admin, "root");
        assert_eq!(
            ids(r.service.handle(&root, list(None)).await),
            ["TKALICE", "TKBOB", "TKOPS"]
        );
        assert_eq!(
            ids(r.service.handle(&root, list(Some("bob"))).await),
            ["TKBOB"]
        );
        assert_eq!(ids(r.service.handle(&alice, list(None)).await), ["TKALICE"]);
        assert_eq!(
            ids(r.service.handle(&alice, list(Some("alice"))).await),
            ["TKALICE"]
        );
        assert!(matches!(
            r.service.handle(&alice, list(Some("bob"))).await,
            Response::Error(ApiError::Unauthorized(_))
        ));
        assert!(matches!(
            r.service.handle(&who(Role::Agent, "n1"), list(None)).await,
            Response::Error(ApiError::Unauthorized(_))
        ));
        // Only keys that are not revoked sign, with their derived secret.
        let (k, secret) = r.service.active_access_key("TKALICE").unwrap();
        assert_eq!((k.user.as_str(), secret.len()), ("alice", 40));
        r.service
            .shared
            .write()
            .unwrap()
            .state
            .apply(
                &Command::RevokeAccessKey {
                    id: "TKALICE".into(),
                },
                40,
            )
            .unwrap();
        assert!(r.service.active_access_key("TKALICE").is_none());
        assert!(r.service.active_access_key("TKNONE").is_none());
    }
}
