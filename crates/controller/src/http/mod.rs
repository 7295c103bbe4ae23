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
//! [`dto`].

pub mod dash;
pub mod dto;
pub mod error;
mod extract;
mod logs;
pub mod openapi;
mod routes;
mod stream;
mod ui;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;
use tracing::{debug, info};
use tranche_tls::{CertVerifier, Identity, TlsFiles};

use crate::mailbox::SharedRef;
use crate::service::Service;

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
    /// The AWS Batch-compatible endpoint under `/v1/`, where `[aws]` enables it.
    pub aws: Option<Arc<crate::aws::Endpoint>>,
    logs_client: tokio::sync::OnceCell<Arc<tranche_client::Client>>,
}

impl Api {
    pub fn new(
        service: Arc<Service>,
        shared: SharedRef,
        certs: Arc<CertVerifier>,
        tls: TlsFiles,
        client_addr: SocketAddr,
        aws: Option<Arc<crate::aws::Endpoint>>,
    ) -> Arc<Api> {
        Arc::new(Api {
            service,
            shared,
            certs,
            tls,
            client_addr,
            aws,
            logs_client: tokio::sync::OnceCell::new(),
        })
    }
}

/// Who is on the other end of a connection, from its TLS handshake.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The identity of the client certificate it presented, if any.
    pub cert: Option<Identity>,
    pub addr: SocketAddr,
}

/// The API's routes.
pub fn router(api: Arc<Api>) -> Router {
    routes::router(api)
}

/// Binds `addr` (checked before the controller joins its peers, so a taken port is
/// an error at start).
pub fn bind(addr: &str) -> Result<std::net::TcpListener, String> {
    let a: SocketAddr = addr
        .parse()
        .map_err(|_| format!("http_addr: `{addr}` is not an IP address and port"))?;
    let l = std::net::TcpListener::bind(a)
        .map_err(|e| format!("cannot listen on http_addr {a}: {e}"))?;
    l.set_nonblocking(true)
        .map_err(|e| format!("http_addr {a}: {e}"))?;
    Ok(l)
}

/// Serves HTTPS on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: std::net::TcpListener,
    tls: rustls::ServerConfig,
    api: Arc<Api>,
    mut shutdown: watch::Receiver<bool>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("http_addr: {e}");
            return;
        }
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let app = router(api);
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
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    info!(client = %addr, "refused an HTTPS handshake: {e}");
                    return;
                }
                Err(_) => return,
            };
            let cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| tranche_tls::identity_of_cert(c).ok());
            let peer = Peer { cert, addr };
            let svc = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer.clone());
                    let app = app.clone();
                    async move {
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
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(tls), svc);
            if let Err(e) = conn.await {
                debug!(client = %addr, "http connection: {e}");
            }
        });
    }
}
