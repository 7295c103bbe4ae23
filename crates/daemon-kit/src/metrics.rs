//! The Prometheus `/metrics` endpoint of a daemon: plain HTTP on its own thread,
//! serving the text its daemon renders at each scrape.

/// Serves `GET /metrics` on `addr` (a bare port: 127.0.0.1) from a thread of its own,
/// answering with `render()` in Prometheus' text format. Metrics carry no
/// authentication, so an address off this machine is warned about. Returns the address
/// bound (port 0 picks a free one).
pub fn serve<F>(addr: &str, render: F) -> Result<std::net::SocketAddr, String>
where
    F: Fn() -> String + Send + 'static,
{
    let server = bind(addr)?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| format!("metrics_addr {addr}: not an IP address"))?;
    std::thread::Builder::new()
        .name("tranche-metrics".into())
        .spawn(move || {
            for req in server.incoming_requests() {
                let resp = if req.url() == "/metrics" {
                    let header = tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"text/plain; version=0.0.4"[..],
                    )
                    .expect("static header");
                    tiny_http::Response::from_string(render()).with_header(header)
                } else {
                    tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                };
                let _ = req.respond(resp);
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(bound)
}

/// Binds the metrics port of `metrics_addr` (see [`tranche_tls::listen_addr`]).
pub fn bind(addr: &str) -> Result<tiny_http::Server, String> {
    let a = tranche_tls::listen_addr(addr).map_err(|e| format!("metrics_addr: {e}"))?;
    if !a.ip().is_loopback() {
        tracing::warn!(
            addr = %a,
            "metrics_addr is not a loopback address: every host that reaches it (every job's \
             container on this machine too) reads the metrics without authentication"
        );
    }
    let listener = crate::listen::tcp(a).map_err(|e| format!("metrics_addr {a}: {e}"))?;
    let server = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| format!("metrics_addr {a}: {e}"))?;
    if let Some(l) = server.server_addr().to_ip() {
        tracing::info!(addr = %l, "metrics serving");
    }
    Ok(server)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    #[test]
    fn a_scrape_gets_the_rendered_text_and_other_paths_404() {
        let addr = super::serve("127.0.0.1:0", || "tranche_up 1\n".to_string()).unwrap();
        let get = |path: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("/metrics");
        assert!(
            ok.starts_with("HTTP/1.0 200") || ok.starts_with("HTTP/1.1 200"),
            "{ok}"
        );
        assert!(ok.ends_with("tranche_up 1\n"), "{ok}");
        let other = get("/other");
        assert!(other.contains(" 404 "), "{other}");
    }
}
