//! The state's stored form in each format version this build reads, and the migration
//! from the older one. An image's envelope (see [`crate::codec`]) says which version its
//! state bytes are in.
//!
//! Format 1 kept each node's last heartbeat in the replicated state (heartbeats were
//! log entries); format 2 keeps liveness as the leader's soft state, so its nodes have
//! no such field. Everything else is laid out alike in both.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::*;

use crate::codec::{self, FormatError};
use crate::session::Session;
use crate::state::State;

/// The types of format 1 that differ from today's, frozen as that release wrote them.
pub mod v1 {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Node {
        pub inventory: NodeInventory,
        pub allocated: Vec<Option<JobId>>,
        pub drain: Option<String>,
        pub down: Option<String>,
        pub unreachable: bool,
        pub last_heartbeat: Millis,
        pub registered_at: Millis,
    }

    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct State {
        pub version: u64,
        pub environments: BTreeMap<EnvName, ServiceEnvironment>,
        pub policies: BTreeMap<PolicyName, SchedulingPolicy>,
        pub queues: BTreeMap<QueueName, JobQueue>,
        pub shares: BTreeMap<ShareName, QuotaShare>,
        pub nodes: BTreeMap<NodeName, Node>,
        pub jobs: BTreeMap<JobId, Job>,
        pub tokens: BTreeMap<(UserName, String), JobId>,
        pub next_job_id: u64,
        pub sessions: BTreeMap<u64, Session>,
        pub sessions_swept_at: Millis,
    }

    impl From<Node> for tranche_model::Node {
        /// The last heartbeat is dropped: the leader that reads this starts every
        /// node's timer afresh.
        fn from(n: Node) -> Self {
            tranche_model::Node {
                inventory: n.inventory,
                allocated: n.allocated,
                drain: n.drain,
                down: n.down,
                unreachable: n.unreachable,
                registered_at: n.registered_at,
            }
        }
    }

    impl From<State> for crate::State {
        fn from(s: State) -> Self {
            let mut st = crate::State {
                version: s.version,
                environments: s.environments,
                policies: s.policies,
                queues: s.queues,
                shares: s.shares,
                nodes: s.nodes.into_iter().map(|(k, n)| (k, n.into())).collect(),
                jobs: s.jobs,
                tokens: s.tokens,
                next_job_id: s.next_job_id,
                sessions: s.sessions,
                sessions_swept_at: s.sessions_swept_at,
                ..Default::default()
            };
            st.rebuild_index();
            st
        }
    }
}

/// Decodes state bytes written in format `version` and migrates them to today's
/// state (indexes rebuilt).
pub fn decode_state(version: u16, bytes: &[u8]) -> Result<State, FormatError> {
    let bad = |reason: String| FormatError::Decode { version, reason };
    match version {
        1 => Ok(codec::decode::<v1::State>(bytes).map_err(bad)?.into()),
        codec::FORMAT => State::restore(bytes).map_err(|e| bad(e.to_string())),
        found => Err(FormatError::Unknown { found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Command;

    #[test]
    fn a_format_1_state_migrates_with_its_nodes_and_jobs() {
        let mut st = State::new();
        let inv = NodeInventory {
            name: "n1".into(),
            address: "127.0.0.1".into(),
            labels: BTreeMap::new(),
            gpus: vec![],
            cpus: 1,
            memory_mb: 1,
        };
        st.apply(&Command::RegisterNode(inv.clone()), 5).unwrap();
        let n = st.nodes[&NodeName::from("n1")].clone();
        let old = v1::State {
            version: st.version,
            environments: st.environments.clone(),
            policies: st.policies.clone(),
            queues: st.queues.clone(),
            shares: st.shares.clone(),
            nodes: [(
                n.inventory.name.clone(),
                v1::Node {
                    inventory: n.inventory.clone(),
                    allocated: n.allocated.clone(),
                    drain: Some("repair".into()),
                    down: None,
                    unreachable: true,
                    last_heartbeat: 1234,
                    registered_at: n.registered_at,
                },
            )]
            .into(),
            jobs: st.jobs.clone(),
            tokens: st.tokens.clone(),
            next_job_id: st.next_job_id,
            sessions: st.sessions.clone(),
            sessions_swept_at: st.sessions_swept_at,
        };
        let got = decode_state(1, &codec::encode(&old)).unwrap();
        let m = &got.nodes[&NodeName::from("n1")];
        assert_eq!(m.drain.as_deref(), Some("repair"));
        assert!(m.unreachable);
        assert_eq!(m.inventory, inv);
        // Today's bytes read as format 1 do not decode: the layouts differ.
        assert!(decode_state(1, &st.snapshot()).is_err());
        assert_eq!(decode_state(codec::FORMAT, &st.snapshot()).unwrap(), st);
        assert_eq!(
            decode_state(7, &st.snapshot()),
            Err(FormatError::Unknown { found: 7 })
        );
    }
}
