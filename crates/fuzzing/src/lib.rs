//! The bodies of Tranche's fuzz targets. Each target is a `pub fn(&[u8])` that must
//! never panic, whatever the bytes: it feeds them to one of Tranche's decoders of
//! untrusted input and, where that is cheap, checks that what decodes re-encodes to
//! something that decodes to the same value.
//!
//! The same functions run under libFuzzer (the `fuzz/` crate at the repository root,
//! `scripts/fuzz.sh`) and in the stable smoke run of `cargo test` (`tests/smoke.rs`),
//! which replays the seed corpus and every committed regression input and then mutates
//! the seeds for a few seconds. [`seeds`] builds real encoded inputs for every target.
//!
//! This crate does no I/O of its own, except the `image_layout` target, which builds
//! its input into an image layout and unpacks it in a temporary directory; only its
//! tests read the committed corpus.

pub mod image;
pub mod mutate;
pub mod seeds;

use std::fmt::Debug;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use raft::eraftpb::{
    ConfChange, ConfState, Entry, EntryType, HardState, Message, SnapshotMetadata,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tranche_controller::peer::{ImageData, PeerFrame, PeerItem, Proposal};
use tranche_proto::{
    frame, ClientRequest, LogFrame, LogRequest, Member, Response, MAX_CLIENT_FRAME, MAX_PEER_FRAME,
};
use tranche_state::{codec, State};

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` file and the corpus
/// folder), its body, and whether its input is a length-prefixed frame (the mutator
/// then often fixes the length up, so that the body is reached).
#[derive(Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
    pub framed: bool,
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "client_frame",
        run: client_frame,
        framed: true,
    },
    Target {
        name: "log_frame",
        run: log_frame,
        framed: true,
    },
    Target {
        name: "peer_frame",
        run: peer_frame,
        framed: true,
    },
    Target {
        name: "raft_proto",
        run: raft_proto,
        framed: false,
    },
    Target {
        name: "state_image",
        run: state_image,
        framed: false,
    },
    Target {
        name: "policy_file",
        run: policy_file,
        framed: false,
    },
    Target {
        name: "scenario_file",
        run: scenario_file,
        framed: false,
    },
    Target {
        name: "image_layout",
        run: image::image_layout,
        framed: false,
    },
];

/// The client API, both ways: a frame as a controller reads a [`ClientRequest`] and as a
/// client (or agent) reads a [`Response`].
pub fn client_frame(data: &[u8]) {
    frame_round_trip::<ClientRequest>(data, MAX_CLIENT_FRAME);
    frame_round_trip::<Response>(data, MAX_CLIENT_FRAME);
}

/// The agent's log port, both ways: [`LogRequest`] and [`LogFrame`].
pub fn log_frame(data: &[u8]) {
    frame_round_trip::<LogRequest>(data, MAX_CLIENT_FRAME);
    frame_round_trip::<LogFrame>(data, MAX_CLIENT_FRAME);
}

/// A frame from another controller, and every raft message inside it as the Raft node
/// decodes it.
pub fn peer_frame(data: &[u8]) {
    if let Some(f) = frame_round_trip::<PeerFrame>(data, MAX_PEER_FRAME) {
        for item in &f.items {
            if let PeerItem::Raft(bytes) = item {
                raft_message(bytes);
            }
        }
    }
}

/// Raft's protobuf records. The first byte chooses which: a message between
/// controllers, or one of the records the raft log stores (an entry, the hard state,
/// the conf state, a state image's metadata); the rest is the record.
pub fn raft_proto(data: &[u8]) {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 5 {
        0 => raft_message(rest),
        1 => {
            if let Some(e) = proto_round_trip::<Entry>(rest) {
                entry(&e);
            }
        }
        2 => drop(proto_round_trip::<HardState>(rest)),
        3 => drop(proto_round_trip::<ConfState>(rest)),
        _ => drop(proto_round_trip::<SnapshotMetadata>(rest)),
    }
}

/// A state image, as a restarting controller reads it from its raft log or a follower
/// receives it in a snapshot: the whole [`ImageData`], and the bytes taken as the state
/// machine's own snapshot.
pub fn state_image(data: &[u8]) {
    if let Some(img) = value_round_trip::<ImageData>(data) {
        state_snapshot(&img.state);
    }
    // As a controller reads it: of any readable format, the state migrated.
    if let Ok(img) = ImageData::open(data) {
        let again = ImageData::seal(&img.state, img.members.clone(), img.last_now);
        let back = ImageData::open(&again).expect("a re-sealed image opens");
        assert!(
            back.state == img.state,
            "an image's state differs after a round trip"
        );
    }
    state_snapshot(data);
}

/// The policy file `tranche apply -f` reads; every object it yields is validated as a
/// controller would.
pub fn policy_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(objects) = tranche_model::policy_file::parse(text) else {
        return;
    };
    for e in &objects.environments {
        let _ = e.validate();
    }
    for q in &objects.queues {
        let _ = q.validate();
    }
    for s in &objects.shares {
        let _ = s.validate();
    }
}

/// A scenario file: parsed, checked, and, when it is valid, run in virtual time.
pub fn scenario_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sc) = tranche_sim::Scenario::parse(text) {
        let _ = tranche_sim::run(&sc);
    }
}

fn raft_message(bytes: &[u8]) {
    let Some(m) = proto_round_trip::<Message>(bytes) else {
        return;
    };
    for e in m.get_entries() {
        entry(e);
    }
    if m.has_snapshot() {
        state_image(m.get_snapshot().get_data());
    }
}

/// A log entry's payload, as the Raft node applies it.
fn entry(e: &Entry) {
    match e.get_entry_type() {
        EntryType::EntryNormal => drop(value_round_trip::<Proposal>(&e.data)),
        EntryType::EntryConfChange => {
            if let Some(cc) = proto_round_trip::<ConfChange>(&e.data) {
                value_round_trip::<Member>(&cc.context);
            }
            value_round_trip::<(u64, u64)>(&e.context);
        }
        EntryType::EntryConfChangeV2 => {}
    }
}

fn state_snapshot(bytes: &[u8]) {
    if let Ok(s) = State::restore(bytes) {
        let again = s.snapshot();
        let t = State::restore(&again).expect("a state's own snapshot restores");
        assert!(
            s == t,
            "a restored state differs after a snapshot round trip"
        );
        assert_eq!(t.snapshot(), again, "a state's snapshot is not stable");
    }
}

/// Decodes a whole frame, and reads it as a stream reader would; when it decodes, both
/// agree and the value survives encode → decode.
fn frame_round_trip<T>(data: &[u8], limit: usize) -> Option<T>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let whole = frame::decode::<T>(data, limit);
    // The stream reader takes the first frame and leaves the rest.
    let mut stream = data;
    let read = block_on(frame::read::<T, _>(&mut stream, limit));
    if let Ok(v) = &read {
        let used = data.len() - stream.len();
        let first = frame::decode::<T>(&data[..used], limit).expect("a read frame decodes");
        assert_eq!(&first, v, "read and decode disagree");
    }
    match (&whole, &read) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "read and decode disagree"),
        (Ok(_), Err(e)) => panic!("decode accepts a frame that read refuses: {e}"),
        _ => {}
    }
    let v = whole.ok()?;
    let again = frame::encode(&v);
    let w: T = frame::decode(&again, limit).expect("a re-encoded frame decodes");
    assert_eq!(v, w, "a frame differs after a round trip");
    assert_eq!(frame::encode(&w), again, "encoding is not stable");
    Some(v)
}

/// A stored or replicated value in its envelope, of any readable format (see
/// `tranche_state::codec`).
fn value_round_trip<T>(data: &[u8]) -> Option<T>
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let v: T = codec::unseal(data).ok()?;
    let again = codec::seal(&v);
    let w: T = codec::unseal(&again).expect("a re-sealed value opens");
    assert_eq!(v, w, "a value differs after a round trip");
    assert_eq!(codec::seal(&w), again, "sealing is not stable");
    Some(v)
}

fn proto_round_trip<M: protobuf::Message + PartialEq>(data: &[u8]) -> Option<M> {
    let m = M::parse_from_bytes(data).ok()?;
    let again = m.write_to_bytes().expect("a parsed message encodes");
    let n = M::parse_from_bytes(&again).expect("a re-encoded message parses");
    assert!(m == n, "a protobuf message differs after a round trip");
    Some(m)
}

/// Runs a future that never waits (a read from memory) to completion.
fn block_on<F: Future>(f: F) -> F::Output {
    const VTABLE: RawWakerVTable = RawWakerVTable::new(|_| RAW, |_| {}, |_| {}, |_| {});
    const RAW: RawWaker = RawWaker::new(std::ptr::null(), &VTABLE);
    // SAFETY: every function of the vtable ignores the (null) data pointer.
    let waker = unsafe { Waker::from_raw(RAW) };
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("a read from memory never waits"),
    }
}
