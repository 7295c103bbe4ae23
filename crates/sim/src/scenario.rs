//! The scenario file (version 1, TOML): what it may say, and how it is checked.

use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use tranche_model::{ObjState, Strategy, MAX_GPUS_PER_NODE_INVENTORY};

/// The latest instant and the longest duration a scenario may state, in seconds (about
/// 31 years): far beyond any real policy question, and far from overflowing the
/// millisecond clock.
pub const MAX_SECONDS: u64 = 1_000_000_000;

/// The most nodes a scenario may define (with `count`).
pub const MAX_NODES: u64 = 10_000;

/// The queue of a scenario that defines none.
pub const DEFAULT_QUEUE: &str = "default";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub environment: Option<EnvSpec>,
    /// Several environments instead of one (Tranche's addition): each named, with a
    /// selector that takes its nodes; each queue names its own.
    #[serde(default)]
    pub environments: Vec<EnvSpec>,
    /// Job queues on the environment (Tranche's addition; absent: one queue `default`).
    #[serde(default)]
    pub queues: Vec<QueueSpec>,
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub shares: Vec<ShareSpec>,
    /// Groups of shares (nested quotas; Tranche's addition).
    #[serde(default)]
    pub groups: Vec<GroupSpec>,
    #[serde(default)]
    pub events: Vec<EventSpec>,
    #[serde(default)]
    pub expect: Vec<ExpectSpec>,
    /// The scheduling policy's `FIFO` (the default) or `FAIR_SHARE`, with its
    /// `usage_half_life_s` (Tranche's addition).
    #[serde(default)]
    pub idle_resource_assignment: Option<String>,
    #[serde(default)]
    pub usage_half_life_s: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSpec {
    pub unit: String,
    pub max: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSpec {
    pub name: Option<String>,
    pub capacity_limits: Option<Vec<LimitSpec>>,
    /// Node labels a node must carry to be in the environment (Tranche's addition;
    /// absent or empty: every node).
    pub selector: Option<BTreeMap<String, String>>,
}

/// One job queue on the scenario's environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    pub name: String,
    /// 0-1000; queues are scheduled in descending priority (default 0).
    pub priority: Option<u32>,
    /// The queue's environment, when `[[environments]]` are given.
    #[serde(default)]
    pub environment: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    pub count: Option<u32>,
    pub unit: String,
    pub gpus: u32,
    pub labels: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareSpec {
    pub name: String,
    /// The share's queue (Tranche's addition): required when `[[queues]]` are given,
    /// else the one queue `default`.
    #[serde(default)]
    pub queue: Option<String>,
    pub capacity_limits: Vec<LimitSpec>,
    pub strategy: Strategy,
    pub borrow_limit: Option<i64>,
    pub in_share_preemption: Option<bool>,
    pub default_grace_s: Option<u64>,
    pub max_grace_s: Option<u64>,
    pub min_runtime_s: Option<u64>,
    /// The share's loan terms: how long its jobs on borrowed GPUs run before a reclaim
    /// may take them (default: `min_runtime_s`), and their recall notice.
    pub loan_min_runtime_s: Option<u64>,
    pub recall_notice_s: Option<u64>,
    /// Its weight under FAIR_SHARE (default: the sum of its maxes).
    pub weight: Option<u32>,
    pub state: Option<ObjState>,
}

/// A group of shares and groups of one queue (see `tranche_model::ShareGroup`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    pub name: String,
    /// Its queue: required when `[[queues]]` are given, else the one queue `default`.
    #[serde(default)]
    pub queue: Option<String>,
    #[serde(default)]
    pub shares: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    pub capacity_limits: Vec<LimitSpec>,
    pub strategy: Strategy,
    pub borrow_limit: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    pub at: u64,
    pub submit: Option<SubmitSpec>,
    pub cancel: Option<String>,
    pub update_priority: Option<PrioritySpec>,
    pub update_share: Option<UpdateShareSpec>,
    pub drain: Option<DrainSpec>,
    pub resume: Option<String>,
    pub node_down: Option<String>,
    pub node_up: Option<String>,
    /// The named job reports a checkpoint (as touching its `TRANCHE_CHECKPOINT_FILE`).
    pub checkpoint: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitSpec {
    pub name: String,
    pub share: String,
    pub unit: String,
    pub gpus: u32,
    pub nodes: Option<u32>,
    pub priority: Option<u32>,
    pub runtime_s: Option<u64>,
    pub exit_code: Option<i32>,
    pub on_signal: Option<String>,
    pub grace_s: Option<u64>,
    pub preemption_retries: Option<u32>,
    pub retry_attempts: Option<u32>,
    /// `--checkpoint-every`: the job saves its work this often; a preempted attempt
    /// loses only the work since its last checkpoint, and the next one resumes there.
    pub checkpoint_every_s: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrioritySpec {
    pub job: String,
    pub priority: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateShareSpec {
    pub name: String,
    pub capacity_limits: Option<Vec<LimitSpec>>,
    pub strategy: Option<Strategy>,
    pub borrow_limit: Option<i64>,
    pub in_share_preemption: Option<bool>,
    pub default_grace_s: Option<u64>,
    pub min_runtime_s: Option<u64>,
    pub state: Option<ObjState>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainSpec {
    pub node: String,
    pub reason: String,
    pub now: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectSpec {
    pub at: u64,
    pub job: Option<String>,
    pub state: Option<String>,
    pub preempting: Option<bool>,
    pub node: Option<String>,
    pub attempts: Option<u32>,
    /// Substring of the job's pending reason (Tranche's addition to the format).
    pub reason: Option<String>,
    pub share: Option<String>,
    pub used: Option<BTreeMap<String, u32>>,
}

/// How a simulated job reacts to its checkpoint signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSignal {
    ExitAfter(u64),
    Ignore,
}

/// An `on_signal` that is neither `exit_after:N` nor `ignore`; it holds the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be \"exit_after:N\" (whole seconds) or \"ignore\", got {0:?}")]
pub struct OnSignalError(pub String);

impl SubmitSpec {
    pub fn on_signal(&self) -> Result<OnSignal, OnSignalError> {
        match self.on_signal.as_deref() {
            None => Ok(OnSignal::ExitAfter(0)),
            Some("ignore") => Ok(OnSignal::Ignore),
            Some(s) => s
                .strip_prefix("exit_after:")
                .and_then(|n| n.parse().ok())
                .map(OnSignal::ExitAfter)
                .ok_or_else(|| OnSignalError(s.to_string())),
        }
    }
}

/// Why a scenario or policy file is not valid: the field it names (or the line, where
/// TOML gives one) and the rule it breaks.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file is too large, or nests too deep, to be read at all.
    #[error("{0}")]
    TooLarge(String),
    /// The TOML does not parse into a scenario (its message names the line).
    #[error("{}", .0.to_string().trim_end())]
    Toml(#[from] toml::de::Error),
    /// A field breaks a rule serde cannot state; `field` is its path in the file.
    #[error("invalid `{field}`: {message}")]
    Invalid { field: String, message: String },
    /// A policy file gives jobs: the trace gives them.
    #[error("a policy file has no [[events]] or [[expect]]: the trace gives the jobs")]
    PolicyHasJobs,
    /// A policy file without shares.
    #[error("a policy file needs at least one [[shares]] entry")]
    PolicyWithoutShares,
    /// Neither the policy file nor `--nodes` gives nodes.
    #[error("no nodes: give --nodes \"COUNT x GPUS UNIT\" or [[nodes]] in the policy file")]
    NoNodes,
}

impl ScenarioError {
    /// The field a [`ScenarioError::Invalid`] names.
    pub fn field(&self) -> Option<&str> {
        match self {
            ScenarioError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

fn err(field: impl std::fmt::Display, msg: impl std::fmt::Display) -> ScenarioError {
    ScenarioError::Invalid {
        field: field.to_string(),
        message: msg.to_string(),
    }
}

impl Scenario {
    /// The scheduling policy's idle assignment the file asks for.
    pub fn idle_assignment(&self) -> Result<tranche_model::IdleAssignment, ScenarioError> {
        let bad = |e: tranche_model::ValidationError| ScenarioError::Invalid {
            field: e.field,
            message: e.rule,
        };
        let a = tranche_model::IdleAssignment::from_fields(
            self.idle_resource_assignment.as_deref(),
            self.usage_half_life_s,
        )
        .map_err(bad)?;
        tranche_model::SchedulingPolicy {
            name: "p".into(),
            idle_resource_assignment: a,
        }
        .validate()
        .map_err(bad)?;
        Ok(a)
    }

    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        tranche_model::text_limits::check_toml("scenario file", text)
            .map_err(ScenarioError::TooLarge)?;
        let sc: Scenario = toml::from_str(text)?;
        sc.check()?;
        Ok(sc)
    }

    /// Checks what serde cannot: one action per event, unique job names, expectations
    /// that name known jobs and shares.
    pub(crate) fn check(&self) -> Result<(), ScenarioError> {
        if self.nodes.is_empty() {
            return Err(err(
                "nodes",
                "a scenario needs at least one [[nodes]] entry",
            ));
        }
        self.check_bounds()?;
        let mut node_names = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.count == Some(0) {
                return Err(err(format!("nodes[{i}].count"), "must be at least 1"));
            }
            if n.gpus == 0 || n.gpus as usize > MAX_GPUS_PER_NODE_INVENTORY {
                return Err(err(
                    format!("nodes[{i}].gpus"),
                    format!("must be 1-{MAX_GPUS_PER_NODE_INVENTORY}, got {}", n.gpus),
                ));
            }
            for name in expand_names(n) {
                if !node_names.insert(name.clone()) {
                    return Err(err(
                        format!("nodes[{i}].name"),
                        format!("node {name} is defined twice"),
                    ));
                }
            }
        }
        self.check_queues()?;
        self.idle_assignment()?;
        let share_names: BTreeSet<&str> = self.shares.iter().map(|s| s.name.as_str()).collect();
        let mut jobs = BTreeSet::new();
        let mut last_at = 0;
        for (i, e) in self.events.iter().enumerate() {
            let n = [
                e.submit.is_some(),
                e.cancel.is_some(),
                e.update_priority.is_some(),
                e.update_share.is_some(),
                e.drain.is_some(),
                e.resume.is_some(),
                e.node_down.is_some(),
                e.node_up.is_some(),
                e.checkpoint.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if n != 1 {
                return Err(err(
                    format!("events[{i}]"),
                    format!("needs exactly one action (submit, cancel, update_priority, update_share, drain, resume, node_down, node_up, checkpoint), found {n}"),
                ));
            }
            if e.at < last_at {
                return Err(err(
                    format!("events[{i}].at"),
                    format!("events must be in time order ({} after {last_at})", e.at),
                ));
            }
            last_at = e.at;
            if let Some(s) = &e.submit {
                if !jobs.insert(s.name.as_str()) {
                    return Err(err(
                        format!("events[{i}].submit.name"),
                        format!("job {} is submitted twice", s.name),
                    ));
                }
                s.on_signal()
                    .map_err(|m| err(format!("events[{i}].submit.on_signal"), m))?;
            }
            let refs = [
                e.cancel.as_deref().map(|j| ("cancel", j)),
                e.update_priority
                    .as_ref()
                    .map(|p| ("update_priority.job", p.job.as_str())),
            ];
            for (field, j) in refs.into_iter().flatten() {
                if !jobs.contains(j) {
                    return Err(err(
                        format!("events[{i}].{field}"),
                        format!("job {j} is not submitted before this event"),
                    ));
                }
            }
            if let Some(u) = &e.update_share {
                if !share_names.contains(u.name.as_str()) {
                    return Err(err(
                        format!("events[{i}].update_share.name"),
                        format!("no share named {}", u.name),
                    ));
                }
            }
            let node_refs = [
                e.drain.as_ref().map(|d| ("drain.node", d.node.as_str())),
                e.resume.as_deref().map(|n| ("resume", n)),
                e.node_down.as_deref().map(|n| ("node_down", n)),
                e.node_up.as_deref().map(|n| ("node_up", n)),
            ];
            for (field, n) in node_refs.into_iter().flatten() {
                if !node_names.contains(n) {
                    return Err(err(
                        format!("events[{i}].{field}"),
                        format!("no node named {n}"),
                    ));
                }
            }
        }
        for (i, x) in self.expect.iter().enumerate() {
            match (&x.job, &x.share) {
                (Some(j), None) => {
                    if !jobs.contains(j.as_str()) {
                        return Err(err(
                            format!("expect[{i}].job"),
                            format!("no job named {j} is ever submitted"),
                        ));
                    }
                    if x.used.is_some() {
                        return Err(err(
                            format!("expect[{i}].used"),
                            "goes with `share`, not `job`",
                        ));
                    }
                    if let Some(s) = &x.state {
                        if s != "REJECTED" && tranche_model::JobStatus::parse(s).is_none() {
                            return Err(err(
                                format!("expect[{i}].state"),
                                format!("unknown job status {s:?}"),
                            ));
                        }
                    }
                    if let Some(n) = &x.node {
                        if !node_names.contains(n) {
                            return Err(err(
                                format!("expect[{i}].node"),
                                format!("no node named {n}"),
                            ));
                        }
                    }
                }
                (None, Some(s)) => {
                    if !share_names.contains(s.as_str()) {
                        return Err(err(
                            format!("expect[{i}].share"),
                            format!("no share named {s}"),
                        ));
                    }
                    if x.used.is_none() {
                        return Err(err(
                            format!("expect[{i}]"),
                            "a share expectation needs `used`",
                        ));
                    }
                    if x.state.is_some()
                        || x.preempting.is_some()
                        || x.node.is_some()
                        || x.attempts.is_some()
                        || x.reason.is_some()
                    {
                        return Err(err(
                            format!("expect[{i}]"),
                            "a share expectation takes only `used`",
                        ));
                    }
                }
                _ => {
                    return Err(err(
                        format!("expect[{i}]"),
                        "needs exactly one of `job` or `share`",
                    ))
                }
            }
        }
        Ok(())
    }
}

impl Scenario {
    /// The queues, in file order (one `default` queue when none are given).
    pub fn queue_list(&self) -> Vec<QueueSpec> {
        if self.queues.is_empty() {
            vec![QueueSpec {
                name: DEFAULT_QUEUE.to_string(),
                priority: None,
                environment: None,
            }]
        } else {
            self.queues.clone()
        }
    }

    /// The queue of share `i`.
    pub fn share_queue(&self, i: usize) -> String {
        self.shares[i]
            .queue
            .clone()
            .unwrap_or_else(|| DEFAULT_QUEUE.to_string())
    }

    /// Queue names are unique, and every share names a queue the file defines.
    fn check_queues(&self) -> Result<(), ScenarioError> {
        let mut names = BTreeSet::new();
        for (i, q) in self.queues.iter().enumerate() {
            if !names.insert(q.name.as_str()) {
                return Err(err(
                    format!("queues[{i}].name"),
                    format!("queue {} is defined twice", q.name),
                ));
            }
            if let Some(p) = q.priority.filter(|p| *p > 1000) {
                return Err(err(
                    format!("queues[{i}].priority"),
                    format!("must be 0-1000, got {p}"),
                ));
            }
        }
        self.check_environments()?;
        for (i, s) in self.shares.iter().enumerate() {
            match (&s.queue, self.queues.is_empty()) {
                (None, false) => {
                    return Err(err(
                        format!("shares[{i}].queue"),
                        "required when [[queues]] are given",
                    ))
                }
                (Some(q), true) if q != DEFAULT_QUEUE => {
                    return Err(err(
                        format!("shares[{i}].queue"),
                        format!("no queue named {q} (without [[queues]] the one queue is `{DEFAULT_QUEUE}`)"),
                    ))
                }
                (Some(q), false) if !names.contains(q.as_str()) => {
                    return Err(err(
                        format!("shares[{i}].queue"),
                        format!("no queue named {q}"),
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// With `[[environments]]`: no `[environment]` too, every environment named once,
    /// and every queue on one of them.
    fn check_environments(&self) -> Result<(), ScenarioError> {
        if self.environments.is_empty() {
            for (i, q) in self.queues.iter().enumerate() {
                if q.environment.is_some() {
                    return Err(err(
                        format!("queues[{i}].environment"),
                        "needs [[environments]] to name",
                    ));
                }
            }
            return Ok(());
        }
        if self.environment.is_some() {
            return Err(err(
                "environment",
                "give either [environment] or [[environments]], not both",
            ));
        }
        let mut names = BTreeSet::new();
        for (i, e) in self.environments.iter().enumerate() {
            let Some(n) = &e.name else {
                return Err(err(format!("environments[{i}].name"), "is required"));
            };
            if !names.insert(n.as_str()) {
                return Err(err(
                    format!("environments[{i}].name"),
                    format!("environment {n} is defined twice"),
                ));
            }
        }
        if self.queues.is_empty() && self.environments.len() > 1 {
            return Err(err(
                "queues",
                "with several [[environments]], [[queues]] must say which each queue is on",
            ));
        }
        for (i, q) in self.queues.iter().enumerate() {
            match &q.environment {
                Some(e) if !names.contains(e.as_str()) => {
                    return Err(err(
                        format!("queues[{i}].environment"),
                        format!("no environment named {e}"),
                    ))
                }
                None if self.environments.len() > 1 => {
                    return Err(err(
                        format!("queues[{i}].environment"),
                        "required when several [[environments]] are given",
                    ))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The environments, in file order (one, named `default` unless it says, when
    /// `[[environments]]` is not given).
    pub fn environment_list(&self) -> Vec<EnvSpec> {
        if self.environments.is_empty() {
            vec![self.environment.clone().unwrap_or(EnvSpec {
                name: None,
                capacity_limits: None,
                selector: None,
            })]
        } else {
            self.environments.clone()
        }
    }

    /// Every time within [`MAX_SECONDS`] and at most [`MAX_NODES`] nodes, before
    /// anything is expanded or scheduled.
    fn check_bounds(&self) -> Result<(), ScenarioError> {
        let nodes: u64 = self
            .nodes
            .iter()
            .map(|n| u64::from(n.count.unwrap_or(1)))
            .sum();
        if nodes > MAX_NODES {
            return Err(err(
                "nodes",
                format!("at most {MAX_NODES} nodes in all, got {nodes}"),
            ));
        }
        let mut times: Vec<(String, Option<u64>)> = vec![];
        for (i, s) in self.shares.iter().enumerate() {
            times.push((format!("shares[{i}].default_grace_s"), s.default_grace_s));
            times.push((format!("shares[{i}].max_grace_s"), s.max_grace_s));
            times.push((format!("shares[{i}].min_runtime_s"), s.min_runtime_s));
        }
        for (i, e) in self.events.iter().enumerate() {
            times.push((format!("events[{i}].at"), Some(e.at)));
            if let Some(sub) = &e.submit {
                times.push((format!("events[{i}].submit.runtime_s"), sub.runtime_s));
                times.push((format!("events[{i}].submit.grace_s"), sub.grace_s));
                if let Ok(OnSignal::ExitAfter(n)) = sub.on_signal() {
                    times.push((format!("events[{i}].submit.on_signal"), Some(n)));
                }
            }
            if let Some(u) = &e.update_share {
                times.push((
                    format!("events[{i}].update_share.default_grace_s"),
                    u.default_grace_s,
                ));
                times.push((
                    format!("events[{i}].update_share.min_runtime_s"),
                    u.min_runtime_s,
                ));
            }
        }
        for (i, x) in self.expect.iter().enumerate() {
            times.push((format!("expect[{i}].at"), Some(x.at)));
        }
        for (field, t) in times {
            if let Some(t) = t.filter(|t| *t > MAX_SECONDS) {
                return Err(err(
                    field,
                    format!("at most {MAX_SECONDS} seconds, got {t}"),
                ));
            }
        }
        Ok(())
    }
}

/// `count > 1` makes name1..nameN.
pub fn expand_names(n: &NodeSpec) -> Vec<String> {
    match n.count.unwrap_or(1) {
        1 => vec![n.name.clone()],
        c => (1..=c).map(|i| format!("{}{i}", n.name)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "[[nodes]]\nname = \"n\"\nunit = \"h100\"\ngpus = 8\n";

    #[test]
    fn times_and_node_counts_are_bounded() {
        assert!(Scenario::parse(BASE).is_ok());
        let many = BASE.replace("gpus = 8", "gpus = 8\ncount = 4000000000");
        assert_eq!(
            Scenario::parse(&many).unwrap_err().to_string(),
            "invalid `nodes`: at most 10000 nodes in all, got 4000000000"
        );
        let late = format!("{BASE}[[expect]]\nat = 18446744073709551\nshare = \"s\"\n");
        assert_eq!(
            Scenario::parse(&late).unwrap_err().to_string(),
            "invalid `expect[0].at`: at most 1000000000 seconds, got 18446744073709551"
        );
        let long = format!(
            "{BASE}[[events]]\nat = 0\nsubmit = {{ name = \"j\", share = \"s\", unit = \"h100\", gpus = 1, on_signal = \"exit_after:18446744073709551615\" }}\n"
        );
        assert!(Scenario::parse(&long)
            .unwrap_err()
            .to_string()
            .starts_with("invalid `events[0].submit.on_signal`: at most"));
    }

    #[test]
    fn an_invalid_scenario_names_its_field_in_its_kind() {
        let twice = format!("{BASE}{}", BASE.replace("gpus = 8", "gpus = 4"));
        let e = Scenario::parse(&twice).unwrap_err();
        assert!(
            matches!(&e, ScenarioError::Invalid { field, message }
                if field == "nodes[1].name" && message == "node n is defined twice"),
            "{e:?}"
        );
        assert_eq!(e.field(), Some("nodes[1].name"));
        let e = Scenario::parse(
            "[[nodes]]
name = 1
",
        )
        .unwrap_err();
        assert!(matches!(e, ScenarioError::Toml(_)), "{e:?}");
        assert_eq!(e.field(), None);
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = Scenario::parse(&"#".repeat(tranche_model::text_limits::MAX_FILE_BYTES + 1))
            .unwrap_err();
        assert!(matches!(e, ScenarioError::TooLarge(_)), "{e:?}");
    }
}
