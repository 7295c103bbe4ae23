//! Quota shares: a Tranche share with the policy file's default grace periods and no
//! member list (`Create`/`Update`/`Describe`/`List`/`DeleteQuotaShare`).

use super::*;

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
            Some(s)
                if queue.as_ref().is_none_or(|q| q == s.queue.as_str()) && !is_implicit(st, s) =>
            {
                Ok(s.clone())
            }
            _ => Err(AwsError::client(format!(
                "quota share {text} does not exist"
            ))),
        }
    }

    pub(crate) async fn create_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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
            match st.queues.get(&QueueName::from(queue.as_str())) {
                None => {
                    return Err(AwsError::client(format!(
                        "job queue {queue} does not exist"
                    )))
                }
                Some(q) if is_fifo(q) => {
                    return Err(AwsError::invalid(
                        "jobQueue",
                        format!("job queue {queue} has no quota-share scheduling policy (it was made without a schedulingPolicyArn: a FIFO queue), so it takes no quota shares"),
                    ))
                }
                Some(_) => {}
            }
        }
        let share = QuotaShare {
            resource_sharing: rs,
            in_share_preemption: pre,
            state,
            ..new_share(name.as_str().into(), queue.as_str().into(), limits)
        };
        cx.write(ClientCommand::PutShare(share)).await?;
        self.tag_new(cx, format!("quota-share/{name}"), r.tags)
            .await?;
        Ok(json!({"quotaShareName": name, "quotaShareArn": self.arns.share(&queue, &name)}))
    }

    pub(crate) async fn update_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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

    pub(crate) async fn describe_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: OneShare = parse(body)?;
        let st = cx.state().await?;
        let s = self.share_named(&st, required(&r.quota_share_arn, "quotaShareArn")?)?;
        Ok(self.share_json(&st, &s, true))
    }

    pub(crate) async fn list_quota_shares(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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
            .filter(|s| s.queue.as_str() == queue && !is_implicit(&st, s))
            .map(|s| self.share_json(&st, s, false))
            .collect();
        let (items, next) = page(&all, r.max_results, r.next_token.as_deref())?;
        Ok(with_next(json!({ "quotaShares": items }), next))
    }

    pub(crate) async fn delete_quota_share(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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
