//! SageMaker `DescribeTrainingJob` over the training jobs the endpoint names: each
//! attempt of a service job is one training job, `<TrainingJobName>-<job id>-<attempt>`
//! (the ARN a service job's `latestAttempt` and `attempts` carry).
//!
//! The training job's status and secondary statuses come from its attempt and its
//! job's transitions; `AlgorithmSpecification`, `ResourceConfig`, `StoppingCondition`,
//! `OutputDataConfig` and the rest of the request are the submitted payload's. A user's
//! key sees only its own training jobs (as it reads only its own jobs' output): another
//! user's, like a name the endpoint never gave, is not found.

use super::*;

/// The log group and the member name of SageMaker's training jobs.
pub(super) const LOG_GROUP: &str = "/aws/sagemaker/TrainingJobs";

/// What SageMaker answers for a training job it does not have.
fn not_found(name: &str) -> AwsError {
    AwsError::json_client(
        "ValidationException",
        format!("Requested resource not found: training job {name} does not exist"),
    )
}

/// Milliseconds as the seconds AWS JSON protocols carry timestamps in.
pub(super) fn seconds(ms: Millis) -> Value {
    json!(ms as f64 / 1000.0)
}

/// The members of the request that `DescribeTrainingJob` answers with as they were
/// sent.
const ECHOED: [&str; 11] = [
    "AlgorithmSpecification",
    "ResourceConfig",
    "StoppingCondition",
    "OutputDataConfig",
    "HyperParameters",
    "RoleArn",
    "InputDataConfig",
    "VpcConfig",
    "CheckpointConfig",
    "Environment",
    "EnableNetworkIsolation",
];

/// A training job's status, secondary status transitions and why it failed, from its
/// attempt.
struct Progress {
    status: &'static str,
    transitions: Vec<Value>,
    failure: Option<String>,
}

impl Endpoint {
    /// The service job and attempt of training job `name`, where the caller may read
    /// it (`None`: no such training job, or another user's).
    pub(super) async fn training_job(
        &self,
        cx: &Ctx<'_>,
        name: &str,
    ) -> AwsResult<Option<(Job, u32)>> {
        let mut parts = name.rsplitn(3, '-');
        let (Some(attempt), Some(id), Some(base)) = (parts.next(), parts.next(), parts.next())
        else {
            return Ok(None);
        };
        let (Ok(attempt), Ok(id)) = (attempt.parse::<u32>(), id.parse::<u64>()) else {
            return Ok(None);
        };
        let Some(j) = self.job_read(cx, JobRef::job(JobId(id))).await? else {
            return Ok(None);
        };
        let named = j
            .spec
            .sagemaker
            .as_ref()
            .is_some_and(|s| s.training_job_name == base);
        let readable = tranche_controller::service::may_read_output(&cx.who, &j).is_ok();
        let has = j.attempts.iter().any(|a| a.number == attempt);
        Ok((named && readable && has).then_some((j, attempt)))
    }

    fn progress(j: &Job, a: &Attempt, share: Option<&QuotaShare>) -> Progress {
        let within = |at: Millis| at >= a.scheduled_at && a.ended_at.is_none_or(|e| at <= e);
        let starting = j
            .transitions
            .iter()
            .find(|t| within(t.at) && t.to == JobStatus::Starting && t.from != t.to)
            .map(|t| t.at);
        let stopping = j
            .transitions
            .iter()
            .find(|t| within(t.at) && t.from == t.to && t.reason.starts_with("stopping ("))
            .map(|t| (t.at, t.reason.clone()));
        let mut steps: Vec<(&str, Millis, String)> = vec![(
            "Starting",
            a.scheduled_at,
            "Starting the training job on its nodes".into(),
        )];
        if let Some(t) = starting {
            steps.push((
                "Downloading",
                t,
                "Preparing the training image and the input channels".into(),
            ));
        }
        if let Some(t) = a.ran_from() {
            steps.push(("Training", t, "Training in progress".into()));
        }
        let reason = Self::attempt_reason(j, a, share);
        let (status, failure) = match (&a.end, a.ended_at) {
            (Some(end), Some(at)) => {
                let reason = reason.unwrap_or_default();
                match end {
                    AttemptEnd::Exited { code: 0 } => {
                        steps.push((
                            "Uploading",
                            at,
                            "The model and the output stay in the nodes' spool".into(),
                        ));
                        steps.push(("Completed", at, "Training job completed".into()));
                        ("Completed", None)
                    }
                    AttemptEnd::Stopped { .. } => {
                        if let Some((t, why)) = stopping.filter(|(t, _)| *t <= at) {
                            steps.push(("Stopping", t, why));
                        }
                        steps.push(("Stopped", at, reason));
                        ("Stopped", None)
                    }
                    AttemptEnd::Exited { .. } | AttemptEnd::Lost => {
                        steps.push(("Failed", at, reason.clone()));
                        ("Failed", Some(reason))
                    }
                }
            }
            _ => match stopping {
                Some((t, why)) => {
                    steps.push(("Stopping", t, why));
                    ("Stopping", None)
                }
                None => ("InProgress", None),
            },
        };
        let done = a.end.is_some();
        let transitions = (0..steps.len())
            .map(|i| {
                let (status, start, msg) = &steps[i];
                let mut v = json!({
                    "Status": status,
                    "StartTime": seconds(*start),
                    "StatusMessage": msg,
                });
                let end = match steps.get(i + 1) {
                    Some((_, next, _)) => Some(*next),
                    None if done => Some(*start),
                    None => None,
                };
                if let Some(e) = end {
                    v["EndTime"] = seconds(e.max(*start));
                }
                v
            })
            .collect();
        Progress {
            status,
            transitions,
            failure,
        }
    }

    /// Training job `name` as `DescribeTrainingJob` answers it.
    fn training_json(&self, name: &str, j: &Job, a: &Attempt, share: Option<&QuotaShare>) -> Value {
        let p = Self::progress(j, a, share);
        let payload: Map<String, Value> = j
            .spec
            .sagemaker
            .as_ref()
            .and_then(|s| serde_json::from_str(&s.payload).ok())
            .unwrap_or_default();
        let mut v = json!({
            "TrainingJobName": name,
            "TrainingJobArn": self.training_arn(j, a.number),
            "TrainingJobStatus": p.status,
            "SecondaryStatus": p.transitions.last().map(|t| t["Status"].clone()),
            "SecondaryStatusTransitions": p.transitions,
            "CreationTime": seconds(a.scheduled_at),
            "LastModifiedTime": seconds(
                a.ended_at.or(a.ran_from()).unwrap_or(a.scheduled_at).max(a.scheduled_at)
            ),
            "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
        });
        let m = v.as_object_mut().expect("an object");
        for k in ECHOED {
            if let Some(x) = payload.get(k) {
                m.insert(k.into(), x.clone());
            }
        }
        let output = payload
            .get("OutputDataConfig")
            .and_then(|o| o.get("S3OutputPath"))
            .and_then(Value::as_str)
            .map(|p| p.trim_end_matches('/').to_string())
            .unwrap_or_else(|| {
                format!("s3://sagemaker-{}-{}", self.arns.region, self.arns.account)
            });
        m.insert(
            "ModelArtifacts".into(),
            json!({"S3ModelArtifacts": format!("{output}/{name}/output/model.tar.gz")}),
        );
        if let Some(t) = a.ran_from() {
            m.insert("TrainingStartTime".into(), seconds(t));
            if let Some(e) = a.ended_at {
                m.insert("TrainingEndTime".into(), seconds(e));
                let s = json!(e.saturating_sub(t) / 1000);
                m.insert("TrainingTimeInSeconds".into(), s.clone());
                m.insert("BillableTimeInSeconds".into(), s);
            }
        }
        if let Some(f) = p.failure {
            m.insert("FailureReason".into(), json!(f));
        }
        v
    }

    pub(crate) async fn describe_training_job(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct Req {
            training_job_name: Option<String>,
        }
        let r: Req = parse(body)?;
        let name = r.training_job_name.ok_or_else(|| {
            AwsError::json_client(
                "ValidationException",
                "1 validation error detected: Value null at 'trainingJobName' failed to satisfy constraint: Member must not be null",
            )
        })?;
        let (j, n) = self
            .training_job(cx, &name)
            .await?
            .ok_or_else(|| not_found(&name))?;
        let a = j
            .attempts
            .iter()
            .find(|a| a.number == n)
            .expect("training_job found the attempt");
        let st = cx.state().await?;
        Ok(self.training_json(&name, &j, a, st.shares.get(&j.spec.share)))
    }
}
