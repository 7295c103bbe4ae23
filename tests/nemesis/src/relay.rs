//! A fault-injecting UDP relay in front of each controller's peer port.
//!
//! Every controller listens on a private port and is reached by the others at the
//! relay's address (its `peer_addr`; it listens on `peer_listen`). The relay forwards
//! each datagram, and the replies, unless one end is cut off: then it drops them, as a
//! broken link would. QUIC sees packet loss, nothing else.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::UdpSocket;

/// Which controllers are cut off, shared by every relay.
#[derive(Default)]
pub struct Cuts {
    blocked: Mutex<HashSet<u64>>,
    /// A controller's private listen address → its id (the source of its packets).
    sources: Mutex<HashMap<SocketAddr, u64>>,
    pub dropped: std::sync::atomic::AtomicU64,
    pub forwarded: std::sync::atomic::AtomicU64,
}

impl Cuts {
    pub fn set(&self, ids: &[u64]) {
        let mut b = self.blocked.lock().unwrap();
        b.clear();
        b.extend(ids.iter().copied());
    }

    pub fn add_source(&self, addr: SocketAddr, id: u64) {
        self.sources.lock().unwrap().insert(addr, id);
    }

    /// True when a packet between controller `to` and the sender at `from` must be lost.
    fn cut(&self, to: u64, from: SocketAddr) -> bool {
        let b = self.blocked.lock().unwrap();
        if b.contains(&to) {
            return true;
        }
        let src = self.sources.lock().unwrap().get(&from).copied();
        src.is_some_and(|s| b.contains(&s))
    }

    fn count(&self, dropped: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if dropped {
            self.dropped.fetch_add(1, Relaxed);
        } else {
            self.forwarded.fetch_add(1, Relaxed);
        }
    }
}

/// Starts the relay for controller `id`: datagrams to `public` go to `private`.
pub async fn spawn(
    id: u64,
    public: std::net::UdpSocket,
    private: SocketAddr,
    cuts: Arc<Cuts>,
) -> std::io::Result<()> {
    public.set_nonblocking(true)?;
    let front = Arc::new(UdpSocket::from_std(public)?);
    tokio::spawn(async move {
        // One upstream socket per sender, so that replies find their way back.
        let mut ups: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
        let mut buf = vec![0u8; 65_536];
        loop {
            let Ok((n, from)) = front.recv_from(&mut buf).await else {
                continue;
            };
            let dropped = cuts.cut(id, from);
            cuts.count(dropped);
            if dropped {
                continue;
            }
            let up = match ups.get(&from) {
                Some(u) => u.clone(),
                None => {
                    let Ok(u) = UdpSocket::bind("127.0.0.1:0").await else {
                        continue;
                    };
                    let u = Arc::new(u);
                    ups.insert(from, u.clone());
                    tokio::spawn(backward(id, from, u.clone(), front.clone(), cuts.clone()));
                    u
                }
            };
            let _ = up.send_to(&buf[..n], private).await;
        }
    });
    Ok(())
}

/// Replies from the controller to one sender.
async fn backward(
    id: u64,
    to: SocketAddr,
    up: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    cuts: Arc<Cuts>,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((n, _)) = up.recv_from(&mut buf).await else {
            continue;
        };
        let dropped = cuts.cut(id, to);
        cuts.count(dropped);
        if !dropped {
            let _ = front.send_to(&buf[..n], to).await;
        }
    }
}
