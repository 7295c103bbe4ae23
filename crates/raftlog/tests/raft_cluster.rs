//! End to end with raft-rs: a three-member cluster in one process, each member on its own
//! `DiskStorage`, handling every `Ready` with one `persist`. A member that misses entries while
//! the leader compacts its log catches up through a snapshot served from the leader's image, and
//! members restart from their files.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use raft::eraftpb::{EntryType, Message};
use raft::{Config, RawNode, StateRole, Storage};
use tranche_raftlog::{DiskStorage, Image, PersistBatch};

struct Member {
    path: PathBuf,
    storage: DiskStorage,
    raw: RawNode<DiskStorage>,
    /// The state machine: every applied normal entry's data, in order.
    state: Vec<String>,
    applied: u64,
}

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

fn decode_state(data: &[u8]) -> Vec<String> {
    if data.is_empty() {
        return Vec::new();
    }
    String::from_utf8(data.to_vec())
        .unwrap()
        .split('\n')
        .map(str::to_string)
        .collect()
}

impl Member {
    /// Opens (or reopens) the member's file and starts Raft from it; the state machine comes
    /// from the stored image and Raft re-delivers the committed entries after it.
    fn start(id: u64, path: &Path, voters: &[u64]) -> Member {
        let storage = DiskStorage::open(path).unwrap();
        if !storage.is_initialized() {
            storage.initialize(voters).unwrap();
        }
        let (state, applied) = match storage.image() {
            Some(image) => (decode_state(&image.data), image.index),
            None => (Vec::new(), 0),
        };
        let config = Config {
            id,
            applied,
            ..Default::default()
        };
        config.validate().unwrap();
        let raw = RawNode::new(&config, storage.clone(), &logger()).unwrap();
        Member {
            path: path.to_path_buf(),
            storage,
            raw,
            state,
            applied,
        }
    }

    fn apply(&mut self, entries: Vec<raft::eraftpb::Entry>) {
        let Some(last) = entries.last().map(|e| e.index) else {
            return;
        };
        for e in entries {
            if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
                self.state.push(String::from_utf8(e.data.to_vec()).unwrap());
            }
        }
        self.applied = last;
        self.storage
            .persist(&PersistBatch {
                applied: Some(last),
                ..Default::default()
            })
            .unwrap();
    }

    /// Handles one `Ready` if there is one; returns the messages to send.
    fn handle_ready(&mut self) -> Option<Vec<Message>> {
        if !self.raw.has_ready() {
            return None;
        }
        let mut out = Vec::new();
        let mut rd = self.raw.ready();
        out.extend(rd.take_messages());

        let snap = rd.snapshot().clone();
        let has_snap = !snap.is_empty();
        self.storage
            .persist(&PersistBatch {
                snapshot: has_snap.then_some(&snap),
                entries: rd.entries(),
                hard_state: rd.hs().cloned(),
                ..Default::default()
            })
            .unwrap();
        if has_snap {
            self.state = decode_state(&snap.data);
            self.applied = snap.get_metadata().index;
        }
        let committed = rd.take_committed_entries();
        self.apply(committed);
        out.extend(rd.take_persisted_messages());

        let mut light = self.raw.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.storage
                .persist(&PersistBatch {
                    commit: Some(commit),
                    ..Default::default()
                })
                .unwrap();
        }
        out.extend(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply(committed);
        self.raw.advance_apply();
        Some(out)
    }

    /// Stores an image of the state machine at the applied index, compacting the log up to it.
    fn make_image(&mut self) {
        let index = self.applied;
        self.storage
            .persist(&PersistBatch {
                image: Some(Image {
                    index,
                    term: self.storage.term(index).unwrap(),
                    conf_state: self.storage.conf_state(),
                    data: self.state.join("\n").into_bytes(),
                }),
                compact_to: Some(index + 1),
                ..Default::default()
            })
            .unwrap();
    }
}

struct Cluster {
    _dir: tempfile::TempDir,
    members: BTreeMap<u64, Member>,
    down: HashSet<u64>,
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let members = (1..=3)
            .map(|id| {
                let path = dir.path().join(format!("member-{id}.redb"));
                (id, Member::start(id, &path, &[1, 2, 3]))
            })
            .collect();
        Cluster {
            _dir: dir,
            members,
            down: HashSet::new(),
        }
    }

    /// Handles readies and delivers messages until nothing moves.
    fn settle(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            let mut mail = Vec::new();
            for (id, m) in self.members.iter_mut() {
                if self.down.contains(id) {
                    continue;
                }
                while let Some(out) = m.handle_ready() {
                    moved = true;
                    mail.extend(out);
                }
            }
            for msg in mail {
                if self.down.contains(&msg.to) || self.down.contains(&msg.from) {
                    continue;
                }
                moved = true;
                self.members
                    .get_mut(&msg.to)
                    .unwrap()
                    .raw
                    .step(msg)
                    .unwrap();
            }
            if !moved {
                return;
            }
        }
        panic!("cluster did not settle");
    }

    fn leader(&self) -> u64 {
        let leaders: Vec<u64> = self
            .members
            .iter()
            .filter(|(id, m)| !self.down.contains(id) && m.raw.raft.state == StateRole::Leader)
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(leaders.len(), 1, "leaders: {leaders:?}");
        leaders[0]
    }

    fn propose(&mut self, data: &str) {
        let leader = self.leader();
        self.members
            .get_mut(&leader)
            .unwrap()
            .raw
            .propose(vec![], data.as_bytes().to_vec())
            .unwrap();
        self.settle();
    }

    fn restart(&mut self, id: u64) {
        let path = self.members[&id].path.clone();
        self.members.remove(&id);
        self.members
            .insert(id, Member::start(id, &path, &[1, 2, 3]));
    }
}

#[test]
fn three_members_with_snapshot_catch_up_and_restarts() {
    let mut c = Cluster::new();
    c.members.get_mut(&1).unwrap().raw.campaign().unwrap();
    c.settle();
    assert_eq!(c.leader(), 1);

    for i in 0..5 {
        c.propose(&format!("a{i}"));
    }
    let want: Vec<String> = (0..5).map(|i| format!("a{i}")).collect();
    for m in c.members.values() {
        assert_eq!(m.state, want);
    }

    // Member 3 misses entries while the leader compacts its whole log behind an image.
    c.down.insert(3);
    for i in 0..10 {
        c.propose(&format!("b{i}"));
    }
    c.members.get_mut(&1).unwrap().make_image();
    let leader_storage = c.members[&1].storage.clone();
    let image_index = leader_storage.image().unwrap().index;
    assert_eq!(leader_storage.first_index().unwrap(), image_index + 1);
    assert!(c.members[&3].storage.last_index().unwrap() < image_index);

    // Back up: the leader can only send its image.
    c.down.remove(&3);
    c.propose("c0");
    let mut want: Vec<String> = want;
    want.extend((0..10).map(|i| format!("b{i}")));
    want.push("c0".to_string());
    for (id, m) in &c.members {
        assert_eq!(m.state, want, "member {id}");
    }
    let follower = &c.members[&3].storage;
    let received = follower.image().expect("member 3 received a snapshot");
    assert!(received.index >= image_index);
    assert!(follower.first_index().unwrap() > image_index);
    assert!(!leader_storage.snapshot_wanted());

    // Every member restarts from its file and ends up with the same state.
    drop(leader_storage); // a clone keeps the file open
    for id in [3, 2, 1] {
        c.restart(id);
    }
    c.settle();
    c.members.get_mut(&2).unwrap().raw.campaign().unwrap();
    c.settle();
    assert_eq!(c.leader(), 2);
    c.propose("d0");
    want.push("d0".to_string());
    for (id, m) in &c.members {
        assert_eq!(m.state, want, "member {id} after restart");
        let s = &m.storage;
        assert_eq!(s.applied(), m.applied);
        assert!(s.hard_state().commit >= m.applied);
    }
}

#[test]
fn single_member_restarts_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("solo.redb");
    let mut m = Member::start(1, &path, &[1]);
    m.raw.campaign().unwrap();
    let drain = |m: &mut Member| while m.handle_ready().is_some() {};
    drain(&mut m);
    for i in 0..20 {
        m.raw.propose(vec![], format!("x{i}").into_bytes()).unwrap();
        drain(&mut m);
    }
    m.make_image();
    for i in 20..25 {
        m.raw.propose(vec![], format!("x{i}").into_bytes()).unwrap();
        drain(&mut m);
    }
    let before = m.state.clone();
    assert_eq!(before.len(), 25);
    let last = m.storage.last_index().unwrap();
    drop(m);

    let mut m = Member::start(1, &path, &[1]);
    assert_eq!(m.storage.last_index().unwrap(), last);
    m.raw.campaign().unwrap();
    drain(&mut m);
    assert_eq!(m.state, before);
    assert_eq!(m.raw.raft.state, StateRole::Leader);
}
