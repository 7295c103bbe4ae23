//! The file and its tables (see the crate's on-disk layout): opening the database,
//! writing a batch in one transaction, and reading everything back.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};
use redb::{Database, Durability, ReadableTable, TableDefinition};

use crate::batch::{BatchEffect, PersistBatch};
use crate::error::{storage_err, table_err, LogError};
use crate::image::Image;
use crate::storage::Core;

pub(crate) const ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("entries");
pub(crate) const RAFT_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_state");
pub(crate) const IMAGE: TableDefinition<&str, &[u8]> = TableDefinition::new("image");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const KEY_HARD_STATE: &str = "hard_state";
const KEY_CONF_STATE: &str = "conf_state";
const KEY_APPLIED: &str = "applied";
const KEY_TRUNCATED: &str = "truncated";
const KEY_IMAGE_METADATA: &str = "metadata";
const KEY_IMAGE_DATA: &str = "data";

/// Whether a persisted batch waits for the disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fsync {
    /// Every batch is fsync'd before [`DiskStorage::persist`] returns (the default).
    ///
    /// [`DiskStorage::persist`]: crate::DiskStorage::persist
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

pub(crate) fn create_db(path: &Path, fsync: Fsync) -> Result<Database, redb::DatabaseError> {
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

/// Writes `batch` (validated into `plan`) in one write transaction, committed durably.
pub(crate) fn write_batch(
    db: &Database,
    batch: &PersistBatch,
    plan: &BatchEffect,
    truncated_before: u64,
) -> Result<(), LogError> {
    let mut txn = db.begin_write().map_err(|source| LogError::Transaction {
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

/// Reads everything stored into a [`Core`].
pub(crate) fn load(db: &Database) -> Result<Core, LogError> {
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
