//! Job queues: a queue with one service environment and one scheduling policy
//! (`Create`/`Update`/`Describe`/`DeleteJobQueue`); one made without a policy is a
//! FIFO queue with an implicit quota share (see [`super::FIFO_POLICY`]).

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
        let mut v = json!({
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
        });
        if is_fifo(q) {
            v.as_object_mut()
                .expect("an object")
                .remove("schedulingPolicyArn");
        }
        v
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
        let policy = match r.scheduling_policy_arn.as_deref() {
            Some(a) => {
                let p = self.arns.policy_of(a).map_err(AwsError::client)?;
                if p == FIFO_POLICY {
                    return Err(reserved_policy("schedulingPolicyArn"));
                }
                Some(p)
            }
            None => None,
        };
        let priority = Self::queue_priority(*required(&r.priority, "priority")?)?;
        let state = state_of("state", r.state.as_deref())?.unwrap_or_default();
        check_tags(&r.tags)?;
        let mut tags = r.tags.clone().unwrap_or_default();
        if tags.len() >= MAX_OBJECT_TAGS {
            return Err(AwsError::invalid(
                "tags",
                format!(
                    "at most {} tags on a job queue on this cluster (it keeps one of its {MAX_OBJECT_TAGS} for itself), got {}",
                    MAX_OBJECT_TAGS - 1,
                    tags.len()
                ),
            ));
        }
        let queue = QueueName::from(name.as_str());
        // A FIFO queue's implicit share, and whether its policy is to be made.
        let mut fifo = None;
        {
            let st = cx.state().await?;
            if st.queues.contains_key(&queue) {
                return Err(AwsError::client(EXISTS));
            }
            // Every job of a queue of this name before has a smaller id.
            tags.insert(FIRST_JOB_TAG.into(), st.next_job_id.to_string());
            if policy.is_none() {
                if let Some(s) = st.shares.get(&ShareName::from(name.as_str())) {
                    return Err(AwsError::invalid(
                        "jobQueueName",
                        format!(
                            "a job queue without a schedulingPolicyArn has an implicit quota share of its own name, and quota share {name} already exists (in job queue {}); name the queue otherwise",
                            s.queue
                        ),
                    ));
                }
                let e = st
                    .environments
                    .get(&EnvName::from(env.as_str()))
                    .ok_or_else(|| {
                        AwsError::client(format!("service environment {env} does not exist"))
                    })?;
                fifo = Some((
                    implicit_share(&queue, e),
                    !st.policies.contains_key(&PolicyName::from(FIFO_POLICY)),
                ));
            }
        }
        if let Some((_, true)) = fifo {
            cx.write(ClientCommand::PutPolicy(SchedulingPolicy {
                name: FIFO_POLICY.into(),
                idle_resource_assignment: IdleAssignment::Fifo,
            }))
            .await?;
        }
        cx.write(ClientCommand::PutQueue(JobQueue {
            name: queue,
            priority,
            state,
            environment: env.as_str().into(),
            policy: policy.as_deref().unwrap_or(FIFO_POLICY).into(),
        }))
        .await?;
        if let Some((share, _)) = fifo {
            cx.write(ClientCommand::PutShare(share)).await?;
        }
        self.tag_new(cx, format!("job-queue/{name}"), Some(tags))
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
            if is_fifo(&q) {
                return Err(AwsError::invalid(
                    "schedulingPolicyArn",
                    format!("job queue {name} was made without a scheduling policy: it is a FIFO queue and can't have one added"),
                ));
            }
            let p = self.arns.policy_of(p).map_err(AwsError::client)?;
            if p == FIFO_POLICY {
                return Err(reserved_policy("schedulingPolicyArn"));
            }
            q.policy = p.as_str().into();
        }
        // A FIFO queue's implicit share follows its environment's limits.
        let share = match is_fifo(&q) {
            false => None,
            true => {
                let st = cx.state().await?;
                let env = st.environments.get(&q.environment).ok_or_else(|| {
                    AwsError::client(format!(
                        "service environment {} does not exist",
                        q.environment
                    ))
                })?;
                st.shares
                    .get(&ShareName::from(name.as_str()))
                    .filter(|s| s.capacity_limits != env.capacity_limits)
                    .map(|s| QuotaShare {
                        capacity_limits: env.capacity_limits.clone(),
                        ..s.clone()
                    })
            }
        };
        cx.write(ClientCommand::PutQueue(q)).await?;
        if let Some(s) = share {
            cx.write(ClientCommand::PutShare(s)).await?;
        }
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
        let implicit = {
            let st = cx.state().await?;
            let q = match st.queues.get(&QueueName::from(name.as_str())) {
                None => return Err(AwsError::client(format!("job queue {name} does not exist"))),
                Some(q) if q.state == ObjState::Enabled => {
                    return Err(AwsError::client(format!(
                    "job queue {name} is ENABLED; update its state to DISABLED before deleting it"
                )))
                }
                Some(q) => q,
            };
            if is_fifo(q)
                && st
                    .jobs
                    .values()
                    .any(|j| j.spec.queue == q.name && !j.status.is_terminal())
            {
                return Err(AwsError::client(format!(
                    "job queue {name} still has unfinished jobs"
                )));
            }
            st.shares
                .get(&ShareName::from(name.as_str()))
                .filter(|s| is_implicit(&st, s))
                .cloned()
        };
        // A FIFO queue's implicit share goes with it.
        if let Some(s) = implicit {
            let share = s.name.clone();
            cx.write(ClientCommand::PutShare(QuotaShare {
                state: ObjState::Disabled,
                ..s
            }))
            .await?;
            cx.write(ClientCommand::DeleteShare(share)).await?;
        }
        cx.write(ClientCommand::DeleteQueue(name.as_str().into()))
            .await?;
        Ok(json!({}))
    }
}
