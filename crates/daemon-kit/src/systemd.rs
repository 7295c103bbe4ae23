//! Readiness for the service manager: systemd's `Type=notify` protocol (a datagram
//! `READY=1` to `$NOTIFY_SOCKET`). Without that variable nothing happens.

/// Tells systemd (or any manager speaking its protocol) the service's state, e.g.
/// `READY=1` or `STOPPING=1`. Errors are ignored: readiness is advisory.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = sock.send_to_addr(state.as_bytes(), &addr);
        }
    } else {
        let _ = sock.send_to(state.as_bytes(), &path);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ready_reaches_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &path);
        super::notify("READY=1");
        let mut buf = [0u8; 64];
        let n = sock.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
