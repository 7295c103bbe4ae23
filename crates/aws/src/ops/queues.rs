//! Job queues: a queue with one service environment and one scheduling policy
//! (`Create`/`Update`/`Describe`/`DeleteJobQueue`).

use super::*;

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
pub(super) struct OneQueue {
    pub(super) job_queue: Option<String>,
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

    pub(crate) async fn create_job_queue(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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

    pub(crate) async fn update_job_queue(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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

    pub(crate) async fn describe_job_queues(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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

    pub(crate) async fn delete_job_queue(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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
