//! Service environments: `Create`/`Update`/`Describe`/`DeleteServiceEnvironment`, each
//! an environment of Tranche selecting every node.

use super::*;

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

    pub(super) async fn tag_new(
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

    pub(crate) async fn create_service_environment(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: CreateEnv = parse(body)?;
        let name = required(&r.service_environment_name, "serviceEnvironmentName")?.clone();
        let ty = required(&r.service_environment_type, "serviceEnvironmentType")?;
        one_of("serviceEnvironmentType", ty, &["SAGEMAKER_TRAINING"])?;
        let state = state_of("state", r.state.as_deref())?.unwrap_or_default();
        let limits = self.cap.environment_limits(
            "capacityLimits",
            required(&r.capacity_limits, "capacityLimits")?,
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

    pub(crate) async fn update_service_environment(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: UpdateEnv = parse(body)?;
        let name = self
            .arns
            .environment_of(required(&r.service_environment, "serviceEnvironment")?)
            .map_err(AwsError::client)?;
        let (mut env, implicit) = {
            let st = cx.state().await?;
            let env = st
                .environments
                .get(&EnvName::from(name.as_str()))
                .cloned()
                .ok_or_else(|| {
                    AwsError::client(format!("service environment {name} does not exist"))
                })?;
            // The implicit shares of the FIFO queues on it, whose limits are its.
            let implicit: Vec<QuotaShare> = st
                .queues
                .values()
                .filter(|q| is_fifo(q) && q.environment == env.name)
                .filter_map(|q| st.shares.get(&ShareName::from(q.name.as_str())).cloned())
                .collect();
            (env, implicit)
        };
        if let Some(s) = state_of("state", r.state.as_deref())? {
            env.state = s;
        }
        if let Some(l) = &r.capacity_limits {
            env.capacity_limits = self.cap.environment_limits("capacityLimits", l)?;
        }
        let limits = env.capacity_limits.clone();
        cx.write(ClientCommand::PutEnvironment(env)).await?;
        for mut s in implicit.into_iter().filter(|s| s.capacity_limits != limits) {
            s.capacity_limits = limits.clone();
            cx.write(ClientCommand::PutShare(s)).await?;
        }
        Ok(json!({
            "serviceEnvironmentName": name,
            "serviceEnvironmentArn": self.arns.environment(&name),
        }))
    }

    pub(crate) async fn describe_service_environments(
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

    pub(crate) async fn delete_service_environment(
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
