//! The exit monitor: waits for attempts' ends (on their shims' pidfds, and a sweep of
//! the spool), reports each exit once, stops attempts past their time limit, and fences
//! the node when the controllers have been out of reach for `fence_after`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};
use tranche_model::Progress;

use super::{Agent, AttemptKey, ORPHAN_GRACE, SWEEP};
use crate::exec::Attempt;

/// The reason, in an exit report, of an attempt the agent stopped when it fenced its
/// node: the job did not fail, and the controllers requeue it.
const FENCED: &str = "fenced: the agent lost the controllers for fence_after";

impl Agent {
    /// Reports exits (exactly once: an exit is forgotten only once the controllers have
    /// it), and fences the node when the controllers have been out of reach too long.
    ///
    /// An attempt's end is waited for on its shim's pidfd, which wakes the monitor at
    /// once; every second each attempt is also looked for in the spool, for an end the
    /// shim did not live to see through (its processes outliving a killed shim).
    pub(super) async fn monitor(self: Arc<Self>) {
        let fence_after = Duration::from_secs(self.cfg.fence_after_s);
        let mut swept = Instant::now();
        loop {
            tokio::select! {
                _ = self.shim_gone.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            let sweep = swept.elapsed() >= SWEEP;
            if sweep {
                swept = Instant::now();
            }
            // Under the lock only what is in memory; the spool is read on a blocking
            // thread, so that the runtime's workers (the connection to the controllers,
            // every report) never wait on the file system.
            let (new, known, look) = {
                let mut l = self.attempts.lock().unwrap();
                let mut new = vec![];
                for e in l.values_mut().filter(|e| !e.watched) {
                    e.watched = true;
                    // Not looked for in the spool while its watch is set up: a watch that
                    // cannot be made looks again.
                    e.look.store(false, Ordering::Release);
                    new.push((e.attempt.clone(), e.look.clone()));
                }
                let mut known = vec![];
                let mut look = vec![];
                // An exit whose report is on its way is not copied out again: this runs
                // every 10 ms, and an attempt's copy is its whole spec.
                let reporting = self.reporting.lock().unwrap();
                for (k, e) in l.iter() {
                    if e.attempt.known_exit().is_some() {
                        if !reporting.contains(k) {
                            known.push((*k, e.attempt.clone()));
                        }
                    } else if sweep || e.look.load(Ordering::Acquire) {
                        look.push((*k, e.attempt.clone()));
                    }
                }
                (new, known, look)
            };
            for (attempt, look) in new {
                self.watch(attempt, look);
            }
            let mut exited = known;
            if !look.is_empty() {
                let found = tokio::task::spawn_blocking(move || {
                    look.into_iter()
                        .filter(|(_, a)| a.exit().is_some())
                        .collect::<Vec<_>>()
                })
                .await
                .unwrap_or_default();
                exited.extend(found);
            }
            // Each exit is reported on a task of its own, so that one ending while
            // others' reports are on their way goes at once; an exit whose report is on
            // its way is not sent again, one not delivered is at a later look.
            for (key, a) in exited {
                if !self.reporting.lock().unwrap().insert(key) {
                    continue;
                }
                let agent = self.clone();
                tokio::spawn(async move {
                    agent.report_exit(key, a).await;
                    agent.reporting.lock().unwrap().remove(&key);
                });
            }
            let overdue: Vec<AttemptKey> = {
                let mut l = self.attempts.lock().unwrap();
                l.iter_mut()
                    .filter(|(_, e)| {
                        !e.stopping && e.time_limit_at.is_some_and(|t| t <= Instant::now())
                    })
                    .map(|(k, e)| {
                        e.stopped_for = Some("time limit reached".into());
                        *k
                    })
                    .collect()
            };
            for k in overdue {
                info!(job = k.job.0, attempt = k.attempt.0, "time limit reached");
                self.clone().stop(k, None, ORPHAN_GRACE);
            }
            let lost = self.last_contact.lock().unwrap().elapsed();
            if lost > fence_after && !self.fenced.swap(true, Ordering::Relaxed) {
                warn!(
                    lost_s = lost.as_secs(),
                    "no controller quorum for fence_after: stopping every job on this node"
                );
                let keys: Vec<AttemptKey> = {
                    let mut l = self.attempts.lock().unwrap();
                    for e in l.values_mut() {
                        e.stopped_for.get_or_insert_with(|| FENCED.into());
                        if let Err(err) = e.attempt.mark_fenced() {
                            warn!("{}: {err}", e.attempt.dir().display());
                        }
                    }
                    l.keys().copied().collect()
                };
                for k in keys {
                    self.clone().stop(k, None, ORPHAN_GRACE);
                }
            }
        }
    }

    /// Waits on the attempt's shim's pidfd, if it has one: until it fires, the monitor
    /// does not look for the attempt's end in the spool (`look` is false). The pidfd is
    /// found on a blocking thread (it reads the spool); where there is none, `look` is
    /// set again and the monitor looks in the spool.
    fn watch(&self, attempt: Arc<Attempt>, look: Arc<AtomicBool>) {
        let gone = self.shim_gone.clone();
        tokio::spawn(async move {
            let fd = tokio::task::spawn_blocking(move || attempt.shim_pidfd())
                .await
                .ok()
                .flatten();
            let registered = fd.map(|fd| {
                // SAFETY: an OwnedFd is a valid open descriptor that stays the same
                // until it is dropped, which happens with the AsyncFd.
                unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        fd,
                        tokio::io::Interest::READABLE,
                    )
                }
            });
            match registered {
                Some(Ok(fd)) => {
                    // Readable once the shim has ended; an error is taken as that too.
                    let _ = fd.readable().await;
                }
                Some(Err(err)) => debug!("cannot wait on the shim's pidfd: {err}"),
                None => {}
            }
            look.store(true, Ordering::Release);
            gone.notify_one();
        });
    }

    /// Reports one attempt's exit; once the controllers have it, the attempt is
    /// forgotten and its directory cleared.
    async fn report_exit(&self, key: AttemptKey, a: Arc<Attempt>) {
        let st = a.exit().expect("exited");
        let stopped_for = self
            .attempts
            .lock()
            .unwrap()
            .get(&key)
            .and_then(|l| l.stopped_for.clone());
        let killed = st.signal.map(|s| format!("killed by signal {s}"));
        let reason = match (stopped_for, killed) {
            (Some(why), Some(k)) => Some(format!("{why}; {k}")),
            (Some(why), None) => Some(why),
            (None, k) => k,
        };
        // Neither code nor signal, and no launch error: the agent lost the
        // attempt (it died before the shim started, or the shim vanished). The
        // job did not fail; the controllers requeue it.
        // An attempt the fence ended neither failed nor finished (a job may exit 0 on
        // its checkpoint signal): like one the agent lost track of, it is requeued (or
        // ended as a stop the controllers had ordered meant).
        let fenced = reason.as_deref().is_some_and(|r| r.starts_with(FENCED)) || a.fenced();
        let reason = match (fenced, reason) {
            (true, Some(r)) if !r.starts_with(FENCED) => Some(format!("{FENCED}; {r}")),
            (true, None) => Some(FENCED.to_string()),
            (_, r) => r,
        };
        // A SageMaker job's model goes to its output path before its success is
        // reported, as SageMaker uploads it before the job is Completed.
        let reason = if fenced {
            reason
        } else {
            let m = a.clone();
            let delivered = tokio::task::spawn_blocking(move || m.deliver_model())
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            match delivered {
                Ok(_) => reason,
                Err(e) => {
                    warn!(job = key.job.0, "cannot deliver the model: {e}");
                    Some(format!("the model was not delivered: {e}"))
                }
            }
        };
        let event =
            if fenced || (st.code.is_none() && st.signal.is_none() && a.launch_error().is_none()) {
                Progress::Lost {
                    reason: reason.unwrap_or_else(|| {
                        format!(
                            "the agent on {} lost track of the attempt (no exit status)",
                            self.inventory.name
                        )
                    }),
                }
            } else {
                Progress::Exited {
                    code: st.code,
                    reason,
                }
            };
        let delivered = self.progress(key, event).await;
        if delivered {
            // Forgotten first, then cleared: nothing may look at an attempt
            // whose directory is going away (it would seem to have vanished
            // without an exit, and be stopped as an orphan).
            self.filing.lock().unwrap().insert(key);
            self.attempts.lock().unwrap().remove(&key);
            // File-system work (the directory's files moved and removed, the cgroup
            // removed) is done on a blocking thread: on the runtime's workers it would
            // hold up the connection to the controllers and every other report.
            // [`CLEARING`] attempts at a time (see `clearing`).
            let cleared = {
                let _turn = self.clearing.acquire().await;
                tokio::task::spawn_blocking(move || a.acknowledge()).await
            };
            if let Ok(Err(e)) = cleared {
                warn!(job = key.job.0, "cannot clear the attempt dir: {e}");
            }
            self.filing.lock().unwrap().remove(&key);
        }
    }
}
