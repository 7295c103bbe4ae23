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
//!
//! # Modules
//!
//! `storage` holds [`DiskStorage`] and its in-memory copy of the log, `batch` a
//! [`PersistBatch`]'s validation and effect, `tables` the file's tables (writing a batch,
//! loading everything back), `image` the state-machine [`Image`], `error` [`LogError`].
//!
//! [`Entry`]: raft::eraftpb::Entry
//! [`HardState`]: raft::eraftpb::HardState
//! [`ConfState`]: raft::eraftpb::ConfState
//! [`SnapshotMetadata`]: raft::eraftpb::SnapshotMetadata
//! [`Storage::entries`]: raft::Storage::entries
//! [`Storage::term`]: raft::Storage::term
//! [`Storage::snapshot`]: raft::Storage::snapshot

#![warn(missing_docs)]

mod batch;
mod error;
mod image;
mod storage;
mod tables;

pub use batch::PersistBatch;
pub use error::LogError;
pub use image::Image;
pub use storage::{DiskStorage, LogStats};
pub use tables::Fsync;
