//! Progress reports to the controllers: RUNNING once per attempt (sent again by the next
//! reconcile when not delivered), and every other event, counted delivered once the
//! controllers have it or refuse it as already over.

use tracing::warn;
use tranche_client::ClientError;
use tranche_model::Progress;
use tranche_proto::{ApiError, ClientCommand, Refusal};

use std::sync::Arc;
use std::time::Duration;

use super::{Agent, AttemptKey, RunningReport};

/// How often the agent looks at the jobs' checkpoint files.
pub const CHECKPOINT_LOOK: Duration = Duration::from_secs(5);
/// The least time between two checkpoint reports of one attempt.
pub const CHECKPOINT_GAP: Duration = Duration::from_secs(30);

impl Agent {
    /// Reports that an attempt runs (its `running` is `Sending`); a report not
    /// delivered is sent again by the next reconcile.
    pub(super) async fn report_running(&self, key: AttemptKey) {
        let delivered = self.progress(key, Progress::Running).await;
        if let Some(e) = self.attempts.lock().unwrap().get_mut(&key) {
            e.running = if delivered {
                RunningReport::Sent
            } else {
                RunningReport::Unsent
            };
        }
    }

    /// Reports the checkpoints jobs make: every [`CHECKPOINT_LOOK`] it reads the time
    /// of each running attempt's checkpoint file, and reports an attempt whose file
    /// changed, at most once per [`CHECKPOINT_GAP`] (each report is a replicated
    /// write). The controllers record the checkpoint at their own time, so the node's
    /// clock does not matter; what a job touched between two looks counts a few
    /// seconds late.
    pub(super) async fn checkpoints(self: Arc<Self>) {
        loop {
            tokio::time::sleep(CHECKPOINT_LOOK).await;
            let running: Vec<_> = self
                .attempts
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, e)| e.running == RunningReport::Sent)
                .filter(|(_, e)| {
                    e.checkpoint_sent
                        .is_none_or(|t| t.elapsed() >= CHECKPOINT_GAP)
                })
                .map(|(k, e)| (*k, e.attempt.clone(), e.checkpoint_seen))
                .collect();
            if running.is_empty() {
                continue;
            }
            // The file system is read off the runtime's workers.
            let Ok(touched) = tokio::task::spawn_blocking(move || {
                running
                    .into_iter()
                    .filter_map(|(k, a, seen)| {
                        a.checkpoint_touched()
                            .filter(|t| Some(*t) != seen)
                            .map(|t| (k, t))
                    })
                    .collect::<Vec<_>>()
            })
            .await
            else {
                continue;
            };
            for (key, at) in touched {
                if self.report(key, &Progress::Checkpointed).await {
                    if let Some(e) = self.attempts.lock().unwrap().get_mut(&key) {
                        e.checkpoint_seen = Some(at);
                        e.checkpoint_sent = Some(std::time::Instant::now());
                    }
                }
            }
        }
    }

    /// Whether this node's part of the attempt has ended and the controllers have
    /// that: in this agent's memory, or, after a restart, its output kept in the spool
    /// (which happens only once the end has been reported).
    pub(super) fn ended_here(&self, key: AttemptKey) -> bool {
        if self.ended_here.lock().unwrap().contains(&key) {
            return true;
        }
        crate::exec::kept_output(&self.cfg.spool_dir, key.job, key.attempt, false).is_some()
    }

    /// Sends a progress report. True when the controllers have it: applied, or refused
    /// because the attempt is already over (a report repeated after a restart).
    pub(super) async fn progress(&self, key: AttemptKey, event: Progress) -> bool {
        let delivered = self.report(key, &event).await;
        if delivered && matches!(event, Progress::Exited { .. } | Progress::Lost { .. }) {
            self.ended_here.lock().unwrap().insert(key);
        }
        delivered
    }

    async fn report(&self, key: AttemptKey, event: &Progress) -> bool {
        let event = event.clone();
        let job = key.job;
        match self
            .client
            .command(ClientCommand::JobProgress {
                job,
                attempt: key.attempt.0,
                event,
            })
            .await
        {
            Ok(Ok(_)) => {
                self.contact();
                true
            }
            Ok(Err(ApiError::Rejected(Refusal::Conflict(_) | Refusal::NotFound { .. }))) => {
                self.contact();
                true
            }
            Ok(Err(e)) => {
                warn!(job = job.0, "progress refused: {e}");
                false
            }
            Err(ClientError::Api(e)) => {
                warn!(job = job.0, "progress refused: {e}");
                false
            }
            Err(e) => {
                warn!(job = job.0, "progress not delivered: {e}");
                false
            }
        }
    }
}
