//! The types of format 1 that differ from format 2's, frozen as that release wrote them.

use super::v5::QuotaShare;
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
    pub jobs: BTreeMap<JobId, super::v2::Job>,
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

impl From<State> for super::v2::State {
    fn from(s: State) -> Self {
        super::v2::State {
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
        }
    }
}
