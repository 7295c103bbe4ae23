//! The controller-to-controller protocol. Everything queued for one peer travels as one
//! [`PeerFrame`] (a frame of at most [`MAX_PEER_FRAME`](tranche_proto::MAX_PEER_FRAME) bytes) on
//! one unidirectional stream. Raft messages inside it are protobuf, as raft-rs defines
//! them; the log entries they carry hold a bincode [`Proposal`] (or, for a membership
//! change, a [`Member`] and the proposer's `(origin, id)`), and a Raft snapshot holds an
//! [`ImageData`]. All of these are sealed in the stored-format envelope and decode
//! through [`tranche_state::codec`], which bounds what a decoder may allocate and reads
//! the previous format too (see [`tranche_state::format`]).

use serde::{Deserialize, Serialize};
use tranche_model::Millis;
use tranche_state::codec::{self, FormatError};
use tranche_state::format::{v2, v3, v4, v5, v7};
use tranche_state::{Command, RequestId, State};

use tranche_proto::frame::{self, FrameError, PEER_PROTOCOL_VERSION};
use tranche_proto::Member;

/// One item between controllers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerItem {
    /// A raft message, protobuf-encoded as raft-rs defines it.
    Raft(Vec<u8>),
    /// A client's write received by a follower, for the leader to propose.
    Forward {
        id: u64,
        cmd: Command,
        request: Option<RequestId>,
    },
}

/// What travels on one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerFrame {
    pub from: u64,
    /// The sender's peer address, so that a member that joined and does not yet know
    /// the membership can answer.
    pub from_addr: String,
    /// Random per process start. A new value means the sender restarted, so any
    /// connection to its previous process is dead even if QUIC has not noticed yet.
    pub incarnation: u64,
    pub items: Vec<PeerItem>,
}

/// What every normal entry of the log carries: who proposed it (for the answer), the
/// time chosen by the leader, and the command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub origin: u64,
    pub id: u64,
    pub now: Millis,
    pub cmd: Command,
    /// The client's request id, which makes retries of the write apply once.
    pub request: Option<RequestId>,
}

/// The state-machine image stored in a Raft snapshot: the state's own snapshot
/// ([`tranche_state::State::snapshot`]), the membership, and the latest entry time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageData {
    pub state: Vec<u8>,
    pub members: Vec<Member>,
    pub last_now: Millis,
}

/// A state image as read back: the state (migrated to today's format), the membership,
/// the latest entry time, and the format it was stored in.
pub struct OpenedImage {
    pub state: State,
    pub members: Vec<Member>,
    pub last_now: Millis,
    pub format: u16,
}

impl ImageData {
    /// The image of `state`, in this build's format.
    pub fn seal(state: &State, members: Vec<Member>, last_now: Millis) -> Vec<u8> {
        codec::seal(&ImageData {
            state: state.snapshot(),
            members,
            last_now,
        })
    }

    /// Reads an image of any format this build reads.
    pub fn open(bytes: &[u8]) -> Result<OpenedImage, FormatError> {
        let (format, body) = codec::open(bytes)?;
        let img: ImageData = codec::decode(body).map_err(|reason| FormatError::Decode {
            version: format,
            reason,
        })?;
        Ok(OpenedImage {
            state: tranche_state::format::decode_state(format, &img.state)?,
            members: img.members,
            last_now: img.last_now,
            format,
        })
    }
}

impl Proposal {
    /// A log entry's bytes, in this build's format.
    pub fn seal(&self) -> Vec<u8> {
        codec::seal(self)
    }

    /// Reads a log entry of any format this build reads, migrated to today's command.
    pub fn open(bytes: &[u8]) -> Result<Proposal, FormatError> {
        let (version, body) = codec::open(bytes)?;
        let bad = |reason: String| FormatError::Decode { version, reason };
        // Format 9 only appends the group commands to format 8's.
        if version == codec::FORMAT || version == 8 {
            return codec::decode(body).map_err(bad);
        }
        // Format 7 only appends a command to format 6's; format 8 changes the share
        // and job spec that commands carry.
        if version == 7 || version == 6 {
            let p: v7::Proposal = codec::decode(body).map_err(bad)?;
            return Ok(Proposal {
                origin: p.origin,
                id: p.id,
                now: p.now,
                cmd: p.cmd.into(),
                request: p.request,
            });
        }
        // Formats 1 and 2 lay their entries out alike; formats 3, 4 and 5 differ in
        // their commands, format 5 in its request ids too.
        let p: v5::Proposal = match version {
            5 => codec::decode(body).map_err(bad)?,
            4 => codec::decode::<v4::Proposal>(body).map_err(bad)?.into(),
            3 => {
                let p: v4::Proposal = codec::decode::<v3::Proposal>(body).map_err(bad)?.into();
                p.into()
            }
            _ => {
                let p: v3::Proposal = codec::decode::<v2::Proposal>(body).map_err(bad)?.into();
                let p: v4::Proposal = p.into();
                p.into()
            }
        };
        Ok(Proposal {
            origin: p.origin,
            id: p.id,
            now: p.now,
            cmd: p.cmd.into(),
            request: p.request.map(Into::into),
        })
    }
}

/// What a controller of an earlier peer protocol sends: its forwarded writes carry its
/// format's command (`C`) and request id (`R`): format 7's for versions 7 and 6,
/// format 5's for version 5.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum PreviousItem<C, R> {
    Raft(Vec<u8>),
    Forward { id: u64, cmd: C, request: Option<R> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PreviousFrame<C, R> {
    from: u64,
    from_addr: String,
    incarnation: u64,
    items: Vec<PreviousItem<C, R>>,
}

impl<C: Into<Command>, R: Into<RequestId>> From<PreviousFrame<C, R>> for PeerFrame {
    fn from(f: PreviousFrame<C, R>) -> Self {
        PeerFrame {
            from: f.from,
            from_addr: f.from_addr,
            incarnation: f.incarnation,
            items: f
                .items
                .into_iter()
                .map(|i| match i {
                    PreviousItem::Raft(b) => PeerItem::Raft(b),
                    PreviousItem::Forward { id, cmd, request } => PeerItem::Forward {
                        id,
                        cmd: cmd.into(),
                        request: request.map(Into::into),
                    },
                })
                .collect(),
        }
    }
}

impl PeerFrame {
    /// The frame as a controller sends it, in [`PEER_PROTOCOL_VERSION`].
    pub fn encode(&self) -> Vec<u8> {
        frame::encode_as(self, PEER_PROTOCOL_VERSION)
    }

    /// Reads a frame's payload from another controller, of this protocol version or
    /// an earlier one (a controller not yet upgraded): version 8 is laid out as this
    /// one, versions 7 and 6 too but forward writes in format 7, version 5 in format 5.
    pub fn decode_payload(payload: &[u8]) -> Result<PeerFrame, FrameError> {
        let v = frame::payload_version(payload)?;
        // Version 8 forwards writes of format 8, which read as today's.
        if v == PEER_PROTOCOL_VERSION || v == 8 {
            return frame::decode_payload_of(payload, &[v]).map(|(_, f)| f);
        }
        if v == 7 || v == 6 {
            let (_, f): (u16, PreviousFrame<v7::Command, RequestId>) =
                frame::decode_payload_of(payload, &[v])?;
            return Ok(f.into());
        }
        let (_, f): (u16, PreviousFrame<v5::Command, v5::RequestId>) =
            frame::decode_payload_of(payload, &[5])?;
        Ok(f.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_frames_of_the_previous_format_read_as_todays() {
        let spec = v2::JobSpec {
            name: "j".into(),
            queue: "q".into(),
            share: "s".into(),
            user: "alice".into(),
            priority: 3,
            request: tranche_model::Request {
                unit: "h100".into(),
                gpus_per_node: 1,
                nodes: 1,
            },
            cpus_per_node: 0,
            memory_mb_per_node: 0,
            image: "host".into(),
            command: vec!["true".into()],
            env: Default::default(),
            time_limit_s: None,
            checkpoint: v7::Checkpoint {
                signal: "SIGTERM".into(),
                grace_s: None,
            },
            retry_attempts: 1,
            preemption_retries: None,
            client_token: Some("t".into()),
            tags: Default::default(),
        };
        let old = v2::Proposal {
            origin: 2,
            id: 7,
            now: 99,
            cmd: v2::Command::Submit(spec.clone()),
            request: None,
        };
        // As format 2 wrote it (its envelope), and as format 1 did (bare).
        for bytes in [sealed_as(2, &old), codec::encode(&old)] {
            let p = Proposal::open(&bytes).unwrap();
            assert_eq!((p.origin, p.id, p.now), (2, 7, 99));
            match p.cmd {
                Command::Submit(s) => assert_eq!((s.priority, s.cwd), (3, None)),
                other => panic!("{other:?}"),
            }
        }
        let today = Proposal::open(&old_as_today(&spec).seal()).unwrap();
        assert!(matches!(today.cmd, Command::Submit(ref s) if s.cwd.as_deref() == Some("/w")));

        // As format 3 wrote it: a cancel named its job by id alone.
        let v3_entry = v3::Proposal {
            origin: 1,
            id: 2,
            now: 3,
            cmd: v3::Command::Cancel {
                job: tranche_model::JobId(9),
                reason: "r".into(),
            },
            request: None,
        };
        let p = Proposal::open(&sealed_as(3, &v3_entry)).unwrap();
        assert_eq!(
            p.cmd,
            Command::Cancel {
                job: tranche_model::JobId(9).into(),
                reason: "r".into()
            }
        );

        // As format 4 wrote it: a held submit, with no SageMaker part.
        let v3_spec: v3::JobSpec = spec.clone().into();
        let mut v4_spec: v4::JobSpec = v3_spec.into();
        v4_spec.hold = true;
        let v4_entry = v4::Proposal {
            origin: 1,
            id: 3,
            now: 4,
            cmd: v4::Command::Submit(v4_spec.clone()),
            request: None,
        };
        let p = Proposal::open(&sealed_as(4, &v4_entry)).unwrap();
        assert!(
            matches!(p.cmd, Command::Submit(ref s) if s.hold && s.sagemaker.is_none()),
            "{p:?}"
        );

        // As format 5 wrote it: a share with no priority cap or limits, and a request
        // id with no identity.
        let v5_share = v5::QuotaShare {
            name: "s".into(),
            queue: "q".into(),
            capacity_limits: vec![],
            resource_sharing: tranche_model::ResourceSharing {
                strategy: tranche_model::Strategy::Lend,
                borrow_limit: None,
            },
            in_share_preemption: true,
            state: tranche_model::ObjState::Enabled,
            members: vec![],
            default_grace_s: 1,
            max_grace_s: 2,
            min_runtime_s: 3,
        };
        let v5_request = v5::RequestId {
            client: 11,
            seq: 2,
            first_incomplete: 1,
        };
        let v5_entry = v5::Proposal {
            origin: 1,
            id: 4,
            now: 5,
            cmd: v5::Command::PutShare(v5_share),
            request: Some(v5_request),
        };
        let p = Proposal::open(&sealed_as(5, &v5_entry)).unwrap();
        match &p.cmd {
            Command::PutShare(s) => assert_eq!(
                (s.min_runtime_s, s.max_user_priority, s.limits),
                (
                    3,
                    tranche_model::DEFAULT_MAX_USER_PRIORITY,
                    tranche_model::JobLimits::default()
                )
            ),
            other => panic!("{other:?}"),
        }
        let r = p.request.unwrap();
        assert_eq!((r.identity.as_str(), r.client, r.seq), ("", 11, 2));

        // A peer frame of protocol 5 with a forwarded submit and its request id.
        let f = PreviousFrame {
            from: 3,
            from_addr: "127.0.0.1:1".into(),
            incarnation: 4,
            items: vec![
                PreviousItem::Raft(vec![1, 2]),
                PreviousItem::Forward {
                    id: 5,
                    cmd: v5::Command::Submit(v4_spec.into()),
                    request: Some(v5_request),
                },
            ],
        };
        let bytes = frame::encode_as(&f, 5);
        let got = PeerFrame::decode_payload(&bytes[4..]).unwrap();
        assert_eq!((got.from, got.incarnation, got.items.len()), (3, 4, 2));
        assert!(
            matches!(&got.items[1], PeerItem::Forward { id: 5, cmd: Command::Submit(s), request: Some(r) } if s.hold && s.sagemaker.is_none() && r.client == 11)
        );
        let mut older = bytes.clone();
        older[5] = 1;
        assert!(PeerFrame::decode_payload(&older[4..]).is_err());
    }

    #[test]
    fn peer_frames_are_version_9_and_older_frames_still_read() {
        let f = PeerFrame {
            from: 1,
            from_addr: "127.0.0.1:1".into(),
            incarnation: 2,
            items: vec![PeerItem::Raft(vec![7])],
        };
        let bytes = f.encode();
        assert_eq!(
            frame::payload_version(&bytes[4..]).unwrap(),
            PEER_PROTOCOL_VERSION
        );
        assert_eq!(PeerFrame::decode_payload(&bytes[4..]).unwrap(), f);
        // A controller of the previous release reads only versions 8, 7, 6 and 5: it
        // refuses the frame whole, never an entry inside it.
        assert!(frame::decode_payload_of::<PeerFrame>(&bytes[4..], &[8, 7, 6, 5]).is_err());
        // What it sends (version 8, format 8's writes) reads as today's.
        let eight = PeerFrame {
            items: vec![PeerItem::Forward {
                id: 4,
                cmd: Command::DeleteShare("s".into()),
                request: None,
            }],
            ..f.clone()
        };
        let got = PeerFrame::decode_payload(&frame::encode_as(&eight, 8)[4..]).unwrap();
        assert_eq!(got, eight);
        let p8 = Proposal {
            origin: 1,
            id: 2,
            now: 3,
            cmd: Command::DeleteShare("s".into()),
            request: None,
        };
        assert_eq!(Proposal::open(&sealed_as(8, &p8)).unwrap(), p8);
        // What such a controller sends (version 7), with a forwarded share of format
        // 7, reads as today's: the share lends on AWS's terms.
        let share = v7::QuotaShare {
            name: "s".into(),
            queue: "q".into(),
            capacity_limits: vec![],
            resource_sharing: tranche_model::ResourceSharing {
                strategy: tranche_model::Strategy::Lend,
                borrow_limit: None,
            },
            in_share_preemption: false,
            state: tranche_model::ObjState::Enabled,
            members: vec![],
            default_grace_s: 1,
            max_grace_s: 2,
            min_runtime_s: 3,
            max_user_priority: 10,
            limits: Default::default(),
        };
        let old = PreviousFrame {
            from: 1,
            from_addr: "127.0.0.1:1".into(),
            incarnation: 2,
            items: vec![PreviousItem::<v7::Command, RequestId>::Forward {
                id: 3,
                cmd: v7::Command::PutShare(share.clone()),
                request: None,
            }],
        };
        for v in [7, 6] {
            let got = PeerFrame::decode_payload(&frame::encode_as(&old, v)[4..]).unwrap();
            match &got.items[0] {
                PeerItem::Forward {
                    cmd: Command::PutShare(s),
                    ..
                } => assert_eq!(
                    (s.min_runtime_s, s.loans),
                    (3, tranche_model::LoanTerms::default())
                ),
                other => panic!("{other:?}"),
            }
        }
        // Format-6 and -7 entries read too: format 7 only appends a command, and
        // format 8 changes what a share and a spec hold.
        let p = v7::Proposal {
            origin: 1,
            id: 2,
            now: 3,
            cmd: v7::Command::PutShare(share),
            request: None,
        };
        for v in [6, 7] {
            let got = Proposal::open(&sealed_as(v, &p)).unwrap();
            assert!(
                matches!(&got.cmd, Command::PutShare(s) if s.max_user_priority == 10 && s.loans.recall_notice_s == 0),
                "{got:?}"
            );
        }
    }

    /// `v` sealed as format `version` wrote it.
    fn sealed_as<T: Serialize>(version: u16, v: &T) -> Vec<u8> {
        let mut sealed = codec::MAGIC.to_vec();
        sealed.extend(version.to_be_bytes());
        sealed.extend(codec::encode(v));
        sealed
    }

    fn old_as_today(spec: &v2::JobSpec) -> Proposal {
        let s: v3::JobSpec = spec.clone().into();
        let mut s: tranche_model::JobSpec = v7::JobSpec::from(v4::JobSpec::from(s)).into();
        s.cwd = Some("/w".into());
        Proposal {
            origin: 1,
            id: 1,
            now: 1,
            cmd: Command::Submit(s),
            request: None,
        }
    }
}
