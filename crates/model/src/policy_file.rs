//! The policy file `tranche apply -f` reads (TOML): environments, scheduling policies,
//! queues and quota shares, turned into the model's objects. The text is checked
//! against [`crate::text_limits`] before it is parsed.
//!
//! Job limits ([`crate::JobLimits`]) are kept per quota share. A top-level `[limits]`
//! table sets them for every share of the file, and a share's own `limits` table
//! overrides any of them; a number set in neither takes [`crate::JobLimits`]'
//! default:
//!
//! ```toml
//! [limits]                      # every share of this file
//! max_pending_per_user = 10000  # SUBMITTED, PENDING or RUNNABLE, per user and share
//! max_jobs_per_user = 10000     # not yet ended, per user and share
//! max_jobs_per_share = 50000    # not yet ended, the share's users together
//! max_arrays_per_user = 100     # arrays with a task not yet ended
//! submits_per_user_per_minute = 600
//! max_array_tasks = 10000
//!
//! [[shares]]
//! name = "vision"
//! max_user_priority = 100       # users' highest job priority (default 100)
//! limits = { max_jobs_per_user = 2000 }
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{
    CapacityLimit, IdleAssignment, JobLimits, JobQueue, LoanTerms, ObjState, QuotaShare,
    ResourceSharing, SchedulingPolicy, ServiceEnvironment, ShareGroup, Strategy,
    DEFAULT_MAX_USER_PRIORITY,
};

/// The objects a policy file describes, each kind in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyObjects {
    pub environments: Vec<ServiceEnvironment>,
    pub policies: Vec<SchedulingPolicy>,
    pub queues: Vec<JobQueue>,
    pub shares: Vec<QuotaShare>,
    /// Applied after the shares, which they name.
    pub groups: Vec<ShareGroup>,
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
    #[serde(default)]
    groups: Vec<GroupEntry>,
    #[serde(default)]
    limits: LimitsEntry,
}

/// A group of shares (and groups) of one queue: see [`ShareGroup`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupEntry {
    name: String,
    queue: String,
    #[serde(default)]
    shares: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    capacity_limits: Vec<CapacityLimit>,
    strategy: Strategy,
    #[serde(default)]
    borrow_limit: Option<i64>,
}

/// Job limits as a file writes them: any of them, the rest from the level above.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsEntry {
    max_pending_per_user: Option<u32>,
    max_jobs_per_user: Option<u32>,
    max_jobs_per_share: Option<u32>,
    max_arrays_per_user: Option<u32>,
    submits_per_user_per_minute: Option<u32>,
    max_array_tasks: Option<u32>,
}

impl LimitsEntry {
    /// `self`'s numbers over `base`.
    fn over(&self, base: JobLimits) -> JobLimits {
        JobLimits {
            max_pending_per_user: self
                .max_pending_per_user
                .unwrap_or(base.max_pending_per_user),
            max_jobs_per_user: self.max_jobs_per_user.unwrap_or(base.max_jobs_per_user),
            max_jobs_per_share: self.max_jobs_per_share.unwrap_or(base.max_jobs_per_share),
            max_arrays_per_user: self.max_arrays_per_user.unwrap_or(base.max_arrays_per_user),
            submits_per_user_per_minute: self
                .submits_per_user_per_minute
                .unwrap_or(base.submits_per_user_per_minute),
            max_array_tasks: self.max_array_tasks.unwrap_or(base.max_array_tasks),
        }
    }
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
    /// `FIFO` (the default) or `FAIR_SHARE`.
    #[serde(default)]
    idle_resource_assignment: Option<String>,
    /// FAIR_SHARE's half-life of usage, in seconds.
    #[serde(default)]
    usage_half_life_s: Option<u64>,
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
    #[serde(default)]
    loan_min_runtime_s: Option<u64>,
    #[serde(default)]
    recall_notice_s: u64,
    #[serde(default)]
    weight: Option<u32>,
    #[serde(default = "max_user_priority")]
    max_user_priority: u32,
    #[serde(default)]
    limits: LimitsEntry,
}

fn max_user_priority() -> u32 {
    DEFAULT_MAX_USER_PRIORITY
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
    let file_limits = f.limits.over(JobLimits::default());
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
            .map(|p| {
                let idle = IdleAssignment::from_fields(
                    p.idle_resource_assignment.as_deref(),
                    p.usage_half_life_s,
                )
                .map_err(|e| format!("policy {}: {} {}", p.name, e.field, e.rule))?;
                Ok(SchedulingPolicy {
                    name: p.name.as_str().into(),
                    idle_resource_assignment: idle,
                })
            })
            .collect::<Result<_, String>>()?,
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
                max_user_priority: s.max_user_priority,
                limits: s.limits.over(file_limits),
                loans: LoanTerms {
                    min_runtime_s: s.loan_min_runtime_s,
                    recall_notice_s: s.recall_notice_s,
                },
                weight: s.weight,
            })
            .collect(),
        groups: f
            .groups
            .into_iter()
            .map(|g| ShareGroup {
                name: g.name.as_str().into(),
                queue: g.queue.as_str().into(),
                shares: g.shares.iter().map(|m| m.as_str().into()).collect(),
                groups: g.groups.iter().map(|m| m.as_str().into()).collect(),
                capacity_limits: g.capacity_limits,
                resource_sharing: ResourceSharing {
                    strategy: g.strategy,
                    borrow_limit: g.borrow_limit,
                },
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
        for s in &o.shares {
            s.validate().unwrap();
        }
        assert_eq!(o.groups.len(), 1);
        o.groups[0].validate().unwrap();
        let deep = format!("{text}\nx = {}", "[".repeat(10_000));
        let e = super::parse(&deep).unwrap_err();
        assert!(e.starts_with("policy file: line "), "{e}");
        assert!(e.ends_with("nesting deeper than 32 levels"), "{e}");
    }

    #[test]
    fn a_fair_share_policy_needs_its_half_life_and_only_it_takes_one() {
        let policy = |body: &str| super::parse(&format!("[[policies]]\nname = \"p\"\n{body}"));
        let o = policy("idle_resource_assignment = \"FAIR_SHARE\"\nusage_half_life_s = 3600\n")
            .unwrap();
        assert_eq!(o.policies[0].half_life_s(), Some(3600));
        assert_eq!(policy("").unwrap().policies[0].half_life_s(), None);
        let e = policy("idle_resource_assignment = \"FAIR_SHARE\"\n").unwrap_err();
        assert!(
            e.starts_with("policy p: usage_half_life_s is required"),
            "{e}"
        );
        let e = policy("usage_half_life_s = 3600\n").unwrap_err();
        assert!(
            e.contains("only allowed with idle_resource_assignment = \"FAIR_SHARE\""),
            "{e}"
        );
        let e = policy("idle_resource_assignment = \"LIFO\"\n").unwrap_err();
        assert!(
            e.contains("idle_resource_assignment must be \"FIFO\" or \"FAIR_SHARE\", got \"LIFO\""),
            "{e}"
        );
    }

    #[test]
    fn limits_come_from_the_share_then_the_file_then_the_defaults() {
        let text = r#"
            [limits]
            max_jobs_per_user = 300
            submits_per_user_per_minute = 20

            [[shares]]
            name = "a"
            queue = "q"
            strategy = "LEND"
            capacity_limits = [{ unit = "h100", max = 8 }]
            max_user_priority = 10
            limits = { max_jobs_per_user = 40 }

            [[shares]]
            name = "b"
            queue = "q"
            strategy = "LEND"
            capacity_limits = [{ unit = "h100", max = 8 }]
        "#;
        let o = super::parse(text).unwrap();
        let d = crate::JobLimits::default();
        let (a, b) = (&o.shares[0], &o.shares[1]);
        assert_eq!((a.max_user_priority, b.max_user_priority), (10, 100));
        assert_eq!(
            (a.limits.max_jobs_per_user, b.limits.max_jobs_per_user),
            (40, 300)
        );
        assert_eq!(a.limits.submits_per_user_per_minute, 20);
        assert_eq!(b.limits.max_pending_per_user, d.max_pending_per_user);
        let e = super::parse(&text.replace("max_jobs_per_user = 40", "max_jobz = 1")).unwrap_err();
        assert!(e.contains("max_jobz"), "{e}");
        let mut bad = a.clone();
        bad.limits.max_array_tasks = 20_000;
        let e = bad.validate().unwrap_err();
        assert_eq!(e.field, "limits.max_array_tasks");
        assert!(e.rule.contains("1 to 10000, got 20000"), "{e}");
    }
}
