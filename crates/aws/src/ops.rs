//! The operations: each reads its AWS request, acts through the service layer with
//! the caller's identity (so the same authorization as every other transport), and
//! answers in AWS's shapes.
//!
//! Objects made here are the objects `tranche apply` makes: a service environment is
//! an environment selecting every node, a scheduling policy's `quotaSharePolicy` is a
//! policy, a job queue is a queue with one environment and one policy, and a quota
//! share is a share with the policy file's default grace periods and no member list.

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

fn tags_json(st: &State, key: Option<String>) -> Value {
    let t = key
        .and_then(|k| st.aws.tags.get(&k))
        .cloned()
        .unwrap_or_default();
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
        Some(t) => validate_tags(t, "tags").map_err(|e| AwsError::invalid(&e.field, e.rule)),
        None => Ok(()),
    }
}

fn with_next(mut body: Value, next: Option<String>) -> Value {
    if let (Some(n), Value::Object(m)) = (next, &mut body) {
        m.insert("nextToken".into(), Value::String(n));
    }
    body
}

// ---- service environments ------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateEnv {
    service_environment_name: Option<String>,
    service_environment_type: Option<String>,
    state: Option<String>,
    capacity_limits: Option<Vec<AwsLimit>>,
    tags: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateEnv {
    service_environment: Option<String>,
    state: Option<String>,
    capacity_limits: Option<Vec<AwsLimit>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeEnvs {
    service_environments: Option<Vec<String>>,
    max_results: Option<i64>,
    next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteEnv {
    service_environment: Option<String>,
}

impl Endpoint {
    fn env_json(&self, st: &State, e: &ServiceEnvironment) -> Value {
        json!({
            "serviceEnvironmentName": e.name.as_str(),
            "serviceEnvironmentArn": self.arns.environment(e.name.as_str()),
            "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "state": e.state.to_string(),
            "status": "VALID",
            "capacityLimits": self.cap.limits_json(&e.capacity_limits),
            "tags": tags_json(st, Some(format!("service-environment/{}", e.name))),
        })
    }

    async fn tag_new(
        &self,
        cx: &Ctx<'_>,
        resource: String,
        tags: Option<BTreeMap<String, String>>,
    ) -> AwsResult<()> {
        if let Some(tags) = tags.filter(|t| !t.is_empty()) {
            cx.write(ClientCommand::TagResource { resource, tags })
                .await?;
        }
        Ok(())
    }

    pub(super) async fn create_service_environment(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: CreateEnv = parse(body)?;
        let name = required(&r.service_environment_name, "serviceEnvironmentName")?.clone();
        let ty = required(&r.service_environment_type, "serviceEnvironmentType")?;
        one_of("serviceEnvironmentType", ty, &["SAGEMAKER_TRAINING"])?;
        let state = state_of("state", r.state.as_deref())?.unwrap_or_default();
        let limits = self.cap.to_tranche(
            "capacityLimits",
            required(&r.capacity_limits, "capacityLimits")?,
            false,
        )?;
        check_tags(&r.tags)?;
        if cx
            .state()
            .await?
            .environments
            .contains_key(&EnvName::from(name.as_str()))
        {
            return Err(AwsError::client(EXISTS));
        }
        let env = ServiceEnvironment {
            name: name.as_str().into(),
            selector: BTreeMap::new(),
            capacity_limits: limits,
            state,
        };
        cx.write(ClientCommand::PutEnvironment(env)).await?;
        self.tag_new(cx, format!("service-environment/{name}"), r.tags)
            .await?;
        Ok(json!({
            "serviceEnvironmentName": name,
            "serviceEnvironmentArn": self.arns.environment(&name),
        }))
    }

    pub(super) async fn update_service_environment(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: UpdateEnv = parse(body)?;
        let name = self
            .arns
            .environment_of(required(&r.service_environment, "serviceEnvironment")?)
            .map_err(AwsError::client)?;
        let mut env = cx
            .state()
            .await?
            .environments
            .get(&EnvName::from(name.as_str()))
            .cloned()
            .ok_or_else(|| {
                AwsError::client(format!("service environment {name} does not exist"))
            })?;
        if let Some(s) = state_of("state", r.state.as_deref())? {
            env.state = s;
        }
        if let Some(l) = &r.capacity_limits {
            env.capacity_limits = self.cap.to_tranche("capacityLimits", l, false)?;
        }
        cx.write(ClientCommand::PutEnvironment(env)).await?;
        Ok(json!({
            "serviceEnvironmentName": name,
            "serviceEnvironmentArn": self.arns.environment(&name),
        }))
    }

    pub(super) async fn describe_service_environments(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: DescribeEnvs = parse(body)?;
        let st = cx.state().await?;
        let wanted = Wanted::of(&r.service_environments, |x| self.arns.environment_of(x))?;
        let all: Vec<Value> = st
            .environments
            .values()
            .filter(|e| wanted.has(e.name.as_str()))
            .map(|e| self.env_json(&st, e))
            .collect();
        let (items, next) = page(&all, r.max_results, r.next_token.as_deref())?;
        Ok(with_next(json!({ "serviceEnvironments": items }), next))
    }

    pub(super) async fn delete_service_environment(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: DeleteEnv = parse(body)?;
        let name = self
            .arns
            .environment_of(required(&r.service_environment, "serviceEnvironment")?)
            .map_err(AwsError::client)?;
        let state = cx
            .state()
            .await?
            .environments
            .get(&EnvName::from(name.as_str()))
            .map(|e| e.state);
        match state {
            None => return Err(AwsError::client(format!("service environment {name} does not exist"))),
            Some(ObjState::Enabled) => {
                return Err(AwsError::client(format!(
                    "service environment {name} is ENABLED; update its state to DISABLED before deleting it"
                )))
            }
            Some(ObjState::Disabled) => {}
        }
        cx.write(ClientCommand::DeleteEnvironment(name.as_str().into()))
            .await?;
        Ok(json!({}))
    }
}

// ---- scheduling policies -------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QsPolicy {
    idle_resource_assignment_strategy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreatePolicy {
    name: Option<String>,
    quota_share_policy: Option<QsPolicy>,
    fairshare_policy: Option<Value>,
    tags: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdatePolicy {
    arn: Option<String>,
    quota_share_policy: Option<QsPolicy>,
    fairshare_policy: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribePolicies {
    arns: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListPolicies {
    max_results: Option<i64>,
    next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeletePolicy {
    arn: Option<String>,
}

fn check_policy(qs: &Option<QsPolicy>, fair: &Option<Value>, creating: bool) -> AwsResult<()> {
    if fair.is_some() {
        return Err(AwsError::invalid(
            "fairsharePolicy",
            "fair-share policies are not supported by this cluster; use quotaSharePolicy",
        ));
    }
    match qs {
        Some(p) => {
            let s = required(
                &p.idle_resource_assignment_strategy,
                "quotaSharePolicy.idleResourceAssignmentStrategy",
            )?;
            one_of(
                "quotaSharePolicy.idleResourceAssignmentStrategy",
                s,
                &["FIFO"],
            )
        }
        None if creating => Err(AwsError::invalid(
            "quotaSharePolicy",
            "is required: every scheduling policy on this cluster is a quota-share policy",
        )),
        None => Ok(()),
    }
}

impl Endpoint {
    fn policy_json(&self, st: &State, p: &SchedulingPolicy) -> Value {
        json!({
            "name": p.name.as_str(),
            "arn": self.arns.policy(p.name.as_str()),
            "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"},
            "tags": tags_json(st, Some(format!("scheduling-policy/{}", p.name))),
        })
    }

    pub(super) async fn create_scheduling_policy(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: CreatePolicy = parse(body)?;
        let name = required(&r.name, "name")?.clone();
        check_policy(&r.quota_share_policy, &r.fairshare_policy, true)?;
        check_tags(&r.tags)?;
        if cx
            .state()
            .await?
            .policies
            .contains_key(&PolicyName::from(name.as_str()))
        {
            return Err(AwsError::client(EXISTS));
        }
        cx.write(ClientCommand::PutPolicy(SchedulingPolicy {
            name: name.as_str().into(),
            idle_resource_assignment: IdleAssignment::Fifo,
        }))
        .await?;
        self.tag_new(cx, format!("scheduling-policy/{name}"), r.tags)
            .await?;
        Ok(json!({"name": name, "arn": self.arns.policy(&name)}))
    }

    pub(super) async fn update_scheduling_policy(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: UpdatePolicy = parse(body)?;
        let name = self
            .arns
            .policy_of(required(&r.arn, "arn")?)
            .map_err(AwsError::client)?;
        check_policy(&r.quota_share_policy, &r.fairshare_policy, false)?;
        if !cx
            .state()
            .await?
            .policies
            .contains_key(&PolicyName::from(name.as_str()))
        {
            return Err(AwsError::client(format!(
                "scheduling policy {name} does not exist"
            )));
        }
        // FIFO is the only strategy: nothing to change.
        Ok(json!({}))
    }

    pub(super) async fn describe_scheduling_policies(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: DescribePolicies = parse(body)?;
        let arns = required(&r.arns, "arns")?;
        if arns.len() > 100 {
            return Err(AwsError::invalid("arns", "at most 100 ARNs"));
        }
        let st = cx.state().await?;
        let mut out = vec![];
        for a in arns {
            let name = self.arns.policy_of(a).map_err(AwsError::client)?;
            if let Some(p) = st.policies.get(&PolicyName::from(name.as_str())) {
                out.push(self.policy_json(&st, p));
            }
        }
        Ok(json!({ "schedulingPolicies": out }))
    }

    pub(super) async fn list_scheduling_policies(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: ListPolicies = parse(body)?;
        let st = cx.state().await?;
        let all: Vec<Value> = st
            .policies
            .keys()
            .map(|n| json!({"arn": self.arns.policy(n.as_str())}))
            .collect();
        let (items, next) = page(&all, r.max_results, r.next_token.as_deref())?;
        Ok(with_next(json!({ "schedulingPolicies": items }), next))
    }

    pub(super) async fn delete_scheduling_policy(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: DeletePolicy = parse(body)?;
        let name = self
            .arns
            .policy_of(required(&r.arn, "arn")?)
            .map_err(AwsError::client)?;
        cx.write(ClientCommand::DeletePolicy(name.as_str().into()))
            .await?;
        Ok(json!({}))
    }
}

// ---- job queues ----------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvOrder {
    order: Option<i64>,
    service_environment: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateQueue {
    job_queue_name: Option<String>,
    state: Option<String>,
    scheduling_policy_arn: Option<String>,
    priority: Option<i64>,
    compute_environment_order: Option<Vec<Value>>,
    service_environment_order: Option<Vec<EnvOrder>>,
    job_queue_type: Option<String>,
    tags: Option<BTreeMap<String, String>>,
    job_state_time_limit_actions: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateQueue {
    job_queue: Option<String>,
    state: Option<String>,
    scheduling_policy_arn: Option<String>,
    priority: Option<i64>,
    compute_environment_order: Option<Vec<Value>>,
    service_environment_order: Option<Vec<EnvOrder>>,
    job_state_time_limit_actions: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeQueues {
    job_queues: Option<Vec<String>>,
    max_results: Option<i64>,
    next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OneQueue {
    job_queue: Option<String>,
}

impl Endpoint {
    fn queue_json(&self, st: &State, q: &JobQueue) -> Value {
        json!({
            "jobQueueName": q.name.as_str(),
            "jobQueueArn": self.arns.queue(q.name.as_str()),
            "state": q.state.to_string(),
            "status": "VALID",
            "schedulingPolicyArn": self.arns.policy(q.policy.as_str()),
            "priority": q.priority,
            "computeEnvironmentOrder": [],
            "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": self.arns.environment(q.environment.as_str())}],
            "jobQueueType": "SAGEMAKER_TRAINING",
            "tags": tags_json(st, Some(format!("job-queue/{}", q.name))),
        })
    }

    fn queue_env(&self, order: &[EnvOrder]) -> AwsResult<String> {
        if order.len() != 1 {
            return Err(AwsError::invalid(
                "serviceEnvironmentOrder",
                format!(
                    "a job queue on this cluster has exactly one service environment, got {}",
                    order.len()
                ),
            ));
        }
        let e = &order[0];
        required(&e.order, "serviceEnvironmentOrder.1.order")?;
        self.arns
            .environment_of(required(
                &e.service_environment,
                "serviceEnvironmentOrder.1.serviceEnvironment",
            )?)
            .map_err(AwsError::client)
    }

    fn queue_priority(p: i64) -> AwsResult<u32> {
        if !(0..=MAX_QUEUE_PRIORITY as i64).contains(&p) {
            return Err(AwsError::invalid(
                "priority",
                format!("must be 0 to {MAX_QUEUE_PRIORITY}, got {p}"),
            ));
        }
        Ok(p as u32)
    }

    pub(super) async fn create_job_queue(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: CreateQueue = parse(body)?;
        let name = required(&r.job_queue_name, "jobQueueName")?.clone();
        if let Some(t) = &r.job_queue_type {
            one_of(
                "jobQueueType",
                t,
                &[
                    "EKS",
                    "ECS",
                    "ECS_FARGATE",
                    "SAGEMAKER_TRAINING",
                    "ECS_MANAGED_INSTANCES",
                ],
            )?;
            if t != "SAGEMAKER_TRAINING" {
                return Err(AwsError::invalid(
                    "jobQueueType",
                    format!("{t} queues are not supported by this cluster; use SAGEMAKER_TRAINING"),
                ));
            }
        }
        if r.compute_environment_order
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        {
            return Err(AwsError::invalid("computeEnvironmentOrder", "compute environments are not supported by this cluster; use serviceEnvironmentOrder"));
        }
        if r.job_state_time_limit_actions
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        {
            return Err(AwsError::invalid(
                "jobStateTimeLimitActions",
                "is not supported by this cluster",
            ));
        }
        let env = self.queue_env(required(
            &r.service_environment_order,
            "serviceEnvironmentOrder",
        )?)?;
        let policy = self
            .arns
            .policy_of(r.scheduling_policy_arn.as_deref().ok_or_else(|| {
                AwsError::invalid("schedulingPolicyArn", "is required: every job queue on this cluster has a quota-share scheduling policy")
            })?)
            .map_err(AwsError::client)?;
        let priority = Self::queue_priority(*required(&r.priority, "priority")?)?;
        let state = state_of("state", r.state.as_deref())?.unwrap_or_default();
        check_tags(&r.tags)?;
        if cx
            .state()
            .await?
            .queues
            .contains_key(&QueueName::from(name.as_str()))
        {
            return Err(AwsError::client(EXISTS));
        }
        cx.write(ClientCommand::PutQueue(JobQueue {
            name: name.as_str().into(),
            priority,
            state,
            environment: env.as_str().into(),
            policy: policy.as_str().into(),
        }))
        .await?;
        self.tag_new(cx, format!("job-queue/{name}"), r.tags)
            .await?;
        Ok(json!({"jobQueueName": name, "jobQueueArn": self.arns.queue(&name)}))
    }

    pub(super) async fn update_job_queue(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: UpdateQueue = parse(body)?;
        let name = self
            .arns
            .queue_of(required(&r.job_queue, "jobQueue")?)
            .map_err(AwsError::client)?;
        let mut q = cx
            .state()
            .await?
            .queues
            .get(&QueueName::from(name.as_str()))
            .cloned()
            .ok_or_else(|| AwsError::client(format!("job queue {name} does not exist")))?;
        if r.compute_environment_order
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        {
            return Err(AwsError::invalid(
                "computeEnvironmentOrder",
                "compute environments are not supported by this cluster",
            ));
        }
        if r.job_state_time_limit_actions
            .as_ref()
            .is_some_and(|c| !c.is_empty())
        {
            return Err(AwsError::invalid(
                "jobStateTimeLimitActions",
                "is not supported by this cluster",
            ));
        }
        if let Some(s) = state_of("state", r.state.as_deref())? {
            q.state = s;
        }
        if let Some(p) = r.priority {
            q.priority = Self::queue_priority(p)?;
        }
        if let Some(o) = &r.service_environment_order {
            q.environment = self.queue_env(o)?.as_str().into();
        }
        if let Some(p) = &r.scheduling_policy_arn {
            q.policy = self
                .arns
                .policy_of(p)
                .map_err(AwsError::client)?
                .as_str()
                .into();
        }
        cx.write(ClientCommand::PutQueue(q)).await?;
        Ok(json!({"jobQueueName": name, "jobQueueArn": self.arns.queue(&name)}))
    }

    pub(super) async fn describe_job_queues(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: DescribeQueues = parse(body)?;
        let st = cx.state().await?;
        let wanted = Wanted::of(&r.job_queues, |x| self.arns.queue_of(x))?;
        let all: Vec<Value> = st
            .queues
            .values()
            .filter(|q| wanted.has(q.name.as_str()))
            .map(|q| self.queue_json(&st, q))
            .collect();
        let (items, next) = page(&all, r.max_results, r.next_token.as_deref())?;
        Ok(with_next(json!({ "jobQueues": items }), next))
    }

    pub(super) async fn delete_job_queue(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: OneQueue = parse(body)?;
        let name = self
            .arns
            .queue_of(required(&r.job_queue, "jobQueue")?)
            .map_err(AwsError::client)?;
        match cx
            .state()
            .await?
            .queues
            .get(&QueueName::from(name.as_str()))
        {
            None => return Err(AwsError::client(format!("job queue {name} does not exist"))),
            Some(q) if q.state == ObjState::Enabled => {
                return Err(AwsError::client(format!(
                    "job queue {name} is ENABLED; update its state to DISABLED before deleting it"
                )))
            }
            _ => {}
        }
        cx.write(ClientCommand::DeleteQueue(name.as_str().into()))
            .await?;
        Ok(json!({}))
    }
}

// ---- quota shares --------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sharing {
    strategy: Option<String>,
    borrow_limit: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Preemption {
    in_share_preemption: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateShare {
    quota_share_name: Option<String>,
    job_queue: Option<String>,
    capacity_limits: Option<Vec<AwsLimit>>,
    resource_sharing_configuration: Option<Sharing>,
    preemption_configuration: Option<Preemption>,
    state: Option<String>,
    tags: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateShare {
    quota_share_arn: Option<String>,
    capacity_limits: Option<Vec<AwsLimit>>,
    resource_sharing_configuration: Option<Sharing>,
    preemption_configuration: Option<Preemption>,
    state: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OneShare {
    quota_share_arn: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListShares {
    job_queue: Option<String>,
    max_results: Option<i64>,
    next_token: Option<String>,
}

fn sharing(s: &Sharing) -> AwsResult<ResourceSharing> {
    let name = required(&s.strategy, "resourceSharingConfiguration.strategy")?;
    let strategy = match name.as_str() {
        "RESERVE" => Strategy::Reserve,
        "LEND" => Strategy::Lend,
        "LEND_AND_BORROW" => Strategy::LendAndBorrow,
        o => {
            return Err(AwsError::bad_enum(
                "resourceSharingConfiguration.strategy",
                o,
                &["RESERVE", "LEND", "LEND_AND_BORROW"],
            ))
        }
    };
    if s.borrow_limit.is_some() && strategy != Strategy::LendAndBorrow {
        return Err(AwsError::invalid(
            "resourceSharingConfiguration.borrowLimit",
            format!("borrowLimit can only be applied to quota shares with a strategy of LEND_AND_BORROW, not {strategy}"),
        ));
    }
    Ok(ResourceSharing {
        strategy,
        borrow_limit: s.borrow_limit,
    })
}

fn in_share(p: &Preemption) -> AwsResult<bool> {
    match required(
        &p.in_share_preemption,
        "preemptionConfiguration.inSharePreemption",
    )?
    .as_str()
    {
        "ENABLED" => Ok(true),
        "DISABLED" => Ok(false),
        o => Err(AwsError::bad_enum(
            "preemptionConfiguration.inSharePreemption",
            o,
            &["ENABLED", "DISABLED"],
        )),
    }
}

impl Endpoint {
    fn share_json(&self, st: &State, s: &QuotaShare, tags: bool) -> Value {
        let mut rs = json!({"strategy": s.resource_sharing.strategy.to_string()});
        if let Some(b) = s.resource_sharing.borrow_limit {
            rs["borrowLimit"] = json!(b);
        }
        let mut v = json!({
            "quotaShareName": s.name.as_str(),
            "quotaShareArn": self.arns.share(s.queue.as_str(), s.name.as_str()),
            "jobQueueArn": self.arns.queue(s.queue.as_str()),
            "capacityLimits": self.cap.limits_json(&s.capacity_limits),
            "resourceSharingConfiguration": rs,
            "preemptionConfiguration": {"inSharePreemption": if s.in_share_preemption {"ENABLED"} else {"DISABLED"}},
            "state": s.state.to_string(),
            "status": "VALID",
        });
        if tags {
            v["tags"] = tags_json(st, Some(format!("quota-share/{}", s.name)));
        }
        v
    }

    /// The share an ARN names (its queue checked when the ARN gives one).
    fn share_named(&self, st: &State, text: &str) -> AwsResult<QuotaShare> {
        let (queue, name) = self.arns.share_of(text).map_err(AwsError::client)?;
        match st.shares.get(&ShareName::from(name.as_str())) {
            Some(s) if queue.as_ref().is_none_or(|q| q == s.queue.as_str()) => Ok(s.clone()),
            _ => Err(AwsError::client(format!(
                "quota share {text} does not exist"
            ))),
        }
    }

    pub(super) async fn create_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: CreateShare = parse(body)?;
        let name = required(&r.quota_share_name, "quotaShareName")?.clone();
        let queue = self
            .arns
            .queue_of(required(&r.job_queue, "jobQueue")?)
            .map_err(AwsError::client)?;
        let limits = self.cap.to_tranche(
            "capacityLimits",
            required(&r.capacity_limits, "capacityLimits")?,
            true,
        )?;
        let rs = sharing(required(
            &r.resource_sharing_configuration,
            "resourceSharingConfiguration",
        )?)?;
        let pre = in_share(required(
            &r.preemption_configuration,
            "preemptionConfiguration",
        )?)?;
        let state = state_of("state", r.state.as_deref())?.unwrap_or_default();
        check_tags(&r.tags)?;
        {
            let st = cx.state().await?;
            if let Some(s) = st.shares.get(&ShareName::from(name.as_str())) {
                return Err(AwsError::client(if s.queue.as_str() == queue {
                    format!("{EXISTS}: quota share {name} already exists in job queue {queue}")
                } else {
                    format!("{EXISTS}: quota share {name} already exists (in job queue {}); share names are unique on this cluster", s.queue)
                }));
            }
            if !st.queues.contains_key(&QueueName::from(queue.as_str())) {
                return Err(AwsError::client(format!(
                    "job queue {queue} does not exist"
                )));
            }
        }
        cx.write(ClientCommand::PutShare(QuotaShare {
            name: name.as_str().into(),
            queue: queue.as_str().into(),
            capacity_limits: limits,
            resource_sharing: rs,
            in_share_preemption: pre,
            state,
            members: vec![],
            default_grace_s: DEFAULT_GRACE_S,
            max_grace_s: MAX_GRACE_S,
            min_runtime_s: 0,
            max_user_priority: tranche_model::DEFAULT_MAX_USER_PRIORITY,
            limits: Default::default(),
        }))
        .await?;
        self.tag_new(cx, format!("quota-share/{name}"), r.tags)
            .await?;
        Ok(json!({"quotaShareName": name, "quotaShareArn": self.arns.share(&queue, &name)}))
    }

    pub(super) async fn update_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: UpdateShare = parse(body)?;
        let arn = required(&r.quota_share_arn, "quotaShareArn")?;
        let mut s = self.share_named(&*cx.state().await?, arn)?;
        if let Some(l) = &r.capacity_limits {
            s.capacity_limits = self.cap.to_tranche("capacityLimits", l, true)?;
        }
        if let Some(rs) = &r.resource_sharing_configuration {
            s.resource_sharing = sharing(rs)?;
        }
        if let Some(p) = &r.preemption_configuration {
            s.in_share_preemption = in_share(p)?;
        }
        if let Some(st) = state_of("state", r.state.as_deref())? {
            s.state = st;
        }
        let out = json!({"quotaShareName": s.name.as_str(), "quotaShareArn": self.arns.share(s.queue.as_str(), s.name.as_str())});
        cx.write(ClientCommand::PutShare(s)).await?;
        Ok(out)
    }

    pub(super) async fn describe_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: OneShare = parse(body)?;
        let st = cx.state().await?;
        let s = self.share_named(&st, required(&r.quota_share_arn, "quotaShareArn")?)?;
        Ok(self.share_json(&st, &s, true))
    }

    pub(super) async fn list_quota_shares(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: ListShares = parse(body)?;
        let queue = self
            .arns
            .queue_of(required(&r.job_queue, "jobQueue")?)
            .map_err(AwsError::client)?;
        let st = cx.state().await?;
        if !st.queues.contains_key(&QueueName::from(queue.as_str())) {
            return Err(AwsError::client(format!(
                "job queue {queue} does not exist"
            )));
        }
        let all: Vec<Value> = st
            .shares
            .values()
            .filter(|s| s.queue.as_str() == queue)
            .map(|s| self.share_json(&st, s, false))
            .collect();
        let (items, next) = page(&all, r.max_results, r.next_token.as_deref())?;
        Ok(with_next(json!({ "quotaShares": items }), next))
    }

    pub(super) async fn delete_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: OneShare = parse(body)?;
        let s = self.share_named(
            &*cx.state().await?,
            required(&r.quota_share_arn, "quotaShareArn")?,
        )?;
        if s.state == ObjState::Enabled {
            return Err(AwsError::client(format!(
                "quota share {} is ENABLED; update its state to DISABLED before deleting it",
                s.name
            )));
        }
        cx.write(ClientCommand::DeleteShare(s.name)).await?;
        Ok(json!({}))
    }
}

// ---- service jobs --------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RetryStrategy {
    attempts: Option<i64>,
    evaluate_on_exit: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobPreemption {
    preemption_retries_before_termination: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Timeout {
    attempt_duration_seconds: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Submit {
    job_name: Option<String>,
    job_queue: Option<String>,
    retry_strategy: Option<RetryStrategy>,
    scheduling_priority: Option<i64>,
    service_request_payload: Option<String>,
    service_job_type: Option<String>,
    share_identifier: Option<String>,
    quota_share_name: Option<String>,
    preemption_configuration: Option<JobPreemption>,
    timeout_config: Option<Timeout>,
    tags: Option<BTreeMap<String, String>>,
    client_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OneJob {
    job_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    name: Option<String>,
    values: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListJobs {
    job_queue: Option<String>,
    job_status: Option<String>,
    max_results: Option<i64>,
    next_token: Option<String>,
    filters: Option<Vec<Filter>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Terminate {
    job_id: Option<String>,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminateMany {
    jobs: Option<Vec<String>>,
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateJob {
    job_id: Option<String>,
    scheduling_priority: Option<i64>,
}

fn job_priority(p: i64) -> AwsResult<u32> {
    if !(0..=MAX_JOB_PRIORITY as i64).contains(&p) {
        return Err(AwsError::invalid(
            "schedulingPriority",
            format!("must be 0 to {MAX_JOB_PRIORITY}, got {p}"),
        ));
    }
    Ok(p as u32)
}

/// A job's status as AWS spells it.
pub fn aws_status(s: JobStatus) -> &'static str {
    match s {
        JobStatus::Cancelled => "FAILED",
        s => s.as_str(),
    }
}

impl Endpoint {
    fn training_arn(&self, j: &Job, attempt: u32) -> String {
        let base = j
            .spec
            .sagemaker
            .as_ref()
            .map(|s| s.training_job_name.clone())
            .unwrap_or_else(|| j.spec.name.to_string());
        self.arns
            .training_job(&format!("{base}-{}-{attempt}", j.id.0))
    }

    fn capacity_usage(&self, j: &Job) -> Value {
        match j.spec.sagemaker.as_ref() {
            Some(s) => {
                json!([{"capacityUnit": s.instance_type, "quantity": j.spec.request.nodes as f64}])
            }
            None => {
                let (unit, n) = self
                    .cap
                    .to_aws(&j.spec.request.unit, j.spec.request.total_gpus());
                json!([{"capacityUnit": unit, "quantity": n as f64}])
            }
        }
    }

    fn status_reason(j: &Job) -> Option<String> {
        j.transitions
            .last()
            .map(|t| t.reason.clone())
            .filter(|r| !r.is_empty())
    }

    fn stopped_at(j: &Job) -> Option<Millis> {
        j.status
            .is_terminal()
            .then(|| j.transitions.last().map(|t| t.at))
            .flatten()
    }

    fn started_at(j: &Job) -> Option<Millis> {
        j.attempts.iter().rev().find_map(|a| a.ran_from())
    }

    fn summary_json(&self, j: &Job) -> Value {
        let mut v = json!({
            "jobArn": self.arns.job(j.id),
            "jobId": j.id.0.to_string(),
            "jobName": j.spec.name.as_str(),
            "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": j.spec.share.as_str(),
            "status": aws_status(j.status),
            "createdAt": j.submitted_at,
            "capacityUsage": self.capacity_usage(j),
        });
        let m = v.as_object_mut().expect("an object");
        if let Some(r) = Self::status_reason(j) {
            m.insert("statusReason".into(), json!(r));
        }
        if let Some(a) = j.attempts.last() {
            m.insert("scheduledAt".into(), json!(a.scheduled_at));
            m.insert(
                "latestAttempt".into(),
                json!({"serviceResourceId": {"name": "TrainingJobArn", "value": self.training_arn(j, a.number)}}),
            );
        }
        if let Some(t) = Self::started_at(j) {
            m.insert("startedAt".into(), json!(t));
        }
        if let Some(t) = Self::stopped_at(j) {
            m.insert("stoppedAt".into(), json!(t));
        }
        if j.status == JobStatus::Cancelled {
            m.insert("isTerminated".into(), json!(true));
        }
        v
    }

    fn attempt_json(&self, j: &Job, a: &Attempt) -> Value {
        let mut v = json!({
            "serviceResourceId": {"name": "TrainingJobArn", "value": self.training_arn(j, a.number)},
        });
        let m = v.as_object_mut().expect("an object");
        if let Some(t) = a.ran_from() {
            m.insert("startedAt".into(), json!(t));
        }
        if let Some(t) = a.ended_at {
            m.insert("stoppedAt".into(), json!(t));
        }
        if let Some(end) = &a.end {
            let reason = match end {
                AttemptEnd::Exited { code: 0 } => {
                    "Received status from SageMaker: Training job completed".to_string()
                }
                AttemptEnd::Exited { code } => {
                    format!("the training container exited with code {code}")
                }
                AttemptEnd::Stopped { kind, code } => {
                    let how = match code {
                        Some(c) => format!("exited with code {c} within its grace period"),
                        None => "was killed at the end of its grace period".to_string(),
                    };
                    match kind {
                        StopKind::Reclaim { for_job } => format!("preempted: its quota share's lent capacity was reclaimed for job {}; it {how}", for_job.0),
                        StopKind::InShare { for_job } => format!("preempted by the higher-priority job {} of its quota share; it {how}", for_job.0),
                        StopKind::Cancel => format!("terminated; it {how}"),
                        StopKind::Drain => format!("its node was drained; it {how}"),
                    }
                }
                AttemptEnd::Lost => "its node went down; the attempt was lost".to_string(),
            };
            m.insert("statusReason".into(), json!(reason));
        }
        v
    }

    fn describe_json(&self, j: &Job) -> Value {
        let mut v = self.summary_json(j);
        let m = v.as_object_mut().expect("an object");
        m.insert(
            "jobQueue".into(),
            json!(self.arns.queue(j.spec.queue.as_str())),
        );
        m.insert("schedulingPriority".into(), json!(j.spec.priority));
        m.insert(
            "retryStrategy".into(),
            json!({"attempts": j.spec.retry_attempts}),
        );
        // Required in the model: 0 until the job has started.
        m.entry("startedAt").or_insert(json!(0));
        m.insert(
            "isTerminated".into(),
            json!(j.status == JobStatus::Cancelled),
        );
        m.insert(
            "attempts".into(),
            Value::Array(j.attempts.iter().map(|a| self.attempt_json(j, a)).collect()),
        );
        if let Some(s) = j.spec.sagemaker.as_ref().filter(|_| !j.spec.is_redacted()) {
            m.insert("serviceRequestPayload".into(), json!(s.payload));
        }
        if let Some(t) = j.spec.time_limit_s {
            m.insert("timeoutConfig".into(), json!({"attemptDurationSeconds": t}));
        }
        if let Some(p) = j.spec.preemption_retries {
            m.insert(
                "preemptionConfiguration".into(),
                json!({"preemptionRetriesBeforeTermination": p}),
            );
        }
        let preempted: Vec<&Attempt> = j.attempts.iter().filter(|a| a.was_preempted()).collect();
        if !preempted.is_empty() {
            let recent: Vec<Value> = preempted
                .iter()
                .rev()
                .take(5)
                .map(|a| self.attempt_json(j, a))
                .collect();
            m.insert(
                "preemptionSummary".into(),
                json!({"preemptedAttemptCount": preempted.len(), "recentPreemptedAttempts": recent}),
            );
        }
        m.insert("tags".into(), json!(j.spec.tags));
        v
    }

    fn job_in<'a>(&self, st: &'a State, text: &str) -> AwsResult<&'a Job> {
        let id = self.arns.job_of(text).map_err(AwsError::client)?;
        st.job(id)
            .ok_or_else(|| AwsError::client(format!("service job {text} does not exist")))
    }

    /// A service job as the caller may see it: read through the service layer, which
    /// leaves out of another user's job what only its owner sees (the request payload,
    /// the environment, the tags).
    async fn job_seen(&self, cx: &Ctx<'_>, text: &str) -> AwsResult<Job> {
        let id = self.arns.job_of(text).map_err(AwsError::client)?;
        let req = ClientRequest::Read {
            query: Query::Job(JobRef::job(id)),
            stale: false,
        };
        match cx.api.service.handle(&cx.who, req).await {
            Answer::Job(j) => Ok(*j),
            Answer::Error(ApiError::NotFound(_)) => Err(AwsError::client(format!(
                "service job {text} does not exist"
            ))),
            Answer::Error(e) => Err(e.into()),
            other => Err(AwsError::server(format!(
                "the controller answered with {} where a job was expected; retry",
                other.kind()
            ))),
        }
    }

    pub(super) async fn submit_service_job(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: Submit = parse(body)?;
        let name = required(&r.job_name, "jobName")?.clone();
        let queue = self
            .arns
            .queue_of(required(&r.job_queue, "jobQueue")?)
            .map_err(AwsError::client)?;
        one_of(
            "serviceJobType",
            required(&r.service_job_type, "serviceJobType")?,
            &["SAGEMAKER_TRAINING"],
        )?;
        if r.share_identifier.is_some() {
            return Err(AwsError::invalid(
                "shareIdentifier",
                "fair-share identifiers are not supported: this cluster's queues have quota-share policies; give quotaShareName",
            ));
        }
        let share = r.quota_share_name.clone().ok_or_else(|| {
            AwsError::invalid(
                "quotaShareName",
                "is required: the job queue has a quota-share scheduling policy",
            )
        })?;
        let payload = required(&r.service_request_payload, "serviceRequestPayload")?;
        let t = super::training::read(payload, &name, &self.cfg, &self.cap)?;
        let priority = job_priority(r.scheduling_priority.unwrap_or(0))?;
        let retry_attempts = match &r.retry_strategy {
            Some(rs) => {
                let a = *required(&rs.attempts, "retryStrategy.attempts")?;
                if !(1..=MAX_RETRY_ATTEMPTS as i64).contains(&a) {
                    return Err(AwsError::invalid(
                        "retryStrategy.attempts",
                        format!("must be 1 to {MAX_RETRY_ATTEMPTS}, got {a}"),
                    ));
                }
                let _ = &rs.evaluate_on_exit;
                a as u32
            }
            None => 1,
        };
        let preemption_retries = match r
            .preemption_configuration
            .as_ref()
            .and_then(|p| p.preemption_retries_before_termination)
        {
            None => None,
            Some(n) if (0..=10_000).contains(&n) => Some(n as u32),
            Some(n) => {
                return Err(AwsError::invalid(
                    "preemptionConfiguration.preemptionRetriesBeforeTermination",
                    format!("must be 0 to 10000, got {n}"),
                ))
            }
        };
        let timeout = match r
            .timeout_config
            .as_ref()
            .and_then(|t| t.attempt_duration_seconds)
        {
            None => None,
            Some(s) if s >= 1 => Some(s as u64),
            Some(s) => {
                return Err(AwsError::invalid(
                    "timeoutConfig.attemptDurationSeconds",
                    format!("must be at least 1, got {s}"),
                ))
            }
        };
        let time_limit_s = match (timeout, t.max_runtime_s) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(tok) = &r.client_token {
            if tok.is_empty() || tok.len() > 64 {
                return Err(AwsError::invalid(
                    "clientToken",
                    "must be 1 to 64 characters",
                ));
            }
        }
        let mut spec = JobSpec::new(
            &name,
            &queue,
            &share,
            &cx.who.name,
            t.unit.as_str(),
            t.gpus_per_node,
            t.nodes,
        );
        spec.priority = priority;
        spec.image = t.image;
        spec.command = t.command;
        spec.env = t.env;
        spec.time_limit_s = time_limit_s;
        spec.retry_attempts = retry_attempts;
        spec.preemption_retries = preemption_retries;
        spec.client_token = r.client_token.clone();
        spec.tags = r.tags.clone().unwrap_or_default();
        spec.sagemaker = Some(Box::new(t.sagemaker));
        {
            let st = cx.state().await?;
            match st.queues.get(&QueueName::from(queue.as_str())) {
                None => {
                    return Err(AwsError::client(format!(
                        "job queue {queue} does not exist"
                    )))
                }
                Some(q) if q.state == ObjState::Disabled => {
                    return Err(AwsError::client(format!(
                        "job queue {queue} is DISABLED and accepts no jobs"
                    )))
                }
                _ => {}
            }
            match st.shares.get(&ShareName::from(share.as_str())) {
                Some(s) if s.queue.as_str() == queue => {}
                _ => {
                    return Err(AwsError::client(format!(
                        "quota share {share} does not exist in job queue {queue}"
                    )))
                }
            }
        }
        let id = match cx.write(ClientCommand::Submit(spec)).await? {
            tranche_state::Outcome::Submitted { job, .. } => job,
            _ => {
                return Err(AwsError::server(
                    "the submit was answered with something other than a job id; retry",
                ))
            }
        };
        Ok(json!({"jobArn": self.arns.job(id), "jobName": name, "jobId": id.0.to_string()}))
    }

    pub(super) async fn describe_service_job(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: OneJob = parse(body)?;
        let j = self.job_seen(cx, required(&r.job_id, "jobId")?).await?;
        Ok(self.describe_json(&j))
    }

    pub(super) async fn list_service_jobs(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: ListJobs = parse(body)?;
        let queue = match &r.job_queue {
            Some(q) => Some(self.arns.queue_of(q).map_err(AwsError::client)?),
            None => None,
        };
        let status = r.job_status.as_deref().unwrap_or("RUNNING");
        one_of("jobStatus", status, &STATUSES)?;
        let filters = r.filters.as_deref().unwrap_or(&[]);
        if filters.len() > 1 {
            return Err(AwsError::invalid(
                "filters",
                "only one filter can be used at a time",
            ));
        }
        let mut by_name: Option<(String, bool)> = None;
        let mut by_share: Option<String> = None;
        let (mut before, mut after): (Option<u64>, Option<u64>) = (None, None);
        let mut use_status = true;
        if let Some(f) = filters.first() {
            let name = required(&f.name, "filters.1.name")?;
            let values = required(&f.values, "filters.1.values")?;
            let v = values
                .first()
                .ok_or_else(|| AwsError::invalid("filters.1.values", "needs a value"))?;
            let time = || {
                v.parse::<u64>().map_err(|_| {
                    AwsError::invalid(
                        "filters.1.values",
                        "must be a time in milliseconds since the epoch",
                    )
                })
            };
            match name.as_str() {
                "JOB_NAME" => {
                    use_status = false;
                    by_name = Some(match v.strip_suffix('*') {
                        Some(p) => (p.to_lowercase(), true),
                        None => (v.to_lowercase(), false),
                    });
                }
                "QUOTA_SHARE_NAME" => by_share = Some(v.clone()),
                "BEFORE_CREATED_AT" => {
                    use_status = false;
                    before = Some(time()?);
                }
                "AFTER_CREATED_AT" => {
                    use_status = false;
                    after = Some(time()?);
                }
                "SHARE_IDENTIFIER" => {
                    return Err(AwsError::invalid("filters.1.name", "SHARE_IDENTIFIER: fair-share identifiers are not supported by this cluster; use QUOTA_SHARE_NAME"))
                }
                o => return Err(AwsError::bad_enum("filters.1.name", o, &["JOB_NAME", "BEFORE_CREATED_AT", "AFTER_CREATED_AT", "SHARE_IDENTIFIER", "QUOTA_SHARE_NAME"])),
            }
        }
        let max = r.max_results.unwrap_or(100);
        if !(1..=1000).contains(&max) {
            return Err(AwsError::invalid("maxResults", "must be 1 to 1000"));
        }
        // Ended jobs are listed from the history, which holds those that have left the
        // state too: newest end first, a token is a history cursor.
        if use_status && matches!(status, "SUCCEEDED" | "FAILED") {
            let f = tranche_proto::HistoryFilter {
                share: by_share.as_deref().map(Into::into),
                status: match status {
                    "SUCCEEDED" => vec![JobStatus::Succeeded],
                    _ => vec![JobStatus::Failed, JobStatus::Cancelled],
                },
                limit: max as u32,
                before: match r.next_token.as_deref() {
                    None => None,
                    Some(t) => Some(tranche_proto::HistoryCursor::parse(t).map_err(|_| {
                        AwsError::invalid("nextToken", "is not a token this endpoint gave")
                    })?),
                },
                ..Default::default()
            };
            return self.list_ended(cx, queue.as_deref(), f).await;
        }
        // Newest first: a token is the id the next page starts below.
        let below = match r.next_token.as_deref() {
            None => u64::MAX,
            Some(t) => t
                .parse::<u64>()
                .map_err(|_| AwsError::invalid("nextToken", "is not a token this endpoint gave"))?,
        };
        let st = cx.state().await?;
        if let Some(q) = &queue {
            if !st.queues.contains_key(&QueueName::from(q.as_str())) {
                return Err(AwsError::client(format!("job queue {q} does not exist")));
            }
        }
        let keeps = |j: &Job| {
            queue.as_ref().is_none_or(|q| j.spec.queue.as_str() == q)
                && (!use_status || aws_status(j.status) == status)
                && by_share.as_ref().is_none_or(|s| j.spec.share.as_str() == s)
                && match &by_name {
                    None => true,
                    Some((n, true)) => j.spec.name.as_str().to_lowercase().starts_with(n.as_str()),
                    Some((n, false)) => j.spec.name.as_str().to_lowercase() == *n,
                }
                && before.is_none_or(|t| j.submitted_at < t)
                && after.is_none_or(|t| j.submitted_at > t)
        };
        // At most `max` jobs listed and `MAX_JOBS_SCANNED` looked at; a token only where
        // another job is listed after these, or the scan stopped before the end.
        let mut list = Vec::new();
        let mut next = None;
        for (n, (id, j)) in st.jobs.range(..JobId(below)).rev().enumerate() {
            if n == MAX_JOBS_SCANNED {
                next = Some(id.0 + 1);
                break;
            }
            if keeps(j) {
                if list.len() == max as usize {
                    next = Some(id.0 + 1);
                    break;
                }
                list.push(self.summary_json(&job_as_seen_by(&cx.who, j)?));
            }
        }
        Ok(with_next(
            json!({ "jobSummaryList": list }),
            next.map(|n: u64| n.to_string()),
        ))
    }

    /// A page of ended jobs (`f`) in `queue`, from the state and the history store,
    /// each as the caller may see it.
    async fn list_ended(
        &self,
        cx: &Ctx<'_>,
        queue: Option<&str>,
        f: tranche_proto::HistoryFilter,
    ) -> AwsResult<Value> {
        if let Some(q) = queue {
            if !cx.state().await?.queues.contains_key(&QueueName::from(q)) {
                return Err(AwsError::client(format!("job queue {q} does not exist")));
            }
        }
        let req = ClientRequest::Read {
            query: Query::History(f),
            stale: false,
        };
        let page = match cx.api.service.handle(&cx.who, req).await {
            Answer::History(p) => p,
            Answer::Error(e) => return Err(e.into()),
            other => {
                return Err(AwsError::server(format!(
                    "the controller answered with {} where ended jobs were expected; retry",
                    other.kind()
                )))
            }
        };
        // The whole record of each (the listing shows its attempts and capacity): from
        // the state while it is there, else from the history store.
        let history = cx.api.shared.read().unwrap().history.clone();
        let mut list = Vec::new();
        for e in page
            .jobs
            .iter()
            .filter(|e| queue.is_none_or(|q| e.job.queue.as_str() == q))
        {
            let hot = cx.api.shared.read().unwrap().state.job(e.job.id).cloned();
            let job = match (hot, &history) {
                (Some(j), _) => Some(j),
                (None, Some(h)) => h.get(e.job.id).map_err(AwsError::server)?.map(|(_, j)| j),
                (None, None) => None,
            };
            if let Some(j) = job {
                list.push(self.summary_json(&job_as_seen_by(&cx.who, &j)?));
            }
        }
        Ok(with_next(
            json!({ "jobSummaryList": list }),
            page.next.as_ref().map(tranche_proto::HistoryCursor::text),
        ))
    }

    pub(super) async fn terminate_service_job(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: Terminate = parse(body)?;
        let text = required(&r.job_id, "jobId")?;
        let reason = required(&r.reason, "reason")?.clone();
        let id = self.arns.job_of(text).map_err(AwsError::client)?;
        self.terminate(cx, text, id, &reason).await?;
        Ok(json!({}))
    }

    /// Cancels a job the caller may cancel; one that has already ended is left as it
    /// is. The caller is authorized first, whatever the job's state, and a job that
    /// does not exist is answered as one it may not cancel, so that the answer tells
    /// nothing of other users' jobs.
    async fn terminate(&self, cx: &Ctx<'_>, text: &str, id: JobId, reason: &str) -> AwsResult<()> {
        let cancel = ClientCommand::Cancel {
            job: JobRef::job(id),
            reason: reason.to_string(),
        };
        let ended = {
            let st = cx.state().await?;
            match authorize(&cx.who, Origin::AwsEndpoint, &cancel, &st) {
                Ok(()) => {}
                Err(ApiError::NotFound(_) | ApiError::Unauthorized(_)) => {
                    return Err(AwsError::client(format!(
                        "service job {text} does not exist, or {} may not terminate it",
                        cx.who
                    )))
                }
                Err(e) => return Err(e.into()),
            }
            st.job(id).is_some_and(|j| j.status.is_terminal())
        };
        if !ended {
            cx.write(cancel).await?;
        }
        Ok(())
    }

    pub(super) async fn terminate_service_jobs(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: TerminateMany = parse(body)?;
        let jobs = required(&r.jobs, "jobs")?;
        if jobs.is_empty() || jobs.len() > 50 {
            return Err(AwsError::invalid(
                "jobs",
                format!("must list 1 to 50 jobs, got {}", jobs.len()),
            ));
        }
        let reason = required(&r.reason, "reason")?.clone();
        let (mut ok, mut errors) = (vec![], vec![]);
        for text in jobs {
            let id = match self.arns.job_of(text) {
                Ok(id) => id,
                Err(m) => {
                    errors.push(json!({"job": text, "code": "ClientException", "message": m}));
                    continue;
                }
            };
            match self.terminate(cx, text, id, &reason).await {
                Ok(()) => ok.push(json!(text)),
                Err(e) => errors.push(json!({"job": text, "code": e.code, "message": e.message})),
            }
        }
        Ok(json!({"successful": ok, "errors": errors}))
    }

    pub(super) async fn update_service_job(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: UpdateJob = parse(body)?;
        let text = required(&r.job_id, "jobId")?;
        let priority = job_priority(*required(&r.scheduling_priority, "schedulingPriority")?)?;
        let (id, name) = {
            let st = cx.state().await?;
            let j = self.job_in(&st, text)?;
            (j.id, j.spec.name.to_string())
        };
        cx.write(ClientCommand::UpdatePriority {
            job: JobRef::job(id),
            priority,
        })
        .await?;
        Ok(json!({"jobArn": self.arns.job(id), "jobName": name, "jobId": id.0.to_string()}))
    }

    pub(super) async fn get_job_queue_snapshot(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: OneQueue = parse(body)?;
        let queue = self
            .arns
            .queue_of(required(&r.job_queue, "jobQueue")?)
            .map_err(AwsError::client)?;
        let now = cx.now();
        let st = cx.state().await?;
        if !st.queues.contains_key(&QueueName::from(queue.as_str())) {
            return Err(AwsError::client(format!(
                "job queue {queue} does not exist"
            )));
        }
        let snap = tranche_controller::views::queue(&st, 100, now);
        let in_queue = |s: &ShareName| st.shares.get(s).is_some_and(|s| s.queue.as_str() == queue);
        let entry = |j: &tranche_proto::JobSummary| json!({"jobArn": self.arns.job(j.id), "earliestTimeAtPosition": j.submitted_at});
        let front: Vec<Value> = snap
            .front
            .iter()
            .filter(|j| j.queue.as_str() == queue)
            .map(entry)
            .collect();
        let mut per_share = Map::new();
        for (s, jobs) in &snap.shares {
            if in_queue(s) {
                if let Some(first) = jobs.first() {
                    per_share.insert(s.to_string(), json!([entry(first)]));
                }
            }
        }
        let usage = tranche_controller::views::shares(&st);
        let mut total: BTreeMap<Unit, (u32, u32)> = BTreeMap::new();
        let mut top = vec![];
        for u in usage.iter().filter(|u| in_queue(&u.name)) {
            let used: Vec<(Unit, u32, u32)> = u
                .units
                .iter()
                .map(|x| (x.unit.clone(), x.used, x.max.max(1)))
                .collect();
            for (unit, used, max) in &used {
                let e = total.entry(unit.clone()).or_default();
                e.0 += used;
                e.1 = e.1.max(*max);
            }
            top.push(json!({"quotaShareName": u.name.as_str(), "capacityUsage": self.cap.usage_json(&used)}));
        }
        let total: Vec<(Unit, u32, u32)> = total.into_iter().map(|(u, (a, m))| (u, a, m)).collect();
        Ok(json!({
            "frontOfQueue": {"jobs": front, "lastUpdatedAt": now},
            "frontOfQuotaShares": {"quotaShares": per_share, "lastUpdatedAt": now},
            "queueUtilization": {
                "totalCapacityUsage": self.cap.usage_json(&total),
                "quotaShareUtilization": {"topCapacityUtilization": top},
                "lastUpdatedAt": now,
            },
        }))
    }

    // ---- tags ------------------------------------------------------------------

    fn tag_target(&self, arn: &str) -> AwsResult<super::arn::Target> {
        self.arns
            .parse(arn)
            .map_err(|m| AwsError::invalid("resourceArn", m))
    }

    pub(super) async fn list_tags(&self, cx: &Ctx<'_>, arn: &str) -> AwsResult<Value> {
        let t = self.tag_target(arn)?;
        if let super::arn::Target::Job(_) = &t {
            let j = self.job_seen(cx, arn).await?;
            return Ok(json!({ "tags": j.spec.tags }));
        }
        let st = cx.state().await?;
        let key = t.tag_key().expect("an object's key");
        if !st.tagged_object_exists(&key) {
            return Err(AwsError::client(format!("resource {arn} does not exist")));
        }
        let tags = tags_json(&st, Some(key));
        Ok(json!({ "tags": tags }))
    }

    pub(super) async fn tag(&self, cx: &Ctx<'_>, arn: &str, body: &[u8]) -> AwsResult<Value> {
        #[derive(Deserialize)]
        struct TagBody {
            tags: Option<BTreeMap<String, String>>,
        }
        let r: TagBody = parse(body)?;
        let tags = required(&r.tags, "tags")?.clone();
        validate_tags(&tags, "tags").map_err(|e| AwsError::invalid(&e.field, e.rule))?;
        let resource = self.tag_target(arn)?.tag_key().ok_or_else(|| {
            AwsError::invalid(
                "resourceArn",
                "a service job's tags are set when it is submitted",
            )
        })?;
        cx.write(ClientCommand::TagResource { resource, tags })
            .await?;
        Ok(json!({}))
    }

    pub(super) async fn untag(
        &self,
        cx: &Ctx<'_>,
        arn: &str,
        keys: Vec<String>,
    ) -> AwsResult<Value> {
        if keys.is_empty() {
            return Err(AwsError::invalid("tagKeys", "is required"));
        }
        let resource = self.tag_target(arn)?.tag_key().ok_or_else(|| {
            AwsError::invalid(
                "resourceArn",
                "a service job's tags are set when it is submitted",
            )
        })?;
        cx.write(ClientCommand::UntagResource { resource, keys })
            .await?;
        Ok(json!({}))
    }
}
