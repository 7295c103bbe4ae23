//! The operations: each reads its AWS request, acts through the service layer with
//! the caller's identity (so the same authorization as every other transport), and
//! answers in AWS's shapes.
//!
//! Objects made here are the objects `tranche apply` makes: a service environment is
//! an environment selecting every node, a scheduling policy's `quotaSharePolicy` is a
//! policy, a job queue is a queue with one environment and one policy, and a quota
//! share is a share with the policy file's default grace periods and no member list.
//!
//! A job queue made without a scheduling policy is AWS's FIFO queue: it gets the
//! reserved policy [`FIFO_POLICY`] and one implicit quota share of the queue's own name
//! whose limits are its service environment's, which every job submitted without
//! `quotaShareName` joins. The endpoint shows neither (no `schedulingPolicyArn`, no
//! quota shares, no `quotaShareName` on its jobs); `tranche shares` and the native API
//! show them.
//!
//! One module per resource kind holds its operations (`Endpoint`'s methods that the
//! router dispatches to); this module holds what they share: reading members, pages,
//! tags and the statuses a service job reports.

mod environments;
mod jobs;
mod logs;
mod policies;
mod queues;
mod shares;
mod snapshot;
mod tags;
mod training_jobs;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tranche_model::*;
use tranche_proto::{ApiError, ClientCommand, ClientRequest, Query, Response as Answer};
use tranche_state::State;

use tranche_controller::service::{authorize, job_as_seen_by, Origin};

use super::capacity::AwsLimit;
use super::wire::{parse, AwsError, AwsResult, EXISTS};
use super::{Ctx, Endpoint};

/// Statuses a service job reports (AWS has no CANCELLED: a cancelled job is FAILED
/// with `isTerminated`).
const STATUSES: [&str; 8] = [
    "SUBMITTED",
    "PENDING",
    "RUNNABLE",
    "SCHEDULED",
    "STARTING",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
];

/// The scheduling policy of every job queue made without one: FIFO, reserved (no
/// policy of that name can be made, described or deleted here).
pub const FIFO_POLICY: &str = "implicit-fifo";

/// Whether `q` is a FIFO queue (made without a scheduling policy).
fn is_fifo(q: &JobQueue) -> bool {
    q.policy.as_str() == FIFO_POLICY
}

/// Whether `s` is the implicit share of a FIFO queue.
fn is_implicit(st: &State, s: &QuotaShare) -> bool {
    s.name.as_str() == s.queue.as_str() && st.queues.get(&s.queue).is_some_and(is_fifo)
}

/// A share as this endpoint makes one: no member list, the policy file's default grace
/// periods, LEND without in-share preemption until the request says otherwise.
fn new_share(name: ShareName, queue: QueueName, limits: Vec<CapacityLimit>) -> QuotaShare {
    QuotaShare {
        weight: None,
        loans: Default::default(),
        name,
        queue,
        capacity_limits: limits,
        resource_sharing: ResourceSharing {
            strategy: Strategy::Lend,
            borrow_limit: None,
        },
        in_share_preemption: false,
        state: ObjState::Enabled,
        members: vec![],
        default_grace_s: DEFAULT_GRACE_S,
        max_grace_s: MAX_GRACE_S,
        min_runtime_s: 0,
        max_user_priority: tranche_model::DEFAULT_MAX_USER_PRIORITY,
        limits: Default::default(),
    }
}

/// The implicit share of FIFO queue `queue` on `env`: all of the environment's
/// capacity, lent to other queues' shares on it while idle, no preemption within.
fn implicit_share(queue: &QueueName, env: &ServiceEnvironment) -> QuotaShare {
    new_share(
        queue.as_str().into(),
        queue.clone(),
        env.capacity_limits.clone(),
    )
}

/// The refusal of a scheduling policy named [`FIFO_POLICY`].
fn reserved_policy(member: &str) -> AwsError {
    AwsError::invalid(
        member,
        format!("scheduling policy name {FIFO_POLICY} is reserved for the job queues made without a schedulingPolicyArn"),
    )
}

/// Grace periods a share made here gets (those of the policy file's defaults).
const DEFAULT_GRACE_S: u64 = 30;
const MAX_GRACE_S: u64 = 600;

/// The most jobs one `ListServiceJobs` call looks at under the state lock; past it the
/// answer has what it found so far and a `nextToken` to go on from.
const MAX_JOBS_SCANNED: usize = 10_000;

fn state_of(member: &str, v: Option<&str>) -> AwsResult<Option<ObjState>> {
    match v {
        None => Ok(None),
        Some("ENABLED") => Ok(Some(ObjState::Enabled)),
        Some("DISABLED") => Ok(Some(ObjState::Disabled)),
        Some(o) => Err(AwsError::bad_enum(member, o, &["ENABLED", "DISABLED"])),
    }
}

fn one_of(member: &str, v: &str, allowed: &[&str]) -> AwsResult<()> {
    if allowed.contains(&v) {
        Ok(())
    } else {
        Err(AwsError::bad_enum(member, v, allowed))
    }
}

fn required<'a, T>(v: &'a Option<T>, member: &str) -> AwsResult<&'a T> {
    v.as_ref()
        .ok_or_else(|| AwsError::invalid(member, "is required"))
}

/// The tag a job queue made here keeps the first job id it may hold in, so that a
/// queue deleted and made again under its name does not list the jobs of the one
/// before (whose ids are all smaller). The endpoint shows it on no object, and no
/// caller may set or remove it.
const FIRST_JOB_TAG: &str = "tranche:firstJobId";

/// The first job id job queue `q` may hold (0 for one not made here).
fn first_job_of(st: &State, q: &str) -> u64 {
    st.tags
        .get(&format!("job-queue/{q}"))
        .and_then(|t| t.get(FIRST_JOB_TAG))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Refuses a caller's tag keys that name [`FIRST_JOB_TAG`].
fn refuse_reserved_tag<'a>(
    member: &str,
    mut keys: impl Iterator<Item = &'a String>,
) -> AwsResult<()> {
    match keys.any(|k| k == FIRST_JOB_TAG) {
        true => Err(AwsError::invalid(
            &format!("{member}.{FIRST_JOB_TAG}"),
            "this tag key is reserved: the endpoint keeps a job queue's first job id in it",
        )),
        false => Ok(()),
    }
}

fn tags_json(st: &State, key: Option<String>) -> Value {
    let mut t = key
        .and_then(|k| st.tags.get(&k))
        .cloned()
        .unwrap_or_default();
    t.remove(FIRST_JOB_TAG);
    json!(t)
}

/// Paging over a sorted list: `nextToken` is the position to go on from.
fn page<T: Clone>(
    items: &[T],
    max: Option<i64>,
    token: Option<&str>,
) -> AwsResult<(Vec<T>, Option<String>)> {
    let max = max.unwrap_or(100);
    if !(1..=1000).contains(&max) {
        return Err(AwsError::invalid("maxResults", "must be 1 to 1000"));
    }
    let start = match token {
        None => 0,
        Some(t) => t
            .parse::<usize>()
            .map_err(|_| AwsError::invalid("nextToken", "is not a token this endpoint gave"))?,
    };
    let end = start.saturating_add(max as usize).min(items.len());
    let slice = items.get(start..end).unwrap_or(&[]).to_vec();
    let next = (end < items.len()).then(|| end.to_string());
    Ok((slice, next))
}

/// The names a Describe call asks for (every object when it names none).
struct Wanted(Option<Vec<String>>);

impl Wanted {
    fn of(
        list: &Option<Vec<String>>,
        name_of: impl Fn(&str) -> Result<String, String>,
    ) -> AwsResult<Wanted> {
        Ok(Wanted(match list {
            Some(l) if !l.is_empty() => Some(
                l.iter()
                    .map(|x| name_of(x).map_err(AwsError::client))
                    .collect::<AwsResult<_>>()?,
            ),
            _ => None,
        }))
    }

    fn has(&self, name: &str) -> bool {
        self.0.as_ref().is_none_or(|w| w.iter().any(|n| n == name))
    }
}

/// Checks a request's `tags`, when it has them.
fn check_tags(tags: &Option<BTreeMap<String, String>>) -> AwsResult<()> {
    match tags {
        Some(t) => {
            validate_tags(t, "tags").map_err(|e| AwsError::invalid(&e.field, e.rule))?;
            refuse_reserved_tag("tags", t.keys())
        }
        None => Ok(()),
    }
}

fn with_next(mut body: Value, next: Option<String>) -> Value {
    if let (Some(n), Value::Object(m)) = (next, &mut body) {
        m.insert("nextToken".into(), Value::String(n));
    }
    body
}
