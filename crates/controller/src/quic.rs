//! The client port: QUIC with mutual TLS; one request frame and one response frame per
//! bidirectional stream. This is a thin adapter: it reads the certificate's identity
//! and the frame, and the [`Service`] does the rest.
//!
//! A request frame of the previous protocol version gets a previous-version error
//! frame that the older client can read: it tells the user to upgrade the client.

use std::sync::Arc;

use tracing::{debug, info, warn};
use tranche_proto::frame::{self, PREVIOUS_PROTOCOL_VERSION};
use tranche_proto::{ApiError, ClientRequest, Response, MAX_CLIENT_FRAME, PROTOCOL_VERSION};
use tranche_tls::{Admitted, Gate, Identity, CLOSE_TOO_MANY};

use crate::service::Service;

/// QUIC application error codes on the client port.
pub const CLOSE_BAD_FRAME: u32 = 3;
pub const CLOSE_BAD_CERT: u32 = 2;
/// The stop code of a request stream refused by a limit (the answer names it).
pub const CLOSE_LIMIT: u32 = 6;

pub struct ClientPort {
    pub service: Arc<Service>,
    /// Admits connections and holds their limits (see [`tranche_tls::QuicLimits`]).
    pub gate: Arc<Gate>,
}

/// What a client of the previous protocol version is told.
pub fn upgrade_message() -> String {
    format!(
        "this controller speaks protocol version {PROTOCOL_VERSION} and the client speaks \
         version {PREVIOUS_PROTOCOL_VERSION}: upgrade the client (the tranche CLI, agent or \
         SDK) to this controller's release"
    )
}

impl ClientPort {
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
                if tranche_tls::peer_identity(&conn).is_err() {
                    conn.close(CLOSE_BAD_CERT.into(), b"no usable client certificate");
                    return;
                }
                let admitted = match api.gate.admit(&conn) {
                    Ok(a) => Arc::new(a),
                    Err(why) => {
                        warn!(client = %from, "refused a connection: {why}");
                        conn.close(CLOSE_TOO_MANY.into(), why.as_bytes());
                        return;
                    }
                };
                while let Ok((send, recv)) = conn.accept_bi().await {
                    let api = api.clone();
                    let admitted = admitted.clone();
                    let conn = conn.clone();
                    tokio::spawn(async move { api.stream(conn, &admitted, send, recv).await });
                }
            });
        }
    }

    async fn stream(
        &self,
        conn: quinn::Connection,
        admitted: &Admitted,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
    ) {
        let who: &Identity = &admitted.who;
        // The bytes reserved for this request stay held until it is answered.
        let payload = match frame::read_payload_within(
            &mut recv,
            MAX_CLIENT_FRAME,
            admitted.frame_timeout(),
            |len| admitted.reserve(len),
        )
        .await
        {
            Ok(Some(p)) => Ok(p),
            Ok(None) => Err(frame::FrameError::Truncated),
            Err(e @ (frame::FrameError::Refused(_) | frame::FrameError::Deadline { .. })) => {
                // Over a limit: this request is refused and its stream cut; the
                // connection's other requests go on.
                info!(client = %conn.remote_address(), identity = %who, "request refused: {e}");
                let _ = recv.stop(CLOSE_LIMIT.into());
                let _ = frame::write(
                    &mut send,
                    &Response::Error(ApiError::Unavailable(e.to_string())),
                )
                .await;
                let _ = send.finish();
                return;
            }
            Err(e) => Err(e),
        };
        let (payload, _reserved) = match payload {
            Ok((p, r)) => (Ok(p), Some(r)),
            Err(e) => (Err(e), None),
        };
        if let Ok(p) = &payload {
            if frame::payload_version(p).ok() == Some(PREVIOUS_PROTOCOL_VERSION) {
                // `Response::Error(ApiError::BadRequest)` is laid out alike in both
                // versions, so the older client prints this message.
                info!(client = %conn.remote_address(), identity = %who, "a client of protocol version {PREVIOUS_PROTOCOL_VERSION}: told to upgrade");
                let answer = Response::Error(ApiError::BadRequest(upgrade_message()));
                let _ = send
                    .write_all(&frame::encode_as(&answer, PREVIOUS_PROTOCOL_VERSION))
                    .await;
                let _ = send.finish();
                return;
            }
        }
        let req = payload.and_then(|p| frame::decode_payload::<ClientRequest>(&p));
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
        let serial = conn
            .peer_identity()
            .and_then(|a| {
                a.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
                    .ok()
            })
            .and_then(|c| c.first().and_then(|d| tranche_tls::serial_of_cert(d)));
        let resp = self
            .service
            .handle_cert(who, crate::service::Origin::Client, serial, req)
            .await;
        let _ = frame::write(&mut send, &resp).await;
        let _ = send.finish();
    }
}
