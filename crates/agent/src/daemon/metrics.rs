//! The agent's metrics in Prometheus' text format, and the small HTTP server (tiny_http,
//! on a thread of its own) that serves them on `metrics_addr`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::warn;

use super::Agent;

impl Agent {
    /// The agent's metrics in Prometheus' text format.
    pub fn metrics(&self) -> String {
        let age = self.last_contact.lock().unwrap().elapsed().as_secs_f64();
        let (running, stopping) = {
            let l = self.attempts.lock().unwrap();
            let running = l.values().filter(|e| e.exit().is_none()).count();
            (running, l.values().filter(|e| e.stopping).count())
        };
        let fenced = self.fenced.load(Ordering::Relaxed) as u8;
        let gpus = self.inventory.gpus.len();
        format!(
            "# HELP tranche_agent_heartbeat_age_seconds Time since the controllers last answered.\n\
             # TYPE tranche_agent_heartbeat_age_seconds gauge\n\
             tranche_agent_heartbeat_age_seconds {age}\n\
             # HELP tranche_agent_attempts_running Attempts with a process left on this node.\n\
             # TYPE tranche_agent_attempts_running gauge\n\
             tranche_agent_attempts_running {running}\n\
             # HELP tranche_agent_attempts_stopping Attempts being stopped (signal sent).\n\
             # TYPE tranche_agent_attempts_stopping gauge\n\
             tranche_agent_attempts_stopping {stopping}\n\
             # HELP tranche_agent_fenced 1 while the agent has fenced its node.\n\
             # TYPE tranche_agent_fenced gauge\n\
             tranche_agent_fenced {fenced}\n\
             # HELP tranche_agent_gpus GPUs this node reports.\n\
             # TYPE tranche_agent_gpus gauge\n\
             tranche_agent_gpus {gpus}\n"
        )
    }

    /// Serves `GET /metrics` on `addr` (a bare port: 127.0.0.1). Metrics carry no
    /// authentication, so an address off this machine is warned about.
    pub(super) fn serve_metrics(self: Arc<Self>, addr: &str) -> Result<(), String> {
        let a = tranche_tls::listen_addr(addr).map_err(|e| format!("metrics_addr: {e}"))?;
        if !a.ip().is_loopback() {
            warn!(
                addr = %a,
                "metrics_addr is not a loopback address: every host that reaches it (every \
                 job on this node too) reads the metrics without authentication"
            );
        }
        let server = tiny_http::Server::http(a).map_err(|e| format!("metrics_addr {a}: {e}"))?;
        std::thread::Builder::new()
            .name("tranche-metrics".into())
            .spawn(move || {
                for req in server.incoming_requests() {
                    let resp = if req.url() == "/metrics" {
                        tiny_http::Response::from_string(self.metrics())
                    } else {
                        tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                    };
                    let _ = req.respond(resp);
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(())
    }
}
