//! A state-machine image: what Raft hands a slow follower as a snapshot.

use std::fmt;

use raft::eraftpb::{ConfState, Snapshot, SnapshotMetadata};

/// A state-machine image: the application's state after applying the log up to `index`.
///
/// The latest image is what [`Storage::snapshot`] returns to Raft (as a [`Snapshot`] with this
/// metadata and data), and what a received snapshot becomes.
///
/// [`Storage::snapshot`]: raft::Storage::snapshot
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

    pub(crate) fn metadata(&self) -> SnapshotMetadata {
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
