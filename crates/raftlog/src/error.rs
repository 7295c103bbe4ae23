//! What can fail in the durable log, each error naming what failed.

use std::path::PathBuf;

use raft::StorageError;

/// An error from the durable Raft log.
///
/// Each variant names what failed: opening the file, a transaction, a table, decoding a record
/// (with the entry index where there is one), or a [`PersistBatch`] that is not valid against the
/// stored state. A batch rejected with one of the validation variants changed nothing.
///
/// [`PersistBatch`]: crate::PersistBatch
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
    ///
    /// [`DiskStorage::initialize`]: crate::DiskStorage::initialize
    #[error("raft log is already initialized")]
    AlreadyInitialized,
    /// [`DiskStorage::initialize`] was called without voters.
    ///
    /// [`DiskStorage::initialize`]: crate::DiskStorage::initialize
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

pub(crate) fn storage_err(
    table: &'static str,
    op: impl Into<String>,
) -> impl FnOnce(redb::StorageError) -> LogError {
    let op = op.into();
    move |source| LogError::Storage { table, op, source }
}

pub(crate) fn table_err(table: &'static str) -> impl FnOnce(redb::TableError) -> LogError {
    move |source| LogError::Table { table, source }
}
