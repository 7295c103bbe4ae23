//! Progress reports to the controllers: RUNNING once per attempt (sent again by the next
//! reconcile when not delivered), and every other event, counted delivered once the
//! controllers have it or refuse it as already over.

use tracing::warn;
use tranche_client::ClientError;
use tranche_model::Progress;
use tranche_proto::{ApiError, ClientCommand, Refusal};

use super::{Agent, AttemptKey, RunningReport};

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
