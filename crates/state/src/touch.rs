//! Which nodes' work a command may change: what their agents must run or stop. The
//! controllers wake only those agents' long polls when it is applied, so a placement
//! reaches its node at once however many nodes wait.

use std::collections::BTreeSet;

use tranche_model::{JobId, NodeName};

use crate::{Action, Command, State};

/// The nodes whose work a command may change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    Nodes(BTreeSet<NodeName>),
    /// Possibly any node (the command changes objects that jobs depend on).
    All,
}

impl State {
    /// The nodes whose work `cmd` may change, judged on the state before it is applied.
    /// It may name more nodes than change, never fewer.
    pub fn touched_by(&self, cmd: &Command) -> Touched {
        let mut out = BTreeSet::new();
        let mut job = |out: &mut BTreeSet<NodeName>, id: &JobId| {
            if let Some(a) = self.job(*id).and_then(|j| j.attempts.last()) {
                out.extend(a.allocation.iter().map(|n| n.node.clone()));
            }
        };
        match cmd {
            Command::PutEnvironment(_)
            | Command::DeleteEnvironment(_)
            | Command::PutPolicy(_)
            | Command::DeletePolicy(_)
            | Command::PutQueue(_)
            | Command::DeleteQueue(_)
            | Command::PutShare(_)
            | Command::DeleteShare(_)
            | Command::PutGroup(_)
            | Command::DeleteGroup(_) => return Touched::All,
            Command::Submit(_)
            | Command::PruneLedger { .. }
            | Command::ForgetEnded(_)
            | Command::PutAccessKey(_)
            | Command::RevokeAccessKey { .. }
            | Command::TagResource { .. }
            | Command::UntagResource { .. } => {}
            Command::Cancel { job: r, .. }
            | Command::UpdatePriority { job: r, .. }
            | Command::Hold { job: r }
            | Command::Release { job: r } => {
                for id in self.resolve(r).unwrap_or_default() {
                    job(&mut out, &id);
                }
            }
            Command::JobProgress { job: id, .. } => job(&mut out, id),
            Command::RegisterNode(inv) => node(self, &mut out, &inv.name, &mut job),
            Command::Heartbeat { node: n }
            | Command::DrainNode { node: n, .. }
            | Command::ResumeNode { node: n }
            | Command::NodeUnreachable { node: n }
            | Command::NodeDown { node: n, .. }
            | Command::NodeUp { node: n } => node(self, &mut out, n, &mut job),
            Command::ApplyPlan(plan) => {
                for a in &plan.actions {
                    match a {
                        Action::Place { allocation, .. } => {
                            out.extend(allocation.iter().map(|n| n.node.clone()))
                        }
                        Action::Preempt { job: id, .. } => job(&mut out, id),
                        Action::Hold { .. } => {}
                    }
                }
            }
        }
        Touched::Nodes(out)
    }
}

/// A node and every node of the jobs on it (a gang's other nodes learn of its stop).
fn node(
    st: &State,
    out: &mut BTreeSet<NodeName>,
    n: &NodeName,
    job: &mut impl FnMut(&mut BTreeSet<NodeName>, &JobId),
) {
    out.insert(n.clone());
    if let Some(node) = st.nodes.get(n) {
        let ids: BTreeSet<JobId> = node.allocated.iter().flatten().copied().collect();
        for id in &ids {
            job(out, id);
        }
    }
}
