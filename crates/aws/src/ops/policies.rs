//! Scheduling policies: a `quotaSharePolicy` is a Tranche policy (`Create`/`Update`/
//! `Describe`/`List`/`DeleteSchedulingPolicy`).

use super::*;

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

/// Refuses a scheduling policy `name` that does not exist.
async fn existing_policy(cx: &Ctx<'_>, name: &str) -> AwsResult<()> {
    if cx
        .state()
        .await?
        .policies
        .contains_key(&PolicyName::from(name))
    {
        Ok(())
    } else {
        Err(AwsError::client(format!(
            "scheduling policy {name} does not exist"
        )))
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

    pub(crate) async fn create_scheduling_policy(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: CreatePolicy = parse(body)?;
        let name = required(&r.name, "name")?.clone();
        if name == FIFO_POLICY {
            return Err(reserved_policy("name"));
        }
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

    pub(crate) async fn update_scheduling_policy(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: UpdatePolicy = parse(body)?;
        let name = self
            .arns
            .policy_of(required(&r.arn, "arn")?)
            .map_err(AwsError::client)?;
        if name == FIFO_POLICY {
            return Err(reserved_policy("arn"));
        }
        check_policy(&r.quota_share_policy, &r.fairshare_policy, false)?;
        existing_policy(cx, &name).await?;
        // FIFO is the only strategy: nothing to change.
        Ok(json!({}))
    }

    pub(crate) async fn describe_scheduling_policies(
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
            if name == FIFO_POLICY {
                continue;
            }
            if let Some(p) = st.policies.get(&PolicyName::from(name.as_str())) {
                out.push(self.policy_json(&st, p));
            }
        }
        Ok(json!({ "schedulingPolicies": out }))
    }

    pub(crate) async fn list_scheduling_policies(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: ListPolicies = parse(body)?;
        let st = cx.state().await?;
        let all: Vec<Value> = st
            .policies
            .keys()
            .filter(|n| n.as_str() != FIFO_POLICY)
            .map(|n| json!({"arn": self.arns.policy(n.as_str())}))
            .collect();
        let (items, next) = page(&all, r.max_results, r.next_token.as_deref())?;
        Ok(with_next(json!({ "schedulingPolicies": items }), next))
    }

    pub(crate) async fn delete_scheduling_policy(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: DeletePolicy = parse(body)?;
        let name = self
            .arns
            .policy_of(required(&r.arn, "arn")?)
            .map_err(AwsError::client)?;
        if name == FIFO_POLICY {
            return Err(reserved_policy("arn"));
        }
        // Existence first, as for every other object: a missing policy is said to be
        // missing whoever asks.
        existing_policy(cx, &name).await?;
        cx.write(ClientCommand::DeletePolicy(name.as_str().into()))
            .await?;
        Ok(json!({}))
    }
}
