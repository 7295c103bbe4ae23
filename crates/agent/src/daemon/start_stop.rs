//! Starting an attempt (its launch spec, the executor, STARTING and RUNNING reports) and
//! stopping one (its signal, then a kill when its grace ends).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};
use tranche_model::Progress;
use tranche_proto::WorkItem;

use super::{Agent, AttemptKey, RunningAttempt, RunningReport, SHIMS_GONE_DRAIN, STARTING_AFTER};
use crate::exec::{signal_number, ExecError, StopOutcome};
use crate::work_item;

/// Why an attempt did not start.
enum StartError {
    /// The job may not run as its user here, or names output files it cannot have
    /// (see [`work_item`]).
    Refused(work_item::NotStarted),
    /// The executor could not start it.
    Exec(crate::exec::ExecError),
}

/// On a gang's rank 0, whether the attempt's `MASTER_PORT` is free, so that a job
/// whose rendezvous port another program holds fails at once with a message that says
/// so, instead of hanging in its launcher. Another attempt of the job gets another port.
fn rendezvous_port_free(rank: u32, port: u16) -> Result<(), PortTaken> {
    if rank != 0 {
        return Ok(());
    }
    match std::net::TcpListener::bind(("0.0.0.0", port)) {
        Ok(_) => Ok(()),
        Err(source) => Err(PortTaken { port, source }),
    }
}

/// A gang's rendezvous port that another program holds on rank 0's node.
#[derive(Debug, thiserror::Error)]
#[error(
    "MASTER_PORT {port} is not free on this node (rank 0): {source}; another attempt \
     gets another port from the agent's rendezvous_ports"
)]
struct PortTaken {
    /// The attempt's `MASTER_PORT`.
    port: u16,
    /// Why it cannot be bound.
    source: std::io::Error,
}

impl Agent {
    pub(super) async fn start(self: Arc<Self>, item: WorkItem) {
        let key = AttemptKey::of(&item);
        // STARTING is reported once the setup has taken STARTING_AFTER (an image to
        // unpack, a container to create); RUNNING once the job runs and any STARTING
        // report is in. A job that starts sooner goes from SCHEDULED to RUNNING: one
        // replicated write fewer per job.
        let (set_up, set_up_rx) = tokio::sync::oneshot::channel::<()>();
        let starting = {
            let agent = self.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = set_up_rx => {}
                    _ = tokio::time::sleep(STARTING_AFTER) => {
                        agent.progress(key, Progress::Starting).await;
                    }
                }
            })
        };
        let r = &item.rendezvous;
        if let Err(why) = rendezvous_port_free(r.rank, r.master_port) {
            warn!(job = item.job.0, "attempt not started: {why}");
            let _ = set_up.send(());
            let _ = starting.await;
            self.progress(
                key,
                Progress::Exited {
                    code: None,
                    reason: Some(format!("failed to start: {why}")),
                },
            )
            .await;
            return;
        }
        let execs = self.execs.clone();
        let agent = self.clone();
        let work = item.clone();
        // The account lookup may ask a directory service (LDAP, SSSD): off the runtime.
        let started = tokio::task::spawn_blocking(move || {
            let spec = work_item::launch_spec(&agent.cfg, &work, agent.fake_devices)
                .map_err(StartError::Refused)?;
            // A failure of the node's storage comes back as such (`node_fault`).
            execs.start(&spec).map_err(StartError::Exec)
        })
        .await
        .expect("start task");
        let _ = set_up.send(());
        let _ = starting.await;
        match started {
            Ok(a) => {
                info!(job = item.job.0, attempt = item.attempt, "attempt started");
                self.shims_gone.store(0, Ordering::Relaxed);
                let mut held = RunningAttempt::new(
                    Arc::new(a),
                    item.signal.clone(),
                    item.time_limit_s
                        .map(|s| Instant::now() + Duration::from_secs(s)),
                );
                // Sending from here: a reconcile while the report is on its way does not
                // send it again.
                held.running = RunningReport::Sending;
                self.attempts.lock().unwrap().insert(key, held);
                self.report_running(key).await;
            }
            // The node's own storage failed (its spool full, read-only, failing): the
            // job did nothing wrong. The attempt is lost, so the job is requeued, and the
            // node drains, so that no other job is placed here to fail the same way.
            Err(StartError::Exec(e)) if e.node_fault().is_some() => {
                warn!(
                    job = item.job.0,
                    "attempt not started, the node's fault: {e}"
                );
                self.progress(
                    key,
                    Progress::Lost {
                        reason: format!("the node could not start it: {e}"),
                    },
                )
                .await;
                // One reason for every such failure, so that the node drains once.
                let why = e.node_fault().map(|io| io.to_string()).unwrap_or_default();
                self.drain_self(&format!(
                    "the agent cannot write its spool {}: {why}",
                    self.cfg.spool_dir.display()
                ))
                .await;
            }
            // A shim gone without a word (killed, or unable to write even that): the
            // job did nothing wrong and nothing of it ran, so the attempt is lost and
            // the job requeued. The node stays up unless its storage says otherwise
            // (above).
            Err(StartError::Exec(e @ ExecError::ShimGone { .. })) => {
                warn!(job = item.job.0, "attempt not started: {e}");
                self.progress(
                    key,
                    Progress::Lost {
                        reason: format!("the node could not start it: {e}"),
                    },
                )
                .await;
                let gone = self.shims_gone.fetch_add(1, Ordering::Relaxed) + 1;
                if gone >= SHIMS_GONE_DRAIN {
                    // One reason for every such drain, so that the node drains once.
                    self.drain_self(&format!(
                        "{SHIMS_GONE_DRAIN} attempts in a row could not start: their shims \
                         exited without starting the job or saying why (the agent's log has \
                         each)"
                    ))
                    .await;
                }
            }
            Err(e) => {
                // A refusal is the user's or the config's doing, not the node's: the
                // attempt ends with it as its reason and nothing of the job ran.
                let reason = match e {
                    StartError::Refused(why) => format!("not started: {why}"),
                    StartError::Exec(e) => format!("failed to start: {e}"),
                };
                warn!(job = item.job.0, "attempt {reason}");
                self.progress(
                    key,
                    Progress::Exited {
                        code: None,
                        reason: Some(reason),
                    },
                )
                .await;
            }
        }
    }

    /// Signals an attempt and kills it when the grace ends (on a blocking thread).
    pub(super) fn stop(self: Arc<Self>, key: AttemptKey, signal: Option<String>, grace: Duration) {
        let (attempt, sig_name) = {
            let mut l = self.attempts.lock().unwrap();
            let Some(e) = l.get_mut(&key) else { return };
            if e.stopping {
                return;
            }
            e.stopping = true;
            (
                e.attempt.clone(),
                signal.unwrap_or_else(|| e.signal.clone()),
            )
        };
        let sig = signal_number(&sig_name).unwrap_or(15);
        info!(job = key.job.0, attempt = key.attempt.0, signal = %sig_name, grace_ms = grace.as_millis() as u64, "stopping an attempt");
        tokio::task::spawn_blocking(move || {
            let outcome = attempt.stop(sig, grace);
            match outcome {
                StopOutcome::ExitedInGrace { status } => {
                    info!(job = key.job.0, attempt = key.attempt.0, status = %status, "exited within its grace period")
                }
                StopOutcome::Killed { via, .. } => {
                    info!(job = key.job.0, attempt = key.attempt.0, via = %via, "killed when its grace period ended")
                }
            }
        });
    }
}
