//! Retention, driven from the Raft loop: the leader proposes `ForgetEnded` for ended
//! jobs past `[retention] job_hot_s` (or beyond `job_hot_max`), and every controller
//! drops its own history records past `history_days`.

use std::time::{Duration, Instant};

use tracing::{info, warn};
use tranche_state::{Command, Retention};

use super::RaftNode;
use crate::mailbox::wall_ms;

/// The most jobs one `ForgetEnded` drops: each controller writes them to its history
/// store in one transaction while it holds the state, so a batch stays short.
pub const FORGET_BATCH: u32 = 2_000;

/// How soon the leader looks again when its last batch was full.
const BACKLOG_RECHECK: Duration = Duration::from_millis(50);

impl RaftNode {
    /// The leader proposes dropping the ended jobs past their retention, in batches;
    /// every controller applies the same cut (see `tranche_state::retention`).
    pub(super) fn forget_ended(&mut self) {
        let r = &self.cfg.retention;
        let wait = if self.forget_backlog {
            BACKLOG_RECHECK
        } else {
            Duration::from_secs(r.check_s)
        };
        if !self.is_leader()
            || self.applied_term != self.raw.raft.term
            || self.last_forget.elapsed() < wait
        {
            return;
        }
        self.last_forget = Instant::now();
        let retention = Retention {
            ended_before: wall_ms().saturating_sub(r.job_hot_s.saturating_mul(1000)),
            keep_jobs: r.job_hot_max,
            keep_bytes: r.job_hot_max_mb.saturating_mul(1 << 20),
            limit: FORGET_BATCH,
        };
        // Nothing due costs one look at the oldest ended entry.
        let n = self
            .shared
            .read()
            .unwrap()
            .state
            .forgettable(&retention)
            .len();
        self.forget_backlog = n >= FORGET_BATCH as usize;
        if n == 0 {
            return;
        }
        info!(jobs = n, "ended jobs leave the state for the history store");
        let id = self.new_id();
        self.propose(self.id, id, Command::ForgetEnded(retention), None);
    }

    /// Every controller drops its history records older than `history_days`, a batch
    /// at a time, off the Raft loop.
    pub(super) fn prune_history(&mut self) {
        let every = Duration::from_secs(self.cfg.retention.check_s.saturating_mul(10));
        if self.last_history_prune.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last_history_prune = Some(Instant::now());
        let Some(history) = self.shared.read().unwrap().history.clone() else {
            return;
        };
        let keep_ms = u64::from(self.cfg.retention.history_days) * 24 * 3600 * 1000;
        let before = wall_ms().saturating_sub(keep_ms);
        tokio::task::spawn_blocking(move || loop {
            match history.prune(before) {
                Ok(0) => break,
                Ok(n) => info!(records = n, "history records past history_days dropped"),
                Err(e) => {
                    warn!("{e}");
                    break;
                }
            }
        });
    }
}
