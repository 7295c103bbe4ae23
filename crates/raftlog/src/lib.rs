//! Durable Raft storage for Tranche controllers.
//!
//! [`DiskStorage`] implements [`raft::Storage`] on top of a single [redb] database file. It holds
//! the Raft log (entries), the [`HardState`], the [`ConfState`], the application's applied index,
//! the latest state-machine [`Image`] (a snapshot: metadata plus opaque data) and a few small
//! application key/values ("meta").
//!
//! # Model
//!
//! * Every change goes through [`DiskStorage::persist`] with a [`PersistBatch`]: one redb write
//!   transaction, committed with [`redb::Durability::Immediate`] (fsync) before `persist` returns.
//!   (Unless the file was opened with [`Fsync::UnsafeNever`], for benchmarks only: then nothing
//!   is fsync'd.) A batch is atomic: after a crash either all of it is on disk or none of it. The
//!   in-memory view
//!   served to Raft is updated only after the commit succeeded; a batch that fails validation or
//!   fails to commit changes nothing.
//! * All log entries that have not been compacted are also kept in memory, so
//!   [`Storage::entries`] and [`Storage::term`] never touch the disk. [`DiskStorage::open`] loads
//!   everything back.
//! * The log is described by a *truncation point* `(index, term)`: the last entry that was
//!   discarded (by compaction or because a received snapshot replaced the log). The first entry in
//!   the log is always `truncation index + 1`, and [`Storage::term`] answers for the truncation
//!   index too. A fresh storage is truncated at `(0, 0)`.
//! * The latest image is what [`Storage::snapshot`] hands to Raft for slow followers. Compaction
//!   never discards entries after the latest image (`compact_to <= image.index + 1`), so the image
//!   always covers everything that was compacted away. Without a (recent enough) image Raft gets
//!   `SnapshotTemporarilyUnavailable` and [`DiskStorage::snapshot_wanted`] tells the application
//!   to make one.
//!
//! # Handling a `Ready`
//!
//! For a [`raft::Ready`] build one batch: [`PersistBatch::snapshot`] from `Ready::snapshot()` (when
//! not empty), [`PersistBatch::entries`] from `Ready::entries()` and [`PersistBatch::hard_state`]
//! from `Ready::hs()`, then persist it before sending `Ready::persisted_messages()` and calling
//! `advance`. A `LightReady`'s commit index goes in [`PersistBatch::commit`]. After applying
//! committed entries, persist [`PersistBatch::applied`] (and [`PersistBatch::conf_state`] after a
//! conf change); after making a state-machine image, persist [`PersistBatch::image`] and, if
//! wanted, [`PersistBatch::compact_to`].
//!
//! Within one batch the parts take effect in this order: snapshot, entries, hard state, commit,
//! conf state, applied, image, compaction, meta.
//!
//! ```
//! use raft::eraftpb::{Entry, HardState};
//! use raft::Storage;
//! use tranche_raftlog::{DiskStorage, PersistBatch};
//!
//! # let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("raft.redb");
//! let storage = DiskStorage::open(&path)?;
//! storage.initialize(&[1, 2, 3])?;
//! let entries: Vec<Entry> = (1..=3)
//!     .map(|index| Entry { index, term: 1, ..Default::default() })
//!     .collect();
//! storage.persist(&PersistBatch {
//!     entries: &entries,
//!     hard_state: Some(HardState { term: 1, vote: 1, commit: 2, ..Default::default() }),
//!     meta: &[("addr/1", b"10.0.0.1:7000".to_vec())],
//!     ..Default::default()
//! })?;
//! drop(storage);
//!
//! let storage = DiskStorage::open(&path)?;
//! assert_eq!(storage.last_index().unwrap(), 3);
//! assert_eq!(storage.hard_state().commit, 2);
//! assert_eq!(storage.meta("addr/1").as_deref(), Some(&b"10.0.0.1:7000"[..]));
//! # Ok::<(), tranche_raftlog::LogError>(())
//! ```
//!
//! # Restarting
//!
//! Open the file, restore the state machine from [`DiskStorage::image`] (if any) and start Raft
//! with `Config::applied` set to the index the restored state machine reflects: the image's index
//! when the state machine lives only in memory (Raft then hands out the committed entries after
//! it again), or [`DiskStorage::applied`] when the application's own state is durable up to that
//! index. Raft requires it to be at or after the log's truncation point; the image's index
//! always is.
//!
//! # On-disk layout
//!
//! * table `entries`: `u64` index → protobuf-encoded [`Entry`];
//! * table `raft_state`: `hard_state` and `conf_state` (protobuf), `applied` (u64, little endian),
//!   `truncated` (index and term, two little-endian u64);
//! * table `image`: `metadata` (protobuf [`SnapshotMetadata`]) and `data` (raw bytes);
//! * table `meta`: application key → value.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use redb::{Database, Durability, ReadableTable, TableDefinition};

const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
const RAFT_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_state");
const IMAGE: TableDefinition<&str, &[u8]> = TableDefinition::new("image");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const KEY_HARD_STATE: &str = "hard_state";
const KEY_CONF_STATE: &str = "conf_state";
const KEY_APPLIED: &str = "applied";
const KEY_TRUNCATED: &str = "truncated";
const KEY_IMAGE_METADATA: &str = "metadata";
const KEY_IMAGE_DATA: &str = "data";

/// An error from the durable Raft log.
///
/// Each variant names what failed: opening the file, a transaction, a table, decoding a record
/// (with the entry index where there is one), or a [`PersistBatch`] that is not valid against the
/// stored state. A batch rejected with one of the validation variants changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The database file could not be opened or created.
    #[error("opening raft log database {}: {source}", path.display())]
    Open {
        /// The file that was opened.
        path: PathBuf,
        /// What redb reported.
        #[source]
        source: redb::DatabaseError,
    },
    /// A read or write transaction could not be started.
    #[error("starting a {kind} transaction on the raft log: {source}")]
    Transaction {
        /// `"read"` or `"write"`.
        kind: &'static str,
        /// What redb reported.
        #[source]
        source: Box<redb::TransactionError>,
    },
    /// A table could not be opened.
    #[error("opening raft log table `{table}`: {source}")]
    Table {
        /// The table's name.
        table: &'static str,
        /// What redb reported.
        #[source]
        source: redb::TableError,
    },
    /// Reading or writing records of a table failed.
    #[error("{op} in raft log table `{table}`: {source}")]
    Storage {
        /// The table's name.
        table: &'static str,
        /// What was being done, e.g. `"inserting entry 12"`.
        op: String,
        /// What redb reported.
        #[source]
        source: redb::StorageError,
    },
    /// Committing the write transaction failed; nothing of the batch is stored.
    #[error("committing the raft log transaction: {source}")]
    Commit {
        /// What redb reported.
        #[source]
        source: redb::CommitError,
    },
    /// A stored record could not be decoded.
    #[error("decoding {what} from raft log table `{table}`: {source}")]
    Decode {
        /// The table's name.
        table: &'static str,
        /// The record, e.g. `"entry 12"` or `"hard state"`.
        what: String,
        /// What protobuf reported.
        #[source]
        source: protobuf::ProtobufError,
    },
    /// A record could not be encoded.
    #[error("encoding {what}: {source}")]
    Encode {
        /// The record, e.g. `"entry 12"`.
        what: String,
        /// What protobuf reported.
        #[source]
        source: protobuf::ProtobufError,
    },
    /// The stored records contradict each other (gap in the log, wrong sizes, ...).
    #[error("raft log is corrupt: {0}")]
    Corrupt(String),
    /// [`DiskStorage::initialize`] was called on storage that already holds Raft state.
    #[error("raft log is already initialized")]
    AlreadyInitialized,
    /// [`DiskStorage::initialize`] was called without voters.
    #[error("initializing the raft log needs at least one voter")]
    NoVoters,
    /// The appended entries start at or before the truncation point.
    #[error(
        "appending at index {index} would overwrite compacted entries (first index {first_index})"
    )]
    AppendCompacted {
        /// Index of the first appended entry.
        index: u64,
        /// First index of the log.
        first_index: u64,
    },
    /// The appended entries start after `last_index + 1`.
    #[error("appending at index {index} would leave a gap after last index {last_index}")]
    AppendGap {
        /// Index of the first appended entry.
        index: u64,
        /// Last index of the log.
        last_index: u64,
    },
    /// The appended entries do not have consecutive indexes.
    #[error("appended entries are not consecutive: index {found} follows {previous}")]
    AppendNotConsecutive {
        /// Index of the entry before.
        previous: u64,
        /// Index of the entry that should have been `previous + 1`.
        found: u64,
    },
    /// A received snapshot is older than the log's first index or the latest image.
    #[error(
        "snapshot at index {index} is out of date (first index {first_index}, image index {image_index:?})"
    )]
    SnapshotOutOfDate {
        /// The snapshot's index.
        index: u64,
        /// First index of the log.
        first_index: u64,
        /// Index of the latest image, if any.
        image_index: Option<u64>,
    },
    /// A new image is older than the latest image.
    #[error("image at index {index} is older than the stored image at {image_index}")]
    ImageOutOfDate {
        /// The new image's index.
        index: u64,
        /// Index of the latest stored image.
        image_index: u64,
    },
    /// A new image lies beyond the commit index.
    #[error("image at index {index} is beyond the commit index {commit}")]
    ImageNotCommitted {
        /// The new image's index.
        index: u64,
        /// The commit index after the batch.
        commit: u64,
    },
    /// A new image's term differs from the log's term at its index, or the log has no term there.
    #[error("image at index {index} has term {term} but the log has {log_term:?} there")]
    ImageTermMismatch {
        /// The new image's index.
        index: u64,
        /// The new image's term.
        term: u64,
        /// The log's term at that index (`None`: compacted or beyond the last entry).
        log_term: Option<u64>,
    },
    /// Compaction would discard entries after the latest image (or there is no image).
    #[error("cannot compact to {compact_to}: latest image is at {image_index:?}")]
    CompactBeyondImage {
        /// The requested compaction point.
        compact_to: u64,
        /// Index of the latest image, if any.
        image_index: Option<u64>,
    },
    /// Compaction would discard entries beyond the last one.
    #[error("cannot compact to {compact_to}: last index is {last_index}")]
    CompactBeyondLog {
        /// The requested compaction point.
        compact_to: u64,
        /// Last index of the log.
        last_index: u64,
    },
}

impl From<LogError> for raft::Error {
    /// [`LogError::SnapshotOutOfDate`] becomes [`StorageError::SnapshotOutOfDate`]; everything else
    /// becomes [`StorageError::Other`].
    fn from(e: LogError) -> raft::Error {
        match e {
            LogError::SnapshotOutOfDate { .. } => {
                raft::Error::Store(StorageError::SnapshotOutOfDate)
            }
            other => raft::Error::Store(StorageError::Other(Box::new(other))),
        }
    }
}

/// A state-machine image: the application's state after applying the log up to `index`.
///
/// The latest image is what [`Storage::snapshot`] returns to Raft (as a [`Snapshot`] with this
/// metadata and data), and what a received snapshot becomes.
#[derive(Clone, Default, PartialEq)]
pub struct Image {
    /// Index of the last log entry the image includes.
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
    /// The membership in effect at `index`.
    pub conf_state: ConfState,
    /// The application's serialized state.
    pub data: Vec<u8>,
}

impl Image {
    /// The image as a Raft snapshot: metadata `index`, `term`, `conf_state`, and `data`.
    pub fn to_snapshot(&self) -> Snapshot {
        let mut snap = Snapshot {
            data: self.data.clone().into(),
            ..Default::default()
        };
        snap.set_metadata(self.metadata());
        snap
    }

    /// The image a Raft snapshot describes (its metadata and a copy of its data).
    pub fn from_snapshot(snap: &Snapshot) -> Image {
        let meta = snap.get_metadata();
        Image {
            index: meta.index,
            term: meta.term,
            conf_state: meta.get_conf_state().clone(),
            data: snap.data.to_vec(),
        }
    }

    fn metadata(&self) -> SnapshotMetadata {
        let mut meta = SnapshotMetadata {
            index: self.index,
            term: self.term,
            ..Default::default()
        };
        meta.set_conf_state(self.conf_state.clone());
        meta
    }
}

impl fmt::Debug for Image {
    /// Shows index, term, conf state and the data's length (not the data).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Image")
            .field("index", &self.index)
            .field("term", &self.term)
            .field("conf_state", &self.conf_state)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// Everything to store durably in one atomic step; see [`DiskStorage::persist`].
///
/// All parts are optional; `PersistBatch::default()` stores nothing. Within the batch the parts
/// take effect in field order: `snapshot`, `entries`, `hard_state`, `commit`, `conf_state`,
/// `applied`, `image`, `compact_to`, `meta`.
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
struct Core {
    /// Entries `truncated_index + 1 ..= truncated_index + entries.len()`.
    entries: Vec<Entry>,
    truncated_index: u64,
    truncated_term: u64,
    hard_state: HardState,
    conf_state: ConfState,
    applied: u64,
    image: Option<Arc<Image>>,
    meta: BTreeMap<String, Vec<u8>>,
    /// A hard state, conf state or image record exists.
    initialized: bool,
}

impl Core {
    fn first_index(&self) -> u64 {
        self.truncated_index + 1
    }

    fn last_index(&self) -> u64 {
        self.truncated_index + self.entries.len() as u64
    }

    fn image_index(&self) -> Option<u64> {
        self.image.as_ref().map(|i| i.index)
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
struct BatchEffect {
    /// Discard all entries (received snapshot).
    clear: bool,
    /// Keep this many (post-`clear`) entries, then append the batch's entries.
    keep: Option<usize>,
    /// Then discard this many entries from the front (compaction).
    drop_front: usize,
    truncated: Option<(u64, u64)>,
    hard_state: Option<HardState>,
    conf_state: Option<ConfState>,
    applied: Option<u64>,
    image: Option<Arc<Image>>,
}

/// Whether a persisted batch waits for the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fsync {
    /// Every batch is fsync'd before [`DiskStorage::persist`] returns (the default).
    #[default]
    Always,
    /// Unsafe, for benchmarks only: batches are written to the file (the operating system's page
    /// cache) with the same commit protocol, but never fsync'd. They survive a crash of the
    /// process, not one of the machine or its power: acknowledged writes can then be lost, and a
    /// Raft member can forget its vote.
    UnsafeNever,
}

/// The file under a database opened with [`Fsync::UnsafeNever`]: redb's syncs do nothing.
#[derive(Debug)]
struct UnsyncedFile(redb::backends::FileBackend);

impl redb::StorageBackend for UnsyncedFile {
    fn len(&self) -> Result<u64, io::Error> {
        self.0.len()
    }

    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, io::Error> {
        self.0.read(offset, len)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.0.set_len(len)
    }

    fn sync_data(&self, _eventual: bool) -> Result<(), io::Error> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.0.write(offset, data)
    }
}

fn create_db(path: &Path, fsync: Fsync) -> Result<Database, redb::DatabaseError> {
    match fsync {
        Fsync::Always => Database::create(path),
        Fsync::UnsafeNever => {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)?;
            let backend = UnsyncedFile(redb::backends::FileBackend::new(file)?);
            Database::builder().create_with_backend(backend)
        }
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

fn storage_err(
    table: &'static str,
    op: impl Into<String>,
) -> impl FnOnce(redb::StorageError) -> LogError {
    let op = op.into();
    move |source| LogError::Storage { table, op, source }
}

fn table_err(table: &'static str) -> impl FnOnce(redb::TableError) -> LogError {
    move |source| LogError::Table { table, source }
}

fn encode<M: protobuf::Message>(m: &M, what: impl FnOnce() -> String) -> Result<Vec<u8>, LogError> {
    m.write_to_bytes().map_err(|source| LogError::Encode {
        what: what(),
        source,
    })
}

fn decode<M: protobuf::Message>(
    bytes: &[u8],
    table: &'static str,
    what: impl FnOnce() -> String,
) -> Result<M, LogError> {
    M::parse_from_bytes(bytes).map_err(|source| LogError::Decode {
        table,
        what: what(),
        source,
    })
}

fn u64_from(bytes: &[u8], what: &str) -> Result<u64, LogError> {
    let arr: [u8; 8] = bytes
        .try_into()
        .map_err(|_| LogError::Corrupt(format!("{what} has {} bytes, expected 8", bytes.len())))?;
    Ok(u64::from_le_bytes(arr))
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
            self.write(batch, &plan, core.truncated_index)?;
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

    fn write(
        &self,
        batch: &PersistBatch,
        plan: &BatchEffect,
        truncated_before: u64,
    ) -> Result<(), LogError> {
        let mut txn = self
            .shared
            .db
            .begin_write()
            .map_err(|source| LogError::Transaction {
                kind: "write",
                source: Box::new(source),
            })?;
        txn.set_durability(Durability::Immediate);
        {
            let mut entries = txn.open_table(ENTRIES).map_err(table_err("entries"))?;
            if plan.clear {
                remove_keys(&mut entries, 0, u64::MAX, u64::MAX)
                    .map_err(storage_err("entries", "discarding the log for a snapshot"))?;
            }
            if let Some(first) = batch.entries.first() {
                remove_keys(&mut entries, first.index, u64::MAX, u64::MAX).map_err(storage_err(
                    "entries",
                    format!("truncating the log from {}", first.index),
                ))?;
                for e in batch.entries {
                    let bytes = encode(e, || format!("entry {}", e.index))?;
                    entries
                        .insert(e.index, bytes.as_slice())
                        .map_err(|source| LogError::Storage {
                            table: "entries",
                            op: format!("inserting entry {}", e.index),
                            source,
                        })?;
                }
            }
            // Compacted entries leave the file gradually: at most COMPACT_STEP of them
            // per transaction, so that compacting a long log never stalls one batch.
            // Entries at or below the truncation point are never read back.
            let truncated = plan.truncated.map_or(truncated_before, |(i, _)| i);
            remove_keys(&mut entries, 0, truncated + 1, COMPACT_STEP).map_err(storage_err(
                "entries",
                format!("compacting the log to {}", truncated + 1),
            ))?;
            let mut state = txn
                .open_table(RAFT_STATE)
                .map_err(table_err("raft_state"))?;
            if let Some(hs) = &plan.hard_state {
                let bytes = encode(hs, || "hard state".to_string())?;
                state
                    .insert(KEY_HARD_STATE, bytes.as_slice())
                    .map_err(storage_err("raft_state", "writing the hard state"))?;
            }
            if let Some(cs) = &plan.conf_state {
                let bytes = encode(cs, || "conf state".to_string())?;
                state
                    .insert(KEY_CONF_STATE, bytes.as_slice())
                    .map_err(storage_err("raft_state", "writing the conf state"))?;
            }
            if let Some(applied) = plan.applied {
                state
                    .insert(KEY_APPLIED, applied.to_le_bytes().as_slice())
                    .map_err(storage_err("raft_state", "writing the applied index"))?;
            }
            if let Some((index, term)) = plan.truncated {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&index.to_le_bytes());
                bytes[8..].copy_from_slice(&term.to_le_bytes());
                state
                    .insert(KEY_TRUNCATED, bytes.as_slice())
                    .map_err(storage_err("raft_state", "writing the truncation point"))?;
            }

            if let Some(image) = &plan.image {
                let mut table = txn.open_table(IMAGE).map_err(table_err("image"))?;
                let meta = encode(&image.metadata(), || {
                    format!("image metadata at {}", image.index)
                })?;
                table
                    .insert(KEY_IMAGE_METADATA, meta.as_slice())
                    .map_err(storage_err(
                        "image",
                        format!("writing image metadata at {}", image.index),
                    ))?;
                table
                    .insert(KEY_IMAGE_DATA, image.data.as_slice())
                    .map_err(storage_err(
                        "image",
                        format!("writing image data at {}", image.index),
                    ))?;
            }

            if !batch.meta.is_empty() {
                let mut table = txn.open_table(META).map_err(table_err("meta"))?;
                for (key, value) in batch.meta {
                    table
                        .insert(*key, value.as_slice())
                        .map_err(storage_err("meta", format!("writing meta `{key}`")))?;
                }
            }
        }
        txn.commit().map_err(|source| LogError::Commit { source })
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

/// Validates `batch` against `core` and works out its effect.
fn plan(core: &Core, batch: &PersistBatch) -> Result<BatchEffect, LogError> {
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
fn apply(core: &mut Core, batch: &PersistBatch, plan: BatchEffect) {
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

/// Reads everything stored into a [`Core`].
/// How many compacted entries one transaction removes from the file at most.
const COMPACT_STEP: u64 = 4096;

/// Removes the entries with keys in `lo..hi`, at most `limit` of them from the low end,
/// one key at a time. The log's keys are consecutive, so the stored first and last keys
/// bound the loop; redb removes single keys far faster than it runs `retain_in` over a
/// range.
fn remove_keys(
    table: &mut redb::Table<u64, &[u8]>,
    lo: u64,
    hi: u64,
    limit: u64,
) -> Result<(), redb::StorageError> {
    let first = match table.first()? {
        Some((k, _)) => k.value(),
        None => return Ok(()),
    };
    let last = match table.last()? {
        Some((k, _)) => k.value(),
        None => return Ok(()),
    };
    let start = lo.max(first);
    let end = hi
        .min(last.saturating_add(1))
        .min(start.saturating_add(limit));
    for key in start..end {
        table.remove(key)?;
    }
    Ok(())
}

fn load(db: &Database) -> Result<Core, LogError> {
    let txn = db.begin_read().map_err(|source| LogError::Transaction {
        kind: "read",
        source: Box::new(source),
    })?;

    let state = txn
        .open_table(RAFT_STATE)
        .map_err(table_err("raft_state"))?;
    let get = |key: &str| -> Result<Option<Vec<u8>>, LogError> {
        Ok(state
            .get(key)
            .map_err(storage_err("raft_state", format!("reading `{key}`")))?
            .map(|v| v.value().to_vec()))
    };
    let mut initialized = false;
    let hard_state = match get(KEY_HARD_STATE)? {
        Some(b) => {
            initialized = true;
            decode::<HardState>(&b, "raft_state", || "hard state".to_string())?
        }
        None => HardState::default(),
    };
    let conf_state = match get(KEY_CONF_STATE)? {
        Some(b) => {
            initialized = true;
            decode::<ConfState>(&b, "raft_state", || "conf state".to_string())?
        }
        None => ConfState::default(),
    };
    let applied = match get(KEY_APPLIED)? {
        Some(b) => u64_from(&b, "applied index")?,
        None => 0,
    };
    let (truncated_index, truncated_term) = match get(KEY_TRUNCATED)? {
        Some(b) if b.len() == 16 => (
            u64_from(&b[..8], "truncation index")?,
            u64_from(&b[8..], "truncation term")?,
        ),
        Some(b) => {
            return Err(LogError::Corrupt(format!(
                "truncation point has {} bytes, expected 16",
                b.len()
            )))
        }
        None => (0, 0),
    };

    let table = txn.open_table(IMAGE).map_err(table_err("image"))?;
    let meta_bytes = table
        .get(KEY_IMAGE_METADATA)
        .map_err(storage_err("image", "reading image metadata"))?
        .map(|v| v.value().to_vec());
    let image = match meta_bytes {
        Some(b) => {
            initialized = true;
            let meta: SnapshotMetadata = decode(&b, "image", || "image metadata".to_string())?;
            let data = table
                .get(KEY_IMAGE_DATA)
                .map_err(storage_err("image", "reading image data"))?
                .map(|v| v.value().to_vec())
                .ok_or_else(|| {
                    LogError::Corrupt(format!("image at {} has no data record", meta.index))
                })?;
            Some(Arc::new(Image {
                index: meta.index,
                term: meta.term,
                conf_state: meta.get_conf_state().clone(),
                data,
            }))
        }
        None => None,
    };

    let table = txn.open_table(ENTRIES).map_err(table_err("entries"))?;
    let mut entries = Vec::new();
    // Entries at or below the truncation point may still be in the file: they are
    // removed a few thousand per transaction after a compaction.
    for (expected, item) in (truncated_index + 1..).zip(
        table
            .range(truncated_index + 1..)
            .map_err(storage_err("entries", "iterating the log"))?,
    ) {
        let (key, value) = item.map_err(|source| LogError::Storage {
            table: "entries",
            op: format!("reading entry {expected}"),
            source,
        })?;
        let key = key.value();
        if key != expected {
            return Err(LogError::Corrupt(format!(
                "expected entry {expected} (truncated at {truncated_index}), found entry {key}"
            )));
        }
        let entry: Entry = decode(value.value(), "entries", || format!("entry {key}"))?;
        if entry.index != key {
            return Err(LogError::Corrupt(format!(
                "entry stored under index {key} says index {}",
                entry.index
            )));
        }
        entries.push(entry);
    }

    let table = txn.open_table(META).map_err(table_err("meta"))?;
    let mut meta = BTreeMap::new();
    for item in table
        .iter()
        .map_err(storage_err("meta", "iterating meta"))?
    {
        let (key, value) = item.map_err(storage_err("meta", "reading meta"))?;
        meta.insert(key.value().to_string(), value.value().to_vec());
    }

    Ok(Core {
        entries,
        truncated_index,
        truncated_term,
        hard_state,
        conf_state,
        applied,
        image,
        meta,
        initialized,
    })
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
