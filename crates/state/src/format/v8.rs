//! Format 8, as that release stored it: its state has no groups of quota shares
//! (`State::groups`, format 9). Its commands and log entries read as format 9's, which
//! only appends the group commands.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::*;

use crate::ledger::Ledger;
use crate::session::Session;
use crate::state::{stored_jobs, SubmitWindow};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub version: u64,
    pub environments: BTreeMap<EnvName, ServiceEnvironment>,
    pub policies: BTreeMap<PolicyName, SchedulingPolicy>,
    pub queues: BTreeMap<QueueName, JobQueue>,
    pub shares: BTreeMap<ShareName, QuotaShare>,
    pub nodes: BTreeMap<NodeName, Node>,
    #[serde(with = "stored_jobs")]
    pub jobs: BTreeMap<JobId, Job>,
    pub tokens: BTreeMap<(UserName, String), JobId>,
    pub next_job_id: u64,
    pub sessions: BTreeMap<(String, u64), Session>,
    pub sessions_swept_at: Millis,
    pub ledger: Ledger,
    pub keys: BTreeMap<String, AccessKey>,
    pub tags: BTreeMap<String, BTreeMap<String, String>>,
    pub submit_rate: BTreeMap<(ShareName, UserName), SubmitWindow>,
}

impl From<State> for crate::State {
    /// A format-8 state has no groups: every share stands alone, as it did.
    fn from(s: State) -> Self {
        let mut st = crate::State {
            version: s.version,
            environments: s.environments,
            policies: s.policies,
            queues: s.queues,
            shares: s.shares,
            nodes: s.nodes,
            jobs: s.jobs,
            tokens: s.tokens,
            next_job_id: s.next_job_id,
            sessions: s.sessions,
            sessions_swept_at: s.sessions_swept_at,
            ledger: s.ledger,
            keys: s.keys,
            tags: s.tags,
            submit_rate: s.submit_rate,
            groups: BTreeMap::new(),
            index: Default::default(),
        };
        st.rebuild_index();
        st
    }
}
