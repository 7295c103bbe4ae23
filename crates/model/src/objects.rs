//! Admin objects: service environments, scheduling policies, job queues, quota shares.

use crate::error::{invalid, ValidationError};
use crate::ids::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Most capacity limits an environment or share may list (AWS's limit).
pub const MAX_CAPACITY_LIMITS: usize = 5;
/// Most quota shares in one job queue (AWS's limit).
pub const MAX_SHARES_PER_QUEUE: usize = 20;
/// Highest job queue priority.
pub const MAX_QUEUE_PRIORITY: u32 = 1000;
/// Upper bound on any grace period or minimum runtime, in seconds (one week).
pub const MAX_DURATION_S: u64 = 7 * 24 * 3600;

/// The highest priority a user may give a job of a share that does not set
/// `max_user_priority`. Priorities order jobs inside a share, and a share with
/// in-share preemption lets a higher priority stop a lower one: 0–100 leaves users the
/// small numbers they use to order their own work (Slurm's `nice`, AWS's
/// `schedulingPriority` in practice), while 101–9999 stays with operators and admins,
/// who can always lift one job above everything users can set.
pub const DEFAULT_MAX_USER_PRIORITY: u32 = 100;

/// ENABLED or DISABLED, for environments, queues and shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ObjState {
    #[default]
    Enabled,
    Disabled,
}

impl fmt::Display for ObjState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjState::Enabled => "ENABLED",
            ObjState::Disabled => "DISABLED",
        })
    }
}

/// `{unit, max}`: at most `max` GPUs of `unit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapacityLimit {
    pub unit: Unit,
    pub max: u32,
}

/// Checks a `capacity_limits` list: 1–5 entries, known units, max ≥ 1, no unit twice.
fn validate_limits(
    limits: &[CapacityLimit],
    field: &str,
    allow_zero: bool,
) -> Result<(), ValidationError> {
    if limits.is_empty() || limits.len() > MAX_CAPACITY_LIMITS {
        return Err(invalid(
            field,
            format!(
                "must have 1 to {MAX_CAPACITY_LIMITS} entries, got {}",
                limits.len()
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, l) in limits.iter().enumerate() {
        l.unit.validate(&format!("{field}[{i}].unit"))?;
        if !seen.insert(&l.unit) {
            return Err(invalid(
                format!("{field}[{i}].unit"),
                format!("unit {} is listed twice", l.unit),
            ));
        }
        if l.max == 0 && !allow_zero {
            return Err(invalid(format!("{field}[{i}].max"), "must be at least 1"));
        }
        if l.max > 1_000_000 {
            return Err(invalid(
                format!("{field}[{i}].max"),
                format!("must be at most 1000000, got {}", l.max),
            ));
        }
    }
    Ok(())
}

/// Looks up the limit for `unit` in a `capacity_limits` list.
pub fn limit_for(limits: &[CapacityLimit], unit: &Unit) -> Option<u32> {
    limits.iter().find(|l| &l.unit == unit).map(|l| l.max)
}

/// A named pool of nodes (those whose labels match `selector`; an empty selector takes
/// every node) with a cap per capacity unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceEnvironment {
    pub name: EnvName,
    pub selector: BTreeMap<String, String>,
    pub capacity_limits: Vec<CapacityLimit>,
    pub state: ObjState,
}

impl ServiceEnvironment {
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.name.validate("name")?;
        validate_limits(&self.capacity_limits, "capacity_limits", false)?;
        for k in self.selector.keys() {
            if k.is_empty() || k.len() > 128 {
                return Err(invalid("selector", "label keys must be 1-128 characters"));
            }
        }
        Ok(())
    }

    /// Whether a node with these labels belongs to the environment.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

/// How idle capacity is handed to borrowers: AWS's FIFO (by submit time across
/// shares), or Tranche's FAIR_SHARE (the share that used the least, per weight, over
/// its decayed usage history first; design §3, *Fair share*).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum IdleAssignment {
    #[default]
    Fifo,
    /// Usage counts half as much every `usage_half_life_s` seconds.
    FairShare { usage_half_life_s: u64 },
}

/// The shortest and longest half-life of fair-share usage: an hour (the ledger's
/// bucket) and a year.
pub const MIN_USAGE_HALF_LIFE_S: u64 = 3600;
pub const MAX_USAGE_HALF_LIFE_S: u64 = 365 * 24 * 3600;

/// The largest fair-share weight of a share.
pub const MAX_SHARE_WEIGHT: u32 = 1_000_000;

impl IdleAssignment {
    /// The assignment a policy's fields name: `idle_resource_assignment` (`FIFO`, the
    /// default, or `FAIR_SHARE`) and `usage_half_life_s` (required with FAIR_SHARE only).
    /// The error names the field and the rule.
    pub fn from_fields(
        name: Option<&str>,
        usage_half_life_s: Option<u64>,
    ) -> Result<IdleAssignment, ValidationError> {
        match (name, usage_half_life_s) {
            (None | Some("FIFO"), None) => Ok(IdleAssignment::Fifo),
            (Some("FAIR_SHARE"), Some(h)) => Ok(IdleAssignment::FairShare {
                usage_half_life_s: h,
            }),
            (Some("FAIR_SHARE"), None) => Err(invalid(
                "usage_half_life_s",
                "is required with idle_resource_assignment = \"FAIR_SHARE\" (seconds, e.g. 604800 for 7 days)",
            )),
            (None | Some("FIFO"), Some(_)) => Err(invalid(
                "usage_half_life_s",
                "is only allowed with idle_resource_assignment = \"FAIR_SHARE\"",
            )),
            (Some(other), _) => Err(invalid(
                "idle_resource_assignment",
                format!("must be \"FIFO\" or \"FAIR_SHARE\", got {other:?}"),
            )),
        }
    }
}

impl fmt::Display for IdleAssignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdleAssignment::Fifo => f.write_str("FIFO"),
            IdleAssignment::FairShare { .. } => f.write_str("FAIR_SHARE"),
        }
    }
}

/// A scheduling policy: `quota_share_policy { idle_resource_assignment = FIFO }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulingPolicy {
    pub name: PolicyName,
    pub idle_resource_assignment: IdleAssignment,
}

impl SchedulingPolicy {
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.name.validate("name")?;
        if let IdleAssignment::FairShare { usage_half_life_s } = self.idle_resource_assignment {
            if !(MIN_USAGE_HALF_LIFE_S..=MAX_USAGE_HALF_LIFE_S).contains(&usage_half_life_s) {
                return Err(invalid(
                    "usage_half_life_s",
                    format!(
                        "must be {MIN_USAGE_HALF_LIFE_S}-{MAX_USAGE_HALF_LIFE_S} s (an hour to a year) with FAIR_SHARE, got {usage_half_life_s}"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The half-life of usage history, for a FAIR_SHARE policy.
    pub fn half_life_s(&self) -> Option<u64> {
        match self.idle_resource_assignment {
            IdleAssignment::Fifo => None,
            IdleAssignment::FairShare { usage_half_life_s } => Some(usage_half_life_s),
        }
    }
}

/// A job queue: one environment, one policy, and the quota shares that name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobQueue {
    pub name: QueueName,
    pub priority: u32,
    pub state: ObjState,
    pub environment: EnvName,
    pub policy: PolicyName,
}

impl JobQueue {
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.name.validate("name")?;
        if self.priority > MAX_QUEUE_PRIORITY {
            return Err(invalid(
                "priority",
                format!("must be 0-{MAX_QUEUE_PRIORITY}, got {}", self.priority),
            ));
        }
        self.environment.validate("environment")?;
        self.policy.validate("policy")
    }
}

/// What a share does with idle capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Strategy {
    /// Never lends its idle capacity, never borrows.
    Reserve,
    /// Lends idle capacity, never borrows.
    Lend,
    /// Lends idle capacity and borrows others' up to `borrow_limit`.
    LendAndBorrow,
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Reserve => "RESERVE",
            Strategy::Lend => "LEND",
            Strategy::LendAndBorrow => "LEND_AND_BORROW",
        })
    }
}

/// `resource_sharing = {strategy, borrow_limit}`. `borrow_limit` is a percentage of the
/// share's own max per unit; -1 means unlimited; only LEND_AND_BORROW may set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceSharing {
    pub strategy: Strategy,
    pub borrow_limit: Option<i64>,
}

impl ResourceSharing {
    /// `borrow_limit` is -1 (unlimited) or a percentage up to 100000, and only with
    /// LEND_AND_BORROW.
    fn validate(&self) -> Result<(), ValidationError> {
        match (self.strategy, self.borrow_limit) {
            (Strategy::LendAndBorrow, Some(b)) if b < -1 => Err(invalid(
                "resource_sharing.borrow_limit",
                format!("must be -1 (unlimited) or a percentage >= 0, got {b}"),
            )),
            (Strategy::LendAndBorrow, Some(b)) if b > 100_000 => Err(invalid(
                "resource_sharing.borrow_limit",
                format!("must be at most 100000 percent, got {b}"),
            )),
            (s, Some(_)) if s != Strategy::LendAndBorrow => Err(invalid(
                "resource_sharing.borrow_limit",
                format!("is only allowed with strategy LEND_AND_BORROW, not {s}"),
            )),
            _ => Ok(()),
        }
    }

    /// The most GPUs an owner of `max` may hold including borrowed ones:
    /// `max × (1 + borrow_limit/100)` for LEND_AND_BORROW (`None`: unlimited), else
    /// `max`.
    pub fn ceiling(&self, max: u32) -> Option<u64> {
        let max = max as u64;
        match self.strategy {
            Strategy::LendAndBorrow => match self.borrow_limit.unwrap_or(-1) {
                -1 => None,
                pct => Some(max * (100 + pct as u64) / 100),
            },
            _ => Some(max),
        }
    }
}

/// Most levels of groups above a share (organisation → department → team → project).
pub const MAX_GROUP_DEPTH: usize = 4;
/// Most members (shares and groups) one group may list.
pub const MAX_GROUP_MEMBERS: usize = MAX_SHARES_PER_QUEUE;

/// A group of quota shares, and of other groups, of one queue: nested quotas
/// (organisation → department → team). The group lists its members; each share or
/// group has at most one group, and groups nest at most [`MAX_GROUP_DEPTH`] levels.
///
/// A group's `capacity_limits` and `resource_sharing` say how its members together
/// stand toward the rest of the queue, as a share's say how its jobs do: what a RESERVE
/// group's members do not use is lent to no one outside it; a LEND or RESERVE group's
/// members borrow only inside it, up to its max; a LEND_AND_BORROW group's members
/// borrow from outside too, together up to the group's ceiling. A share's own max is
/// always its own (see `docs/design.md`, "Nested shares").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareGroup {
    pub name: ShareName,
    pub queue: QueueName,
    /// The quota shares in the group.
    pub shares: Vec<ShareName>,
    /// The groups in the group.
    pub groups: Vec<ShareName>,
    pub capacity_limits: Vec<CapacityLimit>,
    pub resource_sharing: ResourceSharing,
}

impl ShareGroup {
    /// A group of `queue` with these members and one limit, `max` GPUs of `unit`
    /// (`borrow_limit` unset: no cap for LEND_AND_BORROW).
    pub fn new(
        name: &str,
        queue: &str,
        shares: &[&str],
        groups: &[&str],
        (unit, max): (&str, u32),
        strategy: Strategy,
    ) -> ShareGroup {
        ShareGroup {
            name: name.into(),
            queue: queue.into(),
            shares: shares.iter().map(|s| (*s).into()).collect(),
            groups: groups.iter().map(|s| (*s).into()).collect(),
            capacity_limits: vec![CapacityLimit {
                unit: unit.into(),
                max,
            }],
            resource_sharing: ResourceSharing {
                strategy,
                borrow_limit: None,
            },
        }
    }

    /// Checks the group on its own; membership across objects (members exist, are in
    /// the group's queue, have one group, nest at most [`MAX_GROUP_DEPTH`] levels) is
    /// checked by the state, which sees them all.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.name.validate("name")?;
        self.queue.validate("queue")?;
        validate_limits(&self.capacity_limits, "capacity_limits", true)?;
        self.resource_sharing.validate()?;
        let count = self.shares.len() + self.groups.len();
        if count == 0 || count > MAX_GROUP_MEMBERS {
            return Err(invalid(
                "shares",
                format!(
                    "a group must have 1 to {MAX_GROUP_MEMBERS} members (shares and groups), got {count}"
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for (field, names) in [("shares", &self.shares), ("groups", &self.groups)] {
            for (i, m) in names.iter().enumerate() {
                m.validate(&format!("{field}[{i}]"))?;
                if !seen.insert(m) {
                    return Err(invalid(
                        format!("{field}[{i}]"),
                        format!("{m} is listed twice"),
                    ));
                }
                if *m == self.name {
                    return Err(invalid(
                        format!("{field}[{i}]"),
                        format!("a group cannot contain itself ({m})"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The group's max for `unit`; `None` where it lists no limit for it, which the
    /// group then does not bound (its shares' own limits still do).
    pub fn max_for(&self, unit: &Unit) -> Option<u32> {
        limit_for(&self.capacity_limits, unit)
    }

    /// The most GPUs of `unit` its members may hold together with borrowed ones
    /// (`None`: no bound).
    pub fn ceiling_for(&self, unit: &Unit) -> Option<u64> {
        self.max_for(unit)
            .and_then(|m| self.resource_sharing.ceiling(m))
    }
}

/// A quota share: a team's or project's slice of a queue's capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaShare {
    pub name: ShareName,
    pub queue: QueueName,
    pub capacity_limits: Vec<CapacityLimit>,
    pub resource_sharing: ResourceSharing,
    pub in_share_preemption: bool,
    pub state: ObjState,
    /// Users or groups allowed to submit; empty means anyone with a user certificate.
    pub members: Vec<UserName>,
    pub default_grace_s: u64,
    pub max_grace_s: u64,
    /// A running job younger than this is not a preemption victim.
    pub min_runtime_s: u64,
    /// The highest priority a user may set on a job of this share, at submit and
    /// update (operators and admins may set up to [`crate::MAX_JOB_PRIORITY`]).
    pub max_user_priority: u32,
    /// How many jobs the share and each of its users may have, and how fast a user
    /// may submit.
    pub limits: JobLimits,
    /// What the share's jobs that run on borrowed GPUs are promised.
    pub loans: LoanTerms,
    /// Its weight under a FAIR_SHARE policy; `None`: the sum of its maxes.
    pub weight: Option<u32>,
}

/// The terms on which a share's jobs run on borrowed GPUs (above the share's max): how
/// long such a job runs before a reclaim may take it, and how much notice it gets when
/// one does. The defaults are AWS's: no notice, and the share's `min_runtime_s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LoanTerms {
    /// A job on borrowed GPUs is not reclaimed before it has run this long (seconds);
    /// `None`: the share's `min_runtime_s`, which alone governs in-share preemption.
    pub min_runtime_s: Option<u64>,
    /// When a reclaim picks a job, it gets its checkpoint signal this many seconds
    /// before its grace period starts: SIGKILL comes after notice + grace.
    pub recall_notice_s: u64,
}

/// Limits on jobs, per quota share: for each user of the share (as Slurm's limits of
/// an association, user × account) and for the share as a whole (Slurm's `Grp*`
/// limits). Each task of an array counts as a job, as in Slurm. A job counts from its
/// submit until it ends (SUCCEEDED, FAILED or CANCELLED), so ended jobs free their
/// place. The per-user limits hold for the job's user, whoever sends the submit (an
/// admin or operator submitting for a user through the AWS endpoint counts against
/// that user); an admin lifts a limit by applying the share again.
///
/// The defaults suit a rack of a few hundred users: far above what scripts of normal
/// use reach (Slurm's default `MaxJobCount` is 10,000 for a whole cluster), and a
/// bound on what one user makes the controllers hold. The tasks of an array share one
/// spec, so a full-size array (10,000 tasks) costs one spec and a small record per
/// task; jobs that are not arrays hold a spec each, so one user's jobs in a share hold
/// at most `max_jobs_per_user` × [`crate::MAX_SPEC_BYTES`] of specs (2.5 GiB with the
/// defaults, reached only by 10,000 jobs each at the spec size limit), which an admin
/// lowers with either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobLimits {
    /// Jobs a user may have waiting (SUBMITTED, PENDING or RUNNABLE) in the share.
    pub max_pending_per_user: u32,
    /// Jobs a user may have in the share, waiting or running (Slurm's
    /// `MaxSubmitJobs`).
    pub max_jobs_per_user: u32,
    /// Jobs the share may have in all, waiting or running (`GrpSubmitJobs`).
    pub max_jobs_per_share: u32,
    /// Arrays a user may have in the share with at least one task not ended.
    pub max_arrays_per_user: u32,
    /// Submits a user may make to the share per minute of entry time (an array is one
    /// submit).
    pub submits_per_user_per_minute: u32,
    /// Tasks one array may have (at most [`crate::MAX_ARRAY_TASKS`]).
    pub max_array_tasks: u32,
}

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            max_pending_per_user: 10_000,
            max_jobs_per_user: 10_000,
            max_jobs_per_share: 50_000,
            max_arrays_per_user: 100,
            submits_per_user_per_minute: 600,
            max_array_tasks: crate::MAX_ARRAY_TASKS,
        }
    }
}

/// The highest any one of [`JobLimits`]' numbers may be set to.
pub const MAX_JOB_LIMIT: u32 = 1_000_000;

impl JobLimits {
    /// The widest limits allowed, for benchmarks and simulations that measure the
    /// scheduler rather than the limits.
    pub fn widest() -> JobLimits {
        JobLimits {
            max_pending_per_user: MAX_JOB_LIMIT,
            max_jobs_per_user: MAX_JOB_LIMIT,
            max_jobs_per_share: MAX_JOB_LIMIT,
            max_arrays_per_user: MAX_JOB_LIMIT,
            submits_per_user_per_minute: MAX_JOB_LIMIT,
            max_array_tasks: crate::MAX_ARRAY_TASKS,
        }
    }

    /// Checks each number: at least 1 (0 would refuse every submit: disable the share
    /// instead), at most [`MAX_JOB_LIMIT`], and the array size at most
    /// [`crate::MAX_ARRAY_TASKS`].
    pub fn validate(&self, field: &str) -> Result<(), ValidationError> {
        for (name, v, max) in [
            (
                "max_pending_per_user",
                self.max_pending_per_user,
                MAX_JOB_LIMIT,
            ),
            ("max_jobs_per_user", self.max_jobs_per_user, MAX_JOB_LIMIT),
            ("max_jobs_per_share", self.max_jobs_per_share, MAX_JOB_LIMIT),
            (
                "max_arrays_per_user",
                self.max_arrays_per_user,
                MAX_JOB_LIMIT,
            ),
            (
                "submits_per_user_per_minute",
                self.submits_per_user_per_minute,
                MAX_JOB_LIMIT,
            ),
            (
                "max_array_tasks",
                self.max_array_tasks,
                crate::MAX_ARRAY_TASKS,
            ),
        ] {
            if v == 0 || v > max {
                return Err(invalid(
                    format!("{field}.{name}"),
                    format!("must be 1 to {max}, got {v}"),
                ));
            }
        }
        Ok(())
    }
}

impl QuotaShare {
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.name.validate("name")?;
        self.queue.validate("queue")?;
        validate_limits(&self.capacity_limits, "capacity_limits", true)?;
        self.resource_sharing.validate()?;
        for (i, m) in self.members.iter().enumerate() {
            m.validate(&format!("members[{i}]"))?;
        }
        for (field, v) in [
            ("default_grace_s", self.default_grace_s),
            ("max_grace_s", self.max_grace_s),
            ("min_runtime_s", self.min_runtime_s),
            ("loan_min_runtime_s", self.loans.min_runtime_s.unwrap_or(0)),
            ("recall_notice_s", self.loans.recall_notice_s),
        ] {
            if v > MAX_DURATION_S {
                return Err(invalid(
                    field,
                    format!("must be at most {MAX_DURATION_S} s (one week), got {v}"),
                ));
            }
        }
        if self.max_user_priority > crate::MAX_JOB_PRIORITY {
            return Err(invalid(
                "max_user_priority",
                format!(
                    "must be 0-{}, got {}",
                    crate::MAX_JOB_PRIORITY,
                    self.max_user_priority
                ),
            ));
        }
        self.limits.validate("limits")?;
        if let Some(w) = self.weight {
            if !(1..=MAX_SHARE_WEIGHT).contains(&w) {
                return Err(invalid(
                    "weight",
                    format!("must be 1-{MAX_SHARE_WEIGHT} when set, got {w}"),
                ));
            }
        }
        if self.default_grace_s > self.max_grace_s {
            return Err(invalid(
                "default_grace_s",
                format!(
                    "must not exceed max_grace_s ({}), got {}",
                    self.max_grace_s, self.default_grace_s
                ),
            ));
        }
        Ok(())
    }

    /// The share's max for `unit` (0 when the share lists no limit for it).
    pub fn max_for(&self, unit: &Unit) -> u32 {
        limit_for(&self.capacity_limits, unit).unwrap_or(0)
    }

    /// The most GPUs of `unit` the share may hold including borrowed ones:
    /// `max × (1 + borrow_limit/100)`, or `None` for unlimited.
    pub fn ceiling_for(&self, unit: &Unit) -> Option<u64> {
        self.resource_sharing.ceiling(self.max_for(unit))
    }

    /// Its fair-share weight: as set, else the sum of its maxes (at least 1).
    pub fn fair_weight(&self) -> u64 {
        self.weight.map_or_else(
            || {
                self.capacity_limits
                    .iter()
                    .map(|l| l.max as u64)
                    .sum::<u64>()
                    .max(1)
            },
            u64::from,
        )
    }

    /// How long a job of this share on borrowed GPUs runs before a reclaim may take it.
    pub fn loan_min_runtime_s(&self) -> u64 {
        self.loans.min_runtime_s.unwrap_or(self.min_runtime_s)
    }

    pub fn borrows(&self) -> bool {
        self.resource_sharing.strategy == Strategy::LendAndBorrow
    }

    pub fn is_member(&self, user: &UserName) -> bool {
        self.members.is_empty() || self.members.contains(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn share() -> QuotaShare {
        QuotaShare {
            weight: None,
            loans: Default::default(),
            name: "vision".into(),
            queue: "q".into(),
            capacity_limits: vec![CapacityLimit {
                unit: "h100".into(),
                max: 8,
            }],
            resource_sharing: ResourceSharing {
                strategy: Strategy::LendAndBorrow,
                borrow_limit: Some(50),
            },
            in_share_preemption: false,
            state: ObjState::Enabled,
            members: vec![],
            default_grace_s: 60,
            max_grace_s: 600,
            min_runtime_s: 0,
            max_user_priority: DEFAULT_MAX_USER_PRIORITY,
            limits: JobLimits::default(),
        }
    }

    #[test]
    fn a_valid_share_passes_and_its_ceiling_is_max_times_borrow_limit() {
        let s = share();
        s.validate().unwrap();
        assert_eq!(s.ceiling_for(&"h100".into()), Some(12));
        assert_eq!(s.max_for(&"a100".into()), 0);
    }

    #[test]
    fn borrow_limit_rules() {
        let mut s = share();
        s.resource_sharing.borrow_limit = Some(-2);
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "resource_sharing.borrow_limit");
        assert!(e.rule.contains("-1"), "{e}");
        s.resource_sharing.borrow_limit = Some(-1);
        assert_eq!(s.ceiling_for(&"h100".into()), None);
        s.resource_sharing = ResourceSharing {
            strategy: Strategy::Lend,
            borrow_limit: Some(10),
        };
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "resource_sharing.borrow_limit");
        assert!(
            e.rule
                .contains("only allowed with strategy LEND_AND_BORROW"),
            "{e}"
        );
        s.resource_sharing.borrow_limit = None;
        s.validate().unwrap();
        assert_eq!(s.ceiling_for(&"h100".into()), Some(8));
    }

    #[test]
    fn capacity_limits_need_one_to_five_distinct_units() {
        let mut s = share();
        s.capacity_limits.clear();
        assert!(s.validate().unwrap_err().rule.contains("1 to 5"));
        s.capacity_limits = (0..6)
            .map(|i| CapacityLimit {
                unit: Unit(format!("u{i}")),
                max: 1,
            })
            .collect();
        assert_eq!(s.validate().unwrap_err().field, "capacity_limits");
        s.capacity_limits = vec![
            CapacityLimit {
                unit: "h100".into(),
                max: 1,
            },
            CapacityLimit {
                unit: "h100".into(),
                max: 2,
            },
        ];
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "capacity_limits[1].unit");
        assert!(e.rule.contains("twice"));
    }

    #[test]
    fn grace_defaults_must_fit_under_the_max() {
        let mut s = share();
        s.default_grace_s = 700;
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "default_grace_s");
        assert!(e.rule.contains("max_grace_s (600)"));
    }

    #[test]
    fn environment_limits_must_be_positive_and_queue_priority_bounded() {
        let env = ServiceEnvironment {
            name: "gpu".into(),
            selector: BTreeMap::new(),
            capacity_limits: vec![CapacityLimit {
                unit: "h100".into(),
                max: 0,
            }],
            state: ObjState::Enabled,
        };
        let e = env.validate().unwrap_err();
        assert_eq!(e.field, "capacity_limits[0].max");
        let q = JobQueue {
            name: "q".into(),
            priority: 1001,
            state: ObjState::Enabled,
            environment: "gpu".into(),
            policy: "p".into(),
        };
        let e = q.validate().unwrap_err();
        assert_eq!(e.field, "priority");
        assert!(e.rule.contains("0-1000"));
    }
}
