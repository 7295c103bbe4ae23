//! Deterministic checks of `DiskStorage`: bootstrap, appends, received snapshots, images and
//! compaction, `Storage::snapshot`, reopening, atomicity of rejected batches, a large batch, and
//! the benchmarks' unsynced mode.

use std::path::{Path, PathBuf};
use std::time::Instant;

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, Storage, StorageError};
use tranche_raftlog::{DiskStorage, Fsync, Image, LogError, PersistBatch};

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: format!("{index}@{term}").into_bytes().into(),
        ..Default::default()
    }
}

fn entries(range: std::ops::RangeInclusive<u64>, term: u64) -> Vec<Entry> {
    range.map(|i| entry(i, term)).collect()
}

fn hard_state(term: u64, vote: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote,
        commit,
        ..Default::default()
    }
}

fn conf(voters: &[u64]) -> ConfState {
    ConfState {
        voters: voters.to_vec(),
        ..Default::default()
    }
}

fn snapshot(index: u64, term: u64, voters: &[u64], data: &[u8]) -> Snapshot {
    let mut snap = Snapshot {
        data: data.to_vec().into(),
        ..Default::default()
    };
    snap.mut_metadata().index = index;
    snap.mut_metadata().term = term;
    snap.mut_metadata().set_conf_state(conf(voters));
    snap
}

fn image(index: u64, term: u64, data: &[u8]) -> Image {
    Image {
        index,
        term,
        conf_state: conf(&[1, 2, 3]),
        data: data.to_vec(),
    }
}

fn ctx() -> GetEntriesContext {
    GetEntriesContext::empty(false)
}

fn all_entries(s: &DiskStorage) -> Vec<Entry> {
    let first = s.first_index().unwrap();
    let last = s.last_index().unwrap();
    s.entries(first, last + 1, None, ctx()).unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft.redb");
        Fixture { _dir: dir, path }
    }

    fn open(&self) -> DiskStorage {
        DiskStorage::open(&self.path).unwrap()
    }
}

/// A storage with entries 1..=10 (term 1 up to 5, term 2 after) and commit 8.
fn with_log(path: &Path) -> DiskStorage {
    let s = DiskStorage::open(path).unwrap();
    s.initialize(&[1, 2, 3]).unwrap();
    let mut ents = entries(1..=5, 1);
    ents.extend(entries(6..=10, 2));
    s.persist(&PersistBatch {
        entries: &ents,
        hard_state: Some(hard_state(2, 1, 8)),
        ..Default::default()
    })
    .unwrap();
    s
}

#[test]
fn fresh_storage_is_empty() {
    let f = Fixture::new();
    let s = f.open();
    assert!(!s.is_initialized());
    assert_eq!(s.first_index(), Ok(1));
    assert_eq!(s.last_index(), Ok(0));
    assert_eq!(s.term(0), Ok(0));
    assert_eq!(
        s.term(1),
        Err(raft::Error::Store(StorageError::Unavailable))
    );
    let rs = s.initial_state().unwrap();
    assert!(!rs.initialized());
    assert_eq!(rs.hard_state, HardState::default());
    assert_eq!(s.image(), None);
    assert_eq!(s.applied(), 0);
    assert_eq!(s.meta("x"), None);
    assert_eq!(s.entries(1, 1, None, ctx()), Ok(vec![]));
    // An empty batch stores nothing and is fine.
    s.persist(&PersistBatch::default()).unwrap();
    assert!(!s.is_initialized());
}

#[test]
fn initialize_bootstraps_once() {
    let f = Fixture::new();
    {
        let s = f.open();
        assert!(matches!(s.initialize(&[]), Err(LogError::NoVoters)));
        s.initialize(&[1, 2, 3]).unwrap();
        assert!(s.is_initialized());
        assert_eq!(s.conf_state().voters, vec![1, 2, 3]);
        assert!(s.initial_state().unwrap().initialized());
        assert!(matches!(
            s.initialize(&[4]),
            Err(LogError::AlreadyInitialized)
        ));
        assert_eq!(s.first_index(), Ok(1));
        assert_eq!(s.last_index(), Ok(0));
    }
    let s = f.open();
    assert!(s.is_initialized());
    assert_eq!(s.conf_state().voters, vec![1, 2, 3]);
    assert!(matches!(
        s.initialize(&[1]),
        Err(LogError::AlreadyInitialized)
    ));
}

#[test]
fn a_hard_state_alone_initializes() {
    let f = Fixture::new();
    let s = f.open();
    s.persist(&PersistBatch {
        hard_state: Some(hard_state(1, 0, 0)),
        ..Default::default()
    })
    .unwrap();
    assert!(s.is_initialized());
    drop(s);
    assert!(f.open().is_initialized());
}

#[test]
fn append_truncates_conflicting_tail() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    assert_eq!(s.first_index(), Ok(1));
    assert_eq!(s.last_index(), Ok(10));
    // Overwrite from 7 with term 3: 8..=10 go away.
    s.persist(&PersistBatch {
        entries: &entries(7..=8, 3),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.last_index(), Ok(8));
    assert_eq!(s.term(6), Ok(2));
    assert_eq!(s.term(7), Ok(3));
    assert_eq!(
        s.term(9),
        Err(raft::Error::Store(StorageError::Unavailable))
    );
    let want: Vec<Entry> = entries(1..=5, 1)
        .into_iter()
        .chain(entries(6..=6, 2))
        .chain(entries(7..=8, 3))
        .collect();
    assert_eq!(all_entries(&s), want);
    drop(s);
    assert_eq!(all_entries(&f.open()), want);
}

#[test]
fn invalid_appends_are_refused_and_change_nothing() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    let before = all_entries(&s);
    let hs = s.hard_state();

    let err = s
        .persist(&PersistBatch {
            entries: &entries(12..=13, 2),
            hard_state: Some(hard_state(9, 9, 9)),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::AppendGap {
                index: 12,
                last_index: 10
            }
        ),
        "{err}"
    );

    let broken = vec![entry(11, 2), entry(13, 2)];
    let err = s
        .persist(&PersistBatch {
            entries: &broken,
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::AppendNotConsecutive {
                previous: 11,
                found: 13
            }
        ),
        "{err}"
    );

    // Compact to 6 (image at 8), then appending at 5 overwrites compacted entries.
    s.persist(&PersistBatch {
        image: Some(image(8, 2, b"img")),
        compact_to: Some(6),
        ..Default::default()
    })
    .unwrap();
    let err = s
        .persist(&PersistBatch {
            entries: &entries(5..=6, 3),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::AppendCompacted {
                index: 5,
                first_index: 6
            }
        ),
        "{err}"
    );
    assert_eq!(all_entries(&s), before[5..].to_vec());
    assert_eq!(s.hard_state(), hs);
    drop(s);
    let s = f.open();
    assert_eq!(all_entries(&s), before[5..].to_vec());
    assert_eq!(s.hard_state(), hs);
}

#[test]
fn entries_honour_bounds_and_max_size() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    assert_eq!(
        s.entries(0, 3, None, ctx()),
        Err(raft::Error::Store(StorageError::Compacted))
    );
    assert_eq!(
        s.entries(1, 12, None, ctx()),
        Err(raft::Error::Store(StorageError::Unavailable))
    );
    assert!(s.entries(5, 4, None, ctx()).is_err());
    assert_eq!(s.entries(3, 3, None, ctx()), Ok(vec![]));
    assert_eq!(s.entries(3, 6, None, ctx()).unwrap(), entries(3..=5, 1));
    // At least one entry, even with max_size 0.
    assert_eq!(s.entries(3, 6, Some(0), ctx()).unwrap(), entries(3..=3, 1));
    for max in [0u64, 1, 10, 20, 30, 45, 1000, raft::NO_LIMIT] {
        let mut want = entries(3..=5, 1);
        want.extend(entries(6..=10, 2));
        raft::util::limit_size(&mut want, Some(max));
        assert_eq!(
            s.entries(3, 11, Some(max), ctx()).unwrap(),
            want,
            "max {max}"
        );
    }
}

#[test]
fn received_snapshot_replaces_the_log() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    s.persist(&PersistBatch {
        applied: Some(7),
        ..Default::default()
    })
    .unwrap();
    let snap = snapshot(20, 3, &[1, 2, 4], b"state at 20");
    s.persist(&PersistBatch {
        snapshot: Some(&snap),
        ..Default::default()
    })
    .unwrap();
    let check = |s: &DiskStorage| {
        assert_eq!(s.first_index(), Ok(21));
        assert_eq!(s.last_index(), Ok(20));
        assert_eq!(s.term(20), Ok(3));
        assert_eq!(s.term(19), Err(raft::Error::Store(StorageError::Compacted)));
        assert_eq!(
            s.term(21),
            Err(raft::Error::Store(StorageError::Unavailable))
        );
        assert_eq!(s.hard_state(), hard_state(3, 1, 20));
        assert_eq!(s.conf_state(), conf(&[1, 2, 4]));
        assert_eq!(s.applied(), 20);
        let img = s.image().unwrap();
        assert_eq!((img.index, img.term), (20, 3));
        assert_eq!(img.data, b"state at 20");
        assert_eq!(img.conf_state, conf(&[1, 2, 4]));
        assert_eq!(s.snapshot(20, 2).unwrap(), snap);
        assert_eq!(s.stats().entries_in_memory, 0);
    };
    check(&s);
    drop(s);
    let s = f.open();
    check(&s);

    // The log continues after the snapshot.
    s.persist(&PersistBatch {
        entries: &entries(21..=23, 3),
        hard_state: Some(hard_state(3, 1, 22)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.first_index(), Ok(21));
    assert_eq!(s.last_index(), Ok(23));
    assert_eq!(all_entries(&s), entries(21..=23, 3));
}

#[test]
fn snapshot_inside_the_log_empties_it_and_keeps_a_higher_commit() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    // Commit is 8, term 2; a snapshot at 6 term 2 (as MemStorage: the log is emptied).
    let snap = snapshot(6, 2, &[1, 2, 3], b"six");
    s.persist(&PersistBatch {
        snapshot: Some(&snap),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.first_index(), Ok(7));
    assert_eq!(s.last_index(), Ok(6));
    assert_eq!(s.hard_state(), hard_state(2, 1, 8));
}

#[test]
fn snapshot_with_entries_in_one_batch() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    let snap = snapshot(30, 4, &[1, 2, 3], b"thirty");
    s.persist(&PersistBatch {
        snapshot: Some(&snap),
        entries: &entries(31..=32, 4),
        hard_state: Some(hard_state(4, 2, 31)),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.first_index(), Ok(31));
    assert_eq!(s.last_index(), Ok(32));
    assert_eq!(s.term(30), Ok(4));
    assert_eq!(s.hard_state(), hard_state(4, 2, 31));
    drop(s);
    let s = f.open();
    assert_eq!(all_entries(&s), entries(31..=32, 4));
}

#[test]
fn out_of_date_snapshots_are_rejected() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    // Image at 8 without compaction: first index stays 1, but a snapshot older than the
    // image is out of date.
    s.persist(&PersistBatch {
        image: Some(image(8, 2, b"eight")),
        ..Default::default()
    })
    .unwrap();
    let err = s
        .persist(&PersistBatch {
            snapshot: Some(&snapshot(6, 2, &[1], b"")),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(err, LogError::SnapshotOutOfDate { index: 6, .. }),
        "{err}"
    );
    assert_eq!(
        raft::Error::from(err),
        raft::Error::Store(StorageError::SnapshotOutOfDate)
    );

    // Compacted to 6: a snapshot below the first index is out of date too.
    s.persist(&PersistBatch {
        compact_to: Some(6),
        ..Default::default()
    })
    .unwrap();
    let err = s
        .persist(&PersistBatch {
            snapshot: Some(&snapshot(5, 1, &[1], b"")),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::SnapshotOutOfDate {
                index: 5,
                first_index: 6,
                image_index: Some(8)
            }
        ),
        "{err}"
    );
    assert_eq!(s.image().unwrap().data, b"eight");
    assert_eq!(s.first_index(), Ok(6));
    assert_eq!(s.last_index(), Ok(10));
    // At the image's index it is accepted.
    s.persist(&PersistBatch {
        snapshot: Some(&snapshot(8, 2, &[1], b"eight again")),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.first_index(), Ok(9));
}

#[test]
fn compaction_never_passes_the_image() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    // No image: any real compaction is refused; at or below the first index is a no-op.
    let err = s
        .persist(&PersistBatch {
            compact_to: Some(3),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::CompactBeyondImage {
                compact_to: 3,
                image_index: None
            }
        ),
        "{err}"
    );
    s.persist(&PersistBatch {
        compact_to: Some(1),
        ..Default::default()
    })
    .unwrap();

    s.persist(&PersistBatch {
        image: Some(image(5, 1, b"five")),
        applied: Some(5),
        ..Default::default()
    })
    .unwrap();
    let err = s
        .persist(&PersistBatch {
            compact_to: Some(7),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::CompactBeyondImage {
                compact_to: 7,
                image_index: Some(5)
            }
        ),
        "{err}"
    );
    assert_eq!(s.first_index(), Ok(1));

    s.persist(&PersistBatch {
        compact_to: Some(4),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.first_index(), Ok(4));
    assert_eq!(s.term(3), Ok(1));
    assert_eq!(s.term(2), Err(raft::Error::Store(StorageError::Compacted)));
    // Up to the image itself (first index = image + 1); the image's term stays known.
    s.persist(&PersistBatch {
        compact_to: Some(6),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.first_index(), Ok(6));
    assert_eq!(s.term(5), Ok(1));
    assert_eq!(s.term(6), Ok(2));
    // Going backwards does nothing.
    s.persist(&PersistBatch {
        compact_to: Some(2),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(s.first_index(), Ok(6));
    drop(s);
    let s = f.open();
    assert_eq!(s.first_index(), Ok(6));
    assert_eq!(s.term(5), Ok(1));
    assert_eq!(all_entries(&s), entries(6..=10, 2));
}

#[test]
fn image_and_compaction_of_the_whole_log() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    s.persist(&PersistBatch {
        commit: Some(10),
        applied: Some(10),
        image: Some(image(10, 2, b"ten")),
        compact_to: Some(11),
        ..Default::default()
    })
    .unwrap();
    let check = |s: &DiskStorage| {
        assert_eq!(s.first_index(), Ok(11));
        assert_eq!(s.last_index(), Ok(10));
        assert_eq!(s.term(10), Ok(2));
        assert_eq!(s.hard_state().commit, 10);
    };
    check(&s);
    drop(s);
    let s = f.open();
    check(&s);
    s.persist(&PersistBatch {
        entries: &entries(11..=11, 3),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(all_entries(&s), entries(11..=11, 3));
}

#[test]
fn invalid_images_are_refused() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    let err = s
        .persist(&PersistBatch {
            image: Some(image(9, 2, b"")),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::ImageNotCommitted {
                index: 9,
                commit: 8
            }
        ),
        "{err}"
    );
    let err = s
        .persist(&PersistBatch {
            image: Some(image(7, 1, b"")),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::ImageTermMismatch {
                index: 7,
                term: 1,
                log_term: Some(2)
            }
        ),
        "{err}"
    );
    // The commit in the same batch counts.
    s.persist(&PersistBatch {
        commit: Some(9),
        image: Some(image(9, 2, b"nine")),
        ..Default::default()
    })
    .unwrap();
    let err = s
        .persist(&PersistBatch {
            image: Some(image(7, 2, b"")),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::ImageOutOfDate {
                index: 7,
                image_index: 9
            }
        ),
        "{err}"
    );
    assert_eq!(s.image().unwrap().data, b"nine");
}

#[test]
fn storage_snapshot_serves_the_image_or_asks_for_one() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    assert!(!s.snapshot_wanted());
    assert_eq!(
        s.snapshot(0, 2),
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable
        ))
    );
    assert!(s.snapshot_wanted());
    assert!(s.stats().snapshot_wanted);

    s.persist(&PersistBatch {
        image: Some(image(6, 2, b"six")),
        applied: Some(6),
        ..Default::default()
    })
    .unwrap();
    assert!(!s.snapshot_wanted());
    let snap = s.snapshot(0, 2).unwrap();
    assert_eq!(snap.get_metadata().index, 6);
    assert_eq!(snap.get_metadata().term, 2);
    assert_eq!(snap.get_metadata().get_conf_state(), &conf(&[1, 2, 3]));
    assert_eq!(&snap.data[..], b"six");
    assert_eq!(Image::from_snapshot(&snap), s.image().unwrap());

    // Asking for more than the image has.
    assert_eq!(
        s.snapshot(7, 2),
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable
        ))
    );
    assert!(s.snapshot_wanted());
    s.persist(&PersistBatch {
        image: Some(image(8, 2, b"eight")),
        ..Default::default()
    })
    .unwrap();
    assert!(!s.snapshot_wanted());
    assert_eq!(s.snapshot(7, 2).unwrap().get_metadata().index, 8);
}

#[test]
fn reopen_restores_everything() {
    let f = Fixture::new();
    let s = with_log(&f.path);
    s.persist(&PersistBatch {
        applied: Some(8),
        image: Some(image(7, 2, b"seven")),
        compact_to: Some(5),
        conf_state: Some(conf(&[1, 2, 3, 4])),
        meta: &[
            ("addr/1", b"10.0.0.1:7000".to_vec()),
            ("addr/2", b"x".to_vec()),
        ],
        ..Default::default()
    })
    .unwrap();
    s.persist(&PersistBatch {
        meta: &[("addr/2", b"10.0.0.2:7000".to_vec())],
        ..Default::default()
    })
    .unwrap();
    let before = (
        all_entries(&s),
        s.hard_state(),
        s.conf_state(),
        s.image(),
        s.applied(),
        s.meta_all(),
        s.stats(),
        s.term(4),
    );
    drop(s);
    let s = f.open();
    let after = (
        all_entries(&s),
        s.hard_state(),
        s.conf_state(),
        s.image(),
        s.applied(),
        s.meta_all(),
        s.stats(),
        s.term(4),
    );
    assert_eq!(before, after);
    assert_eq!(s.meta("addr/1").unwrap(), b"10.0.0.1:7000");
    assert_eq!(s.meta("addr/2").unwrap(), b"10.0.0.2:7000");
    assert_eq!(s.first_index(), Ok(5));
    assert_eq!(s.term(4), Ok(1));
    assert!(s.is_initialized());
}

#[test]
fn the_file_cannot_be_opened_twice() {
    let f = Fixture::new();
    let _s = f.open();
    let err = DiskStorage::open(&f.path).unwrap_err();
    assert!(matches!(err, LogError::Open { .. }), "{err}");
}

#[test]
fn a_gap_in_the_stored_log_is_reported() {
    let f = Fixture::new();
    drop(with_log(&f.path));
    {
        // Remove entry 4 behind the storage's back.
        let db = redb::Database::create(&f.path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn
                .open_table(redb::TableDefinition::<u64, &[u8]>::new("entries"))
                .unwrap();
            t.remove(4).unwrap();
        }
        txn.commit().unwrap();
    }
    let err = DiskStorage::open(&f.path).unwrap_err();
    assert!(matches!(err, LogError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("expected entry 4"), "{err}");
}

#[test]
fn clones_share_state_and_are_send_sync() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<DiskStorage>();
    fn assert_error<T: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<LogError>();

    let f = Fixture::new();
    let s = with_log(&f.path);
    let c = s.clone();
    std::thread::spawn(move || {
        c.persist(&PersistBatch {
            entries: &entries(11..=11, 2),
            ..Default::default()
        })
        .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(s.last_index(), Ok(11));
}

#[test]
fn a_thousand_entries_in_one_batch() {
    let f = Fixture::new();
    let s = f.open();
    s.initialize(&[1]).unwrap();
    let big: Vec<Entry> = (1..=1000)
        .map(|i| Entry {
            index: i,
            term: 1,
            data: vec![(i % 251) as u8; 256].into(),
            ..Default::default()
        })
        .collect();

    // Rejected as a whole when a later part of the batch is invalid: none of it is stored.
    let err = s
        .persist(&PersistBatch {
            entries: &big,
            hard_state: Some(hard_state(1, 1, 1000)),
            compact_to: Some(500),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(err, LogError::CompactBeyondImage { .. }), "{err}");
    assert_eq!(s.last_index(), Ok(0));
    assert_eq!(s.hard_state(), HardState::default());

    let started = Instant::now();
    s.persist(&PersistBatch {
        entries: &big,
        hard_state: Some(hard_state(1, 1, 1000)),
        ..Default::default()
    })
    .unwrap();
    let elapsed = started.elapsed();
    eprintln!("persisting 1000 entries (256 B each) in one batch took {elapsed:?}");
    assert_eq!(s.last_index(), Ok(1000));
    assert_eq!(s.stats().entries_in_memory, 1000);
    assert_eq!(s.stats().entry_bytes_in_memory, 256_000);
    drop(s);

    let s = f.open();
    assert_eq!(s.last_index(), Ok(1000));
    assert_eq!(all_entries(&s), big);
    assert_eq!(s.hard_state().commit, 1000);
}

/// Counts the entry records still in the file, compacted or not.
fn records_in_file(path: &Path) -> u64 {
    use redb::ReadableTableMetadata;
    let db = redb::Database::open(path).unwrap();
    let txn = db.begin_read().unwrap();
    let t: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("entries");
    txn.open_table(t).unwrap().len().unwrap()
}

#[test]
fn a_long_compaction_leaves_the_file_gradually_and_survives_reopen_midway() {
    let f = Fixture::new();
    let s = DiskStorage::open(&f.path).unwrap();
    s.initialize(&[1]).unwrap();
    let n = 10_000;
    s.persist(&PersistBatch {
        entries: &entries(1..=n, 1),
        hard_state: Some(hard_state(1, 1, n)),
        ..Default::default()
    })
    .unwrap();
    s.persist(&PersistBatch {
        image: Some(image(9_000, 1, b"img")),
        compact_to: Some(9_000),
        ..Default::default()
    })
    .unwrap();
    // Raft sees the compaction at once.
    assert_eq!(s.first_index(), Ok(9_000));
    let before = (all_entries(&s), s.stats());
    drop(s);
    // Part of the compacted entries are still in the file, and are never read back.
    let left = records_in_file(&f.path);
    assert!(left > n - 8_999 && left < n, "{left} records in the file");
    let s = f.open();
    assert_eq!((all_entries(&s), s.stats()), before);
    // Later transactions remove the rest.
    for i in 0..4 {
        s.persist(&PersistBatch {
            entries: &entries(n + 1 + i..=n + 1 + i, 1),
            ..Default::default()
        })
        .unwrap();
    }
    let last = s.last_index().unwrap();
    drop(s);
    assert_eq!(records_in_file(&f.path), last - 9_000 + 1);
}

/// `Fsync::UnsafeNever` (benchmarks only) changes only whether the disk is waited for: the
/// same file format and commit protocol, so what was persisted is there when the file is
/// reopened, in either mode, and an image and compaction work as with fsync.
#[test]
fn an_unsynced_log_is_the_same_file_without_the_waits() {
    let f = Fixture::new();
    let s = DiskStorage::open_with(&f.path, Fsync::UnsafeNever).unwrap();
    assert_eq!(s.fsync(), Fsync::UnsafeNever);
    s.initialize(&[1, 2, 3]).unwrap();
    for i in 1..=50 {
        s.persist(&PersistBatch {
            entries: &[entry(i, 1)],
            hard_state: Some(hard_state(1, 1, i - 1)),
            ..Default::default()
        })
        .unwrap();
    }
    s.persist(&PersistBatch {
        applied: Some(40),
        image: Some(image(40, 1, b"state at 40")),
        compact_to: Some(30),
        ..Default::default()
    })
    .unwrap();
    let before = all_entries(&s);
    drop(s);

    let s = f.open();
    assert_eq!(s.fsync(), Fsync::Always);
    assert_eq!(all_entries(&s), before);
    assert_eq!(s.first_index(), Ok(30));
    assert_eq!(s.last_index(), Ok(50));
    assert_eq!(s.hard_state(), hard_state(1, 1, 49));
    assert_eq!(s.image().unwrap().data, b"state at 40");
    drop(s);
    let s = DiskStorage::open_with(&f.path, Fsync::UnsafeNever).unwrap();
    assert_eq!(all_entries(&s), before);
}
