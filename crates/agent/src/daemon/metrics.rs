//! The agent's metrics in Prometheus' text format, served on `metrics_addr` by the
//! daemons' shared server.

use std::sync::atomic::Ordering;
use std::sync::Arc;

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

    /// Serves `GET /metrics` on `addr` (see [`tranche_daemon_kit::metrics::serve`]).
    pub(super) fn serve_metrics(self: Arc<Self>, addr: &str) -> Result<(), String> {
        tranche_daemon_kit::metrics::serve(addr, move || self.metrics()).map(|_| ())
    }
}
