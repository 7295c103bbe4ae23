//! Random sequences of appends (with conflicting overwrites), hard-state and commit updates,
//! conf states, images with compaction, received snapshots, meta writes and reopens, applied to
//! both `DiskStorage` and `raft::storage::MemStorage`; after every step the two must agree on
//! `first_index`, `last_index`, `term`, `entries`, the hard state and the conf state, and a reopen
//! must bring back exactly what was there.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use proptest::prelude::*;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::storage::MemStorage;
use raft::{GetEntriesContext, Storage, StorageError};
use tranche_raftlog::{DiskStorage, Image, LogError, LogStats, PersistBatch};

#[derive(Debug, Clone)]
enum Op {
    /// Append `1 + len % 8` entries starting `back` positions before `last + 1` (not before the
    /// first index or into the image): `back == 0` appends at the end, anything else overwrites
    /// a tail.
    Append {
        back: u8,
        len: u8,
        term_bump: u8,
    },
    HardState {
        term_bump: u8,
        vote: u8,
        commit: u16,
    },
    Commit(u16),
    ConfState(Vec<u64>),
    Applied(u16),
    /// A local image at a committed index, optionally compacting up to it in the same batch.
    Image {
        pick: u16,
        compact: Option<u16>,
        data: Vec<u8>,
    },
    Compact(u16),
    Snapshot {
        ahead: u8,
        term_bump: u8,
        voters: Vec<u64>,
        data: Vec<u8>,
    },
    Meta {
        key: u8,
        value: Vec<u8>,
    },
    Reopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let small_bytes = prop::collection::vec(any::<u8>(), 0..16);
    let voters = prop::collection::vec(1u64..6, 1..4);
    prop_oneof![
        6 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(b, len, term_bump)| Op::Append {
            // Mostly append at the end, sometimes overwrite.
            back: if b % 3 == 0 { b / 3 } else { 0 },
            len,
            term_bump
        }),
        2 => (any::<u8>(), any::<u8>(), any::<u16>())
            .prop_map(|(term_bump, vote, commit)| Op::HardState { term_bump, vote, commit }),
        2 => any::<u16>().prop_map(Op::Commit),
        1 => voters.clone().prop_map(Op::ConfState),
        1 => any::<u16>().prop_map(Op::Applied),
        3 => (any::<u16>(), prop::option::of(any::<u16>()), small_bytes.clone())
            .prop_map(|(pick, compact, data)| Op::Image { pick, compact, data }),
        3 => any::<u16>().prop_map(Op::Compact),
        1 => (any::<u8>(), any::<u8>(), voters, small_bytes.clone()).prop_map(
            |(ahead, term_bump, voters, data)| Op::Snapshot { ahead, term_bump, voters, data }
        ),
        1 => (any::<u8>(), small_bytes).prop_map(|(key, value)| Op::Meta { key, value }),
        1 => Just(Op::Reopen),
    ]
}

struct Harness {
    _dir: tempfile::TempDir,
    path: PathBuf,
    disk: Option<DiskStorage>,
    mem: MemStorage,
    /// Known term of every index in the current log history (compaction keeps them).
    terms: HashMap<u64, u64>,
    applied: u64,
    image: Option<Image>,
    meta: BTreeMap<String, Vec<u8>>,
}

fn entry(index: u64, term: u64) -> Entry {
    Entry {
        index,
        term,
        data: format!("{index}@{term}").into_bytes().into(),
        ..Default::default()
    }
}

fn ctx() -> GetEntriesContext {
    GetEntriesContext::empty(false)
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("raft.redb");
        let disk = DiskStorage::open(&path).unwrap();
        let mut terms = HashMap::new();
        terms.insert(0, 0);
        Harness {
            _dir: dir,
            path,
            disk: Some(disk),
            mem: MemStorage::new(),
            terms,
            applied: 0,
            image: None,
            meta: BTreeMap::new(),
        }
    }

    fn disk(&self) -> &DiskStorage {
        self.disk.as_ref().unwrap()
    }

    fn bounds(&self) -> (u64, u64) {
        (
            self.disk().first_index().unwrap(),
            self.disk().last_index().unwrap(),
        )
    }

    fn run(&mut self, op: &Op) {
        let (first, last) = self.bounds();
        let hs = self.disk().hard_state();
        let image_index = self.image.as_ref().map(|i| i.index);
        match op {
            Op::Append {
                back,
                len,
                term_bump,
            } => {
                // Raft never overwrites what is in an image (it is committed), so neither do
                // we; anything after it may be overwritten.
                let lowest = first.max(image_index.map_or(0, |i| i + 1));
                let span = last + 1 - lowest;
                let start = last + 1 - u64::from(*back) % (span + 1);
                let base = self.terms.get(&(start - 1)).copied().unwrap_or(hs.term);
                let term = base.max(hs.term) + u64::from(term_bump % 3);
                let ents: Vec<Entry> = (start..start + 1 + u64::from(len % 8))
                    .map(|i| entry(i, term))
                    .collect();
                self.disk()
                    .persist(&PersistBatch {
                        entries: &ents,
                        ..Default::default()
                    })
                    .unwrap();
                self.mem.wl().append(&ents).unwrap();
                self.terms.retain(|&i, _| i < start);
                for e in &ents {
                    self.terms.insert(e.index, e.term);
                }
            }
            Op::HardState {
                term_bump,
                vote,
                commit,
            } => {
                let new = HardState {
                    term: hs.term + u64::from(term_bump % 2),
                    vote: u64::from(vote % 4),
                    commit: hs.commit.max(u64::from(*commit) % (last + 1)),
                    ..Default::default()
                };
                self.disk()
                    .persist(&PersistBatch {
                        hard_state: Some(new.clone()),
                        ..Default::default()
                    })
                    .unwrap();
                self.mem.wl().set_hardstate(new);
            }
            Op::Commit(c) => {
                let commit = hs.commit.max(u64::from(*c) % (last + 1));
                self.disk()
                    .persist(&PersistBatch {
                        commit: Some(commit),
                        ..Default::default()
                    })
                    .unwrap();
                self.mem.wl().mut_hard_state().commit = commit;
            }
            Op::ConfState(voters) => {
                let cs = ConfState {
                    voters: voters.clone(),
                    ..Default::default()
                };
                self.disk()
                    .persist(&PersistBatch {
                        conf_state: Some(cs.clone()),
                        ..Default::default()
                    })
                    .unwrap();
                self.mem.wl().set_conf_state(cs);
            }
            Op::Applied(a) => {
                let applied = u64::from(*a) % (last + 1);
                self.disk()
                    .persist(&PersistBatch {
                        applied: Some(applied),
                        ..Default::default()
                    })
                    .unwrap();
                self.applied = applied;
            }
            Op::Image {
                pick,
                compact,
                data,
            } => {
                let lo = (first - 1).max(image_index.unwrap_or(0));
                let hi = hs.commit.min(last);
                if lo > hi {
                    // Nothing committed beyond the current image: an image beyond the commit
                    // index is refused and changes nothing.
                    let idx = hs.commit + 1;
                    let err = self
                        .disk()
                        .persist(&PersistBatch {
                            image: Some(Image {
                                index: idx,
                                term: self.terms.get(&idx).copied().unwrap_or(0),
                                conf_state: ConfState::default(),
                                data: data.clone(),
                            }),
                            ..Default::default()
                        })
                        .unwrap_err();
                    assert!(
                        matches!(
                            err,
                            LogError::ImageNotCommitted { .. } | LogError::ImageOutOfDate { .. }
                        ),
                        "{err}"
                    );
                    return;
                }
                let idx = lo + u64::from(*pick) % (hi - lo + 1);
                let term = self.terms[&idx];
                let image = Image {
                    index: idx,
                    term,
                    conf_state: self.disk().conf_state(),
                    data: data.clone(),
                };
                // Compact somewhere in [first, min(idx + 1, last)]; MemStorage mishandles a
                // log compacted to empty, so keep at least one entry.
                let compact_to = compact.and_then(|c| {
                    let top = (idx + 1).min(last);
                    (top >= first).then(|| first + u64::from(c) % (top - first + 1))
                });
                self.disk()
                    .persist(&PersistBatch {
                        image: Some(image.clone()),
                        compact_to,
                        ..Default::default()
                    })
                    .unwrap();
                if let Some(c) = compact_to {
                    self.mem.wl().compact(c).unwrap();
                }
                assert!(!self.disk().snapshot_wanted());
                self.image = Some(image);
            }
            Op::Compact(c) => match image_index {
                Some(i) => {
                    let top = (i + 1).min(last);
                    if top < first {
                        return;
                    }
                    let compact_to = first + u64::from(*c) % (top - first + 1);
                    self.disk()
                        .persist(&PersistBatch {
                            compact_to: Some(compact_to),
                            ..Default::default()
                        })
                        .unwrap();
                    self.mem.wl().compact(compact_to).unwrap();
                    // Beyond the image is refused.
                    if i + 2 <= last {
                        let err = self
                            .disk()
                            .persist(&PersistBatch {
                                compact_to: Some(i + 2),
                                ..Default::default()
                            })
                            .unwrap_err();
                        assert!(matches!(err, LogError::CompactBeyondImage { .. }), "{err}");
                    }
                }
                None => {
                    if first < last {
                        let err = self
                            .disk()
                            .persist(&PersistBatch {
                                compact_to: Some(first + 1),
                                ..Default::default()
                            })
                            .unwrap_err();
                        assert!(matches!(err, LogError::CompactBeyondImage { .. }), "{err}");
                    }
                }
            },
            Op::Snapshot {
                ahead,
                term_bump,
                voters,
                data,
            } => {
                let index =
                    first.max(image_index.unwrap_or(0)).max(hs.commit) + u64::from(ahead % 4);
                let term = hs.term.max(self.terms.get(&index).copied().unwrap_or(0))
                    + u64::from(term_bump % 2);
                let mut snap = Snapshot {
                    data: data.clone().into(),
                    ..Default::default()
                };
                snap.mut_metadata().index = index;
                snap.mut_metadata().term = term;
                snap.mut_metadata().mut_conf_state().voters = voters.clone();
                self.disk()
                    .persist(&PersistBatch {
                        snapshot: Some(&snap),
                        ..Default::default()
                    })
                    .unwrap();
                self.mem.wl().apply_snapshot(snap.clone()).unwrap();
                self.terms.clear();
                self.terms.insert(index, term);
                self.applied = index;
                self.image = Some(Image::from_snapshot(&snap));
            }
            Op::Meta { key, value } => {
                let key = format!("k{}", key % 4);
                self.disk()
                    .persist(&PersistBatch {
                        meta: &[(key.as_str(), value.clone())],
                        ..Default::default()
                    })
                    .unwrap();
                self.meta.insert(key, value.clone());
            }
            Op::Reopen => {
                let before = Observed::of(self.disk());
                self.disk = None;
                self.disk = Some(DiskStorage::open(&self.path).unwrap());
                let after = Observed::of(self.disk());
                assert_eq!(before, after, "state changed across reopen");
            }
        }
    }

    fn check(&self) {
        let disk = self.disk();
        let mem = &self.mem;
        let (first, last) = self.bounds();
        assert_eq!(first, mem.first_index().unwrap(), "first_index");
        assert_eq!(last, mem.last_index().unwrap(), "last_index");

        for idx in 0..=last + 2 {
            let d = disk.term(idx);
            let m = mem.term(idx);
            if idx + 1 < first {
                // Compacted. MemStorage still answers for the index of its last received
                // snapshot; DiskStorage only for the truncation point.
                assert_eq!(
                    d,
                    Err(raft::Error::Store(StorageError::Compacted)),
                    "term({idx})"
                );
            } else if idx + 1 == first {
                // The truncation point: DiskStorage keeps its term (MemStorage only after a
                // received snapshot).
                assert_eq!(d, Ok(self.terms[&idx]), "term({idx}) at truncation point");
                if m.is_ok() {
                    assert_eq!(d, m, "term({idx})");
                }
            } else {
                assert_eq!(d, m, "term({idx})");
                if let Ok(t) = d {
                    assert_eq!(t, self.terms[&idx], "term({idx}) vs model");
                }
            }
        }

        if last >= first {
            let stride = ((last - first) / 8).max(1);
            let mut low = first;
            while low <= last {
                for max in [Some(0), Some(20), Some(60), None, Some(u64::MAX)] {
                    for high in [low + 1, (low + 3).min(last + 1), last + 1] {
                        let d = disk.entries(low, high, max, ctx()).unwrap();
                        let m = mem.entries(low, high, max, ctx()).unwrap();
                        assert_eq!(d, m, "entries({low}, {high}, {max:?})");
                    }
                }
                low += stride;
            }
        }
        if first > 1 {
            assert_eq!(
                disk.entries(first - 1, last + 1, None, ctx()),
                Err(raft::Error::Store(StorageError::Compacted))
            );
        }
        assert_eq!(
            disk.entries(first, last + 2, None, ctx()),
            Err(raft::Error::Store(StorageError::Unavailable))
        );

        let rs = disk.initial_state().unwrap();
        let ms = mem.initial_state().unwrap();
        assert_eq!(rs.hard_state, ms.hard_state, "hard state");
        assert_eq!(rs.conf_state, ms.conf_state, "conf state");
        assert_eq!(disk.hard_state(), rs.hard_state);
        assert_eq!(disk.conf_state(), rs.conf_state);
        assert_eq!(disk.applied(), self.applied, "applied");
        assert_eq!(disk.image(), self.image, "image");
        assert_eq!(disk.meta_all(), self.meta, "meta");

        let stats = disk.stats();
        assert_eq!(stats.first_index, first);
        assert_eq!(stats.last_index, last);
        assert_eq!(stats.entries_in_memory as u64, last + 1 - first);
        assert_eq!(stats.image_index, self.image.as_ref().map(|i| i.index));
        if let Some(image) = &self.image {
            // Compaction never goes past the image; the image's term is the log's.
            assert!(first <= image.index + 1);
            if image.index <= last {
                assert_eq!(disk.term(image.index), Ok(image.term));
            }
            let snap = disk.snapshot(image.index, 2).unwrap();
            assert_eq!(Image::from_snapshot(&snap), *image);
        }
    }
}

/// Everything observable through the public API.
#[derive(Debug, PartialEq)]
struct Observed {
    first: u64,
    last: u64,
    terms: Vec<raft::Result<u64>>,
    entries: Vec<Entry>,
    hard_state: HardState,
    conf_state: ConfState,
    applied: u64,
    image: Option<Image>,
    meta: BTreeMap<String, Vec<u8>>,
    initialized: bool,
    stats: LogStats,
}

impl Observed {
    fn of(disk: &DiskStorage) -> Observed {
        let first = disk.first_index().unwrap();
        let last = disk.last_index().unwrap();
        let mut stats = disk.stats();
        stats.snapshot_wanted = false; // not stored
        Observed {
            first,
            last,
            terms: (0..=last + 1).map(|i| disk.term(i)).collect(),
            entries: disk.entries(first, last + 1, None, ctx()).unwrap(),
            hard_state: disk.hard_state(),
            conf_state: disk.conf_state(),
            applied: disk.applied(),
            image: disk.image(),
            meta: disk.meta_all(),
            initialized: disk.is_initialized(),
            stats,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn behaves_like_memstorage_and_survives_reopen(ops in prop::collection::vec(op_strategy(), 1..40)) {
        let mut h = Harness::new();
        h.check();
        for op in &ops {
            h.run(op);
            h.check();
        }
        // Whatever happened, a final reopen brings back the same state.
        h.run(&Op::Reopen);
        h.check();
    }
}
