//! Requests waiting on the Raft log: writes until their entry is applied (answered
//! then: a committed entry is durable on a majority), membership changes likewise,
//! reads until this controller has applied the leader's read index. Each has a
//! deadline; a membership change's answer is held until the `Ready` it was applied in
//! has had its batch written.

use std::collections::HashMap;
use std::time::Instant;

use tokio::sync::oneshot;
use tracing::warn;
use tranche_proto::ApiError;

use crate::mailbox::WriteResult;

pub(super) struct Pending<T> {
    pub reply: oneshot::Sender<T>,
    pub deadline: Instant,
}

type Done = Result<(), ApiError>;

#[derive(Default)]
pub(super) struct Requests {
    pub writes: HashMap<u64, Pending<WriteResult>>,
    pub changes: HashMap<u64, Pending<Done>>,
    pub reads: HashMap<u64, Pending<Done>>,
    /// Read barriers whose read index is known, waiting for `applied` to reach it.
    pub reads_waiting: Vec<(u64, Pending<Done>)>,
    /// Membership answers held until the current `Ready`'s batch is written.
    pub deferred_changes: Vec<(oneshot::Sender<Done>, Done)>,
}

impl Requests {
    /// Answers writes and reads that ran out of time.
    pub fn expire(&mut self, now: Instant) {
        let late: Vec<u64> = self
            .writes
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        if !late.is_empty() {
            warn!(
                count = late.len(),
                "writes not committed in time; answered Unavailable"
            );
        }
        for k in late {
            let p = self.writes.remove(&k).unwrap();
            let _ = p.reply.send(Err(ApiError::Unavailable(
                "not committed in time; the outcome is unknown, retry".into(),
            )));
        }
        for map in [&mut self.reads, &mut self.changes] {
            let late: Vec<u64> = map
                .iter()
                .filter(|(_, p)| p.deadline <= now)
                .map(|(k, _)| *k)
                .collect();
            for k in late {
                let p = map.remove(&k).unwrap();
                let _ = p.reply.send(Err(ApiError::Unavailable(
                    "no answer in time; retry".into(),
                )));
            }
        }
        self.reads_waiting
            .retain(|(_, p)| p.deadline > now || p.reply.is_closed());
    }

    /// Answers everything in flight `Unavailable` (its outcome is unknown).
    pub fn fail_all(&mut self, msg: &str) {
        for (_, p) in self.writes.drain() {
            let _ = p.reply.send(Err(ApiError::Unavailable(msg.into())));
        }
        for (_, p) in self.reads.drain().chain(self.changes.drain()) {
            let _ = p.reply.send(Err(ApiError::Unavailable(msg.into())));
        }
        for (_, p) in self.reads_waiting.drain(..) {
            let _ = p.reply.send(Err(ApiError::Unavailable(msg.into())));
        }
    }

    /// Sends the membership answers held for the batch just written, and the reads
    /// `applied` now covers.
    pub fn answer_deferred(&mut self, applied: u64) {
        for (tx, r) in self.deferred_changes.drain(..) {
            let _ = tx.send(r);
        }
        let mut i = 0;
        while i < self.reads_waiting.len() {
            if self.reads_waiting[i].0 <= applied {
                let (_, p) = self.reads_waiting.swap_remove(i);
                let _ = p.reply.send(Ok(()));
            } else {
                i += 1;
            }
        }
    }

    /// A read barrier's index is known: it waits for `applied` to reach it.
    pub fn read_state(&mut self, rs: raft::ReadState) {
        let Ok(ctx) = <[u8; 8]>::try_from(rs.request_ctx.as_slice()) else {
            return;
        };
        if let Some(p) = self.reads.remove(&u64::from_be_bytes(ctx)) {
            self.reads_waiting.push((rs.index, p));
        }
    }
}
