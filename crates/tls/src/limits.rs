//! What one peer may cost a QUIC server: streams, buffered bytes, connections, time.
//!
//! A server's [`Gate`] admits each connection once its handshake is done: it reads the
//! peer's identity, counts the identity's connections against
//! [`QuicLimits::connections_per_identity`], gives agents and controllers more
//! concurrent streams than people's roles, and has the connection closed when its
//! peer's certificate is revoked. Each request frame then reserves its length from the
//! connection's and the server's byte budgets before its body is read
//! ([`Admitted::reserve`]) and must arrive whole within
//! [`QuicLimits::frame_timeout_s`]. Every refusal names the limit and its value.
//!
//! The defaults, and the `[limits]` table of the controller's config:
//!
//! ```toml
//! [limits]
//! client_streams = 64                 # concurrent requests of a user, operator or admin connection
//! service_streams = 1024              # ... of an agent's or controller's connection
//! connections_per_identity = 64       # open connections of one identity (controllers: no cap)
//! receive_window_kib = 16384          # unread bytes QUIC buffers per connection
//! stream_receive_window_kib = 2048    # ... per stream
//! connection_request_mib = 64         # request bytes being read or handled, per connection
//! request_mib = 1024                  # ... over the whole port
//! frame_timeout_s = 30                # a request frame must arrive whole within this
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quinn::{TransportConfig, VarInt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{peer_identity, CertVerifier, Identity, Role};

/// The QUIC application close code of a connection over its identity's limit.
pub const CLOSE_TOO_MANY: u32 = 5;

/// Limits of one QUIC server port (see the module's documentation for the defaults).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuicLimits {
    /// Concurrent request streams on a connection of a user, operator or admin.
    pub client_streams: u32,
    /// Concurrent request streams on a connection of an agent or a controller.
    pub service_streams: u32,
    /// Open connections of one identity (role and name) to this port; controllers'
    /// are not counted (one relays each job output it serves over its own).
    pub connections_per_identity: u32,
    /// Bytes QUIC buffers for a connection before the application reads them, in KiB.
    pub receive_window_kib: u64,
    /// Bytes QUIC buffers for one stream before the application reads them, in KiB.
    pub stream_receive_window_kib: u64,
    /// Request bytes a connection may have being read or handled at once, in MiB.
    pub connection_request_mib: u32,
    /// Request bytes the whole port may have being read or handled at once, in MiB.
    pub request_mib: u32,
    /// A request frame must arrive whole within this many seconds of its stream's
    /// opening; a peer that sends a length and stalls is cut.
    pub frame_timeout_s: u64,
}

impl Default for QuicLimits {
    fn default() -> Self {
        QuicLimits {
            client_streams: 64,
            service_streams: 1024,
            connections_per_identity: 64,
            receive_window_kib: 16 << 10,
            stream_receive_window_kib: 2 << 10,
            connection_request_mib: 64,
            request_mib: 1024,
            frame_timeout_s: 30,
        }
    }
}

impl QuicLimits {
    /// Checks every value: `Err` names the field, the rule and the value.
    pub fn validate(&self, table: &str) -> Result<(), String> {
        let positive: [(&str, u64); 8] = [
            ("client_streams", self.client_streams.into()),
            ("service_streams", self.service_streams.into()),
            (
                "connections_per_identity",
                self.connections_per_identity.into(),
            ),
            ("receive_window_kib", self.receive_window_kib),
            ("stream_receive_window_kib", self.stream_receive_window_kib),
            ("connection_request_mib", self.connection_request_mib.into()),
            ("request_mib", self.request_mib.into()),
            ("frame_timeout_s", self.frame_timeout_s),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(format!("{table}.{name} must be at least 1, not 0"));
            }
        }
        // A semaphore holds at most u32::MAX >> 3 permits (one per byte).
        let max_mib = (Semaphore::MAX_PERMITS >> 20) as u32;
        for (name, v) in [
            ("connection_request_mib", self.connection_request_mib),
            ("request_mib", self.request_mib),
        ] {
            if v > max_mib {
                return Err(format!("{table}.{name} must be at most {max_mib}, not {v}"));
            }
        }
        if self.connection_request_mib > self.request_mib {
            return Err(format!(
                "{table}.connection_request_mib ({}) must not exceed {table}.request_mib ({})",
                self.connection_request_mib, self.request_mib
            ));
        }
        if self.stream_receive_window_kib > self.receive_window_kib {
            return Err(format!(
                "{table}.stream_receive_window_kib ({}) must not exceed \
                 {table}.receive_window_kib ({})",
                self.stream_receive_window_kib, self.receive_window_kib
            ));
        }
        Ok(())
    }

    /// The deadline of one request frame.
    pub fn frame_timeout(&self) -> Duration {
        Duration::from_secs(self.frame_timeout_s)
    }

    /// The transport settings of a server port whose clients open `bidi` and `uni`
    /// streams: the windows of these limits, and the idle timeout and keep-alive of
    /// every Tranche connection.
    pub(crate) fn transport(&self, bidi: u32, uni: u32) -> Arc<TransportConfig> {
        let mut t = crate::quic::base_transport(bidi, uni);
        t.receive_window(VarInt::from_u64(self.receive_window_kib << 10).unwrap_or(VarInt::MAX));
        t.stream_receive_window(
            VarInt::from_u64(self.stream_receive_window_kib << 10).unwrap_or(VarInt::MAX),
        );
        Arc::new(t)
    }
}

/// Admits a port's connections and keeps their counts and budgets.
pub struct Gate {
    limits: QuicLimits,
    verifier: Arc<CertVerifier>,
    bytes: Arc<Semaphore>,
    open: Mutex<HashMap<Identity, u32>>,
}

impl Gate {
    /// A gate over `limits` (already validated), closing connections whose peer
    /// `verifier` refuses later.
    pub fn new(limits: QuicLimits, verifier: Arc<CertVerifier>) -> Arc<Gate> {
        let bytes = Arc::new(Semaphore::new((limits.request_mib as usize) << 20));
        Arc::new(Gate {
            limits,
            verifier,
            bytes,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &QuicLimits {
        &self.limits
    }

    /// Admits a connection whose handshake is done, or says which limit refuses it
    /// (the caller closes it with [`CLOSE_TOO_MANY`] and that text).
    pub fn admit(self: &Arc<Self>, conn: &quinn::Connection) -> Result<Admitted, String> {
        let who = peer_identity(conn).map_err(|e| e.to_string())?;
        // A controller opens one connection per job output it relays from an agent's
        // log port, so its connections are not capped; every other identity's are.
        if who.role != Role::Controller {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let n = open.entry(who.clone()).or_insert(0);
            if *n >= self.limits.connections_per_identity {
                return Err(format!(
                    "{who} already has {n} connections open to this port: the limit is \
                     connections_per_identity = {}",
                    self.limits.connections_per_identity
                ));
            }
            *n += 1;
        }
        if matches!(who.role, Role::Agent | Role::Controller) {
            conn.set_max_concurrent_bi_streams(VarInt::from_u32(self.limits.service_streams));
        }
        self.verifier.close_when_refused(conn);
        Ok(Admitted {
            who,
            gate: self.clone(),
            bytes: Arc::new(Semaphore::new(
                (self.limits.connection_request_mib as usize) << 20,
            )),
        })
    }
}

/// An admitted connection: its identity and its byte budget. Dropping it frees its
/// place in the identity's count.
pub struct Admitted {
    /// Who is on the other end.
    pub who: Identity,
    gate: Arc<Gate>,
    bytes: Arc<Semaphore>,
}

/// Bytes reserved for one request, given back when dropped.
pub struct Reserved(
    #[allow(dead_code)] OwnedSemaphorePermit,
    #[allow(dead_code)] OwnedSemaphorePermit,
);

impl Admitted {
    /// Reserves `len` bytes for a request frame from the connection's budget and the
    /// port's, or says which is spent.
    pub fn reserve(&self, len: usize) -> Result<Reserved, String> {
        let n = u32::try_from(len).unwrap_or(u32::MAX);
        let mine = self.bytes.clone().try_acquire_many_owned(n).map_err(|_| {
            format!(
                "a request of {len} bytes is over this connection's budget of request bytes \
                 being read or handled: the limit is connection_request_mib = {} MiB; wait for \
                 earlier answers",
                self.gate.limits.connection_request_mib
            )
        })?;
        let port = self
            .gate
            .bytes
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| {
                format!(
                    "a request of {len} bytes is over this server's budget of request bytes being \
                 read or handled: the limit is request_mib = {} MiB; retry shortly",
                    self.gate.limits.request_mib
                )
            })?;
        Ok(Reserved(mine, port))
    }

    /// The deadline of one request frame.
    pub fn frame_timeout(&self) -> Duration {
        self.gate.limits.frame_timeout()
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.who);
            }
        }
    }
}

/// The address of a local, unauthenticated port (metrics): `IP:port` as given, or a
/// bare port, which means 127.0.0.1 (the default: only this machine reads it).
pub fn listen_addr(value: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = value.trim().parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    value.parse().map_err(|_| {
        format!(
            "`{value}` must be a port (served on 127.0.0.1 only, e.g. \"9100\") or an IP \
             address and port (e.g. \"127.0.0.1:9100\")"
        )
    })
}
