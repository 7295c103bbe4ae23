//! Listening sockets a daemon is handed by whoever started it, instead of binding its
//! own: systemd's socket activation (`LISTEN_FDS`, `LISTEN_PID`), or
//! `TRANCHE_LISTEN_FDS=7,9` (the descriptors' numbers), which `tranche-local` uses so
//! that a test's cluster holds its ports from the moment it picks them, and no other
//! process can take one before the daemon starts or while it restarts.
//!
//! A daemon calls [`take_inherited`] first thing in `main`, then [`udp`] and [`tcp`]
//! where it would bind: a handed socket whose local address is the one asked for is
//! used, and any other address is bound as usual. So configs name the same addresses
//! either way.

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::Mutex;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{getsockname, getsockopt, sockopt, SockType, SockaddrStorage};

/// The handed sockets not yet taken, with their type and local address.
static HANDED: Mutex<Vec<(RawFd, SockType, SocketAddr)>> = Mutex::new(Vec::new());

/// Takes note of the sockets this process was handed and removes the variables that
/// name them from the environment (so that nothing this process starts sees them).
/// Call it in `main` before any thread starts. A descriptor that is not a bound IPv4
/// or IPv6 socket is ignored.
pub fn take_inherited() {
    let mut fds: Vec<RawFd> = Vec::new();
    if let Ok(list) = std::env::var("TRANCHE_LISTEN_FDS") {
        fds.extend(
            list.split(',')
                .filter_map(|s| s.trim().parse::<RawFd>().ok()),
        );
    }
    let for_us = match std::env::var("LISTEN_PID") {
        Ok(pid) => pid.trim().parse::<u32>().ok() == Some(std::process::id()),
        Err(_) => false,
    };
    if for_us {
        let n = std::env::var("LISTEN_FDS")
            .ok()
            .and_then(|n| n.trim().parse::<RawFd>().ok())
            .unwrap_or(0);
        // systemd hands them from descriptor 3 on (SD_LISTEN_FDS_START).
        fds.extend(3..3 + n);
    }
    for var in [
        "TRANCHE_LISTEN_FDS",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
    ] {
        // SAFETY (edition 2024 wording): called before any other thread exists.
        std::env::remove_var(var);
    }
    for fd in fds {
        note(fd);
    }
}

/// Notes one handed descriptor, if it is a bound IPv4 or IPv6 socket.
fn note(fd: RawFd) {
    if let Some((ty, addr)) = describe(fd) {
        // Nothing this daemon starts inherits it.
        let _ = fcntl(borrow(fd), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
        HANDED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((fd, ty, addr));
    }
}

fn borrow(fd: RawFd) -> std::os::fd::BorrowedFd<'static> {
    // SAFETY: a descriptor handed to this process stays open until it is taken, and
    // it is only looked at here.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}

fn describe(fd: RawFd) -> Option<(SockType, SocketAddr)> {
    let ty = getsockopt(&borrow(fd), sockopt::SockType).ok()?;
    let a: SockaddrStorage = getsockname(fd).ok()?;
    let addr = if let Some(v4) = a.as_sockaddr_in() {
        SocketAddr::from((v4.ip(), v4.port()))
    } else {
        let v6 = a.as_sockaddr_in6()?;
        SocketAddr::from((v6.ip(), v6.port()))
    };
    Some((ty, addr))
}

fn take(ty: SockType, addr: SocketAddr) -> Option<RawFd> {
    let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
    let i = handed.iter().position(|(_, t, a)| *t == ty && *a == addr)?;
    Some(handed.remove(i).0)
}

/// A UDP socket on `addr`: the one handed to this process for it, or a new one.
pub fn udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    match take(SockType::Datagram, addr) {
        // SAFETY: the descriptor is a UDP socket handed to this process, taken once.
        Some(fd) => Ok(unsafe { UdpSocket::from_raw_fd(fd) }),
        None => UdpSocket::bind(addr),
    }
}

/// A TCP listener on `addr`: the one handed to this process for it, or a new one.
pub fn tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    match take(SockType::Stream, addr) {
        // SAFETY: the descriptor is a TCP listener handed to this process, taken once.
        Some(fd) => Ok(unsafe { TcpListener::from_raw_fd(fd) }),
        None => TcpListener::bind(addr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    #[test]
    fn a_handed_socket_serves_its_own_address_and_kind_only() {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = u.local_addr().unwrap();
        note(u.into_raw_fd());
        // A TCP listener asked for on the same address is not the handed UDP socket.
        assert!(take(SockType::Stream, addr).is_none());
        // The UDP one is: binding anew would fail, the port being taken.
        let s = udp(addr).unwrap();
        assert_eq!(s.local_addr().unwrap(), addr);
        // Taken once: a second ask binds anew, and the port is in use.
        assert!(udp(addr).is_err());
    }

    #[test]
    fn what_is_not_a_socket_is_not_noted() {
        let fd = std::fs::File::open("/dev/null").unwrap().into_raw_fd();
        note(fd);
        assert!(HANDED.lock().unwrap().iter().all(|h| h.0 != fd));
    }
}
