//! The HTTPS + JSON API under `/api/v1/`: another adapter over the controller's
//! [`Service`], beside the QUIC client port. It serves on `http_addr` with the
//! controller's certificate; a client authenticates with a certificate of the cluster
//! (the same roles and names as on the QUIC port) or with a bearer token that
//! `tranche token issue` made from one (see [`tranche_tls::token`]). Every request is
//! then the service layer's request with that identity: the same authorization, and
//! the same forwarding of writes to the leader.
//!
//! Errors have one shape, `{"error": {"code", "message", "field"?}}` (see [`error`]);
//! request bodies are JSON, at most [`MAX_BODY`] bytes, and unknown fields are refused.
//! The OpenAPI document at `/api/v1/openapi.json` is generated from the types in
//! [`dto`]. The dashboard (its JSON under `/api/v1/dash/`, its page and assets from
//! `ui/`) is served here too.
//!
//! The crate may depend on `tranche-controller` (its [`Service`] and shared state),
//! `tranche-proto`, `tranche-tls`, `tranche-client` (to fetch jobs' output from agents),
//! and axum/hyper/utoipa. It never depends on the AWS endpoint (`tranche-aws`), which
//! builds on it: [`router`] takes the routes of other adapters that share the port, and
//! [`Api`], [`MAX_BODY`] and [`error`] are what such an adapter uses.

pub mod dash;
pub mod dto;
pub mod error;
mod extract;
pub mod history;
mod logs;
pub use logs::output_source;
pub mod openapi;
mod routes;
mod stream;
mod ui;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;
use tracing::{debug, info, warn};
use tranche_tls::{CertVerifier, Identity, TlsFiles};

use tranche_controller::config::HttpLimits;
use tranche_controller::mailbox::SharedRef;
use tranche_controller::service::Service;

/// The largest request body accepted: 1 MiB.
pub const MAX_BODY: usize = 1 << 20;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to send a request's headers once it has connected.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// What every handler shares.
pub struct Api {
    pub service: Arc<Service>,
    pub shared: SharedRef,
    pub certs: Arc<CertVerifier>,
    /// This controller's own certificate, to fetch jobs' output from agents.
    pub tls: TlsFiles,
    /// This controller's client port (the log client needs a controller to name).
    pub client_addr: SocketAddr,
    logs_client: tokio::sync::OnceCell<Arc<tranche_client::Client>>,
}

impl Api {
    pub fn new(
        service: Arc<Service>,
        shared: SharedRef,
        certs: Arc<CertVerifier>,
        tls: TlsFiles,
        client_addr: SocketAddr,
    ) -> Arc<Api> {
        Arc::new(Api {
            service,
            shared,
            certs,
            tls,
            client_addr,
            logs_client: tokio::sync::OnceCell::new(),
        })
    }
}

/// Who is on the other end of a connection, from its TLS handshake.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The identity of the client certificate it presented, if any.
    pub cert: Option<Identity>,
    /// That certificate, to check it again on long responses.
    pub der: Option<Arc<rustls_pki_types::CertificateDer<'static>>>,
    pub addr: SocketAddr,
}

/// How often a long response (the event stream, a followed log) checks the
/// credential it was opened with.
const LEASE_RECHECK: Duration = Duration::from_secs(1);

/// The credential a long response was opened with, checked again while it runs: a
/// bearer token (until its `exp`, and while its certificate is not revoked), else the
/// connection's client certificate (while it is not revoked and not expired).
pub(crate) struct Lease {
    api: Arc<Api>,
    token: Option<String>,
    cert: Option<Arc<rustls_pki_types::CertificateDer<'static>>>,
}

impl Lease {
    /// The lease of a request, from its `Authorization` header (a bearer token wins,
    /// as it does when the caller is told apart) and its connection.
    pub(crate) fn of(
        api: &Arc<Api>,
        headers: &axum::http::HeaderMap,
        peer: Option<&Peer>,
    ) -> Lease {
        let token = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|t| {
                t.strip_prefix("Bearer ")
                    .or_else(|| t.strip_prefix("bearer "))
            })
            .map(|t| t.trim().to_string());
        Lease {
            api: api.clone(),
            cert: if token.is_none() {
                peer.and_then(|p| p.der.clone())
            } else {
                None
            },
            token,
        }
    }

    /// Why the credential no longer holds, or `None` while it does.
    pub(crate) fn lapsed(&self) -> Option<String> {
        let now = tranche_controller::mailbox::wall_ms() / 1000;
        if let Some(t) = &self.token {
            return tranche_tls::token::verify_token(&self.api.certs, t, now)
                .err()
                .map(|e| e.to_string());
        }
        let cert = self.cert.as_ref()?;
        let at = rustls_pki_types::UnixTime::since_unix_epoch(Duration::from_secs(now));
        self.api.certs.check(cert, at).err().map(|e| {
            format!(
                "the client certificate is refused now: {}",
                tranche_tls::token::cert_error_text(&e)
            )
        })
    }

    /// `stream`, ended once the credential lapses (checked every [`LEASE_RECHECK`]);
    /// `last` makes the final piece that says why, if the stream's format has one.
    pub(crate) fn keep<S, E>(
        self,
        stream: S,
        last: fn(&str) -> Option<axum::body::Bytes>,
    ) -> impl futures_util::Stream<Item = Result<axum::body::Bytes, E>> + Send
    where
        S: futures_util::Stream<Item = Result<axum::body::Bytes, E>> + Send + Unpin + 'static,
        E: Send + 'static,
    {
        use futures_util::StreamExt;
        let start = tokio::time::Instant::now() + LEASE_RECHECK;
        let mut tick = tokio::time::interval_at(start, LEASE_RECHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        futures_util::stream::unfold(
            (stream, Some((self, tick))),
            move |(mut stream, lease)| async move {
                let (lease, mut tick) = lease?;
                loop {
                    tokio::select! {
                        item = stream.next() => {
                            return item.map(|i| (i, (stream, Some((lease, tick)))));
                        }
                        _ = tick.tick() => {
                            if let Some(why) = lease.lapsed() {
                                debug!("a long response ends: {why}");
                                return last(&why).map(|b| (Ok(b), (stream, None)));
                            }
                        }
                    }
                }
            },
        )
    }
}

/// The API's routes, the dashboard's, and `extra`: the routes of another adapter that
/// serves on the same port (the AWS endpoint's under `/v1/`). All of them answer
/// behind the API's guard (see `routes::guard`); a path none of them knows is the
/// API's `not_found`.
pub fn router(api: Arc<Api>, extra: Router<Arc<Api>>) -> Router {
    routes::routes()
        .route(
            "/api/v1/openapi.json",
            axum::routing::get(openapi::document),
        )
        .merge(dash::router().merge(ui::router()))
        .merge(extra)
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn(routes::guard))
        .with_state(api)
}

/// Binds `addr` (checked before the controller joins its peers, so a taken port is
/// an error at start).
pub fn bind(addr: &str) -> Result<std::net::TcpListener, String> {
    let a: SocketAddr = addr
        .parse()
        .map_err(|_| format!("http_addr: `{addr}` is not an IP address and port"))?;
    let l = tranche_daemon_kit::listen::tcp(a)
        .map_err(|e| format!("cannot listen on http_addr {a}: {e}"))?;
    l.set_nonblocking(true)
        .map_err(|e| format!("http_addr {a}: {e}"))?;
    Ok(l)
}

/// The connections open to the HTTPS port, counted in all and per client address
/// against `[http] max_connections` and `connections_per_ip`.
struct Slots {
    limits: HttpLimits,
    open: std::sync::Mutex<(u32, HashMap<IpAddr, u32>)>,
}

/// One connection's place in [`Slots`], given back when dropped.
struct Slot {
    slots: Arc<Slots>,
    ip: IpAddr,
}

impl Slots {
    /// A place for a connection from `ip`, or which limit refuses it.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, String> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.0 >= self.limits.max_connections {
            return Err(format!(
                "{} connections are open: the limit is http.max_connections = {}",
                open.0, self.limits.max_connections
            ));
        }
        let n = open.1.get(&ip).copied().unwrap_or(0);
        if n >= self.limits.connections_per_ip {
            return Err(format!(
                "{n} connections from {ip} are open: the limit is http.connections_per_ip = {}",
                self.limits.connections_per_ip
            ));
        }
        open.0 += 1;
        open.1.insert(ip, n + 1);
        Ok(Slot {
            slots: self.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        open.0 -= 1;
        if let Some(n) = open.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.ip);
            }
        }
    }
}

/// A connection's stream that notes when bytes last went either way, so that an idle
/// kept-alive connection can be closed.
struct Idle<T> {
    inner: T,
    born: std::time::Instant,
    /// Milliseconds after `born` of the last byte read or written.
    last: Arc<AtomicU64>,
}

impl<T> Idle<T> {
    fn touch(&self) {
        self.last
            .store(self.born.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// How long a connection born at `born` has gone without a byte (see [`Idle`]).
fn idle_for(born: std::time::Instant, last: &AtomicU64) -> Duration {
    born.elapsed()
        .saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)))
}

impl<T: AsyncRead + Unpin> AsyncRead for Idle<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Idle<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves `app` (see [`router`]) over HTTPS on `listener` until `shutdown` turns true;
/// every request's client certificate is checked again by `certs`. Within `limits`: at most
/// `max_connections` open connections and `connections_per_ip` from one address
/// (more are closed at once, before TLS), and a connection without a byte either way
/// for `idle_timeout_s` is closed once its current response (if any) is done.
pub async fn serve(
    listener: std::net::TcpListener,
    tls: rustls::ServerConfig,
    certs: Arc<CertVerifier>,
    app: Router,
    limits: HttpLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let idle_timeout = Duration::from_secs(limits.idle_timeout_s);
    let body_timeout = extract::BodyTimeout(Duration::from_secs(limits.body_timeout_s));
    let slots = Arc::new(Slots {
        limits,
        open: std::sync::Mutex::new((0, HashMap::new())),
    });
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("http_addr: {e}");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    if let Ok(a) = listener.local_addr() {
        info!(addr = %a, "HTTPS API serving");
    }
    loop {
        let (tcp, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    debug!("http accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => {
                if *shutdown.borrow() { return; }
                continue;
            }
        };
        let slot = match slots.take(addr.ip()) {
            Ok(s) => s,
            Err(why) => {
                warn!(client = %addr, "refused an HTTPS connection: {why}");
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let certs = certs.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    info!(client = %addr, "refused an HTTPS handshake: {e}");
                    return;
                }
                Err(_) => return,
            };
            let der = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| Arc::new(c.clone().into_owned()));
            let cert = der
                .as_deref()
                .and_then(|c| tranche_tls::identity_of_cert(c).ok());
            let peer = Peer { cert, der, addr };
            let svc = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    // The certificate a kept-alive connection was opened with is
                    // checked again on every request: revoked or expired since, the
                    // request is refused and the connection closed.
                    let refused = peer
                        .der
                        .as_ref()
                        .and_then(|der| certs.check(der, rustls_pki_types::UnixTime::now()).err());
                    req.extensions_mut().insert(peer.clone());
                    req.extensions_mut().insert(body_timeout);
                    let app = app.clone();
                    async move {
                        if let Some(e) = refused {
                            let mut r = axum::response::IntoResponse::into_response(
                                error::HttpError::unauthenticated(format!(
                                    "the client certificate of this connection is refused now: {}",
                                    tranche_tls::token::cert_error_text(&e)
                                )),
                            );
                            r.headers_mut().insert(
                                axum::http::header::CONNECTION,
                                axum::http::HeaderValue::from_static("close"),
                            );
                            return Ok(r);
                        }
                        // A handler that panics answers 500 in the API's error shape;
                        // the connection and the controller carry on.
                        let call = std::panic::AssertUnwindSafe(
                            app.oneshot(req.map(axum::body::Body::new)),
                        );
                        match futures_util::FutureExt::catch_unwind(call).await {
                            Ok(r) => r,
                            Err(_) => {
                                tracing::error!("an HTTP handler panicked");
                                Ok(axum::response::IntoResponse::into_response(
                                    error::HttpError::new(
                                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                                        "internal",
                                        "the controller failed on this request; the failure is logged",
                                    ),
                                ))
                            }
                        }
                    }
                },
            );
            let born = std::time::Instant::now();
            let last = Arc::new(AtomicU64::new(0));
            let io = Idle {
                inner: tls,
                born,
                last: last.clone(),
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(io), svc);
            tokio::pin!(conn);
            let mut closing = false;
            loop {
                let idle = idle_for(born, &last);
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            debug!(client = %addr, "http connection: {e}");
                        }
                        break;
                    }
                    _ = tokio::time::sleep(idle_timeout.saturating_sub(idle)), if !closing => {
                        if idle_for(born, &last) >= idle_timeout {
                            // No new request is read; a response under way finishes.
                            debug!(client = %addr, "closing an idle HTTPS connection");
                            conn.as_mut().graceful_shutdown();
                            closing = true;
                        }
                    }
                }
            }
        });
    }
}
