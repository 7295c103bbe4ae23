//! The ports of a local cluster's processes, held by the cluster from the moment it
//! picks them: each socket is bound here (port 0, then read back) and handed to the
//! process whose config names its address (`TRANCHE_LISTEN_FDS`; the daemons take a
//! handed socket instead of binding one, see `tranche_daemon_kit::listen`). So no
//! other process on the machine can take a port between its choice and the daemon's
//! start, or while a controller restarts.
//!
//! A UDP socket (QUIC: peers, clients) stays held by the cluster for its whole life, so
//! a restarted controller gets the same one back. A TCP listener (HTTPS, metrics) is
//! closed here once handed over, so that connections to a stopped process are refused
//! rather than queued; it is bound again (the same port) when the process restarts.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::process::Command;

use crate::LocalError;

enum Sock {
    Udp(UdpSocket),
    Tcp(Option<TcpListener>),
}

struct Held {
    addr: SocketAddr,
    sock: Sock,
}

/// The sockets a local cluster holds for its processes.
#[derive(Default)]
pub struct Ports {
    held: Vec<Held>,
}

impl Ports {
    /// Binds a UDP socket on `addr` (port 0: a free port) and holds it; returns its
    /// address.
    pub fn udp(&mut self, addr: SocketAddr) -> Result<SocketAddr, LocalError> {
        let bind = |a| {
            let s = UdpSocket::bind(a).map_err(|source| LocalError::Port {
                proto: "UDP",
                addr: a,
                source,
            })?;
            let at = s.local_addr().map_err(LocalError::Os)?;
            Ok((at, Sock::Udp(s)))
        };
        self.hold(addr, bind)
    }

    /// Binds a TCP listener on `addr` (port 0: a free port) and holds it until a
    /// process takes it; returns its address.
    pub fn tcp(&mut self, addr: SocketAddr) -> Result<SocketAddr, LocalError> {
        let bind = |a| {
            let l = TcpListener::bind(a).map_err(|source| LocalError::Port {
                proto: "TCP",
                addr: a,
                source,
            })?;
            let at = l.local_addr().map_err(LocalError::Os)?;
            Ok((at, Sock::Tcp(Some(l))))
        };
        self.hold(addr, bind)
    }

    /// Binds with `bind` and holds the socket. A free port is one that no socket held
    /// here has, in either protocol: sockets are handed to a process by the addresses
    /// its config names, so a UDP and a TCP socket on the same port number would both
    /// go to it. A port taken that way is kept bound until another is found, so that
    /// the next try gets a new one.
    fn hold(
        &mut self,
        addr: SocketAddr,
        bind: impl Fn(SocketAddr) -> Result<(SocketAddr, Sock), LocalError>,
    ) -> Result<SocketAddr, LocalError> {
        let mut passed = vec![];
        loop {
            let (at, sock) = bind(addr)?;
            if addr.port() != 0 || !self.held.iter().any(|h| h.addr == at) {
                self.held.push(Held { addr: at, sock });
                return Ok(at);
            }
            passed.push(sock);
        }
    }
    /// Gives up the UDP socket held for `addr`, for the caller to serve that address
    /// itself (e.g. a relay in front of a controller).
    pub fn take_udp(&mut self, addr: SocketAddr) -> Option<UdpSocket> {
        let i = self
            .held
            .iter()
            .position(|h| h.addr == addr && matches!(h.sock, Sock::Udp(_)))?;
        match self.held.remove(i).sock {
            Sock::Udp(s) => Some(s),
            Sock::Tcp(_) => None,
        }
    }

    /// Prepares `cmd` to start the process whose config is `config`: every held socket
    /// whose address a top-level setting of the config names (`peer_addr = "..."`,
    /// `metrics_addr = "9100"`, ...) is handed to it. Call [`Ports::handed`] once the
    /// process is spawned.
    pub fn hand(&mut self, cmd: &mut Command, config: &str) -> Result<(), LocalError> {
        let named = listen_addrs(config);
        let mut fds: Vec<RawFd> = Vec::new();
        for h in self.held.iter_mut().filter(|h| named.contains(&h.addr)) {
            let fd = match &mut h.sock {
                Sock::Udp(s) => s.as_raw_fd(),
                Sock::Tcp(l) => {
                    if l.is_none() {
                        let again =
                            TcpListener::bind(h.addr).map_err(|source| LocalError::Rebind {
                                addr: h.addr,
                                source,
                            })?;
                        *l = Some(again);
                    }
                    l.as_ref().expect("bound above").as_raw_fd()
                }
            };
            fds.push(fd);
        }
        if fds.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = fds.iter().map(|f| f.to_string()).collect();
        cmd.env("TRANCHE_LISTEN_FDS", list.join(","));
        // SAFETY: between fork and exec the child only clears the close-on-exec flag of
        // descriptors it inherited open (fcntl is async-signal-safe), so that they
        // survive the exec; the parent's descriptors are not touched.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                for fd in &fds {
                    if nix::libc::fcntl(*fd, nix::libc::F_SETFD, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// After a spawn: the TCP listeners handed to the process are closed here.
    pub fn handed(&mut self, config: &str) {
        let named = listen_addrs(config);
        for h in self.held.iter_mut().filter(|h| named.contains(&h.addr)) {
            if let Sock::Tcp(l) = &mut h.sock {
                *l = None;
            }
        }
    }
}

/// The addresses that the top-level settings of a daemon's config name: values that
/// are an IP address and port, or a bare port (loopback, as the daemons read it).
fn listen_addrs(config: &str) -> Vec<SocketAddr> {
    let Ok(table) = config.parse::<toml::Table>() else {
        return Vec::new();
    };
    table
        .values()
        .filter_map(|v| v.as_str())
        .filter_map(|s| {
            s.parse::<SocketAddr>().ok().or_else(|| {
                s.parse::<u16>()
                    .ok()
                    .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_top_level_addresses_are_named() {
        let text = "peer_addr = \"127.0.0.1:4001\"\nmetrics_addr = \"9100\"\nname = \"c1\"\n\
                    [[peers]]\npeer_addr = \"127.0.0.1:4003\"\n";
        let mut named = listen_addrs(text);
        named.sort();
        let want: Vec<SocketAddr> = vec![
            "127.0.0.1:4001".parse().unwrap(),
            "127.0.0.1:9100".parse().unwrap(),
        ];
        assert_eq!(named, want);
    }

    #[test]
    fn a_held_port_is_not_free_and_a_handed_tcp_listener_is_closed_here() {
        let mut p = Ports::default();
        let u = p.udp("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(UdpSocket::bind(u).is_err(), "a held UDP port was free");
        let t = p.tcp("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(TcpListener::bind(t).is_err(), "a held TCP port was free");
        let config = format!("http_addr = \"{t}\"\n");
        let mut cmd = Command::new("true");
        p.hand(&mut cmd, &config).unwrap();
        p.handed(&config);
        // Closed here once handed, so that a stopped process's port refuses
        // connections. (Looked at in the record, not by connecting: once closed, the
        // port is anyone's on this machine.)
        assert!(
            matches!(&p.held[1].sock, Sock::Tcp(None)),
            "the handed listener is still open here"
        );
        assert!(
            matches!(&p.held[0].sock, Sock::Udp(_)),
            "a UDP port stays held"
        );
        // The next start binds it again.
        let mut cmd = Command::new("true");
        p.hand(&mut cmd, &config).unwrap();
        assert!(
            TcpListener::bind(t).is_err(),
            "not bound again for a restart"
        );
    }

    #[test]
    fn a_tcp_port_never_has_the_number_of_a_held_udp_port() {
        let mut p = Ports::default();
        let u = p.udp("127.0.0.1:0".parse().unwrap()).unwrap();
        // The kernel may give a TCP listener the number of a held UDP port (the two
        // are apart); the first bind here does so on purpose.
        let tries = std::cell::Cell::new(0);
        let bind = |a: SocketAddr| {
            tries.set(tries.get() + 1);
            let at = if tries.get() == 1 { u } else { a };
            let l = TcpListener::bind(at).unwrap();
            Ok((l.local_addr().unwrap(), Sock::Tcp(Some(l))))
        };
        let t = p.hold("127.0.0.1:0".parse().unwrap(), bind).unwrap();
        assert_eq!(tries.get(), 2, "the clashing port was taken");
        assert_ne!(t.port(), u.port());
        // Named by a config, the UDP port's address hands over the UDP socket alone.
        let config = format!("peer_addr = \"{u}\"\n");
        p.hand(&mut Command::new("true"), &config).unwrap();
        p.handed(&config);
        assert!(
            matches!(&p.held[1].sock, Sock::Tcp(Some(_))),
            "another process's TCP listener was handed over"
        );
    }

    #[test]
    fn a_port_taken_elsewhere_is_a_port_error() {
        let mut p = Ports::default();
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let t = TcpListener::bind("127.0.0.1:0").unwrap();
        let (u, t) = (u.local_addr().unwrap(), t.local_addr().unwrap());
        match p.udp(u).unwrap_err() {
            LocalError::Port { proto, addr, .. } => assert_eq!((proto, addr), ("UDP", u)),
            other => panic!("not a port error: {other:?}"),
        }
        let e = p.tcp(t).unwrap_err();
        assert!(
            matches!(&e, LocalError::Port { proto: "TCP", addr, .. } if *addr == t),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(&format!("cannot bind TCP {t}: ")),
            "{e}"
        );
        assert!(p.held.is_empty(), "a port it could not bind is held");
    }
}
