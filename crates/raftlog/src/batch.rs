//! A batch of changes to store atomically, its validation against the stored log
//! ([`plan`]) and its effect on the in-memory copy once committed ([`apply`]).

use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};

use crate::error::LogError;
use crate::image::Image;
use crate::storage::Core;

/// Everything to store durably in one atomic step; see [`DiskStorage::persist`].
///
/// All parts are optional; `PersistBatch::default()` stores nothing. Within the batch the parts
/// take effect in field order: `snapshot`, `entries`, `hard_state`, `commit`, `conf_state`,
/// `applied`, `image`, `compact_to`, `meta`.
///
/// [`DiskStorage::persist`]: crate::DiskStorage::persist
#[derive(Clone, Debug, Default)]
pub struct PersistBatch<'a> {
    /// A snapshot received from the leader (`Ready::snapshot()`, when not empty).
    ///
    /// It becomes the latest image (metadata and data), its metadata's conf state becomes the
    /// conf state, the whole log is discarded (the log is truncated at the snapshot's index and
    /// term, so the first index becomes `index + 1`), the hard state's commit and term are raised
    /// to at least the snapshot's index and term, and the applied index becomes the snapshot's
    /// index. Rejected with [`LogError::SnapshotOutOfDate`] when its index is below the log's
    /// first index or below the latest image's index.
    pub snapshot: Option<&'a Snapshot>,
    /// Entries to append (`Ready::entries()`), with consecutive indexes.
    ///
    /// Stored entries from `entries[0].index` on are replaced (a conflicting tail is truncated),
    /// as `raft::storage::MemStorageCore::append` does. `entries[0].index` must lie in
    /// `[first_index, last_index + 1]` ([`LogError::AppendCompacted`], [`LogError::AppendGap`]).
    pub entries: &'a [Entry],
    /// A new hard state (`Ready::hs()`), replacing the stored one.
    pub hard_state: Option<HardState>,
    /// A new commit index (`LightReady::commit_index()`): sets the hard state's `commit`.
    pub commit: Option<u64>,
    /// A new conf state, after a conf change was applied.
    pub conf_state: Option<ConfState>,
    /// The application's applied index.
    pub applied: Option<u64>,
    /// A state-machine image the application made locally; becomes the latest image.
    ///
    /// Its index must not be below the latest image's, must not exceed the commit index (after
    /// the rest of the batch), and its term must equal the log's term at its index (which must be
    /// the truncation point or an entry in the log). Storing an image clears
    /// [`DiskStorage::snapshot_wanted`]. The data is copied into the storage's memory.
    ///
    /// [`DiskStorage::snapshot_wanted`]: crate::DiskStorage::snapshot_wanted
    pub image: Option<Image>,
    /// Discard log entries with index `< compact_to`.
    ///
    /// Values at or below the first index do nothing. Otherwise `compact_to` must be at most the
    /// latest image's index + 1 (after this batch's image) ([`LogError::CompactBeyondImage`]) and
    /// at most `last_index + 1` ([`LogError::CompactBeyondLog`]). The log is then truncated at
    /// `compact_to - 1` with that entry's term.
    pub compact_to: Option<u64>,
    /// Small application key/values to put (existing keys are overwritten).
    pub meta: &'a [(&'a str, Vec<u8>)],
}

impl PersistBatch<'_> {
    /// True when the batch stores nothing.
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_none()
            && self.entries.is_empty()
            && self.hard_state.is_none()
            && self.commit.is_none()
            && self.conf_state.is_none()
            && self.applied.is_none()
            && self.image.is_none()
            && self.compact_to.is_none()
            && self.meta.is_empty()
    }
}

/// The log as it will look after part of a batch, without changing anything.
struct LogView<'a> {
    truncated_index: u64,
    truncated_term: u64,
    /// Kept stored entries, starting at `truncated_index + 1`.
    kept: &'a [Entry],
    /// Appended entries, following `kept`.
    appended: &'a [Entry],
}

impl LogView<'_> {
    fn first_index(&self) -> u64 {
        self.truncated_index + 1
    }

    fn last_index(&self) -> u64 {
        self.truncated_index + (self.kept.len() + self.appended.len()) as u64
    }

    fn term(&self, idx: u64) -> Option<u64> {
        if idx == self.truncated_index {
            return Some(self.truncated_term);
        }
        if idx < self.first_index() || idx > self.last_index() {
            return None;
        }
        let pos = (idx - self.first_index()) as usize;
        Some(match self.kept.get(pos) {
            Some(e) => e.term,
            None => self.appended[pos - self.kept.len()].term,
        })
    }
}

/// What a validated batch does, applied to [`Core`] after the commit.
pub(crate) struct BatchEffect {
    /// Discard all entries (received snapshot).
    pub(crate) clear: bool,
    /// Keep this many (post-`clear`) entries, then append the batch's entries.
    pub(crate) keep: Option<usize>,
    /// Then discard this many entries from the front (compaction).
    pub(crate) drop_front: usize,
    pub(crate) truncated: Option<(u64, u64)>,
    pub(crate) hard_state: Option<HardState>,
    pub(crate) conf_state: Option<ConfState>,
    pub(crate) applied: Option<u64>,
    pub(crate) image: Option<Arc<Image>>,
}

/// Validates `batch` against `core` and works out its effect.
pub(crate) fn plan(core: &Core, batch: &PersistBatch) -> Result<BatchEffect, LogError> {
    let mut view = LogView {
        truncated_index: core.truncated_index,
        truncated_term: core.truncated_term,
        kept: &core.entries,
        appended: &[],
    };
    let mut truncated = None;
    let mut image_index = core.image_index();
    let mut hard_state = None;
    let mut conf_state = None;
    let mut applied = None;
    let mut image = None;
    let mut clear = false;

    if let Some(snap) = batch.snapshot {
        let meta = snap.get_metadata();
        if meta.index < view.first_index() || image_index.is_some_and(|i| meta.index < i) {
            return Err(LogError::SnapshotOutOfDate {
                index: meta.index,
                first_index: view.first_index(),
                image_index,
            });
        }
        clear = true;
        view = LogView {
            truncated_index: meta.index,
            truncated_term: meta.term,
            kept: &[],
            appended: &[],
        };
        truncated = Some((meta.index, meta.term));
        let mut hs = core.hard_state.clone();
        hs.commit = hs.commit.max(meta.index);
        hs.term = hs.term.max(meta.term);
        hard_state = Some(hs);
        conf_state = Some(meta.get_conf_state().clone());
        applied = Some(meta.index);
        image = Some(Arc::new(Image::from_snapshot(snap)));
        image_index = Some(meta.index);
    }

    let mut keep = None;
    if let Some(first) = batch.entries.first() {
        for pair in batch.entries.windows(2) {
            if pair[1].index != pair[0].index + 1 {
                return Err(LogError::AppendNotConsecutive {
                    previous: pair[0].index,
                    found: pair[1].index,
                });
            }
        }
        if first.index < view.first_index() {
            return Err(LogError::AppendCompacted {
                index: first.index,
                first_index: view.first_index(),
            });
        }
        if first.index > view.last_index() + 1 {
            return Err(LogError::AppendGap {
                index: first.index,
                last_index: view.last_index(),
            });
        }
        let k = (first.index - view.first_index()) as usize;
        view.kept = &view.kept[..k];
        view.appended = batch.entries;
        keep = Some(k);
    }

    if let Some(hs) = &batch.hard_state {
        hard_state = Some(hs.clone());
    }
    if let Some(commit) = batch.commit {
        let mut hs = hard_state.unwrap_or_else(|| core.hard_state.clone());
        hs.commit = commit;
        hard_state = Some(hs);
    }
    if let Some(cs) = &batch.conf_state {
        conf_state = Some(cs.clone());
    }
    if let Some(a) = batch.applied {
        applied = Some(a);
    }

    if let Some(img) = &batch.image {
        if let Some(current) = image_index {
            if img.index < current {
                return Err(LogError::ImageOutOfDate {
                    index: img.index,
                    image_index: current,
                });
            }
        }
        let commit = hard_state.as_ref().unwrap_or(&core.hard_state).commit;
        if img.index > commit {
            return Err(LogError::ImageNotCommitted {
                index: img.index,
                commit,
            });
        }
        let log_term = view.term(img.index);
        if log_term != Some(img.term) {
            return Err(LogError::ImageTermMismatch {
                index: img.index,
                term: img.term,
                log_term,
            });
        }
        image = Some(Arc::new(img.clone()));
        image_index = Some(img.index);
    }

    let mut drop_front = 0;
    if let Some(compact_to) = batch.compact_to {
        if compact_to > view.first_index() {
            let covered = matches!(image_index, Some(i) if compact_to <= i + 1);
            if !covered {
                return Err(LogError::CompactBeyondImage {
                    compact_to,
                    image_index,
                });
            }
            if compact_to > view.last_index() + 1 {
                return Err(LogError::CompactBeyondLog {
                    compact_to,
                    last_index: view.last_index(),
                });
            }
            let term = view
                .term(compact_to - 1)
                .expect("compaction point lies within the log");
            drop_front = (compact_to - view.first_index()) as usize;
            truncated = Some((compact_to - 1, term));
        }
    }

    Ok(BatchEffect {
        clear,
        keep,
        drop_front,
        truncated,
        hard_state,
        conf_state,
        applied,
        image,
    })
}

/// Applies a committed plan to the in-memory state.
pub(crate) fn apply(core: &mut Core, batch: &PersistBatch, plan: BatchEffect) {
    if plan.clear {
        core.entries.clear();
    }
    if let Some(keep) = plan.keep {
        core.entries.truncate(keep);
        core.entries.extend_from_slice(batch.entries);
    }
    if plan.drop_front > 0 {
        core.entries.drain(..plan.drop_front);
    }
    if let Some((index, term)) = plan.truncated {
        core.truncated_index = index;
        core.truncated_term = term;
    }
    if plan.hard_state.is_some() || plan.conf_state.is_some() || plan.image.is_some() {
        core.initialized = true;
    }
    if let Some(hs) = plan.hard_state {
        core.hard_state = hs;
    }
    if let Some(cs) = plan.conf_state {
        core.conf_state = cs;
    }
    if let Some(applied) = plan.applied {
        core.applied = applied;
    }
    if let Some(image) = plan.image {
        core.image = Some(image);
    }
    for (key, value) in batch.meta {
        core.meta.insert((*key).to_string(), value.clone());
    }
    debug_assert_eq!(
        core.entries.first().map(|e| e.index),
        (!core.entries.is_empty()).then(|| core.first_index())
    );
}
