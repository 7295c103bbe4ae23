//! AWS's plain FIFO queue, as its getting-started notebook makes it: a service
//! environment counted in `NUM_INSTANCES`, a job queue with no `schedulingPolicyArn`,
//! and jobs submitted with no `quotaShareName`. In process over the controller's test
//! rig, with requests signed here as botocore signs them.

mod common;

use common::*;
use serde_json::{json, Value};
use tranche_model::{CapacityLimit, QueueName, ShareName, Strategy};
use tranche_state::State;

/// The getting-started notebook's resources: environment `se` of `n` NUM_INSTANCES and
/// queue `jq` on it without a scheduling policy, made by the admin.
async fn fifo_queue(aws: &Aws, n: u32) {
    let key = &aws.admin;
    ok(&aws
        .op(key, "CreateServiceEnvironment", json!({
            "serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "state": "ENABLED", "capacityLimits": [{"maxCapacity": n, "capacityUnit": "NUM_INSTANCES"}],
        }))
        .await);
    let r = ok(&aws
        .op(key, "CreateJobQueue", json!({
            "jobQueueName": "jq", "jobQueueType": "SAGEMAKER_TRAINING", "state": "ENABLED",
            "priority": 1, "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
        }))
        .await);
    assert_eq!(
        r["jobQueueArn"],
        json!(format!("arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/jq"))
    );
}

fn fifo_submit(name: &str) -> Value {
    json!({
        "jobName": name, "jobQueue": "jq", "serviceJobType": "SAGEMAKER_TRAINING",
        "serviceRequestPayload": payload(name, "ml.g5.xlarge", 1),
    })
}

/// Scheduling policy `name`, made by the admin: its ARN.
async fn policy(aws: &Aws, name: &str) -> Value {
    ok(&aws
        .op(
            &aws.admin,
            "CreateSchedulingPolicy",
            json!({"name": name, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await)["arn"]
        .clone()
}

/// A LEND quota share `name` of one ml.g5.xlarge in queue `jq`.
fn share(jq: &str, name: &str) -> Value {
    json!({
        "quotaShareName": name, "jobQueue": jq,
        "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}],
        "resourceSharingConfiguration": {"strategy": "LEND"},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
    })
}

/// GPUs per unit of `limits`.
fn gpus(limits: &[CapacityLimit]) -> Vec<(String, u32)> {
    limits.iter().map(|l| (l.unit.to_string(), l.max)).collect()
}

#[tokio::test]
async fn a_queue_without_a_policy_is_fifo_with_one_implicit_share() {
    let aws = Aws::new(State::new());
    let key = aws.admin.clone();
    fifo_queue(&aws, 2).await;

    // NUM_INSTANCES 2 is 2 of each unit's largest instance type (a10g: 4 GPUs, h100:
    // 8), and is shown as those.
    let r = ok(&aws
        .op(
            &key,
            "DescribeServiceEnvironments",
            json!({"serviceEnvironments": ["se"]}),
        )
        .await);
    assert_eq!(
        r["serviceEnvironments"][0]["capacityLimits"],
        json!([
            {"capacityUnit": "ml.g5.12xlarge", "maxCapacity": 2},
            {"capacityUnit": "ml.p5.48xlarge", "maxCapacity": 2},
        ])
    );
    // The queue shows no policy and no shares; the cluster has the implicit ones.
    let q = ok(&aws
        .op(&key, "DescribeJobQueues", json!({"jobQueues": ["jq"]}))
        .await);
    let q = &q["jobQueues"][0];
    assert_eq!(
        (q["state"].clone(), q["status"].clone()),
        (json!("ENABLED"), json!("VALID"))
    );
    assert!(q.get("schedulingPolicyArn").is_none(), "{q}");
    let r = ok(&aws.op(&key, "ListSchedulingPolicies", json!({})).await);
    assert_eq!(r["schedulingPolicies"], json!([]));
    let r = ok(&aws
        .op(&key, "ListQuotaShares", json!({"jobQueue": "jq"}))
        .await);
    assert_eq!(r["quotaShares"], json!([]));
    {
        let st = &aws.h.rig.shared.read().unwrap().state;
        assert_eq!(
            st.queues[&QueueName::from("jq")].policy.as_str(),
            "implicit-fifo"
        );
        let s = &st.shares[&ShareName::from("jq")];
        assert_eq!(s.queue.as_str(), "jq");
        assert_eq!(s.resource_sharing.strategy, Strategy::Lend);
        assert!(!s.in_share_preemption);
        assert_eq!(
            gpus(&s.capacity_limits),
            [("a10g".to_string(), 8), ("h100".to_string(), 16)]
        );
    }

    // A job without quotaShareName joins the implicit share and shows none.
    let sub = ok(&aws
        .op(&aws.alice, "SubmitServiceJob", fifo_submit("train-1"))
        .await);
    let id = sub["jobId"].as_str().unwrap().to_string();
    let d = ok(&aws
        .op(&aws.alice, "DescribeServiceJob", json!({"jobId": id}))
        .await);
    assert_eq!(d["status"], json!("RUNNABLE"), "{d}");
    assert!(d.get("quotaShareName").is_none(), "{d}");
    assert_eq!(
        d["capacityUsage"],
        json!([{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}])
    );
    let l = ok(&aws
        .op(
            &aws.alice,
            "ListServiceJobs",
            json!({"jobQueue": "jq", "jobStatus": "RUNNABLE"}),
        )
        .await);
    let list = l["jobSummaryList"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{l}");
    assert_eq!(list[0]["jobId"], json!(id));
    assert!(list[0].get("quotaShareName").is_none(), "{l}");
    let snap = ok(&aws
        .op(&key, "GetJobQueueSnapshot", json!({"jobQueue": "jq"}))
        .await);
    assert_eq!(
        snap["frontOfQuotaShares"]["quotaShares"],
        json!({}),
        "{snap}"
    );
    {
        let st = &aws.h.rig.shared.read().unwrap().state;
        let j = st.jobs.values().next().unwrap();
        assert_eq!(j.spec.share.as_str(), "jq");
    }

    // The implicit share follows its environment's limits.
    ok(&aws
        .op(
            &key,
            "UpdateServiceEnvironment",
            json!({
                "serviceEnvironment": "se",
                "capacityLimits": [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}],
            }),
        )
        .await);
    assert_eq!(
        gpus(
            &aws.h.rig.shared.read().unwrap().state.shares[&ShareName::from("jq")].capacity_limits
        ),
        [("a10g".to_string(), 3)]
    );

    // Deleting the queue takes its implicit share; not while a job is unfinished.
    ok(&aws
        .op(
            &key,
            "UpdateJobQueue",
            json!({"jobQueue": "jq", "state": "DISABLED"}),
        )
        .await);
    client_error(
        &aws.op(&key, "DeleteJobQueue", json!({"jobQueue": "jq"}))
            .await,
        "job queue jq still has unfinished jobs",
    );
    ok(&aws
        .op(
            &aws.alice,
            "TerminateServiceJob",
            json!({"jobId": id, "reason": "done"}),
        )
        .await);
    ok(&aws
        .op(&key, "DeleteJobQueue", json!({"jobQueue": "jq"}))
        .await);
    let st = &aws.h.rig.shared.read().unwrap().state;
    assert!(st.queues.is_empty() && st.shares.is_empty());
}

#[tokio::test]
async fn a_fifo_queue_refuses_quota_shares_and_a_policy() {
    let aws = Aws::new(State::new());
    let key = aws.admin.clone();
    fifo_queue(&aws, 1).await;
    client_error(
        &aws.op(&key, "CreateQuotaShare", share("jq", "qs")).await,
        "Invalid value at 'jobQueue': job queue jq has no quota-share scheduling policy",
    );
    let mut with_share = fifo_submit("x");
    with_share["quotaShareName"] = json!("jq");
    client_error(
        &aws.op(&aws.alice, "SubmitServiceJob", with_share).await,
        "Invalid value at 'quotaShareName': job queue jq has no quota-share scheduling policy (a FIFO queue); don't give quotaShareName",
    );
    // The implicit share is no quota share here.
    client_error(
        &aws.op(&key, "DescribeQuotaShare", json!({
            "quotaShareArn": format!("arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/jq/quota-share/jq"),
        }))
        .await,
        "does not exist",
    );
    let sp = policy(&aws, "sp").await;
    client_error(
        &aws.op(
            &key,
            "UpdateJobQueue",
            json!({"jobQueue": "jq", "schedulingPolicyArn": sp}),
        )
        .await,
        "Invalid value at 'schedulingPolicyArn': job queue jq was made without a scheduling policy",
    );
    // The implicit policy's name is reserved.
    for (op, body, member) in [
        (
            "CreateSchedulingPolicy",
            json!({"name": "implicit-fifo", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
            "name",
        ),
        (
            "DeleteSchedulingPolicy",
            json!({"arn": "implicit-fifo"}),
            "arn",
        ),
        (
            "UpdateSchedulingPolicy",
            json!({"arn": "implicit-fifo"}),
            "arn",
        ),
    ] {
        client_error(
            &aws.op(&key, op, body).await,
            &format!(
                "Invalid value at '{member}': scheduling policy name implicit-fifo is reserved"
            ),
        );
    }
    let r = ok(&aws
        .op(
            &key,
            "DescribeSchedulingPolicies",
            json!({"arns": ["implicit-fifo", sp]}),
        )
        .await);
    assert_eq!(r["schedulingPolicies"].as_array().unwrap().len(), 1, "{r}");
}

#[tokio::test]
async fn bad_fifo_input_is_named() {
    let aws = Aws::new(State::new());
    let key = aws.admin.clone();
    let before = aws.h.rig.writes();
    let env = |limits: Value| {
        json!({
            "serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "capacityLimits": limits,
        })
    };
    for (limits, says) in [
        (
            json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}, {"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}]),
            "Invalid value at 'capacityLimits.2.capacityUnit': NUM_INSTANCES must be the environment's only capacity limit, got 2 limits",
        ),
        (
            json!([{"maxCapacity": 0, "capacityUnit": "NUM_INSTANCES"}]),
            "Invalid value at 'capacityLimits.1.maxCapacity': must be 1 to 100000 instances, got 0",
        ),
        (
            json!([{"maxCapacity": 1, "capacityUnit": "ml.nope"}]),
            "Invalid value at 'capacityLimits.1.capacityUnit': instance type `ml.nope` is not configured",
        ),
    ] {
        client_error(
            &aws.op(&key, "CreateServiceEnvironment", env(limits)).await,
            says,
        );
    }
    assert_eq!(
        aws.h.rig.writes(),
        before,
        "a refused environment was written"
    );

    // A FIFO queue named as an existing quota share of another queue.
    let sp = policy(&aws, "sp").await;
    ok(&aws
        .op(
            &key,
            "CreateServiceEnvironment",
            env(json!([{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}])),
        )
        .await);
    ok(&aws
        .op(
            &key,
            "CreateJobQueue",
            json!({
                "jobQueueName": "qm", "priority": 1, "schedulingPolicyArn": sp,
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
            }),
        )
        .await);
    ok(&aws.op(&key, "CreateQuotaShare", share("qm", "taken")).await);
    client_error(
        &aws.op(&key, "CreateJobQueue", json!({
            "jobQueueName": "taken", "priority": 1,
            "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
        }))
        .await,
        "Invalid value at 'jobQueueName': a job queue without a schedulingPolicyArn has an implicit quota share of its own name, and quota share taken already exists (in job queue qm)",
    );
    client_error(
        &aws.op(
            &key,
            "CreateJobQueue",
            json!({
                "jobQueueName": "q2", "priority": 1, "schedulingPolicyArn": "implicit-fifo",
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
            }),
        )
        .await,
        "Invalid value at 'schedulingPolicyArn': scheduling policy name implicit-fifo is reserved",
    );
    // A queue with a policy still needs quotaShareName.
    let mut no_share = fifo_submit("x");
    no_share["jobQueue"] = json!("qm");
    client_error(
        &aws.op(&aws.alice, "SubmitServiceJob", no_share).await,
        "Invalid value at 'quotaShareName': is required",
    );
    // An instance type the cluster does not know, named with its member and value.
    fifo_queue_only(&aws).await;
    let mut p: Value = serde_json::from_str(&payload("x", "ml.g5.xlarge", 1)).unwrap();
    p["ResourceConfig"]["InstanceType"] = json!("ml.trn1.32xlarge");
    let mut b = fifo_submit("x");
    b["serviceRequestPayload"] = json!(p.to_string());
    client_error(
        &aws.op(&aws.alice, "SubmitServiceJob", b).await,
        "Invalid value at 'serviceRequestPayload.ResourceConfig.InstanceType': instance type `ml.trn1.32xlarge` is not configured",
    );
}

/// Queue `jq` without a policy on the existing environment `se`.
async fn fifo_queue_only(aws: &Aws) {
    ok(&aws
        .op(
            &aws.admin,
            "CreateJobQueue",
            json!({
                "jobQueueName": "jq", "priority": 1,
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
            }),
        )
        .await);
}

/// The notebooks' PyTorch image, without `ContainerEntrypoint`, through the catalog's
/// pattern: the job runs the local image's own entrypoint (with `train`).
#[tokio::test]
async fn a_pytorch_image_of_any_region_and_tag_runs_as_the_catalogs_pattern_says() {
    let aws = Aws::new(State::new());
    fifo_queue(&aws, 1).await;
    let image = "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311";
    let mut p: Value = serde_json::from_str(&payload("t", "ml.g5.xlarge", 1)).unwrap();
    p["AlgorithmSpecification"] = json!({"TrainingImage": image, "TrainingInputMode": "File"});
    let mut b = fifo_submit("t");
    b["serviceRequestPayload"] = json!(p.to_string());
    ok(&aws.op(&aws.alice, "SubmitServiceJob", b.clone()).await);
    {
        let st = &aws.h.rig.shared.read().unwrap().state;
        let j = st.jobs.values().next().unwrap();
        assert_eq!(j.spec.image, "/images/pytorch");
        assert!(j.spec.command.is_empty(), "{:?}", j.spec.command);
    }
    // Another repository of that registry is not in the catalog.
    p["AlgorithmSpecification"]["TrainingImage"] =
        json!("763104351884.dkr.ecr.eu-west-1.amazonaws.com/tensorflow-training:2.16");
    b["serviceRequestPayload"] = json!(p.to_string());
    client_error(
        &aws.op(&aws.alice, "SubmitServiceJob", b).await,
        "image `763104351884.dkr.ecr.eu-west-1.amazonaws.com/tensorflow-training:2.16` is not in this cluster's image catalog",
    );
}
