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
use tranche_tls::{peer_identity, Identity};

use crate::service::Service;

/// QUIC application error codes on the client port.
pub const CLOSE_BAD_FRAME: u32 = 3;
pub const CLOSE_BAD_CERT: u32 = 2;

pub struct ClientPort {
    pub service: Arc<Service>,
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
        let payload = match frame::read_payload(&mut recv, MAX_CLIENT_FRAME).await {
            Ok(Some(p)) => Ok(p),
            Ok(None) => Err(frame::FrameError::Truncated),
            Err(e) => Err(e),
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
        let resp = self.service.handle(&who, req).await;
        let _ = frame::write(&mut send, &resp).await;
        let _ = send.finish();
    }
}
