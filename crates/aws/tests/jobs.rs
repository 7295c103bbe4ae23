//! The service-job operations of the AWS Batch-compatible endpoint, in process over
//! the controller's test rig, with requests signed here: SubmitServiceJob (with a
//! client token), DescribeServiceJob (its owner sees the payload, another user not:
//! rule H3), ListServiceJobs (by status, by name, paged), UpdateServiceJob,
//! TerminateServiceJob(s), tags of a job, the queue snapshot, and bad input named.
//! The same behaviours as `python/tests/test_aws.py` checks with boto3.

mod common;

use axum::http::Method;
use common::*;
use serde_json::{json, Value};

fn job_ids(list: &Value) -> Vec<String> {
    list["jobSummaryList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["jobId"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn service_jobs_are_submitted_described_listed_updated_and_terminated() {
    let aws = setup().await;
    let alice = aws.alice.clone();
    let mut args = submit("train-a");
    args["schedulingPriority"] = json!(7);
    args["tags"] = json!({"team": "a"});
    args["timeoutConfig"] = json!({"attemptDurationSeconds": 300});
    args["retryStrategy"] = json!({"attempts": 2});
    args["clientToken"] = json!("token-1");
    let sub = ok(&aws.op(&alice, "SubmitServiceJob", args.clone()).await);
    let id = sub["jobId"].as_str().unwrap().to_string();
    assert_eq!(
        sub["jobArn"],
        json!(format!("arn:aws:batch:{REGION}:{ACCOUNT}:service-job/{id}"))
    );
    assert_eq!(sub["jobName"], json!("train-a"));
    // A retried submit with the same client token is the same job.
    let again = ok(&aws.op(&alice, "SubmitServiceJob", args).await);
    assert_eq!(again["jobId"], json!(id));

    let d = ok(&aws
        .op(
            &alice,
            "DescribeServiceJob",
            json!({"jobId": sub["jobArn"]}),
        )
        .await);
    assert_eq!(
        (d["jobName"].clone(), d["quotaShareName"].clone()),
        (json!("train-a"), json!("qs"))
    );
    assert!(
        d["jobQueue"].as_str().unwrap().ends_with(":job-queue/jq"),
        "{d}"
    );
    assert_eq!(d["schedulingPriority"], json!(7));
    assert_eq!(d["tags"], json!({"team": "a"}));
    assert_eq!(d["timeoutConfig"], json!({"attemptDurationSeconds": 300}));
    assert_eq!(d["retryStrategy"]["attempts"], json!(2));
    assert_eq!(
        d["capacityUsage"],
        json!([{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}])
    );
    assert_eq!(d["serviceJobType"], json!("SAGEMAKER_TRAINING"));
    assert_eq!(d["status"], json!("RUNNABLE"), "no planner runs in the rig");
    assert_eq!(d["isTerminated"], json!(false));
    assert!(d.get("startedAt").is_none(), "not started: {d}");
    let sent: Value = serde_json::from_str(d["serviceRequestPayload"].as_str().unwrap()).unwrap();
    assert_eq!(sent["TrainingJobName"], json!("train-a"));
    assert!(d.get("preemptionSummary").is_none());
    // By its id as well as its ARN.
    let by_id = ok(&aws
        .op(&alice, "DescribeServiceJob", json!({"jobId": id}))
        .await);
    assert_eq!(by_id["jobArn"], sub["jobArn"]);

    // Another user reads no payload and no tags of it (H3).
    let seen = ok(&aws
        .op(&aws.bob, "DescribeServiceJob", json!({"jobId": id}))
        .await);
    assert!(seen.get("serviceRequestPayload").is_none(), "{seen}");
    assert_eq!(seen["tags"], json!({}));
    assert_eq!(
        (seen["jobName"].clone(), seen["status"].clone()),
        (json!("train-a"), json!("RUNNABLE"))
    );

    // Listing: RUNNING by default; by status; by name (a prefix, any case), newest
    // first; paged.
    let more: Vec<String> = {
        let mut v = vec![];
        for i in 0..3 {
            let r = ok(&aws
                .op(&alice, "SubmitServiceJob", submit(&format!("train-b{i}")))
                .await);
            v.push(r["jobId"].as_str().unwrap().to_string());
        }
        v
    };
    let r = ok(&aws
        .op(&alice, "ListServiceJobs", json!({"jobQueue": "jq"}))
        .await);
    assert_eq!(job_ids(&r), Vec::<String>::new(), "nothing is RUNNING");
    let r = ok(&aws
        .op(
            &alice,
            "ListServiceJobs",
            json!({"jobQueue": "jq", "jobStatus": "RUNNABLE"}),
        )
        .await);
    assert_eq!(job_ids(&r).len(), 4, "{r}");
    let s = &r["jobSummaryList"][0];
    for k in [
        "jobArn",
        "jobId",
        "jobName",
        "quotaShareName",
        "status",
        "createdAt",
        "capacityUsage",
    ] {
        assert!(s.get(k).is_some(), "a summary has `{k}`: {s}");
    }
    let r = ok(&aws
        .op(
            &alice,
            "ListServiceJobs",
            json!({"jobQueue": "jq", "filters": [{"name": "JOB_NAME", "values": ["TRAIN-B*"]}]}),
        )
        .await);
    let names: Vec<&str> = r["jobSummaryList"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["jobName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["train-b2", "train-b1", "train-b0"]);
    let mut pages = vec![];
    let mut token: Option<Value> = None;
    loop {
        let mut req = json!({"jobQueue": "jq", "maxResults": 2, "filters": [{"name": "JOB_NAME", "values": ["train-*"]}]});
        if let Some(t) = &token {
            req["nextToken"] = t.clone();
        }
        let page = ok(&aws.op(&alice, "ListServiceJobs", req).await);
        pages.push(job_ids(&page).len());
        match page.get("nextToken") {
            Some(t) if !t.is_null() => token = Some(t.clone()),
            _ => break,
        }
    }
    assert_eq!(pages, [2, 2]);
    let r = ok(&aws
        .op(&alice, "ListServiceJobs", json!({"jobQueue": "jq", "jobStatus": "RUNNABLE", "filters": [{"name": "QUOTA_SHARE_NAME", "values": ["qs"]}]}))
        .await);
    assert_eq!(job_ids(&r).len(), 4);

    // The queue's snapshot: the waiting jobs at its front.
    let snap = ok(&aws
        .op(&alice, "GetJobQueueSnapshot", json!({"jobQueue": "jq"}))
        .await);
    let front: Vec<&str> = snap["frontOfQueue"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["jobArn"].as_str().unwrap())
        .collect();
    assert!(front.contains(&sub["jobArn"].as_str().unwrap()), "{snap}");

    // Update: its owner may, another user not.
    let up = ok(&aws
        .op(
            &alice,
            "UpdateServiceJob",
            json!({"jobId": more[0], "schedulingPriority": 42}),
        )
        .await);
    assert_eq!(up["jobId"], json!(more[0]));
    let d = ok(&aws
        .op(&alice, "DescribeServiceJob", json!({"jobId": more[0]}))
        .await);
    assert_eq!(d["schedulingPriority"], json!(42));
    client_error(
        &aws.op(
            &aws.bob,
            "UpdateServiceJob",
            json!({"jobId": more[0], "schedulingPriority": 9}),
        )
        .await,
        "may change only its own jobs",
    );

    // Terminate: another user's job is answered as one that does not exist.
    client_error(
        &aws.op(
            &aws.bob,
            "TerminateServiceJob",
            json!({"jobId": sub["jobArn"], "reason": "mine now"}),
        )
        .await,
        "does not exist, or user:bob may not terminate it",
    );
    ok(&aws
        .op(
            &alice,
            "TerminateServiceJob",
            json!({"jobId": id, "reason": "enough"}),
        )
        .await);
    let d = ok(&aws
        .op(&alice, "DescribeServiceJob", json!({"jobId": id}))
        .await);
    assert_eq!(
        (d["status"].clone(), d["isTerminated"].clone()),
        (json!("FAILED"), json!(true))
    );
    let mut jobs = more.clone();
    jobs.push("999999".into());
    let bulk = ok(&aws
        .op(
            &alice,
            "TerminateServiceJobs",
            json!({"jobs": jobs, "reason": "cleanup"}),
        )
        .await);
    let mut done: Vec<String> = bulk["successful"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    done.sort();
    assert_eq!(done, more);
    let errors: Vec<&str> = bulk["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["job"].as_str().unwrap())
        .collect();
    assert_eq!(errors, ["999999"], "{bulk}");

    // A job's tags, through the tag operations.
    assert_eq!(job_tags(&aws, &alice, &sub).await, json!({"team": "a"}));
}

/// The tags of the job `sub` (a submit's answer), as `key` lists them.
async fn job_tags(aws: &Aws, key: &str, sub: &Value) -> Value {
    let path = format!(
        "/v1/tags/{}",
        sub["jobArn"]
            .as_str()
            .unwrap()
            .replace(':', "%3A")
            .replace('/', "%2F")
    );
    let r = aws.signed(key, Method::GET, &path, vec![]).await;
    ok(&r)["tags"].clone()
}

#[tokio::test]
async fn bad_submits_name_their_member_and_change_nothing() {
    let aws = setup().await;
    let alice = aws.alice.clone();
    let before = aws.h.rig.writes();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = submit("x");
        f(&mut b);
        b
    };
    let payload_with = |f: &dyn Fn(&mut Value)| {
        let mut p: Value = serde_json::from_str(&payload("x", "ml.g5.xlarge", 1)).unwrap();
        f(&mut p);
        with(&|b| b["serviceRequestPayload"] = json!(p.to_string()))
    };
    for (body, says) in [
        (
            with(&|b| b["serviceJobType"] = json!("NOPE")),
            "serviceJobType",
        ),
        (
            with(&|b| {
                b.as_object_mut().unwrap().remove("jobName");
            }),
            "Invalid value at 'jobName': is required",
        ),
        (
            with(&|b| b["schedulingPriority"] = json!(12000)),
            "Invalid value at 'schedulingPriority'",
        ),
        (
            with(&|b| b["schedulingPriority"] = json!("high")),
            "Invalid value at 'schedulingPriority'",
        ),
        (
            with(&|b| b["retryStrategy"] = json!({"attempts": 0})),
            "Invalid value at 'retryStrategy.attempts'",
        ),
        (
            with(&|b| b["shareIdentifier"] = json!("x")),
            "shareIdentifier",
        ),
        (
            with(&|b| b["quotaShareName"] = json!("nope")),
            "quota share nope does not exist in job queue jq",
        ),
        (
            with(&|b| b["jobQueue"] = json!("nope")),
            "job queue nope does not exist",
        ),
        (
            with(&|b| b["serviceRequestPayload"] = json!("not json")),
            "serviceRequestPayload",
        ),
        (
            payload_with(&|p| p["AlgorithmSpecification"] = json!({"TrainingImage": "nope:1"})),
            "image catalog",
        ),
        (
            payload_with(&|p| p["ResourceConfig"]["InstanceType"] = json!("ml.nope.xlarge")),
            "instance type `ml.nope.xlarge` is not configured",
        ),
        (
            payload_with(
                &|p| p["InputDataConfig"] = json!([{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/k", "S3DataType": "S3Prefix"}}}]),
            ),
            "(channel `train`)': `s3://b/k` is in S3, which this cluster does not serve ([aws] s3_dir is not set)",
        ),
    ] {
        client_error(&aws.op(&alice, "SubmitServiceJob", body).await, says);
    }
    client_error(
        &aws.op(&alice, "DescribeServiceJob", json!({"jobId": "999999"}))
            .await,
        "does not exist",
    );
    client_error(
        &aws.op(&alice, "DescribeServiceJob", json!({})).await,
        "Invalid value at 'jobId': is required",
    );
    client_error(
        &aws.op(
            &alice,
            "ListServiceJobs",
            json!({"jobQueue": "jq", "jobStatus": "DONE"}),
        )
        .await,
        "Value 'DONE' at 'jobStatus'",
    );
    assert_eq!(
        aws.h.rig.writes(),
        before,
        "a refused submit reached the node"
    );
    assert_eq!(aws.h.rig.shared.read().unwrap().state.jobs.len(), 0);
}

/// A job whose only attempt failed before it started (its image had no entrypoint)
/// shows no `startedAt`, and its attempt's reason is the job's.
#[tokio::test]
async fn a_job_that_never_started_has_no_start_and_its_attempt_says_why() {
    let aws = setup().await;
    aws.node("n1", 4);
    let alice = aws.alice.clone();
    let id = ok(&aws.op(&alice, "SubmitServiceJob", submit("never")).await)["jobId"]
        .as_str()
        .unwrap()
        .to_string();
    aws.h.rig.plan();
    let d = ok(&aws
        .op(&alice, "DescribeServiceJob", json!({"jobId": id}))
        .await);
    assert_eq!(d["status"], json!("SCHEDULED"), "{d}");
    assert!(d.get("startedAt").is_none(), "{d}");
    let why = "image `/images/tranche-train` has no entrypoint; give ContainerEntrypoint";
    aws.report(
        &id,
        1,
        tranche_model::Progress::Exited {
            code: None,
            reason: Some(why.into()),
        },
    );
    let d = ok(&aws
        .op(&alice, "DescribeServiceJob", json!({"jobId": id}))
        .await);
    assert_eq!(d["status"], json!("FAILED"), "{d}");
    assert!(d.get("startedAt").is_none(), "{d}");
    let a = &d["attempts"][0];
    assert!(a.get("startedAt").is_none(), "{a}");
    assert!(a.get("stoppedAt").is_some(), "{a}");
    assert!(
        d["statusReason"].as_str().unwrap().contains(why),
        "{}",
        d["statusReason"]
    );
    assert_eq!(a["statusReason"], d["statusReason"]);
}

/// `timeoutConfig` is shown as it was sent, and not at all when none was; the job's
/// time limit is still the smaller of it and the payload's `MaxRuntimeInSeconds` (600).
#[tokio::test]
async fn timeout_config_is_echoed_as_sent() {
    let aws = setup().await;
    let alice = aws.alice.clone();
    for (name, sent, limit) in [
        ("none", None, 600),
        ("long", Some(json!({"attemptDurationSeconds": 86400})), 600),
        ("short", Some(json!({"attemptDurationSeconds": 60})), 60),
        ("empty", Some(json!({})), 600),
    ] {
        let mut b = submit(name);
        b["tags"] = json!({"team": "a"});
        if let Some(t) = &sent {
            b["timeoutConfig"] = t.clone();
        }
        let sub = ok(&aws.op(&alice, "SubmitServiceJob", b).await);
        let d = ok(&aws
            .op(&alice, "DescribeServiceJob", json!({"jobId": sub["jobId"]}))
            .await);
        assert_eq!(d.get("timeoutConfig"), sent.as_ref(), "{name}: {d}");
        assert_eq!(d["tags"], json!({"team": "a"}), "{name}");
        assert_eq!(
            job_tags(&aws, &alice, &sub).await,
            json!({"team": "a"}),
            "{name}"
        );
        let id = tranche_model::JobId(sub["jobId"].as_str().unwrap().parse().unwrap());
        let st = &aws.h.rig.shared.read().unwrap().state;
        assert_eq!(st.job(id).unwrap().spec.time_limit_s, Some(limit), "{name}");
    }
}

/// A terminated job whose process ended on its stop signal at once is said to have
/// done so, not to have been killed at the end of its grace period (30 s); one that
/// ended on a signal after its grace was.
#[tokio::test]
async fn a_job_that_ends_on_its_signal_is_not_said_to_be_killed_at_the_grace_end() {
    let aws = setup().await;
    aws.node("n1", 4);
    let alice = aws.alice.clone();
    for (name, after_ms, says) in [
        ("quick", 0, " ms after it was sent, within its grace period"),
        (
            "slow",
            31_000,
            "terminated; it was killed at the end of its grace period",
        ),
    ] {
        let id = ok(&aws.op(&alice, "SubmitServiceJob", submit(name)).await)["jobId"]
            .as_str()
            .unwrap()
            .to_string();
        aws.h.rig.plan();
        aws.report(&id, 1, tranche_model::Progress::Running);
        ok(&aws
            .op(
                &alice,
                "TerminateServiceJob",
                json!({"jobId": id, "reason": "enough"}),
            )
            .await);
        let killed = tranche_model::Progress::Exited {
            code: None,
            reason: None,
        };
        aws.report_after(&id, 1, killed, after_ms);
        let d = ok(&aws
            .op(&alice, "DescribeServiceJob", json!({"jobId": id}))
            .await);
        assert_eq!(
            (d["status"].clone(), d["isTerminated"].clone()),
            (json!("FAILED"), json!(true)),
            "{d}"
        );
        let why = d["attempts"][0]["statusReason"].as_str().unwrap();
        assert!(why.ends_with(says), "{name}: {why}");
        if after_ms == 0 {
            assert!(
                why.starts_with("terminated; it ended on its stop signal "),
                "{why}"
            );
        }
        assert!(d["attempts"][0]["startedAt"].as_u64().is_some(), "{d}");
    }
}

/// A queue deleted and made again under its name lists only its own jobs, whatever
/// their status; the tag that marks where its jobs start is neither shown nor set.
#[tokio::test]
async fn a_queue_made_again_does_not_list_the_old_ones_jobs() {
    let aws = setup().await;
    let (admin, alice) = (aws.admin.clone(), aws.alice.clone());
    let old = ok(&aws.op(&alice, "SubmitServiceJob", submit("old")).await)["jobId"].clone();
    let runnable_old =
        ok(&aws.op(&alice, "SubmitServiceJob", submit("old-2")).await)["jobId"].clone();
    for id in [&old, &runnable_old] {
        ok(&aws
            .op(
                &alice,
                "TerminateServiceJob",
                json!({"jobId": id, "reason": "x"}),
            )
            .await);
    }
    let share_arn = format!("arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/jq/quota-share/qs");
    for (op, body) in [
        (
            "UpdateQuotaShare",
            json!({"quotaShareArn": share_arn, "state": "DISABLED"}),
        ),
        ("DeleteQuotaShare", json!({"quotaShareArn": share_arn})),
        (
            "UpdateJobQueue",
            json!({"jobQueue": "jq", "state": "DISABLED"}),
        ),
        ("DeleteJobQueue", json!({"jobQueue": "jq"})),
    ] {
        ok(&aws.op(&admin, op, body).await);
    }
    let sp = format!("arn:aws:batch:{REGION}:{ACCOUNT}:scheduling-policy/sp");
    ok(&aws
        .op(
            &admin,
            "CreateJobQueue",
            json!({
                "jobQueueName": "jq", "priority": 1, "schedulingPolicyArn": sp, "tags": {"t": "1"},
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}],
            }),
        )
        .await);
    ok(&aws
        .op(
            &admin,
            "CreateQuotaShare",
            json!({
                "quotaShareName": "qs", "jobQueue": "jq",
                "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 3}],
                "resourceSharingConfiguration": {"strategy": "LEND"},
                "preemptionConfiguration": {"inSharePreemption": "DISABLED"},
            }),
        )
        .await);
    let new = ok(&aws.op(&alice, "SubmitServiceJob", submit("new")).await)["jobId"].clone();
    let list = |body: Value| {
        let aws = &aws;
        let alice = alice.clone();
        async move { job_ids(&ok(&aws.op(&alice, "ListServiceJobs", body).await)) }
    };
    assert_eq!(
        list(json!({"jobQueue": "jq", "jobStatus": "FAILED"})).await,
        Vec::<String>::new()
    );
    assert_eq!(
        list(json!({"jobQueue": "jq", "jobStatus": "RUNNABLE"})).await,
        [new.as_str().unwrap()]
    );
    assert_eq!(
        list(json!({"jobQueue": "jq", "filters": [{"name": "JOB_NAME", "values": ["*"]}]})).await,
        [new.as_str().unwrap()]
    );
    // The old jobs are still there, by their ids.
    let d = ok(&aws
        .op(&alice, "DescribeServiceJob", json!({"jobId": old}))
        .await);
    assert_eq!(d["status"], json!("FAILED"));
    // The queue's own tags only; its first job's tag is the endpoint's.
    let d = ok(&aws
        .op(&admin, "DescribeJobQueues", json!({"jobQueues": ["jq"]}))
        .await);
    assert_eq!(d["jobQueues"][0]["tags"], json!({"t": "1"}));
    let q = format!("arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/jq")
        .replace(':', "%3A")
        .replace('/', "%2F");
    let r = aws
        .signed(&admin, Method::GET, &format!("/v1/tags/{q}"), vec![])
        .await;
    assert_eq!(ok(&r)["tags"], json!({"t": "1"}));
    let body = json!({"tags": {"tranche:firstJobId": "0"}}).to_string();
    let r = aws
        .signed(
            &admin,
            Method::POST,
            &format!("/v1/tags/{q}"),
            body.into_bytes(),
        )
        .await;
    client_error(
        &r,
        "Invalid value at 'tags.tranche:firstJobId': this tag key is reserved",
    );
    let r = aws
        .signed(
            &admin,
            Method::DELETE,
            &format!("/v1/tags/{q}?tagKeys=tranche%3AfirstJobId"),
            vec![],
        )
        .await;
    client_error(&r, "Invalid value at 'tagKeys.tranche:firstJobId'");
}

/// One paged listing, followed by its `nextToken`, lists no job twice and every job
/// that keeps the status throughout once, while jobs are submitted and start between
/// its pages; a token goes on only with the listing that gave it.
#[tokio::test]
async fn paging_is_consistent_within_one_listing() {
    let aws = setup().await;
    aws.node("n1", 1);
    let alice = aws.alice.clone();
    let mut ids = vec![];
    for n in 1..=4 {
        let sub = ok(&aws
            .op(&alice, "SubmitServiceJob", submit(&format!("p{n}")))
            .await);
        ids.push(sub["jobId"].as_str().unwrap().to_string());
    }
    let runnable = json!({"jobQueue": "jq", "jobStatus": "RUNNABLE", "maxResults": 1});
    let mut listed = vec![];
    let mut body = runnable.clone();
    for page in 0.. {
        let r = ok(&aws.op(&alice, "ListServiceJobs", body.clone()).await);
        listed.extend(job_ids(&r));
        if page == 0 {
            // Between pages: the oldest job starts, and a new one is submitted.
            aws.h.rig.plan();
            ok(&aws.op(&alice, "SubmitServiceJob", submit("late")).await);
        }
        match r.get("nextToken") {
            Some(t) => body["nextToken"] = t.clone(),
            None => break,
        }
        let running =
            json!({"jobQueue": "jq", "jobStatus": "RUNNING", "nextToken": body["nextToken"]});
        client_error(
            &aws.op(&alice, "ListServiceJobs", running).await,
            "Invalid value at 'nextToken': is not a token of this listing",
        );
    }
    // Newest first; the first job left RUNNABLE, the late one came after the start.
    assert_eq!(listed, [ids[3].clone(), ids[2].clone(), ids[1].clone()]);
    let first = ok(&aws
        .op(&alice, "DescribeServiceJob", json!({"jobId": ids[0]}))
        .await);
    assert_eq!(first["status"], json!("SCHEDULED"));
}
