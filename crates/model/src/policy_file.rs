//! The policy file `tranche apply -f` reads (TOML): environments, scheduling policies,
//! queues and quota shares, turned into the model's objects. The text is checked
//! against [`crate::text_limits`] before it is parsed.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{
    CapacityLimit, IdleAssignment, JobQueue, ObjState, QuotaShare, ResourceSharing,
    SchedulingPolicy, ServiceEnvironment, Strategy,
};

/// The objects a policy file describes, each kind in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyObjects {
    pub environments: Vec<ServiceEnvironment>,
    pub policies: Vec<SchedulingPolicy>,
    pub queues: Vec<JobQueue>,
    pub shares: Vec<QuotaShare>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    environments: Vec<EnvEntry>,
    #[serde(default)]
    policies: Vec<PolicyEntry>,
    #[serde(default)]
    queues: Vec<QueueEntry>,
    #[serde(default)]
    shares: Vec<ShareEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvEntry {
    name: String,
    capacity_limits: Vec<CapacityLimit>,
    #[serde(default)]
    selector: BTreeMap<String, String>,
    #[serde(default)]
    state: ObjState,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyEntry {
    name: String,
    #[serde(default)]
    idle_resource_assignment: IdleAssignment,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueEntry {
    name: String,
    environment: String,
    policy: String,
    #[serde(default)]
    priority: u32,
    #[serde(default)]
    state: ObjState,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ShareEntry {
    name: String,
    queue: String,
    capacity_limits: Vec<CapacityLimit>,
    strategy: Strategy,
    #[serde(default)]
    borrow_limit: Option<i64>,
    #[serde(default)]
    members: Vec<String>,
    #[serde(default)]
    in_share_preemption: bool,
    #[serde(default)]
    state: ObjState,
    #[serde(default = "default_grace")]
    default_grace_s: u64,
    #[serde(default = "max_grace")]
    max_grace_s: u64,
    #[serde(default)]
    min_runtime_s: u64,
}

fn default_grace() -> u64 {
    30
}
fn max_grace() -> u64 {
    600
}

/// Parses a policy file. The error names the rule (size, nesting) or, from the TOML
/// parser, the line and field. The objects are not validated here: the controllers
/// validate every object they are sent.
pub fn parse(text: &str) -> Result<PolicyObjects, String> {
    crate::text_limits::check_toml("policy file", text)?;
    let f: PolicyFile = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    Ok(PolicyObjects {
        environments: f
            .environments
            .into_iter()
            .map(|e| ServiceEnvironment {
                name: e.name.as_str().into(),
                selector: e.selector,
                capacity_limits: e.capacity_limits,
                state: e.state,
            })
            .collect(),
        policies: f
            .policies
            .into_iter()
            .map(|p| SchedulingPolicy {
                name: p.name.as_str().into(),
                idle_resource_assignment: p.idle_resource_assignment,
            })
            .collect(),
        queues: f
            .queues
            .into_iter()
            .map(|q| JobQueue {
                name: q.name.as_str().into(),
                priority: q.priority,
                state: q.state,
                environment: q.environment.as_str().into(),
                policy: q.policy.as_str().into(),
            })
            .collect(),
        shares: f
            .shares
            .into_iter()
            .map(|s| QuotaShare {
                name: s.name.as_str().into(),
                queue: s.queue.as_str().into(),
                capacity_limits: s.capacity_limits,
                resource_sharing: ResourceSharing {
                    strategy: s.strategy,
                    borrow_limit: s.borrow_limit,
                },
                in_share_preemption: s.in_share_preemption,
                state: s.state,
                members: s.members.iter().map(|m| m.as_str().into()).collect(),
                default_grace_s: s.default_grace_s,
                max_grace_s: s.max_grace_s,
                min_runtime_s: s.min_runtime_s,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_policy_parses_and_limits_apply() {
        let text = include_str!("../../../config/policy.toml");
        let o = super::parse(text).unwrap();
        assert!(!o.shares.is_empty());
        let deep = format!("{text}\nx = {}", "[".repeat(10_000));
        let e = super::parse(&deep).unwrap_err();
        assert!(e.starts_with("policy file: line "), "{e}");
        assert!(e.ends_with("nesting deeper than 32 levels"), "{e}");
    }
}
