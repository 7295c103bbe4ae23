//! Real inputs for every target: frames, raft records and images as Tranche itself
//! encodes them, built from a scenario run part-way (jobs running, one preempted), and
//! the example policy and scenario files. `fuzz/corpus/<target>/` holds these, written
//! by the ignored test `write_seed_corpus`.

use std::collections::BTreeMap;

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfState, Entry, EntryType, HardState, Message, MessageType,
    SnapshotMetadata,
};
use tranche_controller::peer::{ImageData, PeerFrame, PeerItem, Proposal};
use tranche_model::{JobId, JobRef, JobSpec, JobStatus, SECOND};
use tranche_proto::{
    frame, ApiError, ClientCommand, ClientRequest, ClusterStatus, GpuBinding, JobFilter, LogFrame,
    LogRequest, Member, MemberStatus, MembershipChange, NodeWork, Outcome, Query, Response,
    StopOrder, WorkItem,
};
use tranche_state::{codec, Command, State};

const POLICY: &str = include_str!("../../../config/policy.toml");
const SCENARIO: &str = include_str!("../../../tests/scenarios/reclaim.toml");

/// The seed inputs of one target, by name (empty for an unknown name).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let w = World::new();
    match target {
        "client_frame" => w
            .requests()
            .iter()
            .map(frame::encode)
            .chain(w.responses().iter().map(frame::encode))
            .collect(),
        "log_frame" => log_frames(),
        "peer_frame" => vec![frame::encode(&w.peer_frame())],
        "raft_proto" => w.raft_records(),
        "state_image" => vec![codec::seal(&w.image()), w.state.snapshot()],
        "policy_file" => vec![POLICY.as_bytes().to_vec()],
        "scenario_file" => vec![SCENARIO.as_bytes().to_vec()],
        "image_layout" => crate::image::seeds(),
        _ => vec![],
    }
}

/// A cluster's state part-way through the reclaim scenario.
struct World {
    state: State,
    now: u64,
    member: Member,
}

impl World {
    fn new() -> World {
        let sc = tranche_sim::Scenario::parse(SCENARIO).expect("the seed scenario parses");
        let mut sim = tranche_sim::Sim::new(&sc).expect("the seed scenario starts");
        for e in &sc.events {
            sim.advance_to(e.at * SECOND).expect("advances");
            sim.event(e);
            sim.settle().expect("settles");
        }
        sim.advance_to(110 * SECOND).expect("advances");
        World {
            now: sim.now,
            state: sim.state,
            member: Member {
                id: 2,
                name: "c2".into(),
                peer_addr: "10.0.0.2:7001".into(),
                client_addr: "10.0.0.2:7000".into(),
            },
        }
    }

    fn commands(&self) -> Vec<Command> {
        let policy = tranche_model::policy_file::parse(POLICY).expect("the example policy");
        let mut spec = JobSpec::new("train", "q", "vision", "alice", "h100", 4, 2);
        spec.env.insert("EPOCHS".into(), "3".into());
        spec.client_token = Some("tok-1".into());
        vec![
            Command::PutShare(policy.shares[0].clone()),
            Command::PutEnvironment(policy.environments[0].clone()),
            Command::Submit(spec),
            Command::Cancel {
                job: JobRef::job(JobId(1)),
                reason: "user".into(),
            },
            Command::ApplyPlan(tranche_sched::plan(&self.state, self.now)),
        ]
    }

    fn client_commands(&self) -> Vec<ClientCommand> {
        let policy = tranche_model::policy_file::parse(POLICY).expect("the example policy");
        let mut spec = JobSpec::new("train", "q", "vision", "alice", "h100", 4, 2);
        spec.client_token = Some("tok-1".into());
        vec![
            ClientCommand::PutShare(policy.shares[0].clone()),
            ClientCommand::Submit(spec),
            ClientCommand::Cancel {
                job: JobRef::job(JobId(1)),
                reason: "user".into(),
            },
        ]
    }

    fn requests(&self) -> Vec<ClientRequest> {
        let mut out: Vec<ClientRequest> = self
            .client_commands()
            .into_iter()
            .map(|command| ClientRequest::Write {
                request: None,
                command,
            })
            .collect();
        out.push(ClientRequest::Write {
            request: Some(tranche_state::RequestId {
                identity: String::new(),
                client: 0xfeed,
                seq: 3,
                first_incomplete: 2,
            }),
            command: self.client_commands().swap_remove(0),
        });
        out.extend([
            ClientRequest::Read {
                query: Query::Jobs(JobFilter {
                    share: Some("vision".into()),
                    user: None,
                    status: vec![JobStatus::Running],
                    limit: Some(10),
                    array: None,
                    standing: false,
                }),
                stale: false,
            },
            ClientRequest::Read {
                query: Query::NodeWork {
                    node: "n1".into(),
                    after: Some(42),
                    wait_ms: 2000,
                },
                stale: true,
            },
            ClientRequest::Membership(MembershipChange::Add(self.member.clone())),
            ClientRequest::Isolate { from: vec![1, 3] },
            ClientRequest::Heartbeat { node: "n1".into() },
        ]);
        out
    }

    fn responses(&self) -> Vec<Response> {
        let job = self.state.jobs.values().next().expect("a job").clone();
        let item = WorkItem {
            job: job.id,
            attempt: 1,
            status: JobStatus::Running,
            share: job.spec.share.clone(),
            restarts: 0,
            image: "host".into(),
            command: vec!["sh".into(), "-c".into(), "sleep 1".into()],
            env: BTreeMap::from([("A".into(), "1".into())]),
            cpus: 8,
            memory_mb: 1 << 16,
            gpus: (0..2)
                .map(|i| GpuBinding {
                    index: tranche_model::GpuIndex(i),
                    uuid: format!("GPU-{i}"),
                })
                .collect(),
            time_limit_s: Some(3600),
            scheduled_at: self.now,
            started_at: Some(self.now),
            signal: "SIGTERM".into(),
            stop: Some(StopOrder {
                why: "preempted".into(),
                deadline_ms: self.now + 30 * SECOND,
                grace_ms: 30 * SECOND,
            }),
            user: job.spec.user.clone(),
            cwd: Some("/home/alice/run".into()),
            rendezvous: tranche_proto::Rendezvous {
                nodes: vec!["n1".into(), "n2".into()],
                rank: 1,
                gpus_per_node: 2,
                master_addr: "10.0.0.1".into(),
                master_port: 20_417,
            },
            name: "train".into(),
            array: Some(tranche_model::ArrayTask {
                array: job.id,
                index: 7,
                count: 100,
                max_running: Some(10),
            }),
            output: Some("out-%A_%a.txt".into()),
            error: None,
            sagemaker: None,
        };
        vec![
            Response::Applied(Outcome::Submitted {
                job: job.id,
                existing: false,
            }),
            Response::Job(Box::new(job)),
            Response::Nodes(self.state.nodes.values().cloned().collect()),
            Response::NodeWork(NodeWork {
                applied: 7,
                now: self.now,
                registered: true,
                items: vec![item],
            }),
            Response::Controllers(ClusterStatus {
                id: 1,
                leader: Some(1),
                term: 3,
                commit: 9,
                applied: 9,
                image_index: 0,
                first_index: 1,
                members: vec![MemberStatus {
                    member: self.member.clone(),
                    voter: true,
                    matched: Some(9),
                    lag: Some(0),
                }],
            }),
            Response::Error(ApiError::NotLeader {
                leader: Some(self.member.clone()),
            }),
        ]
    }

    fn image(&self) -> ImageData {
        ImageData {
            state: self.state.snapshot(),
            members: vec![self.member.clone()],
            last_now: self.now,
        }
    }

    fn entries(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self
            .commands()
            .into_iter()
            .enumerate()
            .map(|(i, cmd)| {
                let mut e = Entry::default();
                e.set_entry_type(EntryType::EntryNormal);
                e.index = 10 + i as u64;
                e.term = 2;
                e.data = codec::seal(&Proposal {
                    origin: 1,
                    id: i as u64,
                    now: self.now,
                    cmd,
                    request: (i % 2 == 0).then_some(tranche_state::RequestId {
                        identity: "user:alice".into(),
                        client: 0xfeed,
                        seq: i as u64 + 1,
                        first_incomplete: 1,
                    }),
                })
                .into();
                e
            })
            .collect();
        let mut cc = ConfChange::default();
        cc.set_change_type(ConfChangeType::AddNode);
        cc.node_id = 2;
        cc.context = codec::seal(&self.member).into();
        let mut e = Entry::default();
        e.set_entry_type(EntryType::EntryConfChange);
        e.index = 20;
        e.term = 2;
        e.data = cc.write_to_bytes().expect("encodes").into();
        e.context = codec::seal(&(1u64, 5u64)).into();
        out.push(e);
        out
    }

    fn messages(&self) -> Vec<Message> {
        let mut append = Message::default();
        append.set_msg_type(MessageType::MsgAppend);
        append.to = 2;
        append.from = 1;
        append.term = 2;
        append.log_term = 2;
        append.index = 9;
        append.commit = 9;
        append.set_entries(self.entries().into());
        let mut snap = Message::default();
        snap.set_msg_type(MessageType::MsgSnapshot);
        snap.to = 3;
        snap.from = 1;
        snap.term = 2;
        snap.mut_snapshot().data = codec::seal(&self.image()).into();
        snap.mut_snapshot().mut_metadata().index = 9;
        snap.mut_snapshot().mut_metadata().term = 2;
        snap.mut_snapshot().mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        vec![append, snap]
    }

    fn peer_frame(&self) -> PeerFrame {
        let mut items: Vec<PeerItem> = self
            .messages()
            .iter()
            .map(|m| PeerItem::Raft(m.write_to_bytes().expect("encodes")))
            .collect();
        items.push(PeerItem::Forward {
            id: 4,
            cmd: self.commands().swap_remove(2),
            request: Some(tranche_state::RequestId {
                identity: String::new(),
                client: 0xfeed,
                seq: 9,
                first_incomplete: 8,
            }),
        });
        PeerFrame {
            from: 1,
            from_addr: "10.0.0.1:7001".into(),
            incarnation: 0x1234_5678,
            items,
        }
    }

    /// `raft_proto` inputs: a kind byte, then the record.
    fn raft_records(&self) -> Vec<Vec<u8>> {
        let tagged = |kind: u8, m: &dyn protobuf::Message| {
            let mut v = vec![kind];
            v.extend(m.write_to_bytes().expect("encodes"));
            v
        };
        let mut hs = HardState::default();
        hs.term = 2;
        hs.vote = 1;
        hs.commit = 9;
        let mut cs = ConfState::default();
        cs.voters = vec![1, 2, 3];
        cs.learners = vec![4];
        let mut meta = SnapshotMetadata::default();
        meta.index = 9;
        meta.term = 2;
        meta.set_conf_state(cs.clone());
        let mut out: Vec<Vec<u8>> = self.messages().iter().map(|m| tagged(0, m)).collect();
        out.extend(self.entries().iter().map(|e| tagged(1, e)));
        out.push(tagged(2, &hs));
        out.push(tagged(3, &cs));
        out.push(tagged(4, &meta));
        out
    }
}

fn log_frames() -> Vec<Vec<u8>> {
    vec![
        frame::encode(&LogRequest {
            job: JobId(3),
            attempt: Some(1),
            stderr: false,
            follow: true,
            offset: 4096,
        }),
        frame::encode(&LogFrame::Chunk(b"epoch 1 loss 0.31\n".to_vec())),
        frame::encode(&LogFrame::End {
            attempt: 1,
            running: false,
        }),
        frame::encode(&LogFrame::Error(ApiError::NotFound("job 9".into()))),
    ]
}
