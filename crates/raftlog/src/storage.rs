//! The durable [`DiskStorage`]: the log served to Raft from memory and stored through
//! [`DiskStorage::persist`], one batch at a time.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use redb::Database;

use crate::batch::{apply, plan, PersistBatch};
use crate::error::{table_err, LogError};
use crate::image::Image;
use crate::tables::{create_db, load, write_batch, Fsync, ENTRIES, IMAGE, META, RAFT_STATE};

/// Figures describing the stored log, for status pages and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// First index in the log (truncation index + 1).
    pub first_index: u64,
    /// Last index in the log (the truncation index when the log is empty).
    pub last_index: u64,
    /// Index of the latest image, if there is one.
    pub image_index: Option<u64>,
    /// Size of the latest image's data in bytes (0 without an image).
    pub image_bytes: usize,
    /// Number of log entries held (all of them are in memory and on disk).
    pub entries_in_memory: usize,
    /// Sum of the entries' data and context sizes in bytes.
    pub entry_bytes_in_memory: u64,
    /// The stored applied index.
    pub applied: u64,
    /// The stored hard state's commit index.
    pub commit: u64,
    /// The stored hard state's term.
    pub term: u64,
    /// Whether Raft asked for a snapshot that no stored image could satisfy.
    pub snapshot_wanted: bool,
}

/// In-memory copy of everything stored.
pub(crate) struct Core {
    /// Entries `truncated_index + 1 ..= truncated_index + entries.len()`.
    pub(crate) entries: Vec<Entry>,
    pub(crate) truncated_index: u64,
    pub(crate) truncated_term: u64,
    pub(crate) hard_state: HardState,
    pub(crate) conf_state: ConfState,
    pub(crate) applied: u64,
    pub(crate) image: Option<Arc<Image>>,
    pub(crate) meta: BTreeMap<String, Vec<u8>>,
    /// A hard state, conf state or image record exists.
    pub(crate) initialized: bool,
}

impl Core {
    pub(crate) fn first_index(&self) -> u64 {
        self.truncated_index + 1
    }

    pub(crate) fn last_index(&self) -> u64 {
        self.truncated_index + self.entries.len() as u64
    }

    pub(crate) fn image_index(&self) -> Option<u64> {
        self.image.as_ref().map(|i| i.index)
    }
}

struct Shared {
    path: PathBuf,
    fsync: Fsync,
    db: Database,
    core: RwLock<Core>,
    /// Serializes `persist` calls so that planning, writing and applying see one state.
    writer: Mutex<()>,
    snapshot_wanted: AtomicBool,
}

/// Durable [`raft::Storage`] on one redb file; see the [crate] documentation.
///
/// Cloning is cheap and clones share the same database and in-memory state. `DiskStorage` is
/// `Send + Sync`; readers (the [`Storage`] methods and accessors) proceed while a
/// [`persist`](DiskStorage::persist) is writing and see the state from before that batch until it
/// has been committed.
#[derive(Clone)]
pub struct DiskStorage {
    shared: Arc<Shared>,
}

impl fmt::Debug for DiskStorage {
    /// Shows the file and [`DiskStorage::stats`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskStorage")
            .field("path", &self.shared.path)
            .field("fsync", &self.shared.fsync)
            .field("stats", &self.stats())
            .finish()
    }
}

impl DiskStorage {
    /// Opens the log at `path`, creating the file and its tables if missing, and loads everything
    /// (entries, hard state, conf state, applied index, latest image, meta) into memory.
    ///
    /// Fails with [`LogError::Open`] if the file cannot be opened (also when it is already open,
    /// in this or another process), and with [`LogError::Decode`] or [`LogError::Corrupt`] if the
    /// stored records are unreadable or inconsistent (for example a gap in the log).
    pub fn open(path: &Path) -> Result<DiskStorage, LogError> {
        DiskStorage::open_with(path, Fsync::Always)
    }

    /// [`open`](DiskStorage::open), with batches fsync'd or (unsafe, for benchmarks only) not.
    pub fn open_with(path: &Path, fsync: Fsync) -> Result<DiskStorage, LogError> {
        let started = Instant::now();
        let db = create_db(path, fsync).map_err(|source| LogError::Open {
            path: path.to_path_buf(),
            source,
        })?;

        // Make sure all tables exist so that reads need no special cases.
        let txn = db.begin_write().map_err(|source| LogError::Transaction {
            kind: "write",
            source: Box::new(source),
        })?;
        txn.open_table(ENTRIES).map_err(table_err("entries"))?;
        txn.open_table(RAFT_STATE)
            .map_err(table_err("raft_state"))?;
        txn.open_table(IMAGE).map_err(table_err("image"))?;
        txn.open_table(META).map_err(table_err("meta"))?;
        txn.commit().map_err(|source| LogError::Commit { source })?;

        let core = load(&db)?;
        tracing::debug!(
            path = %path.display(),
            first_index = core.first_index(),
            last_index = core.last_index(),
            image_index = ?core.image_index(),
            applied = core.applied,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "raft log opened"
        );
        Ok(DiskStorage {
            shared: Arc::new(Shared {
                path: path.to_path_buf(),
                fsync,
                db,
                core: RwLock::new(core),
                writer: Mutex::new(()),
                snapshot_wanted: AtomicBool::new(false),
            }),
        })
    }

    /// The file this storage was opened from.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether batches are fsync'd.
    pub fn fsync(&self) -> Fsync {
        self.shared.fsync
    }

    fn rl(&self) -> RwLockReadGuard<'_, Core> {
        self.shared
            .core
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn wl(&self) -> RwLockWriteGuard<'_, Core> {
        self.shared
            .core
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// True once a hard state, conf state or image (local or received) has been stored.
    pub fn is_initialized(&self) -> bool {
        self.rl().initialized
    }

    /// Bootstraps a member of a new cluster: durably stores a conf state with these `voters`.
    ///
    /// The log stays empty (first index 1, last index 0). Fails with
    /// [`LogError::AlreadyInitialized`] if [`is_initialized`](DiskStorage::is_initialized), and
    /// with [`LogError::NoVoters`] if `voters` is empty.
    pub fn initialize(&self, voters: &[u64]) -> Result<(), LogError> {
        if voters.is_empty() {
            return Err(LogError::NoVoters);
        }
        if self.is_initialized() {
            return Err(LogError::AlreadyInitialized);
        }
        let cs = ConfState {
            voters: voters.to_vec(),
            ..Default::default()
        };
        self.persist_inner(
            &PersistBatch {
                conf_state: Some(cs),
                ..Default::default()
            },
            true,
        )
    }

    /// Stores `batch` durably and atomically, then makes it visible.
    ///
    /// The batch is first validated against the stored state (see the fields of
    /// [`PersistBatch`]); an invalid batch is rejected and nothing changes. It is then written in
    /// one redb write transaction committed with [`Durability::Immediate`] (fsync, unless opened
    /// with [`Fsync::UnsafeNever`]) before this returns. The in-memory view used by the [`Storage`] methods is updated only after the
    /// commit succeeded. An empty batch does nothing. Concurrent calls are serialized.
    ///
    /// [`Durability::Immediate`]: redb::Durability::Immediate
    pub fn persist(&self, batch: &PersistBatch) -> Result<(), LogError> {
        self.persist_inner(batch, false)
    }

    fn persist_inner(
        &self,
        batch: &PersistBatch,
        must_be_uninitialized: bool,
    ) -> Result<(), LogError> {
        if batch.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let _writer = self
            .shared
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let plan = {
            let core = self.rl();
            if must_be_uninitialized && core.initialized {
                return Err(LogError::AlreadyInitialized);
            }
            let plan = plan(&core, batch)?;
            write_batch(&self.shared.db, batch, &plan, core.truncated_index)?;
            plan
        };
        let mut core = self.wl();
        let new_image = plan.image.is_some();
        apply(&mut core, batch, plan);
        if new_image {
            self.shared.snapshot_wanted.store(false, Ordering::Release);
        }
        tracing::trace!(
            entries = batch.entries.len(),
            snapshot = batch.snapshot.is_some(),
            image = new_image,
            first_index = core.first_index(),
            last_index = core.last_index(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "raft log batch persisted"
        );
        Ok(())
    }

    /// The latest stored state-machine image (a copy), if any.
    pub fn image(&self) -> Option<Image> {
        self.rl().image.as_deref().cloned()
    }

    /// The last stored applied index (0 if none was stored).
    pub fn applied(&self) -> u64 {
        self.rl().applied
    }

    /// The stored hard state (default if none was stored).
    pub fn hard_state(&self) -> HardState {
        self.rl().hard_state.clone()
    }

    /// The stored conf state (default if none was stored).
    pub fn conf_state(&self) -> ConfState {
        self.rl().conf_state.clone()
    }

    /// The value stored under the application key `key`, if any.
    pub fn meta(&self, key: &str) -> Option<Vec<u8>> {
        self.rl().meta.get(key).cloned()
    }

    /// All stored application key/values, ordered by key.
    pub fn meta_all(&self) -> BTreeMap<String, Vec<u8>> {
        self.rl().meta.clone()
    }

    /// True when [`Storage::snapshot`] was asked for a snapshot that no stored image satisfies
    /// (none stored, or older than requested) and no image has been stored since. The
    /// application should then make an image and persist it with [`PersistBatch::image`].
    pub fn snapshot_wanted(&self) -> bool {
        self.shared.snapshot_wanted.load(Ordering::Acquire)
    }

    /// Current figures of the log (computing the entry bytes walks the in-memory log).
    pub fn stats(&self) -> LogStats {
        let core = self.rl();
        LogStats {
            first_index: core.first_index(),
            last_index: core.last_index(),
            image_index: core.image_index(),
            image_bytes: core.image.as_ref().map_or(0, |i| i.data.len()),
            entries_in_memory: core.entries.len(),
            entry_bytes_in_memory: core
                .entries
                .iter()
                .map(|e| (e.data.len() + e.context.len()) as u64)
                .sum(),
            applied: core.applied,
            commit: core.hard_state.commit,
            term: core.hard_state.term,
            snapshot_wanted: self.snapshot_wanted(),
        }
    }
}

impl Storage for DiskStorage {
    /// The stored hard state and conf state.
    fn initial_state(&self) -> raft::Result<RaftState> {
        let core = self.rl();
        Ok(RaftState::new(
            core.hard_state.clone(),
            core.conf_state.clone(),
        ))
    }

    /// Entries `[low, high)` from memory, limited to `max_size` bytes (at least one entry) as
    /// [`raft::util::limit_size`] does.
    ///
    /// [`StorageError::Compacted`] if `low < first_index`, [`StorageError::Unavailable`] if
    /// `high > last_index + 1`; an error (rather than a panic) if `low > high`.
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max_size = max_size.into();
        let core = self.rl();
        if low < core.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > core.last_index() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        if low > high {
            return Err(raft::Error::Store(StorageError::Other(
                format!("invalid entries range [{low}, {high})").into(),
            )));
        }
        let lo = (low - core.first_index()) as usize;
        let hi = (high - core.first_index()) as usize;
        let slice = &core.entries[lo..hi];
        // Count what `limit_size` would keep before copying, so a small `max_size` does not
        // copy the whole range.
        let count = match max_size {
            Some(max) if max != raft::NO_LIMIT && slice.len() > 1 => {
                let mut size = 0u64;
                slice
                    .iter()
                    .take_while(|e| {
                        let first = size == 0;
                        size += u64::from(e.compute_size());
                        first || size <= max
                    })
                    .count()
            }
            _ => slice.len(),
        };
        let mut ents = slice[..count].to_vec();
        raft::util::limit_size(&mut ents, max_size);
        Ok(ents)
    }

    /// The term of entry `idx`; also answers for the truncation point (the latest image's index
    /// after a received snapshot or a compaction up to it).
    ///
    /// [`StorageError::Compacted`] below the truncation point, [`StorageError::Unavailable`]
    /// after the last index.
    fn term(&self, idx: u64) -> raft::Result<u64> {
        let core = self.rl();
        if idx == core.truncated_index {
            return Ok(core.truncated_term);
        }
        if idx < core.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > core.last_index() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(core.entries[(idx - core.first_index()) as usize].term)
    }

    /// Truncation index + 1.
    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.rl().first_index())
    }

    /// Index of the last entry (the truncation index when the log is empty).
    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.rl().last_index())
    }

    /// The latest image as a snapshot.
    ///
    /// Without an image, or when its index is below `request_index`, returns
    /// [`StorageError::SnapshotTemporarilyUnavailable`] (Raft retries later) and sets
    /// [`DiskStorage::snapshot_wanted`].
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let core = self.rl();
        match &core.image {
            Some(image) if image.index >= request_index => Ok(image.to_snapshot()),
            other => {
                let was = self.shared.snapshot_wanted.swap(true, Ordering::AcqRel);
                if !was {
                    tracing::debug!(
                        request_index,
                        to,
                        image_index = ?other.as_ref().map(|i| i.index),
                        "raft asked for a snapshot; no stored image satisfies it"
                    );
                }
                Err(raft::Error::Store(
                    StorageError::SnapshotTemporarilyUnavailable,
                ))
            }
        }
    }
}
