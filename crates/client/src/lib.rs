//! The Tranche client library: talks to the controllers over QUIC with mutual TLS,
//! follows the leader, and retries requests whose outcome is unknown. A submit carries
//! a client token, so a retry after a failover never makes a second job.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tranche_model::{JobId, JobSpec, NodeName};
use tranche_proto::frame::PREVIOUS_PROTOCOL_VERSION;
use tranche_proto::{
    frame, ApiError, ClientCommand, ClientRequest, FrameError, Outcome, Query, Response,
    MAX_CLIENT_FRAME, MAX_NODE_WORK_WAIT_MS, PROTOCOL_VERSION,
};
use tranche_tls::{TlsFiles, CONTROLLER_SERVER_NAME};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("TLS setup: {0}")]
    Tls(String),
    #[error("cannot connect to controller {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    /// The TLS handshake failed on a certificate: the server refused this client's
    /// (expired, not yet valid, revoked, from another CA), or this client refused the
    /// server's. Sending again does not help.
    #[error("TLS handshake with {addr} failed: {reason}")]
    Refused { addr: SocketAddr, reason: String },
    #[error("controller {addr} closed the connection: {reason}")]
    Closed { addr: SocketAddr, reason: String },
    #[error("frame: {0}")]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Api(ApiError),
    #[error("no controller answered within {0:?}; last error: {1}")]
    Timeout(Duration, String),
    #[error("unexpected response: {0}")]
    Unexpected(String),
    /// The controller runs an older release, whose protocol this client no longer
    /// speaks.
    #[error(
        "controller {addr} speaks protocol version {PREVIOUS_PROTOCOL_VERSION}, older than \
         this client's {PROTOCOL_VERSION}: upgrade the controllers, or use a client of their \
         release (the controller said: {said})"
    )]
    OlderController { addr: SocketAddr, said: String },
}

impl ClientError {
    /// Worth sending again, to this or another controller.
    pub fn retryable(&self) -> bool {
        match self {
            ClientError::Connect { .. } | ClientError::Closed { .. } => true,
            // Another controller may have a good certificate; `request` stops once every
            // controller has refused.
            ClientError::Refused { .. } => true,
            ClientError::Frame(FrameError::Io(_) | FrameError::Truncated) => true,
            ClientError::Api(e) => e.retryable(),
            _ => false,
        }
    }
}

/// A client of one cluster.
pub struct Client {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    controllers: Vec<SocketAddr>,
    /// The controller in use and its connection.
    current: Mutex<(usize, Option<quinn::Connection>)>,
    /// How long `request` keeps retrying.
    pub retry_for: Duration,
    /// How long one attempt may wait for its answer before `request` gives up on that
    /// controller (a controller killed mid-request is otherwise noticed only when the
    /// connection's idle timeout ends).
    pub attempt_timeout: Duration,
    /// This client's session: its writes are numbered, so that the controllers apply
    /// each once however often it is retried.
    session: u64,
    seqs: Mutex<Seqs>,
}

/// A session's request numbers: the next one, and those sent and not yet answered.
#[derive(Debug)]
struct Seqs {
    next: u64,
    outstanding: std::collections::BTreeSet<u64>,
}

impl Seqs {
    fn new() -> Seqs {
        Seqs {
            next: 1,
            outstanding: Default::default(),
        }
    }

    /// A new request's number and the lowest number still waiting for its answer
    /// (which the controllers may forget the answers below). Taken in one step: a
    /// request numbered apart from its entry in `outstanding` could tell the
    /// controllers that every number below its own was answered while a lower one was
    /// yet to be sent, and that one would then be refused as a stale copy.
    fn begin(&mut self) -> (u64, u64) {
        let seq = self.next;
        self.next += 1;
        self.outstanding.insert(seq);
        (seq, *self.outstanding.first().expect("just inserted"))
    }

    /// The request was answered, or given up on: it is not sent again.
    fn end(&mut self, seq: u64) {
        self.outstanding.remove(&seq);
    }
}

impl Client {
    /// A client of the controllers at these client-port addresses.
    pub fn new(controllers: Vec<SocketAddr>, tls: &TlsFiles) -> Result<Client, ClientError> {
        let cfg = tranche_tls::client_config(tls).map_err(|e| ClientError::Tls(e.to_string()))?;
        Client::with_config(controllers, cfg)
    }

    /// A client with a ready QUIC client configuration (tests use this to present no
    /// certificate, or a foreign one).
    pub fn with_config(
        controllers: Vec<SocketAddr>,
        cfg: quinn::ClientConfig,
    ) -> Result<Client, ClientError> {
        let endpoint = quinn::Endpoint::client("0.0.0.0:0".parse().unwrap())
            .map_err(|e| ClientError::Tls(format!("cannot open a UDP socket: {e}")))?;
        Client::with_endpoint(endpoint, controllers, cfg)
    }

    /// A client on a QUIC endpoint shared with other clients (one UDP socket for many
    /// identities, as a simulator of many agents needs), with its own configuration.
    pub fn with_endpoint(
        endpoint: quinn::Endpoint,
        controllers: Vec<SocketAddr>,
        cfg: quinn::ClientConfig,
    ) -> Result<Client, ClientError> {
        if controllers.is_empty() {
            return Err(ClientError::Tls("no controller addresses given".into()));
        }
        let start = rand::random::<usize>() % controllers.len();
        Ok(Client {
            endpoint,
            config: cfg,
            controllers,
            current: Mutex::new((start, None)),
            retry_for: Duration::from_secs(15),
            attempt_timeout: Duration::from_secs(5),
            session: rand::random(),
            seqs: Mutex::new(Seqs::new()),
        })
    }

    pub fn controllers(&self) -> &[SocketAddr] {
        &self.controllers
    }

    async fn connection(&self, idx: usize) -> Result<quinn::Connection, ClientError> {
        {
            let cur = self.current.lock().unwrap();
            if cur.0 == idx {
                if let Some(c) = &cur.1 {
                    if c.close_reason().is_none() {
                        return Ok(c.clone());
                    }
                }
            }
        }
        let conn = self
            .handshake(self.controllers[idx], CONTROLLER_SERVER_NAME)
            .await?;
        *self.current.lock().unwrap() = (idx, Some(conn.clone()));
        Ok(conn)
    }

    /// A new QUIC connection to `addr`, verified under `server_name`, within 3 s.
    async fn handshake(
        &self,
        addr: SocketAddr,
        server_name: &str,
    ) -> Result<quinn::Connection, ClientError> {
        let err = |reason: String| ClientError::Connect { addr, reason };
        let connecting = self
            .endpoint
            .connect_with(self.config.clone(), addr, server_name)
            .map_err(|e| err(e.to_string()))?;
        match tokio::time::timeout(Duration::from_secs(3), connecting).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(refused(addr, &e).unwrap_or_else(|| err(e.to_string()))),
            Err(_) => Err(err("handshake timed out".into())),
        }
    }

    /// Sends one request to controller `idx` and waits for its response (at most
    /// `attempt_timeout`); no retry.
    pub async fn request_to(
        &self,
        idx: usize,
        req: &ClientRequest,
    ) -> Result<Response, ClientError> {
        let bytes = frame::encode(req);
        // A long poll is given its wait on top.
        let limit = self.attempt_timeout
            + match req {
                ClientRequest::Read {
                    query:
                        Query::NodeWork {
                            after: Some(_),
                            wait_ms,
                            ..
                        },
                    ..
                } => Duration::from_millis((*wait_ms).min(MAX_NODE_WORK_WAIT_MS) as u64),
                _ => Duration::ZERO,
            };
        match tokio::time::timeout(limit, self.raw_to(idx, &bytes)).await {
            Ok(r) => r,
            Err(_) => {
                // Forget the connection: the controller may be gone.
                let mut cur = self.current.lock().unwrap();
                if cur.0 == idx {
                    cur.1 = None;
                }
                Err(ClientError::Closed {
                    addr: self.controllers[idx],
                    reason: format!("no answer within {} ms", limit.as_millis()),
                })
            }
        }
    }

    /// Opens the connection to the controller tried first, if it has none: the
    /// handshake alone, for a caller that times it. Requests open it when needed.
    pub async fn connect(&self) -> Result<(), ClientError> {
        let idx = self.current.lock().unwrap().0;
        self.connection(idx).await.map(drop)
    }

    /// The position in [`controllers`](Self::controllers) of the leader, as the
    /// controller in use sees it (a stale read, answered without a Raft round; one
    /// attempt, no retry); `None` when it knows no leader or the leader's client
    /// address is not in the list.
    pub async fn leader(&self) -> Result<Option<usize>, ClientError> {
        let req = ClientRequest::Read {
            query: Query::Controllers,
            stale: true,
        };
        let status = match self.request_to(self.current(), &req).await? {
            Response::Controllers(s) => s,
            other => return Err(ClientError::Unexpected(format!("{other:?}"))),
        };
        let Some(leader) = status.leader else {
            return Ok(None);
        };
        Ok(status
            .members
            .iter()
            .find(|m| m.member.id == leader)
            .and_then(|m| {
                self.controllers
                    .iter()
                    .position(|a| a.to_string() == m.member.client_addr)
            }))
    }

    /// Closes the connection in use, telling its controller at once, for a process
    /// about to exit: a connection left open would be kept, and sent keep-alives, by
    /// its controller until the idle timeout.
    pub async fn close(&self) {
        let conn = self.current.lock().unwrap().1.take();
        if let Some(c) = conn {
            c.close(0u32.into(), b"done");
            // The close goes out when the connection's driver next runs.
            tokio::task::yield_now().await;
        }
    }

    /// The position of the controller tried first.
    pub fn current(&self) -> usize {
        self.current.lock().unwrap().0
    }

    /// Makes controller `idx` the one tried first.
    pub fn prefer(&self, idx: usize) {
        let mut cur = self.current.lock().unwrap();
        if cur.0 != idx {
            *cur = (idx % self.controllers.len(), None);
        }
    }

    /// Sends raw bytes as a request (for tests of malformed frames) and reads one
    /// response frame.
    pub async fn raw_to(&self, idx: usize, bytes: &[u8]) -> Result<Response, ClientError> {
        let conn = self.connection(idx).await?;
        let addr = self.controllers[idx];
        let closed = |e: String| match conn.close_reason() {
            Some(quinn::ConnectionError::ApplicationClosed(c)) => ClientError::Closed {
                addr,
                reason: String::from_utf8_lossy(&c.reason).into_owned(),
            },
            Some(other) => refused(addr, &other).unwrap_or_else(|| ClientError::Closed {
                addr,
                reason: other.to_string(),
            }),
            None => ClientError::Frame(FrameError::Io(e)),
        };
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| closed(e.to_string()))?;
        send.write_all(bytes)
            .await
            .map_err(|e| closed(e.to_string()))?;
        let _ = send.finish();
        let read = async {
            let payload = frame::read_payload(&mut recv, MAX_CLIENT_FRAME)
                .await?
                .ok_or(FrameError::Truncated)?;
            // An older controller answers in its version; its `Error` is laid out alike.
            frame::decode_payload_of::<Response>(
                &payload,
                &[PROTOCOL_VERSION, PREVIOUS_PROTOCOL_VERSION],
            )
        };
        match read.await {
            Ok((PROTOCOL_VERSION, r)) => Ok(r),
            Ok((_, r)) => Err(ClientError::OlderController {
                addr,
                said: match r {
                    Response::Error(e) => e.to_string(),
                    _ => "an answer of its own version".into(),
                },
            }),
            Err(e @ (FrameError::Io(_) | FrameError::Truncated))
                if conn.close_reason().is_some() =>
            {
                Err(closed(e.to_string()))
            }
            Err(e) => Err(ClientError::Frame(e)),
        }
    }

    /// Sends a request, retrying on the controller the answers point to, or the next
    /// one, until it gets an answer that is not "retry" or `retry_for` runs out.
    pub async fn request(&self, req: &ClientRequest) -> Result<Response, ClientError> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        let mut refusals = 0;
        loop {
            let idx = self.current.lock().unwrap().0;
            let r = self.request_to(idx, req).await;
            let err = match r {
                Ok(Response::Error(e)) => ClientError::Api(e),
                Ok(resp) => return Ok(resp),
                Err(e) => e,
            };
            refusals = match err {
                ClientError::Refused { .. } => refusals + 1,
                _ => 0,
            };
            if !err.retryable() || refusals >= self.controllers.len() {
                return match err {
                    ClientError::Api(e) => Ok(Response::Error(e)),
                    e => Err(e),
                };
            }
            let next = match &err {
                ClientError::Api(ApiError::NotLeader { leader: Some(m) }) => self
                    .controllers
                    .iter()
                    .position(|a| a.to_string() == m.client_addr)
                    .unwrap_or((idx + 1) % self.controllers.len()),
                // A controller that answers "unavailable" may just be waiting for an
                // election; another may know the leader.
                _ => (idx + 1) % self.controllers.len(),
            };
            {
                let mut cur = self.current.lock().unwrap();
                if cur.0 == idx {
                    *cur = (next, None);
                }
            }
            if started.elapsed() >= self.retry_for {
                return Err(ClientError::Timeout(self.retry_for, err.to_string()));
            }
            // Paces the retries (20 ms doubling to 200 ms) while an election or a
            // restart runs its course; `retry_for` above bounds them.
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(200));
        }
    }

    /// A write; `Ok(Err(..))` when the state machine refused it (nothing changed).
    pub async fn command(
        &self,
        cmd: ClientCommand,
    ) -> Result<Result<Outcome, ApiError>, ClientError> {
        let (seq, first_incomplete) = self.seqs.lock().unwrap().begin();
        let request = tranche_model::RequestId {
            // Set by the controller from this client's certificate.
            identity: String::new(),
            client: self.session,
            seq,
            first_incomplete,
        };
        let r = self
            .request(&ClientRequest::Write {
                request: Some(request),
                command: cmd,
            })
            .await;
        // Answered, or given up on: either way this client will not send it again.
        self.seqs.lock().unwrap().end(seq);
        match r? {
            Response::Applied(o) => Ok(Ok(o)),
            Response::Error(e) => Ok(Err(e)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Sends the commands one by one; the first refusal (or failure to reach the
    /// cluster) ends the run with its message.
    pub async fn apply_all(
        &self,
        cmds: impl IntoIterator<Item = ClientCommand>,
    ) -> Result<(), String> {
        for cmd in cmds {
            match self.command(cmd).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(e.to_string()),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }

    /// Submits a job; gives it a client token first when it has none, so that retries
    /// are safe. Returns the job id and whether the token had been seen already.
    pub async fn submit(&self, mut spec: JobSpec) -> Result<(JobId, bool), ClientError> {
        if spec.client_token.is_none() {
            spec.client_token = Some(new_token());
        }
        match self.command(ClientCommand::Submit(spec)).await? {
            Ok(Outcome::Submitted { job, existing }) => Ok((job, existing)),
            Ok(other) => Err(ClientError::Unexpected(format!("{other:?}"))),
            Err(e) => Err(ClientError::Api(e)),
        }
    }

    /// A read: linearizable unless `stale`.
    pub async fn read(&self, query: Query, stale: bool) -> Result<Response, ClientError> {
        let req = ClientRequest::Read { query, stale };
        match self.request(&req).await? {
            Response::Error(ApiError::NotFound(msg)) => self.read_elsewhere(&req, msg).await,
            Response::Error(e) => Err(ClientError::Api(e)),
            r => Ok(r),
        }
    }

    /// A job that is in no controller's state may still be in some controller's
    /// history store (each controller keeps its own; one that caught up from a
    /// snapshot lacks what was dropped before it): the other controllers are asked
    /// before the job is said not to exist.
    async fn read_elsewhere(
        &self,
        req: &ClientRequest,
        msg: String,
    ) -> Result<Response, ClientError> {
        let ClientRequest::Read {
            query: query @ (Query::Job(_) | Query::Explain(_)),
            ..
        } = req
        else {
            return Err(ClientError::Api(ApiError::NotFound(msg)));
        };
        let stale = ClientRequest::Read {
            query: query.clone(),
            stale: true,
        };
        for i in 0..self.controllers().len() {
            if let Ok(r @ (Response::Job(_) | Response::Explain(_))) =
                self.request_to(i, &stale).await
            {
                return Ok(r);
            }
        }
        Err(ClientError::Api(ApiError::NotFound(msg)))
    }

    /// One page of ended jobs, newest end first (linearizable): those still in the
    /// controllers' state and those the answering controller's history store holds.
    /// `HistoryPage::next`, passed back as `before`, gives the next page.
    pub async fn history(
        &self,
        filter: tranche_proto::HistoryFilter,
    ) -> Result<tranche_proto::HistoryPage, ClientError> {
        match self.read(Query::History(filter), false).await? {
            Response::History(p) => Ok(p),
            other => Err(ClientError::Unexpected(other.kind().to_string())),
        }
    }

    /// An agent's heartbeat for its node, to the leader (followed as `request`
    /// follows it). Returns whether the leader knows the node.
    pub async fn heartbeat(&self, node: NodeName) -> Result<bool, ClientError> {
        match self.request(&ClientRequest::Heartbeat { node }).await? {
            Response::Heartbeat { registered } => Ok(registered),
            Response::Error(e) => Err(ClientError::Api(e)),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    }
}

impl Client {
    /// Streams a job's output from the agent of `node` at `addr` (the node's
    /// `tranche.logs` label), handing each chunk to `sink`. Returns the attempt read and
    /// whether it was still running when the stream ended.
    pub async fn logs(
        &self,
        addr: SocketAddr,
        node: &str,
        req: &tranche_proto::LogRequest,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<(u32, bool), ClientError> {
        self.logs_paced(addr, node, req, |b| {
            sink(&b);
            std::future::ready(true)
        })
        .await
    }

    /// [`logs`](Self::logs) with a sink that paces the reading: the next chunk is read
    /// from the agent only once the sink's future for this one is done, so a slow
    /// consumer holds the agent back (QUIC flow control) instead of the output piling
    /// up here. The sink's `false` stops the reading (the consumer went away): the
    /// answer is then `Ok((0, true))`.
    pub async fn logs_paced<F, Fut>(
        &self,
        addr: SocketAddr,
        node: &str,
        req: &tranche_proto::LogRequest,
        mut sink: F,
    ) -> Result<(u32, bool), ClientError>
    where
        F: FnMut(Vec<u8>) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        use tranche_proto::LogFrame;
        let conn = self
            .handshake(addr, &tranche_tls::agent_server_name(node))
            .await?;
        // The agent checks this client's certificate after the client's side of the
        // handshake is done, so a refusal shows on the first stream.
        let closed = |e: ClientError| match conn.close_reason() {
            Some(reason) => refused(addr, &reason).unwrap_or(e),
            None => e,
        };
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| {
            closed(ClientError::Closed {
                addr,
                reason: e.to_string(),
            })
        })?;
        frame::write(&mut send, req)
            .await
            .map_err(|e| closed(e.into()))?;
        let _ = send.finish();
        loop {
            let got = frame::read::<LogFrame, _>(&mut recv, MAX_CLIENT_FRAME).await;
            match got.map_err(|e| closed(e.into()))? {
                LogFrame::Chunk(b) => {
                    if !sink(b).await {
                        return Ok((0, true));
                    }
                }
                LogFrame::End { attempt, running } => return Ok((attempt, running)),
                LogFrame::Error(e) => return Err(ClientError::Api(e)),
            }
        }
    }
}

/// A connection that ended in a TLS alert (QUIC crypto error codes 0x100 to 0x1ff): a
/// certificate refused by either end.
fn refused(addr: SocketAddr, e: &quinn::ConnectionError) -> Option<ClientError> {
    let alert = |code: quinn::TransportErrorCode| {
        let code = u64::from(code);
        (0x100..0x200).contains(&code).then(|| (code - 0x100) as u8)
    };
    let (alert, reason) = match e {
        quinn::ConnectionError::ConnectionClosed(c) => {
            let alert = alert(c.error_code)?;
            let why = String::from_utf8_lossy(&c.reason).into_owned();
            (
                alert,
                format!("the server refused this client's certificate: {why}"),
            )
        }
        quinn::ConnectionError::TransportError(t) => {
            let alert = alert(t.code)?;
            (
                alert,
                format!("this client refused the server's certificate: {}", t.reason),
            )
        }
        _ => return None,
    };
    let name = match alert {
        40 => "handshake_failure".to_string(),
        42 => "bad_certificate".into(),
        44 => "certificate_revoked".into(),
        45 => "certificate_expired".into(),
        46 => "certificate_unknown".into(),
        48 => "unknown_ca".into(),
        116 => "certificate_required".into(),
        120 => "no_application_protocol".into(),
        n => n.to_string(),
    };
    Some(ClientError::Refused {
        addr,
        reason: format!("{reason} (TLS alert {name})"),
    })
}

/// What an answer of a kind the request does not expect says to the user.
pub fn unexpected_text(r: &Response) -> String {
    match r {
        Response::Error(e) => e.to_string(),
        other => format!(
            "the controller answered with {} where this request expects another kind of \
             answer (are this CLI and the controllers of one release?)",
            other.kind()
        ),
    }
}

/// A fresh client token: 128 random bits in hex.
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::Seqs;
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    /// Requests numbered from many threads at once: none says that the numbers below
    /// its `first_incomplete` were answered while one of them is still to be answered.
    #[test]
    fn no_request_claims_a_lower_one_answered_before_it_is() {
        let seqs = Arc::new(Mutex::new(Seqs::new()));
        let answered = Arc::new(Mutex::new((0u64, BTreeSet::new())));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (seqs, answered) = (seqs.clone(), answered.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let (seq, first) = seqs.lock().unwrap().begin();
                        assert!(first <= seq, "{first} > {seq}");
                        {
                            // (every number up to `done` answered, the others above it)
                            let mut a = answered.lock().unwrap();
                            let (done, above) = &mut *a;
                            while above.remove(&(*done + 1)) {
                                *done += 1;
                            }
                            assert!(
                                first <= *done + 1,
                                "request {seq} says all below {first} were answered, \
                                 but {} was not",
                                *done + 1
                            );
                        }
                        answered.lock().unwrap().1.insert(seq);
                        seqs.lock().unwrap().end(seq);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = seqs.lock().unwrap();
        assert_eq!(s.next, 8 * 20_000 + 1);
        assert!(s.outstanding.is_empty());
    }
}
