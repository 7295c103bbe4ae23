//! The reconcile: what the controllers place on this node against what runs here.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info};
use tranche_model::JobStatus;
use tranche_proto::{NodeWork, WorkItem};
use tranche_state::Progress;

use super::{Agent, Key, RunningReport, ORPHAN_GRACE};

impl Agent {
    /// Starts what is placed here, stops what must stop, and stops what is no longer
    /// listed (cancelled, requeued after a DOWN).
    pub(super) async fn reconcile(self: Arc<Self>, w: NodeWork) {
        let listed: HashMap<Key, &WorkItem> = w.items.iter().map(|i| (Key::of(i), i)).collect();
        // Attempts the controllers no longer place here (cancelled, or requeued while
        // this node was DOWN) are stopped first: their GPUs may be placed anew below.
        let orphans: Vec<Key> = self
            .local
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, l)| !listed.contains_key(k) && !l.stopping && l.exit().is_none())
            .map(|(k, _)| *k)
            .collect();
        for key in orphans {
            info!(
                job = key.job.0,
                attempt = key.attempt.0,
                "attempt no longer placed here; stopping it"
            );
            self.clone().stop(key, None, ORPHAN_GRACE);
        }
        self.ended_here
            .lock()
            .unwrap()
            .retain(|k| listed.contains_key(k));
        for item in &w.items {
            let key = Key::of(item);
            let present = self.local.lock().unwrap().contains_key(&key);
            if !present && self.starting.lock().unwrap().contains_key(&key) {
                continue;
            }
            if !present && self.ended_here(key) {
                // This node's member of a gang has ended; the others have not yet.
                continue;
            }
            if !present {
                if item.status != JobStatus::Scheduled {
                    // Started by this node, but no trace of it is left here (the spool
                    // was lost): it cannot be running any more.
                    self.progress(
                        key,
                        Progress::Lost {
                            reason: format!(
                                "the agent on {} has no record of this attempt",
                                self.inventory.name
                            ),
                        },
                    )
                    .await;
                    continue;
                }
                if item.stop.is_some() {
                    // Stopped before it ever started here: nothing to signal.
                    self.progress(
                        key,
                        Progress::Exited {
                            code: None,
                            reason: Some("stopped before it started".into()),
                        },
                    )
                    .await;
                    continue;
                }
                if self.fenced.load(Ordering::Relaxed) {
                    continue;
                }
                // A GPU is never held by two running jobs: an attempt placed on GPUs
                // that an earlier attempt here still holds (one the controllers gave up
                // while this node was DOWN) starts once that one has exited.
                let holders = self.holders_of(item);
                if !holders.is_empty() {
                    debug!(
                        job = item.job.0,
                        attempt = item.attempt,
                        holders = %holders
                            .iter()
                            .map(Key::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        "waiting for earlier attempts to give back the GPUs"
                    );
                    continue;
                }
                self.starting
                    .lock()
                    .unwrap()
                    .insert(key, item.gpus.iter().map(|g| g.index).collect());
                let agent = self.clone();
                let item = item.clone();
                tokio::spawn(async move {
                    agent.clone().start(item).await;
                    agent.starting.lock().unwrap().remove(&key);
                });
                continue;
            }
            if let Some(stop) = &item.stop {
                let grace = Duration::from_millis(stop.deadline_ms.saturating_sub(w.now));
                self.clone().stop(key, Some(item.signal.clone()), grace);
            } else {
                let report = {
                    let mut l = self.local.lock().unwrap();
                    let e = l.get_mut(&key).unwrap();
                    e.signal = item.signal.clone();
                    // An attempt adopted after a restart: its time limit counts from the
                    // start the controllers recorded.
                    if e.time_limit_at.is_none() {
                        if let (Some(limit), Some(started)) = (item.time_limit_s, item.started_at) {
                            let end_ms = started + limit * 1000;
                            let left = end_ms.saturating_sub(w.now);
                            e.time_limit_at = Some(Instant::now() + Duration::from_millis(left));
                        }
                    }
                    let report = e.running == RunningReport::Unsent && e.exit().is_none();
                    if report {
                        e.running = RunningReport::Sending;
                    }
                    report
                };
                if report {
                    // Off the poll loop: the next work list need not wait for it.
                    let agent = self.clone();
                    tokio::spawn(async move { agent.report_running(key).await });
                }
            }
        }
    }

    /// Attempts on this node, not yet ended, that hold any of the item's GPUs.
    /// Attempts being started count: they will hold their GPUs.
    fn holders_of(&self, item: &WorkItem) -> Vec<Key> {
        let mine = |g: &tranche_model::GpuIndex| item.gpus.iter().any(|b| b.index == *g);
        let mut out: Vec<Key> = self
            .local
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l)| {
                l.attempt.spec().gpus.iter().any(|g| mine(&g.index)) && l.exit().is_none()
            })
            .map(|(k, _)| *k)
            .collect();
        out.extend(
            self.starting
                .lock()
                .unwrap()
                .iter()
                .filter(|(k, gpus)| **k != Key::of(item) && gpus.iter().any(mine))
                .map(|(k, _)| *k),
        );
        out
    }
}
