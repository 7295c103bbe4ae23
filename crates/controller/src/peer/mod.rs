//! Controller-to-controller transport: QUIC with mutual TLS, only `controller`
//! certificates accepted. Everything queued for one peer is sent as one frame on one
//! unidirectional stream, so raft messages are batched per destination.
//!
//! A frame names its sender's Raft id (`PeerFrame.from`); it is taken only from the
//! controller whose certificate carries that member's name. For an id this controller
//! does not know yet (a controller that joins learns the members from the leader), the
//! first certificate name seen with it is kept, and the id's frames must come with
//! that name afterwards.
//!
//! What the frames hold, and the log entries and images that travel inside them, is
//! [`frames`].

pub mod frames;

pub use frames::{ImageData, OpenedImage, PeerFrame, PeerItem, Proposal};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use tranche_proto::{frame, Member, MAX_PEER_FRAME};
use tranche_tls::{peer_identity, Role, CONTROLLER_SERVER_NAME};

use crate::mailbox::NodeMsg;

/// QUIC application error codes when a connection is refused.
pub const CLOSE_WRONG_ROLE: u32 = 1;
pub const CLOSE_BAD_CERT: u32 = 2;

pub struct PeerNet {
    id: u64,
    addr: String,
    endpoint: quinn::Endpoint,
    addrs: RwLock<BTreeMap<u64, SocketAddr>>,
    /// Each member's name (its certificate's name), by Raft id.
    names: RwLock<BTreeMap<u64, String>>,
    /// Addresses learned from incoming frames of controllers not (yet) in the
    /// membership this controller knows.
    learned: RwLock<BTreeMap<u64, SocketAddr>>,
    /// The certificate names that ids not (yet) in the membership came with.
    learned_names: RwLock<BTreeMap<u64, String>>,
    queues: Mutex<HashMap<u64, mpsc::UnboundedSender<PeerItem>>>,
    incarnation: u64,
    /// The latest incarnation seen from each peer.
    seen: Mutex<HashMap<u64, u64>>,
    /// Peers that restarted: their sender must reconnect.
    restarted: Mutex<HashSet<u64>>,
    /// Fault injection: controllers whose traffic is dropped both ways.
    blocked: Arc<RwLock<HashSet<u64>>>,
    /// Closes an incoming connection whose peer's certificate is revoked later.
    certs: std::sync::OnceLock<Arc<tranche_tls::CertVerifier>>,
}

impl PeerNet {
    /// Incoming connections are closed when `certs` refuses their peer later (a
    /// revoked controller certificate).
    pub fn watch_certs(&self, certs: Arc<tranche_tls::CertVerifier>) {
        let _ = self.certs.set(certs);
    }

    pub fn new(id: u64, addr: String, endpoint: quinn::Endpoint) -> Arc<PeerNet> {
        Arc::new(PeerNet {
            id,
            addr,
            learned: RwLock::new(BTreeMap::new()),
            names: RwLock::new(BTreeMap::new()),
            learned_names: RwLock::new(BTreeMap::new()),
            incarnation: rand::random(),
            seen: Mutex::new(HashMap::new()),
            restarted: Mutex::new(HashSet::new()),
            endpoint,
            addrs: RwLock::new(BTreeMap::new()),
            queues: Mutex::new(HashMap::new()),
            blocked: Arc::new(RwLock::new(HashSet::new())),
            certs: std::sync::OnceLock::new(),
        })
    }

    pub fn set_members(&self, members: &BTreeMap<u64, Member>) {
        let mut a = self.addrs.write().unwrap();
        a.clear();
        for (id, m) in members {
            if let Ok(addr) = m.peer_addr.parse() {
                a.insert(*id, addr);
            }
        }
        *self.names.write().unwrap() = members
            .iter()
            .map(|(id, m)| (*id, m.name.clone()))
            .collect();
    }

    /// Whether a frame that says it comes from `from` may be taken from a connection
    /// whose certificate carries `cert_name` (see the module's comment).
    fn sender_is(&self, from: u64, cert_name: &str) -> Result<(), PeerError> {
        let known = self.names.read().unwrap().get(&from).cloned();
        let mut learned = self.learned_names.write().unwrap();
        admit(known.as_deref(), &mut learned, from, cert_name)
    }

    pub fn set_blocked(&self, ids: &[u64]) {
        let mut b = self.blocked.write().unwrap();
        b.clear();
        b.extend(ids.iter().copied());
        info!(blocked = ?ids, "fault injection: controller traffic blocked");
    }

    fn note_incarnation(&self, id: u64, incarnation: u64) {
        let prev = self.seen.lock().unwrap().insert(id, incarnation);
        if prev.is_some_and(|p| p != incarnation) {
            info!(peer = id, "controller restarted; reconnecting to it");
            self.restarted.lock().unwrap().insert(id);
        }
    }

    fn learn(&self, id: u64, addr: &str) {
        if self.addrs.read().unwrap().contains_key(&id) {
            return;
        }
        if let Ok(a) = addr.parse() {
            self.learned.write().unwrap().insert(id, a);
        }
    }

    fn is_blocked(&self, id: u64) -> bool {
        self.blocked.read().unwrap().contains(&id)
    }

    /// Queues an item for a peer; never blocks. Items for an unreachable peer are
    /// dropped (raft retransmits what matters).
    pub fn send(self: &Arc<Self>, to: u64, item: PeerItem) {
        if to == self.id {
            return;
        }
        let mut q = self.queues.lock().unwrap();
        let tx = q.entry(to).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(self.clone().sender(to, rx));
            tx
        });
        let _ = tx.send(item);
    }

    async fn sender(self: Arc<Self>, to: u64, mut rx: mpsc::UnboundedReceiver<PeerItem>) {
        let mut conn: Option<quinn::Connection> = None;
        while let Some(first) = rx.recv().await {
            let mut items = vec![first];
            while items.len() < 4096 {
                match rx.try_recv() {
                    Ok(i) => items.push(i),
                    Err(_) => break,
                }
            }
            if self.is_blocked(to) {
                continue;
            }
            if conn.as_ref().is_some_and(|c| c.close_reason().is_some())
                || self.restarted.lock().unwrap().remove(&to)
            {
                conn = None;
            }
            if conn.is_none() {
                let addr = self.addrs.read().unwrap().get(&to).copied();
                let addr = addr.or_else(|| self.learned.read().unwrap().get(&to).copied());
                let Some(addr) = addr else {
                    debug!(to, "no address for controller; dropping");
                    continue;
                };
                match self.connect(addr).await {
                    Ok(c) => conn = Some(c),
                    Err(e) => {
                        debug!(to, %addr, "cannot reach controller: {e}");
                        // Drop what piled up meanwhile; wait a little before retrying.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        while rx.try_recv().is_ok() {}
                        continue;
                    }
                }
            }
            let c = conn.as_ref().unwrap();
            let bytes = PeerFrame {
                from: self.id,
                from_addr: self.addr.clone(),
                incarnation: self.incarnation,
                items,
            }
            .encode();
            let sent = async {
                let mut s = c.open_uni().await.map_err(|e| e.to_string())?;
                s.write_all(&bytes).await.map_err(|e| e.to_string())?;
                s.finish().map_err(|e| e.to_string())?;
                Ok::<_, String>(())
            }
            .await;
            if let Err(e) = sent {
                debug!(to, "send failed: {e}");
                conn = None;
            }
        }
    }

    async fn connect(&self, addr: SocketAddr) -> Result<quinn::Connection, PeerError> {
        let connecting = self.endpoint.connect(addr, CONTROLLER_SERVER_NAME)?;
        match tokio::time::timeout(Duration::from_secs(2), connecting).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(PeerError::ConnectTimeout),
        }
    }

    /// Accepts controller connections and hands their frames to the node.
    pub async fn serve(self: Arc<Self>, node: mpsc::Sender<NodeMsg>) {
        while let Some(incoming) = self.endpoint.accept().await {
            let me = self.clone();
            let node = node.clone();
            tokio::spawn(async move {
                let conn = match incoming.await {
                    Ok(c) => {
                        if let Some(certs) = me.certs.get() {
                            certs.close_when_refused(&c);
                        }
                        c
                    }
                    Err(e) => {
                        debug!("peer handshake failed: {e}");
                        return;
                    }
                };
                let cert_name = match peer_identity(&conn) {
                    Ok(id) if id.role == Role::Controller => id.name,
                    Ok(id) => {
                        warn!(peer = %conn.remote_address(), identity = %id, "refused a non-controller on the peer port");
                        conn.close(
                            CLOSE_WRONG_ROLE.into(),
                            format!(
                                "the peer port accepts only controller certificates; this certificate is for {id}"
                            )
                            .as_bytes(),
                        );
                        return;
                    }
                    Err(e) => {
                        conn.close(CLOSE_BAD_CERT.into(), e.to_string().as_bytes());
                        return;
                    }
                };
                while let Ok(mut s) = conn.accept_uni().await {
                    let payload = match frame::read_payload(&mut s, MAX_PEER_FRAME).await {
                        Ok(Some(p)) => p,
                        Ok(None) => continue,
                        Err(e) => {
                            warn!(peer = %conn.remote_address(), "bad peer frame: {e}");
                            continue;
                        }
                    };
                    // A controller of the previous release sends frames of the
                    // previous version; they are read too.
                    let f: PeerFrame = match PeerFrame::decode_payload(&payload) {
                        Ok(f) => f,
                        Err(e) => {
                            warn!(peer = %conn.remote_address(), "bad peer frame: {e}");
                            continue;
                        }
                    };
                    if me.is_blocked(f.from) {
                        continue;
                    }
                    if let Err(e) = me.sender_is(f.from, &cert_name) {
                        warn!(peer = %conn.remote_address(), "refused a peer frame: {e}");
                        continue;
                    }
                    me.learn(f.from, &f.from_addr);
                    me.note_incarnation(f.from, f.incarnation);
                    if node
                        .send(NodeMsg::Peer {
                            from: f.from,
                            items: f.items,
                        })
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    }
}

/// Why a frame was refused, or a controller could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The frame names a controller id whose certificate is another's.
    #[error(
        "it names controller id {from}, which is `{expected}`, but comes from the \
         certificate of `{cert_name}`"
    )]
    WrongSender {
        from: u64,
        expected: String,
        cert_name: String,
    },
    #[error(transparent)]
    Connect(#[from] quinn::ConnectError),
    #[error(transparent)]
    Handshake(#[from] quinn::ConnectionError),
    #[error("connect timed out")]
    ConnectTimeout,
}

/// The rule of [`PeerNet::sender_is`]: `from` is member `known`'s id (when this
/// controller knows it), or an id first seen with `cert_name` (kept in `learned`).
fn admit(
    known: Option<&str>,
    learned: &mut BTreeMap<u64, String>,
    from: u64,
    cert_name: &str,
) -> Result<(), PeerError> {
    let expected = match known {
        Some(name) => name.to_string(),
        None => learned
            .entry(from)
            .or_insert_with(|| cert_name.to_string())
            .clone(),
    };
    if expected == cert_name {
        Ok(())
    } else {
        Err(PeerError::WrongSender {
            from,
            expected,
            cert_name: cert_name.to_string(),
        })
    }
}

impl crate::service::Isolation for PeerNet {
    fn set_blocked(&self, ids: &[u64]) {
        PeerNet::set_blocked(self, ids)
    }
}

#[cfg(test)]
mod tests {
    use super::{admit, PeerError};
    use std::collections::BTreeMap;

    #[test]
    fn a_frame_from_another_certificate_is_a_wrong_sender() {
        let mut learned = BTreeMap::new();
        match admit(Some("ctl1"), &mut learned, 1, "ctl2") {
            Err(PeerError::WrongSender {
                from,
                expected,
                cert_name,
            }) => assert_eq!(
                (from, expected.as_str(), cert_name.as_str()),
                (1, "ctl1", "ctl2")
            ),
            other => panic!("not a wrong sender: {other:?}"),
        }
    }

    #[test]
    fn l4_a_frame_is_taken_only_from_the_certificate_of_the_member_it_names() {
        let mut learned = BTreeMap::new();
        // Member 1 is ctl1: its own certificate passes, another controller's does not.
        assert!(admit(Some("ctl1"), &mut learned, 1, "ctl1").is_ok());
        let e = admit(Some("ctl1"), &mut learned, 1, "ctl2").unwrap_err();
        let e = e.to_string();
        assert!(e.contains("controller id 1") && e.contains("ctl2"), "{e}");
        // An id not in the membership yet is bound to the first name it came with.
        assert!(admit(None, &mut learned, 7, "ctl7").is_ok());
        assert!(admit(None, &mut learned, 7, "ctl7").is_ok());
        assert!(admit(None, &mut learned, 7, "old-ctl").is_err());
        // A refused frame teaches nothing.
        assert_eq!(learned.len(), 1);
    }
}
