//! Service jobs: `SubmitServiceJob`, `DescribeServiceJob`, `ListServiceJobs`,
//! `TerminateServiceJob(s)` and `UpdateServiceJob`, over Tranche's jobs.

use super::*;

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

/// The job tag that keeps a submit's `timeoutConfig` as it was sent (its
/// `attemptDurationSeconds`, empty for `{}`), to echo it: the job's time limit is the
/// smaller of it and the payload's `MaxRuntimeInSeconds`. `aws:` keys are reserved, so
/// no caller's tag has it; the endpoint shows it in no job's `tags`.
const TIMEOUT_TAG: &str = "aws:batch:timeoutConfig";

/// A job's tags as the endpoint shows them: without its own [`TIMEOUT_TAG`].
pub(super) fn shown_tags(j: &Job) -> BTreeMap<String, String> {
    let mut t = j.spec.tags.clone();
    t.remove(TIMEOUT_TAG);
    t
}

/// What identifies one `ListServiceJobs` listing (its queue, the status it lists or
/// none where a filter overrides it, and its filter), as 16 hex digits that begin
/// each of its tokens.
fn listing_of(
    queue: Option<&str>,
    status: Option<&str>,
    filter: Option<(&Option<String>, &Option<Vec<String>>)>,
) -> String {
    let text = format!("{queue:?}|{status:?}|{filter:?}");
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A token of `listing` that goes on from `cursor`.
fn seal_token(listing: &str, cursor: &str) -> String {
    format!("{listing}_{cursor}")
}

/// The cursor of `token`, which must be one `listing` gave.
fn open_token<'a>(listing: &str, token: &'a str) -> AwsResult<&'a str> {
    token
        .strip_prefix(listing)
        .and_then(|c| c.strip_prefix('_'))
        .ok_or_else(|| {
            AwsError::invalid(
                "nextToken",
                "is not a token of this listing: a token goes on only with the jobQueue, jobStatus and filters of the call that gave it",
            )
        })
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
    pub(super) fn training_arn(&self, j: &Job, attempt: u32) -> String {
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

    /// Whether `j` is in the implicit share of a FIFO queue (whose jobs show no
    /// `quotaShareName`, as AWS's FIFO queues' jobs have none).
    fn in_implicit_share(st: &State, j: &Job) -> bool {
        j.spec.share.as_str() == j.spec.queue.as_str()
            && st.queues.get(&j.spec.queue).is_some_and(is_fifo)
    }

    fn summary_json(&self, j: &Job, implicit: bool) -> Value {
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
        if implicit {
            m.remove("quotaShareName");
        }
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

    /// The reason of the transition that ended attempt `a` (out of SCHEDULED,
    /// STARTING or RUNNING when it ended).
    fn ending_reason(j: &Job, a: &Attempt) -> Option<String> {
        let end = a.ended_at?;
        j.transitions
            .iter()
            .find(|t| t.at >= end && t.from.is_active() && t.to != t.from)
            .map(|t| t.reason.clone())
            .filter(|r| !r.is_empty())
    }

    /// How the process of attempt `a`, stopped by Tranche, ended: with an exit code
    /// within its grace period, on its stop signal within it, or killed when it ended
    /// (the signal's time is the job's `stopping` transition; the grace, `share`'s).
    fn stopped_how(
        j: &Job,
        a: &Attempt,
        kind: &StopKind,
        code: Option<i32>,
        share: Option<&QuotaShare>,
    ) -> String {
        if let Some(c) = code {
            return format!("exited with code {c} within its grace period");
        }
        let signalled = j
            .transitions
            .iter()
            .rev()
            .find(|t| {
                t.from == t.to
                    && t.from.is_active()
                    && t.reason.starts_with("stopping (")
                    && t.at >= a.scheduled_at
                    && a.ended_at.is_none_or(|e| t.at <= e)
            })
            .map(|t| t.at);
        let (Some(sent), Some(end)) = (signalled, a.ended_at) else {
            return "ended on a signal".to_string();
        };
        let notice = match kind {
            StopKind::Reclaim { .. } => share.map_or(0, |s| s.loans.recall_notice_s),
            _ => 0,
        };
        if end < sent + (notice + j.spec.grace_s(share)) * 1000 {
            format!(
                "ended on its stop signal {} ms after it was sent, within its grace period",
                end - sent
            )
        } else {
            "was killed at the end of its grace period".to_string()
        }
    }

    /// Why attempt `a` ended, in words (`None` while it runs).
    pub(super) fn attempt_reason(
        j: &Job,
        a: &Attempt,
        share: Option<&QuotaShare>,
    ) -> Option<String> {
        let end = a.end.as_ref()?;
        // An attempt that never ran ended as its job's transition then says.
        let never_ran = a
            .ran_from()
            .is_none()
            .then(|| Self::ending_reason(j, a))
            .flatten();
        let reason = match end {
            _ if never_ran.is_some() => never_ran.expect("just checked"),
            AttemptEnd::Exited { code: 0 } => {
                "Received status from SageMaker: Training job completed".to_string()
            }
            AttemptEnd::Exited { code } => {
                format!("the training container exited with code {code}")
            }
            AttemptEnd::Stopped { kind, code } => {
                let how = Self::stopped_how(j, a, kind, *code, share);
                match kind {
                StopKind::Reclaim { for_job } => format!("preempted: its quota share's lent capacity was reclaimed for job {}; it {how}", for_job.0),
                StopKind::InShare { for_job } => format!("preempted by the higher-priority job {} of its quota share; it {how}", for_job.0),
                StopKind::Cancel => format!("terminated; it {how}"),
                StopKind::Drain => format!("its node was drained; it {how}"),
                }
            }
            AttemptEnd::Lost => "its node went down; the attempt was lost".to_string(),
        };
        Some(reason)
    }

    fn attempt_json(&self, j: &Job, a: &Attempt, share: Option<&QuotaShare>) -> Value {
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
        if let Some(reason) = Self::attempt_reason(j, a, share) {
            m.insert("statusReason".into(), json!(reason));
        }
        v
    }

    fn describe_json(&self, j: &Job, implicit: bool, share: Option<&QuotaShare>) -> Value {
        let mut v = self.summary_json(j, implicit);
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
        // `startedAt` (required in the model) is left out until the job has started,
        // as AWS leaves it out.
        m.insert(
            "isTerminated".into(),
            json!(j.status == JobStatus::Cancelled),
        );
        m.insert(
            "attempts".into(),
            Value::Array(
                j.attempts
                    .iter()
                    .map(|a| self.attempt_json(j, a, share))
                    .collect(),
            ),
        );
        if let Some(s) = j.spec.sagemaker.as_ref().filter(|_| !j.spec.is_redacted()) {
            m.insert("serviceRequestPayload".into(), json!(s.payload));
        }
        if let Some(t) = j.spec.tags.get(TIMEOUT_TAG) {
            let sent = match t.parse::<u64>() {
                Ok(s) => json!({"attemptDurationSeconds": s}),
                Err(_) => json!({}),
            };
            m.insert("timeoutConfig".into(), sent);
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
                .map(|a| self.attempt_json(j, a, share))
                .collect();
            m.insert(
                "preemptionSummary".into(),
                json!({"preemptedAttemptCount": preempted.len(), "recentPreemptedAttempts": recent}),
            );
        }
        m.insert("tags".into(), json!(shown_tags(j)));
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
    pub(super) async fn job_seen(&self, cx: &Ctx<'_>, text: &str) -> AwsResult<Job> {
        let id = self.arns.job_of(text).map_err(AwsError::client)?;
        self.job_read(cx, JobRef::job(id))
            .await?
            .ok_or_else(|| AwsError::client(format!("service job {text} does not exist")))
    }

    /// Job `id` as the caller may see it (see [`Endpoint::job_seen`]); `None` where there
    /// is no such job.
    pub(super) async fn job_read(&self, cx: &Ctx<'_>, id: JobRef) -> AwsResult<Option<Job>> {
        let req = ClientRequest::Read {
            query: Query::Job(id),
            stale: false,
        };
        match cx.api.service.handle(&cx.who, req).await {
            Answer::Job(j) => Ok(Some(*j)),
            Answer::Error(ApiError::NotFound(_)) => Ok(None),
            Answer::Error(e) => Err(e.into()),
            other => Err(AwsError::server(format!(
                "the controller answered with {} where a job was expected; retry",
                other.kind()
            ))),
        }
    }

    pub(crate) async fn submit_service_job(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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
        let payload = required(&r.service_request_payload, "serviceRequestPayload")?;
        let t = crate::training::read(payload, &name, &cx.who.name, &self.cfg, &self.cap)?;
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
        let share = {
            let st = cx.state().await?;
            let q = match st.queues.get(&QueueName::from(queue.as_str())) {
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
                Some(q) => q,
            };
            // A FIFO queue's jobs join its implicit share.
            let share = match (is_fifo(q), &r.quota_share_name) {
                (true, None) => queue.clone(),
                (true, Some(_)) => {
                    return Err(AwsError::invalid(
                        "quotaShareName",
                        format!("job queue {queue} has no quota-share scheduling policy (a FIFO queue); don't give quotaShareName"),
                    ))
                }
                (false, Some(s)) => s.clone(),
                (false, None) => {
                    return Err(AwsError::invalid(
                        "quotaShareName",
                        "is required: the job queue has a quota-share scheduling policy",
                    ))
                }
            };
            match st.shares.get(&ShareName::from(share.as_str())) {
                Some(s) if s.queue.as_str() == queue => {}
                _ => {
                    return Err(AwsError::client(format!(
                        "quota share {share} does not exist in job queue {queue}"
                    )))
                }
            }
            share
        };
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
        if let Some(t) = &r.timeout_config {
            if spec.tags.len() >= MAX_TAGS {
                return Err(AwsError::invalid(
                    "tags",
                    format!("at most {} tags with a timeoutConfig on this cluster (a job keeps at most {MAX_TAGS} tags, and the timeoutConfig as one of them), got {}", MAX_TAGS - 1, spec.tags.len()),
                ));
            }
            let sent = t.attempt_duration_seconds.map(|s| s.to_string());
            spec.tags
                .insert(TIMEOUT_TAG.into(), sent.unwrap_or_default());
        }
        spec.sagemaker = Some(Box::new(t.sagemaker));
        let id = match cx.write(ClientCommand::Submit(spec)).await? {
            tranche_proto::Outcome::Submitted { job, .. } => job,
            _ => {
                return Err(AwsError::server(
                    "the submit was answered with something other than a job id; retry",
                ))
            }
        };
        Ok(json!({"jobArn": self.arns.job(id), "jobName": name, "jobId": id.0.to_string()}))
    }

    pub(crate) async fn describe_service_job(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        let r: OneJob = parse(body)?;
        let j = self.job_seen(cx, required(&r.job_id, "jobId")?).await?;
        let st = cx.state().await?;
        let implicit = Self::in_implicit_share(&st, &j);
        Ok(self.describe_json(&j, implicit, st.shares.get(&j.spec.share)))
    }

    pub(crate) async fn list_service_jobs(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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
        // A token goes on with the listing that gave it, and only with it.
        let listing = listing_of(
            queue.as_deref(),
            use_status.then_some(status),
            filters.first().map(|f| (&f.name, &f.values)),
        );
        let token = match r.next_token.as_deref() {
            None => None,
            Some(t) => Some(open_token(&listing, t)?),
        };
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
                before: match token {
                    None => None,
                    Some(t) => Some(tranche_proto::HistoryCursor::parse(t).map_err(|_| {
                        AwsError::invalid("nextToken", "is not a token this endpoint gave")
                    })?),
                },
                ..Default::default()
            };
            return self.list_ended(cx, queue.as_deref(), f, &listing).await;
        }
        // Newest first: a token is the id the next page starts below.
        let below = match token {
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
        let first = queue.as_deref().map_or(0, |q| first_job_of(&st, q));
        let keeps = |j: &Job| {
            queue.as_ref().is_none_or(|q| j.spec.queue.as_str() == q)
                && j.id.0 >= first
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
                list.push(self.summary_json(
                    &job_as_seen_by(&cx.who, j)?,
                    Self::in_implicit_share(&st, j),
                ));
            }
        }
        Ok(with_next(
            json!({ "jobSummaryList": list }),
            next.map(|n: u64| seal_token(&listing, &n.to_string())),
        ))
    }

    /// A page of ended jobs (`f`) in `queue`, from the state and the history store,
    /// each as the caller may see it.
    async fn list_ended(
        &self,
        cx: &Ctx<'_>,
        queue: Option<&str>,
        f: tranche_proto::HistoryFilter,
        listing: &str,
    ) -> AwsResult<Value> {
        let first = match queue {
            Some(q) => {
                let st = cx.state().await?;
                if !st.queues.contains_key(&QueueName::from(q)) {
                    return Err(AwsError::client(format!("job queue {q} does not exist")));
                }
                first_job_of(&st, q)
            }
            None => 0,
        };
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
            .filter(|e| queue.is_none_or(|q| e.job.queue.as_str() == q) && e.job.id.0 >= first)
        {
            let hot = cx.api.shared.read().unwrap().state.job(e.job.id).cloned();
            let job = match (hot, &history) {
                (Some(j), _) => Some(j),
                (None, Some(h)) => h.get(e.job.id).map_err(AwsError::server)?.map(|(_, j)| j),
                (None, None) => None,
            };
            if let Some(j) = job {
                let implicit = Self::in_implicit_share(&cx.api.shared.read().unwrap().state, &j);
                list.push(self.summary_json(&job_as_seen_by(&cx.who, &j)?, implicit));
            }
        }
        Ok(with_next(
            json!({ "jobSummaryList": list }),
            page.next.as_ref().map(|c| seal_token(listing, &c.text())),
        ))
    }

    pub(crate) async fn terminate_service_job(
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

    pub(crate) async fn terminate_service_jobs(
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

    pub(crate) async fn update_service_job(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
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
}
