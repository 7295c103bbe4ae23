//! The node's data dir: opening it (bootstrapping a founding member, restoring the
//! latest state image, migrating an older stored format) and writing state images.
//!
//! The data dir records the stored format it is written in (meta key `format`). A data
//! dir of the previous format is migrated on open: its image is read in that format and
//! written again in this one before the controller serves; log entries of the previous
//! format that follow the image stay as they are, since they are read alike. A data dir
//! of any other format is refused with the version found and the versions this build
//! reads.

use std::time::Instant;

use crate::peer::ImageData;
use raft::eraftpb::{ConfState, Snapshot};
use tracing::info;
use tranche_raftlog::{DiskStorage, Fsync, Image, PersistBatch};
use tranche_state::codec::{FormatError, FORMAT, FORMATS_READ};
use tranche_state::State;

use super::RaftNode;
use crate::config::Config;
use crate::mailbox::{NodeError, Shared};

/// The meta key that records a data dir's stored format.
pub const FORMAT_KEY: &str = "format";

/// The history store's file in the data dir (see [`crate::history`]).
pub const HISTORY_FILE: &str = "history.redb";

/// What [`open`] found in a data dir.
pub struct Opened {
    pub storage: DiskStorage,
    pub shared: Shared,
    pub conf_state: ConfState,
    pub image_index: u64,
}

fn refused(cfg: &Config, e: FormatError) -> NodeError {
    NodeError::Unreadable {
        path: cfg.data_dir.clone(),
        source: e,
    }
}

/// The node's starting point: storage opened (and migrated), state restored.
pub fn open(cfg: &Config) -> Result<Opened, NodeError> {
    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| NodeError::DataDir {
        path: cfg.data_dir.clone(),
        source,
    })?;
    let fsync = match cfg.raft.unsafe_no_fsync {
        false => Fsync::Always,
        true => Fsync::UnsafeNever,
    };
    let storage = DiskStorage::open_with(&cfg.data_dir.join("raft.redb"), fsync)?;
    if let Some(v) = storage.meta(FORMAT_KEY) {
        let found = <[u8; 2]>::try_from(v.as_slice())
            .map(u16::from_be_bytes)
            .unwrap_or(u16::MAX);
        if !FORMATS_READ.contains(&found) {
            return Err(refused(cfg, FormatError::Unknown { found }));
        }
    }
    if !storage.is_initialized() && !cfg.join {
        // A founding member: every founder starts from the same image at index 1 that
        // holds the voters and their addresses, so a member added later must be sent a
        // snapshot and learns the membership from it.
        let mut snap = Snapshot::default();
        snap.set_data(ImageData::seal(&State::new(), cfg.peers.clone(), 0).into());
        let meta = snap.mut_metadata();
        meta.index = 1;
        meta.term = 1;
        meta.mut_conf_state().voters = cfg.peers.iter().map(|p| p.id).collect();
        let voters = meta.get_conf_state().voters.clone();
        storage.persist(&PersistBatch {
            snapshot: Some(&snap),
            meta: &[(FORMAT_KEY, FORMAT.to_be_bytes().to_vec())],
            ..Default::default()
        })?;
        info!(?voters, "bootstrapped a new cluster member");
    }
    let mut shared = Shared::new(cfg.id);
    let history =
        crate::history::History::open(&cfg.data_dir.join(HISTORY_FILE), !cfg.raft.unsafe_no_fsync)
            .map_err(NodeError::History)?;
    shared.history = Some(std::sync::Arc::new(history));
    let mut image_index = 0;
    if let Some(img) = storage.image() {
        let format = restore_image(&mut shared, &img.data).map_err(|e| refused(cfg, e))?;
        shared.applied = img.index;
        image_index = img.index;
        if format != FORMAT {
            // Migrate: the same image, written in this build's format.
            let t = Instant::now();
            let data = ImageData::seal(
                &shared.state,
                shared.members.values().cloned().collect(),
                shared.last_now,
            );
            storage.persist(&PersistBatch {
                image: Some(Image { data, ..img }),
                meta: &[(FORMAT_KEY, FORMAT.to_be_bytes().to_vec())],
                ..Default::default()
            })?;
            info!(
                from = format,
                to = FORMAT,
                index = image_index,
                migrate_ms = t.elapsed().as_millis() as u64,
                "migrated the data dir's state image to this build's stored format"
            );
        }
    }
    let recorded = storage.meta(FORMAT_KEY);
    if recorded.as_deref() != Some(&FORMAT.to_be_bytes()[..]) && storage.is_initialized() {
        storage.persist(&PersistBatch {
            meta: &[(FORMAT_KEY, FORMAT.to_be_bytes().to_vec())],
            ..Default::default()
        })?;
    }
    if shared.members.is_empty() {
        // A joining member knows only itself until the leader's snapshot arrives.
        shared.members.insert(cfg.id, cfg.me());
    }
    let conf_state = storage.conf_state();
    Ok(Opened {
        storage,
        shared,
        conf_state,
        image_index,
    })
}

/// Restores the applied state from an image of any readable format; returns the
/// format it was in.
pub(super) fn restore_image(shared: &mut Shared, data: &[u8]) -> Result<u16, FormatError> {
    let img = ImageData::open(data)?;
    shared.image_bytes = data.len() as u64;
    shared.state = img.state;
    shared.members = img.members.into_iter().map(|m| (m.id, m)).collect();
    shared.last_now = img.last_now;
    Ok(img.format)
}

impl RaftNode {
    pub(super) fn image_due(&mut self) -> Option<Image> {
        let (applied, data, t) = {
            let sh = self.shared.read().unwrap();
            let due = sh.applied >= self.image_index + self.cfg.raft.snapshot_entries
                || ((self.storage.snapshot_wanted() || self.image_for_conf_change)
                    && sh.applied > self.image_index);
            self.image_for_conf_change = false;
            if !due || sh.applied == 0 {
                return None;
            }
            let t = Instant::now();
            let data = ImageData::seal(
                &sh.state,
                sh.members.values().cloned().collect(),
                sh.last_now,
            );
            (sh.applied, data, t)
        };
        info!(
            index = applied,
            bytes = data.len(),
            encode_ms = t.elapsed().as_millis() as u64,
            "writing a state image"
        );
        self.shared.write().unwrap().image_bytes = data.len() as u64;
        Some(Image {
            index: applied,
            term: self.applied_term,
            conf_state: self.conf_state.clone(),
            data,
        })
    }
}
