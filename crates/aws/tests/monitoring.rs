//! SageMaker `DescribeTrainingJob` and CloudWatch Logs' `DescribeLogStreams` and
//! `GetLogEvents` on the AWS endpoint, in process over the controller's test rig, with
//! requests signed here for `sagemaker` and `logs` (AWS JSON 1.1, `POST /`, the
//! operation in `X-Amz-Target`): a training job described through its states, whose
//! it is, its log streams, and bad input named. `python/tests/test_aws.py` reads the
//! events of a real job's output with boto3.

mod common;

use common::*;
use serde_json::{json, Value};
use tranche_model::Progress;

const GROUP: &str = "/aws/sagemaker/TrainingJobs";

async fn describe(aws: &Aws, key: &str, name: &str) -> Reply {
    aws.target(
        key,
        "sagemaker",
        "SageMaker.DescribeTrainingJob",
        json!({ "TrainingJobName": name }),
    )
    .await
}

async fn logs(aws: &Aws, key: &str, op: &str, body: Value) -> Reply {
    aws.target(key, "logs", &format!("Logs_20140328.{op}"), body)
        .await
}

/// The training job name of `job`'s latest attempt, from its `latestAttempt` ARN.
async fn training_name(aws: &Aws, key: &str, job: &str) -> String {
    let d = ok(&aws
        .op(key, "DescribeServiceJob", json!({ "jobId": job }))
        .await);
    let arn = d["latestAttempt"]["serviceResourceId"]["value"]
        .as_str()
        .unwrap_or_else(|| panic!("no latest attempt: {d}"));
    arn.rsplit_once("training-job/").unwrap().1.to_string()
}

fn statuses(d: &Value) -> Vec<&str> {
    d["SecondaryStatusTransitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["Status"].as_str().unwrap())
        .collect()
}

/// An error answer of code `code` whose message has `contains`.
#[track_caller]
fn error_of(r: &Reply, status: u16, code: &str, contains: &str) {
    let (s, ty, message) = aws_error(r);
    assert_eq!((s, ty.as_str()), (status, code), "{}", r.text());
    assert!(message.contains(contains), "`{contains}` not in: {message}");
}

fn exited(code: i32) -> Progress {
    Progress::Exited {
        code: Some(code),
        reason: None,
    }
}

#[tokio::test]
async fn a_training_job_is_described_through_its_states() {
    let aws = setup().await;
    aws.node("n1", 4);
    let (alice, bob, admin) = (aws.alice.clone(), aws.bob.clone(), aws.admin.clone());
    let id = ok(&aws.op(&alice, "SubmitServiceJob", submit("train-a")).await)["jobId"]
        .as_str()
        .unwrap()
        .to_string();
    // Not scheduled yet: no training job.
    let r = describe(&aws, &alice, &format!("train-a-{id}-1")).await;
    error_of(
        &r,
        400,
        "ValidationException",
        "Requested resource not found",
    );

    aws.h.rig.plan();
    let name = training_name(&aws, &alice, &id).await;
    assert_eq!(name, format!("train-a-{id}-1"));
    let d = ok(&describe(&aws, &alice, &name).await);
    assert_eq!(d["TrainingJobName"], json!(name));
    assert_eq!(
        d["TrainingJobArn"],
        json!(format!(
            "arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}"
        ))
    );
    assert_eq!(
        (d["TrainingJobStatus"].clone(), d["SecondaryStatus"].clone()),
        (json!("InProgress"), json!("Starting")),
        "{d}"
    );
    assert!(d.get("TrainingStartTime").is_none(), "{d}");
    // The request's members, as the payload gave them.
    let sent: Value = serde_json::from_str(&payload("train-a", "ml.g5.xlarge", 1)).unwrap();
    for k in [
        "AlgorithmSpecification",
        "ResourceConfig",
        "StoppingCondition",
        "OutputDataConfig",
        "HyperParameters",
        "RoleArn",
    ] {
        assert_eq!(d[k], sent[k], "{k}: {d}");
    }
    assert!(d["CreationTime"].as_f64().unwrap() > 1.7e9, "seconds: {d}");

    aws.report(&id, 1, Progress::Starting);
    let d = ok(&describe(&aws, &alice, &name).await);
    assert_eq!(statuses(&d), ["Starting", "Downloading"], "{d}");
    aws.report_after(&id, 1, Progress::Running, 10);
    let d = ok(&describe(&aws, &alice, &name).await);
    assert_eq!(statuses(&d), ["Starting", "Downloading", "Training"], "{d}");
    assert_eq!(d["SecondaryStatus"], json!("Training"));
    let t = d["SecondaryStatusTransitions"].as_array().unwrap();
    // Each state ends when the next begins; the current one has not ended.
    assert_eq!(t[0]["EndTime"], t[1]["StartTime"], "{d}");
    assert_eq!(t[1]["EndTime"], t[2]["StartTime"], "{d}");
    assert!(t[2].get("EndTime").is_none(), "{d}");
    assert_eq!(d["TrainingStartTime"], t[2]["StartTime"]);

    // Another user does not see it; an admin does.
    let r = describe(&aws, &bob, &name).await;
    error_of(
        &r,
        400,
        "ValidationException",
        "Requested resource not found",
    );
    ok(&describe(&aws, &admin, &name).await);

    aws.report_after(&id, 1, exited(0), 2_000);
    let d = ok(&describe(&aws, &alice, &name).await);
    assert_eq!(d["TrainingJobStatus"], json!("Completed"), "{d}");
    assert_eq!(
        statuses(&d),
        [
            "Starting",
            "Downloading",
            "Training",
            "Uploading",
            "Completed"
        ]
    );
    assert_eq!(d["TrainingTimeInSeconds"], json!(2), "{d}");
    assert!(d["TrainingEndTime"].as_f64() > d["TrainingStartTime"].as_f64());
    assert_eq!(
        d["ModelArtifacts"]["S3ModelArtifacts"],
        json!(format!("s3://out/x/{name}/output/model.tar.gz"))
    );
    assert!(d.get("FailureReason").is_none(), "{d}");
}

#[tokio::test]
async fn failed_and_stopped_training_jobs_say_why() {
    let aws = setup().await;
    aws.node("n1", 4);
    let alice = aws.alice.clone();
    let submit_run = |name: &'static str| {
        let aws = &aws;
        let alice = alice.clone();
        async move {
            let id = ok(&aws.op(&alice, "SubmitServiceJob", submit(name)).await)["jobId"]
                .as_str()
                .unwrap()
                .to_string();
            aws.h.rig.plan();
            aws.report(&id, 1, Progress::Running);
            id
        }
    };
    let id = submit_run("bad").await;
    aws.report(&id, 1, exited(3));
    let name = training_name(&aws, &alice, &id).await;
    let d = ok(&describe(&aws, &alice, &name).await);
    assert_eq!(d["TrainingJobStatus"], json!("Failed"), "{d}");
    assert_eq!(d["SecondaryStatus"], json!("Failed"), "{d}");
    assert_eq!(
        d["FailureReason"],
        json!("the training container exited with code 3")
    );

    let id = submit_run("stop-me").await;
    let name = training_name(&aws, &alice, &id).await;
    ok(&aws
        .op(
            &alice,
            "TerminateServiceJob",
            json!({"jobId": id, "reason": "enough"}),
        )
        .await);
    let d = ok(&describe(&aws, &alice, &name).await);
    assert_eq!(
        (d["TrainingJobStatus"].clone(), d["SecondaryStatus"].clone()),
        (json!("Stopping"), json!("Stopping")),
        "{d}"
    );
    aws.report_after(&id, 1, exited(143), 50);
    let d = ok(&describe(&aws, &alice, &name).await);
    assert_eq!(d["TrainingJobStatus"], json!("Stopped"), "{d}");
    assert_eq!(
        statuses(&d),
        ["Starting", "Training", "Stopping", "Stopped"],
        "{d}"
    );
    let last = d["SecondaryStatusTransitions"].as_array().unwrap()[3].clone();
    assert!(
        last["StatusMessage"]
            .as_str()
            .unwrap()
            .starts_with("terminated; it exited with code 143"),
        "{last}"
    );
}

#[tokio::test]
async fn bad_targets_services_and_names_are_refused_in_aws_shapes() {
    let aws = setup().await;
    let alice = aws.alice.clone();
    // A name the endpoint never gave, in every form.
    for name in ["nope", "a-b", "x-1-1", "train-a-99999-1"] {
        let r = describe(&aws, &alice, name).await;
        error_of(&r, 400, "ValidationException", name);
    }
    let r = aws
        .target(
            &alice,
            "sagemaker",
            "SageMaker.DescribeTrainingJob",
            json!({}),
        )
        .await;
    error_of(&r, 400, "ValidationException", "trainingJobName");
    let r = aws
        .target(
            &alice,
            "sagemaker",
            "SageMaker.CreateTrainingJob",
            json!({}),
        )
        .await;
    error_of(&r, 400, "UnknownOperationException", "DescribeTrainingJob");
    let r = aws.target(&alice, "batch", "Foo.Bar", json!({})).await;
    error_of(&r, 400, "UnknownOperationException", "Foo.Bar");
    // Signed for another service: the scope names the service it needs.
    for (signed, target, needs) in [
        ("batch", "SageMaker.DescribeTrainingJob", "sagemaker"),
        ("sagemaker", "Logs_20140328.GetLogEvents", "logs"),
    ] {
        let r = aws.target(&alice, signed, target, json!({})).await;
        let scope = format!("Credential should be scoped to correct service: '{needs}'");
        error_of(&r, 403, "InvalidSignatureException", &scope);
    }
}

#[tokio::test]
async fn log_streams_are_one_per_node_of_a_started_training_job() {
    let aws = setup().await;
    aws.node("n1", 1);
    aws.node("n2", 1);
    let (alice, bob) = (aws.alice.clone(), aws.bob.clone());
    let mut args = submit("gang");
    args["serviceRequestPayload"] = json!(payload("gang", "ml.g5.xlarge", 2));
    let id = ok(&aws.op(&alice, "SubmitServiceJob", args).await)["jobId"]
        .as_str()
        .unwrap()
        .to_string();
    aws.h.rig.plan();
    let name = training_name(&aws, &alice, &id).await;
    let list = |key: String, body: Value| {
        let aws = &aws;
        async move { logs(aws, &key, "DescribeLogStreams", body).await }
    };
    let prefix = json!({"logGroupName": GROUP, "logStreamNamePrefix": format!("{name}/")});
    // Not started: no streams yet.
    let l = ok(&list(alice.clone(), prefix.clone()).await);
    assert_eq!(l["logStreams"], json!([]), "{l}");

    aws.report(&id, 1, Progress::Running);
    let l = ok(&list(alice.clone(), prefix.clone()).await);
    let names: Vec<&str> = l["logStreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["logStreamName"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{l}");
    for (i, n) in names.iter().enumerate() {
        let epoch = n
            .strip_prefix(&format!("{name}/algo-{}-", i + 1))
            .unwrap_or_else(|| panic!("{n}"));
        assert!(epoch.parse::<u64>().unwrap() > 1_700_000_000, "{n}");
    }
    // Paged; a prefix without `/` finds them too; another user's key sees none.
    let p = ok(&list(
        alice.clone(),
        json!({"logGroupName": GROUP, "logStreamNamePrefix": "gang", "limit": 1}),
    )
    .await);
    assert_eq!(p["logStreams"][0]["logStreamName"], json!(names[0]), "{p}");
    let p2 = ok(&list(
        alice.clone(),
        json!({"logGroupName": GROUP, "logStreamNamePrefix": "gang", "limit": 1, "nextToken": p["nextToken"]}),
    )
    .await);
    assert_eq!(
        p2["logStreams"][0]["logStreamName"],
        json!(names[1]),
        "{p2}"
    );
    assert!(p2.get("nextToken").is_none(), "{p2}");
    let l = ok(&list(bob.clone(), prefix.clone()).await);
    assert_eq!(l["logStreams"], json!([]), "{l}");
    // The group by its ARN, as `logGroupIdentifier`.
    let arn = format!("arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{GROUP}");
    let l = ok(&list(
        alice.clone(),
        json!({"logGroupIdentifier": arn, "logStreamNamePrefix": format!("{name}/")}),
    )
    .await);
    assert_eq!(l["logStreams"].as_array().unwrap().len(), 2, "{l}");

    // Another group, another stream, a bad limit: named.
    let r = list(alice.clone(), json!({"logGroupName": "/aws/batch/job"})).await;
    error_of(
        &r,
        400,
        "ResourceNotFoundException",
        "log group does not exist",
    );
    let r = list(alice.clone(), json!({"logGroupName": GROUP, "limit": 51})).await;
    error_of(&r, 400, "InvalidParameterException", "got 51");
    let get = |key: String, stream: String| {
        let aws = &aws;
        async move {
            logs(
                aws,
                &key,
                "GetLogEvents",
                json!({"logGroupName": GROUP, "logStreamName": stream, "startFromHead": true}),
            )
            .await
        }
    };
    let r = get(alice.clone(), format!("{name}/algo-3-1")).await;
    error_of(
        &r,
        400,
        "ResourceNotFoundException",
        "log stream does not exist",
    );
    let r = get(bob.clone(), names[0].to_string()).await;
    error_of(
        &r,
        400,
        "ResourceNotFoundException",
        "log stream does not exist",
    );
    // The stream is there; its node's agent is what serves the lines, and this rig's
    // nodes publish no log port.
    let r = get(alice.clone(), names[1].to_string()).await;
    error_of(&r, 500, "ServerException", "publishes no log port");
}
