//! ARNs in AWS's forms, and the names or ARNs AWS accepts wherever it takes an
//! identifier:
//!
//! ```text
//! arn:aws:batch:<region>:<account>:service-environment/<name>
//! arn:aws:batch:<region>:<account>:scheduling-policy/<name>
//! arn:aws:batch:<region>:<account>:job-queue/<name>
//! arn:aws:batch:<region>:<account>:job-queue/<queue>/quota-share/<name>
//! arn:aws:batch:<region>:<account>:service-job/<job id>
//! arn:aws:sagemaker:<region>:<account>:training-job/<name>
//! ```

use tranche_model::JobId;

/// The region and account this cluster's ARNs carry.
#[derive(Debug, Clone)]
pub struct Arns {
    pub region: String,
    pub account: String,
}

/// What an ARN (or a bare name) names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Environment(String),
    Policy(String),
    Queue(String),
    Share { queue: Option<String>, name: String },
    Job(JobId),
}

impl Target {
    /// The resource name tags are kept under (see `tranche_state::State::tags`).
    pub fn tag_key(&self) -> Option<String> {
        match self {
            Target::Environment(n) => Some(format!("service-environment/{n}")),
            Target::Policy(n) => Some(format!("scheduling-policy/{n}")),
            Target::Queue(n) => Some(format!("job-queue/{n}")),
            Target::Share { name, .. } => Some(format!("quota-share/{name}")),
            Target::Job(_) => None,
        }
    }
}

impl Arns {
    fn batch(&self, resource: &str) -> String {
        format!("arn:aws:batch:{}:{}:{resource}", self.region, self.account)
    }

    pub fn environment(&self, name: &str) -> String {
        self.batch(&format!("service-environment/{name}"))
    }

    pub fn policy(&self, name: &str) -> String {
        self.batch(&format!("scheduling-policy/{name}"))
    }

    pub fn queue(&self, name: &str) -> String {
        self.batch(&format!("job-queue/{name}"))
    }

    pub fn share(&self, queue: &str, name: &str) -> String {
        self.batch(&format!("job-queue/{queue}/quota-share/{name}"))
    }

    pub fn job(&self, id: JobId) -> String {
        self.batch(&format!("service-job/{}", id.0))
    }

    pub fn training_job(&self, name: &str) -> String {
        format!(
            "arn:aws:sagemaker:{}:{}:training-job/{name}",
            self.region, self.account
        )
    }

    /// Parses an ARN of this cluster's account. A different partition, service,
    /// region or account is refused with a message saying which.
    pub fn parse(&self, text: &str) -> Result<Target, String> {
        let parts: Vec<&str> = text.splitn(6, ':').collect();
        if parts.len() != 6 || parts[0] != "arn" {
            return Err(format!("`{text}` is not an ARN"));
        }
        if parts[1] != "aws" || parts[2] != "batch" {
            return Err(format!(
                "`{text}` is not an AWS Batch ARN (arn:aws:batch:...)"
            ));
        }
        if parts[3] != self.region {
            return Err(format!(
                "`{text}` names region {}; this cluster's ARNs are in {}",
                parts[3], self.region
            ));
        }
        if parts[4] != self.account {
            return Err(format!(
                "`{text}` names account {}; this cluster's account is {}",
                parts[4], self.account
            ));
        }
        let res: Vec<&str> = parts[5].split('/').collect();
        let ok = |s: &str| !s.is_empty();
        match res.as_slice() {
            ["service-environment", n] if ok(n) => Ok(Target::Environment(n.to_string())),
            ["scheduling-policy", n] if ok(n) => Ok(Target::Policy(n.to_string())),
            ["job-queue", n] if ok(n) => Ok(Target::Queue(n.to_string())),
            ["job-queue", q, "quota-share", n] if ok(q) && ok(n) => Ok(Target::Share {
                queue: Some(q.to_string()),
                name: n.to_string(),
            }),
            ["service-job", id] => id
                .parse::<u64>()
                .map(|i| Target::Job(JobId(i)))
                .map_err(|_| format!("`{text}`: a service job's id is a number")),
            _ => Err(format!(
                "`{text}` names no service environment, scheduling policy, job queue, quota share or service job"
            )),
        }
    }

    /// A name or an ARN of the kind `want` makes from a name.
    fn name_or_arn(
        &self,
        text: &str,
        what: &str,
        pick: impl Fn(Target) -> Option<String>,
    ) -> Result<String, String> {
        if !text.starts_with("arn:") {
            return Ok(text.to_string());
        }
        pick(self.parse(text)?).ok_or_else(|| format!("`{text}` is not the ARN of a {what}"))
    }

    pub fn environment_of(&self, text: &str) -> Result<String, String> {
        self.name_or_arn(text, "service environment", |t| match t {
            Target::Environment(n) => Some(n),
            _ => None,
        })
    }

    pub fn policy_of(&self, text: &str) -> Result<String, String> {
        self.name_or_arn(text, "scheduling policy", |t| match t {
            Target::Policy(n) => Some(n),
            _ => None,
        })
    }

    pub fn queue_of(&self, text: &str) -> Result<String, String> {
        self.name_or_arn(text, "job queue", |t| match t {
            Target::Queue(n) => Some(n),
            _ => None,
        })
    }

    /// A quota share's ARN (or name): its queue, when the ARN says, and its name.
    pub fn share_of(&self, text: &str) -> Result<(Option<String>, String), String> {
        if !text.starts_with("arn:") {
            return Ok((None, text.to_string()));
        }
        match self.parse(text)? {
            Target::Share { queue, name } => Ok((queue, name)),
            _ => Err(format!("`{text}` is not the ARN of a quota share")),
        }
    }

    /// A service job's id or ARN.
    pub fn job_of(&self, text: &str) -> Result<JobId, String> {
        if text.starts_with("arn:") {
            return match self.parse(text)? {
                Target::Job(id) => Ok(id),
                _ => Err(format!("`{text}` is not the ARN of a service job")),
            };
        }
        text.parse::<u64>()
            .map(JobId)
            .map_err(|_| format!("`{text}` is not a service job id (a number) or ARN"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arns() -> Arns {
        Arns {
            region: "us-west-2".into(),
            account: "123456789012".into(),
        }
    }

    #[test]
    fn arns_round_trip_and_names_pass_through() {
        let a = arns();
        let s = a.share("q", "QS1");
        assert_eq!(
            s,
            "arn:aws:batch:us-west-2:123456789012:job-queue/q/quota-share/QS1"
        );
        assert_eq!(a.share_of(&s).unwrap(), (Some("q".into()), "QS1".into()));
        assert_eq!(a.queue_of(&a.queue("q")).unwrap(), "q");
        assert_eq!(a.queue_of("q").unwrap(), "q");
        assert_eq!(a.job_of(&a.job(JobId(42))).unwrap(), JobId(42));
        assert_eq!(a.job_of("42").unwrap(), JobId(42));
        assert_eq!(a.environment_of(&a.environment("e")).unwrap(), "e");
        assert_eq!(a.policy_of(&a.policy("p")).unwrap(), "p");
    }

    #[test]
    fn foreign_or_wrong_kind_arns_are_refused_with_the_reason() {
        let a = arns();
        let e = a
            .queue_of("arn:aws:batch:eu-west-1:123456789012:job-queue/q")
            .unwrap_err();
        assert!(e.contains("region eu-west-1"), "{e}");
        let e = a
            .queue_of("arn:aws:batch:us-west-2:999999999999:job-queue/q")
            .unwrap_err();
        assert!(e.contains("account 999999999999"), "{e}");
        let e = a.queue_of(&a.environment("e")).unwrap_err();
        assert!(e.contains("not the ARN of a job queue"), "{e}");
        assert!(a.job_of("abc").is_err());
        assert!(a.parse("arn:aws:s3:::bucket").is_err());
    }
}
