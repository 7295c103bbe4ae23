//! The quota-management operations of the AWS Batch-compatible endpoint, in process
//! over the controller's test rig, with requests signed here: service environments,
//! scheduling policies, job queues and quota shares made, described, listed, paged,
//! updated and deleted, tags, and the refusals clients match on. The same behaviours
//! as `python/tests/test_aws.py` checks with boto3.

mod common;

use axum::http::Method;
use common::*;
use serde_json::{json, Value};
use tranche_state::State;

fn arn(resource: &str) -> String {
    format!("arn:aws:batch:{REGION}:{ACCOUNT}:{resource}")
}

/// A scheduling policy, a service environment of `units` ml.g5.xlarge and a job queue
/// on them, made by `admin`: the policy's ARN.
async fn make_queue(aws: &Aws, sp: &str, se: &str, jq: &str, units: u32) -> String {
    let key = &aws.admin;
    let r = ok(&aws
        .op(
            key,
            "CreateSchedulingPolicy",
            json!({"name": sp, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await);
    assert_eq!(
        r,
        json!({"name": sp, "arn": arn(&format!("scheduling-policy/{sp}"))})
    );
    let sp_arn = r["arn"].as_str().unwrap().to_string();
    let r = ok(&aws
        .op(key, "CreateServiceEnvironment", json!({
            "serviceEnvironmentName": se, "serviceEnvironmentType": "SAGEMAKER_TRAINING",
            "state": "ENABLED", "capacityLimits": [{"maxCapacity": units, "capacityUnit": "ml.g5.xlarge"}],
        }))
        .await);
    assert_eq!(
        r["serviceEnvironmentArn"],
        json!(arn(&format!("service-environment/{se}")))
    );
    let r = ok(&aws
        .op(
            key,
            "CreateJobQueue",
            json!({
                "jobQueueName": jq, "jobQueueType": "SAGEMAKER_TRAINING", "state": "ENABLED",
                "priority": 1, "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": se}],
                "schedulingPolicyArn": sp_arn,
            }),
        )
        .await);
    assert_eq!(
        r,
        json!({"jobQueueName": jq, "jobQueueArn": arn(&format!("job-queue/{jq}"))})
    );
    sp_arn
}

/// Disables quota share `arn`, then deletes it, as the admin.
async fn delete_share(aws: &Aws, arn: &str) {
    let (key, disable) = (
        &aws.admin,
        json!({"quotaShareArn": arn, "state": "DISABLED"}),
    );
    ok(&aws.op(key, "UpdateQuotaShare", disable).await);
    ok(&aws
        .op(key, "DeleteQuotaShare", json!({"quotaShareArn": arn}))
        .await);
}

fn share_body(jq: &str, name: &str, strategy: &str, itype: &str, units: u32) -> Value {
    json!({
        "quotaShareName": name, "jobQueue": jq,
        "capacityLimits": [{"capacityUnit": itype, "maxCapacity": units}],
        "resourceSharingConfiguration": {"strategy": strategy},
        "preemptionConfiguration": {"inSharePreemption": "DISABLED"}, "state": "ENABLED",
    })
}

#[tokio::test]
async fn objects_are_made_described_listed_paged_updated_and_deleted() {
    let aws = Aws::new(State::new());
    let key = aws.admin.clone();
    let sp_arn = make_queue(&aws, "sp", "se", "jq", 3).await;

    // Service environments.
    let r = ok(&aws
        .op(
            &key,
            "DescribeServiceEnvironments",
            json!({"serviceEnvironments": ["se"]}),
        )
        .await);
    let envs = r["serviceEnvironments"].as_array().unwrap();
    assert_eq!(envs.len(), 1);
    assert_eq!(
        (envs[0]["state"].clone(), envs[0]["status"].clone()),
        (json!("ENABLED"), json!("VALID"))
    );
    assert_eq!(
        envs[0]["capacityLimits"],
        json!([{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}])
    );
    assert_eq!(
        envs[0]["serviceEnvironmentType"],
        json!("SAGEMAKER_TRAINING")
    );
    ok(&aws
        .op(&key, "UpdateServiceEnvironment", json!({"serviceEnvironment": "se", "capacityLimits": [{"maxCapacity": 4, "capacityUnit": "ml.g5.xlarge"}]}))
        .await);
    let r = ok(&aws
        .op(
            &key,
            "DescribeServiceEnvironments",
            json!({"serviceEnvironments": [arn("service-environment/se")]}),
        )
        .await);
    // 4 A10Gs read back in the largest type of the unit that divides them.
    assert_eq!(
        r["serviceEnvironments"][0]["capacityLimits"],
        json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.12xlarge"}])
    );

    // Job queues.
    let r = ok(&aws
        .op(&key, "DescribeJobQueues", json!({"jobQueues": ["jq"]}))
        .await);
    let q = &r["jobQueues"][0];
    assert_eq!(q["jobQueueArn"], json!(arn("job-queue/jq")));
    assert_eq!(q["computeEnvironmentOrder"], json!([]));
    assert_eq!(q["jobQueueType"], json!("SAGEMAKER_TRAINING"));
    assert_eq!(q["schedulingPolicyArn"], json!(sp_arn));
    assert_eq!(
        (q["state"].clone(), q["status"].clone()),
        (json!("ENABLED"), json!("VALID"))
    );

    // Scheduling policies.
    let r = ok(&aws.op(&key, "ListSchedulingPolicies", json!({})).await);
    assert_eq!(r["schedulingPolicies"], json!([{"arn": sp_arn}]));
    ok(&aws
        .op(
            &key,
            "UpdateSchedulingPolicy",
            json!({"arn": sp_arn, "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await);
    let r = ok(&aws
        .op(
            &key,
            "DescribeSchedulingPolicies",
            json!({"arns": [sp_arn]}),
        )
        .await);
    let p = &r["schedulingPolicies"][0];
    assert_eq!(p["name"], json!("sp"));
    assert_eq!(
        p["quotaSharePolicy"],
        json!({"idleResourceAssignmentStrategy": "FIFO"})
    );

    // Quota shares: three, one tagged, paged.
    let names = ["qs-a", "qs-b", "qs-c"];
    let mut arns = vec![];
    for n in names {
        let r = ok(&aws
            .op(
                &key,
                "CreateQuotaShare",
                share_body("jq", n, "LEND", "ml.g5.xlarge", 1),
            )
            .await);
        assert_eq!(r["quotaShareName"], json!(n));
        arns.push(r["quotaShareArn"].as_str().unwrap().to_string());
    }
    assert_eq!(arns[0], format!("{}/quota-share/qs-a", arn("job-queue/jq")));
    let mut tagged = share_body("jq", "qs-tagged", "RESERVE", "ml.g5.12xlarge", 1);
    tagged["tags"] = json!({"team": "vision"});
    let t = ok(&aws.op(&key, "CreateQuotaShare", tagged).await)["quotaShareArn"].clone();
    let d = ok(&aws
        .op(&key, "DescribeQuotaShare", json!({"quotaShareArn": t}))
        .await);
    assert_eq!(d["tags"], json!({"team": "vision"}));
    assert_eq!(
        d["capacityLimits"],
        json!([{"capacityUnit": "ml.g5.12xlarge", "maxCapacity": 1}])
    );
    assert_eq!(
        d["resourceSharingConfiguration"],
        json!({"strategy": "RESERVE"})
    );
    delete_share(&aws, t.as_str().unwrap()).await;

    let d = ok(&aws
        .op(
            &key,
            "DescribeQuotaShare",
            json!({"quotaShareArn": arns[0]}),
        )
        .await);
    assert_eq!(d["quotaShareName"], json!("qs-a"));
    assert_eq!(
        (d["status"].clone(), d["state"].clone()),
        (json!("VALID"), json!("ENABLED"))
    );
    assert_eq!(
        d["resourceSharingConfiguration"],
        json!({"strategy": "LEND"})
    );
    assert_eq!(
        d["capacityLimits"],
        json!([{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}])
    );
    let first = ok(&aws
        .op(
            &key,
            "ListQuotaShares",
            json!({"jobQueue": "jq", "maxResults": 1}),
        )
        .await);
    assert_eq!(first["quotaShares"].as_array().unwrap().len(), 1);
    assert!(first["nextToken"].is_string(), "{first}");
    let mut got = vec![];
    let mut token: Option<Value> = None;
    loop {
        let mut req = json!({"jobQueue": "jq", "maxResults": 2});
        if let Some(t) = &token {
            req["nextToken"] = t.clone();
        }
        let page = ok(&aws.op(&key, "ListQuotaShares", req).await);
        for s in page["quotaShares"].as_array().unwrap() {
            got.push(s["quotaShareName"].as_str().unwrap().to_string());
        }
        match page.get("nextToken") {
            Some(t) if !t.is_null() => token = Some(t.clone()),
            _ => break,
        }
    }
    got.sort();
    assert_eq!(got, names);

    ok(&aws
        .op(&key, "UpdateQuotaShare", json!({"quotaShareArn": arns[0], "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}]}))
        .await);
    let d = ok(&aws
        .op(
            &key,
            "DescribeQuotaShare",
            json!({"quotaShareArn": arns[0]}),
        )
        .await);
    assert_eq!(
        d["capacityLimits"],
        json!([{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}])
    );

    // Deletion in the order AWS's samples use: disabled first, or refused.
    client_error(
        &aws.op(&key, "DeleteQuotaShare", json!({"quotaShareArn": arns[0]}))
            .await,
        "DISABLED",
    );
    for a in &arns {
        delete_share(&aws, a).await;
    }
    client_error(
        &aws.op(
            &key,
            "DescribeQuotaShare",
            json!({"quotaShareArn": arns[0]}),
        )
        .await,
        "does not exist",
    );
    client_error(
        &aws.op(&key, "DeleteJobQueue", json!({"jobQueue": "jq"}))
            .await,
        "DISABLED",
    );
    ok(&aws
        .op(
            &key,
            "UpdateJobQueue",
            json!({"jobQueue": "jq", "state": "DISABLED"}),
        )
        .await);
    ok(&aws
        .op(&key, "DeleteJobQueue", json!({"jobQueue": "jq"}))
        .await);
    let r = ok(&aws
        .op(&key, "DescribeJobQueues", json!({"jobQueues": ["jq"]}))
        .await);
    assert_eq!(r["jobQueues"], json!([]));
    ok(&aws
        .op(&key, "DeleteSchedulingPolicy", json!({"arn": sp_arn}))
        .await);
    let r = ok(&aws.op(&key, "ListSchedulingPolicies", json!({})).await);
    assert_eq!(r["schedulingPolicies"], json!([]));
    client_error(
        &aws.op(
            &key,
            "DeleteServiceEnvironment",
            json!({"serviceEnvironment": "se"}),
        )
        .await,
        "DISABLED",
    );
    ok(&aws
        .op(
            &key,
            "UpdateServiceEnvironment",
            json!({"serviceEnvironment": "se", "state": "DISABLED"}),
        )
        .await);
    ok(&aws
        .op(
            &key,
            "DeleteServiceEnvironment",
            json!({"serviceEnvironment": "se"}),
        )
        .await);
    let r = ok(&aws
        .op(
            &key,
            "DescribeServiceEnvironments",
            json!({"serviceEnvironments": ["se"]}),
        )
        .await);
    assert_eq!(r["serviceEnvironments"], json!([]));
    assert!(aws
        .h
        .rig
        .shared
        .read()
        .unwrap()
        .state
        .environments
        .is_empty());
}

#[tokio::test]
async fn refusals_name_the_rule_with_the_codes_and_messages_clients_match() {
    let aws = Aws::new(State::new());
    let key = aws.admin.clone();
    make_queue(&aws, "sp", "se", "jq", 3).await;
    let r = aws
        .op(
            &key,
            "CreateSchedulingPolicy",
            json!({"name": "sp", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await;
    client_error(&r, "Object already exists");
    assert_eq!(
        r.json(),
        json!({"__type": "ClientException", "message": "Object already exists"})
    );
    ok(&aws
        .op(
            &key,
            "CreateQuotaShare",
            share_body("jq", "dup", "LEND", "ml.g5.xlarge", 1),
        )
        .await);
    let before = aws.h.rig.writes();
    for (body, says) in [
        (
            share_body("jq", "dup", "LEND", "ml.g5.xlarge", 1),
            "already exists",
        ),
        (
            share_body("no-such-queue", "qs", "LEND", "ml.g5.xlarge", 1),
            "job queue no-such-queue does not exist",
        ),
        (
            share_body("jq", "qs", "NOPE", "ml.g5.xlarge", 1),
            "Member must satisfy enum value set: [RESERVE, LEND, LEND_AND_BORROW]",
        ),
        (
            {
                let mut b = share_body("jq", "qs", "LEND", "ml.g5.xlarge", 1);
                b["resourceSharingConfiguration"]["borrowLimit"] = json!(100);
                b
            },
            "borrowLimit can only be applied to quota shares with a strategy of LEND_AND_BORROW",
        ),
        (
            share_body("jq", "qs", "LEND", "ml.nope.xlarge", 1),
            "instance type `ml.nope.xlarge` is not configured",
        ),
        (
            share_body("jq", "qs", "LEND", "ml.g5.xlarge", 100_001),
            "Invalid value at 'capacityLimits.1.maxCapacity': must be 0 to 100000",
        ),
    ] {
        client_error(&aws.op(&key, "CreateQuotaShare", body).await, says);
    }
    // A bad parameter is named (a wrong type, a missing member, an enum outside its
    // set, a number out of range); a missing object or a foreign ARN is said to be.
    let env = |name: &str, ty: &str, limits: Value| json!({"serviceEnvironmentName": name, "serviceEnvironmentType": ty, "capacityLimits": limits});
    let one = json!([{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]);
    let three = json!([{"maxCapacity": "three", "capacityUnit": "ml.g5.xlarge"}]);
    let share_arn = format!("{}/quota-share/nope", arn("job-queue/jq"));
    for (op, body, says) in [
        (
            "CreateServiceEnvironment",
            env("se", "SAGEMAKER_TRAINING", one.clone()),
            "Object already exists",
        ),
        (
            "CreateServiceEnvironment",
            env("se2", "SAGEMAKER_TRAINING", three),
            "Invalid value at 'capacityLimits[0].maxCapacity'",
        ),
        (
            "CreateServiceEnvironment",
            env("se2", "SAGEMAKER_TRAINING", Value::Null),
            "Invalid value at 'capacityLimits': is required",
        ),
        (
            "CreateServiceEnvironment",
            env("se2", "ECS", one),
            "Value 'ECS' at 'serviceEnvironmentType'",
        ),
        (
            "ListQuotaShares",
            json!({"jobQueue": "jq", "maxResults": 0}),
            "Invalid value at 'maxResults': must be 1 to 1000",
        ),
        (
            "DeleteJobQueue",
            json!({"jobQueue": "nope"}),
            "does not exist",
        ),
        (
            "DescribeQuotaShare",
            json!({"quotaShareArn": share_arn}),
            "does not exist",
        ),
        (
            "UpdateServiceEnvironment",
            json!({"serviceEnvironment": "nope", "state": "DISABLED"}),
            "service environment nope does not exist",
        ),
        (
            "DescribeJobQueues",
            json!({"jobQueues": ["arn:aws:batch:us-west-2:999999999999:job-queue/jq"]}),
            "999999999999",
        ),
    ] {
        client_error(&aws.op(&key, op, body).await, says);
    }
    // A user may not manage quota objects.
    client_error(
        &aws.op(
            &aws.alice,
            "CreateSchedulingPolicy",
            json!({"name": "sp2", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await,
        "only an admin",
    );
    assert_eq!(
        aws.h.rig.writes(),
        before,
        "a refused request reached the node"
    );
    let r = ok(&aws
        .op(&key, "ListQuotaShares", json!({"jobQueue": "jq"}))
        .await);
    let names: Vec<&str> = r["quotaShares"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["quotaShareName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dup"], "a refused request changed nothing");
}

/// `/v1/tags/<ARN>` with the ARN encoded as botocore encodes a path label.
fn tags_path(arn: &str, query: &str) -> String {
    let enc = arn.replace(':', "%3A").replace('/', "%2F");
    format!("/v1/tags/{enc}{query}")
}

#[tokio::test]
async fn tags_are_set_listed_and_removed() {
    let aws = Aws::new(State::new());
    let key = aws.admin.clone();
    make_queue(&aws, "sp", "se", "jq", 3).await;
    let q = arn("job-queue/jq");
    let r = aws
        .signed(
            &key,
            Method::POST,
            &tags_path(&q, ""),
            json!({"tags": {"owner": "ml", "cost": "7"}})
                .to_string()
                .into_bytes(),
        )
        .await;
    ok(&r);
    let r = aws
        .signed(&key, Method::GET, &tags_path(&q, ""), vec![])
        .await;
    assert_eq!(ok(&r)["tags"], json!({"owner": "ml", "cost": "7"}));
    let r = aws
        .signed(
            &key,
            Method::DELETE,
            &tags_path(&q, "?tagKeys=cost"),
            vec![],
        )
        .await;
    ok(&r);
    let r = aws
        .signed(&key, Method::GET, &tags_path(&q, ""), vec![])
        .await;
    assert_eq!(ok(&r)["tags"], json!({"owner": "ml"}));
    // The same tags are read back by the Describe of the object.
    let r = ok(&aws
        .op(&key, "DescribeJobQueues", json!({"jobQueues": ["jq"]}))
        .await);
    assert_eq!(r["jobQueues"][0]["tags"], json!({"owner": "ml"}));
    // A user may not tag a queue; an ARN of nothing is refused.
    let r = aws
        .signed(
            &aws.alice,
            Method::POST,
            &tags_path(&q, ""),
            json!({"tags": {"x": "y"}}).to_string().into_bytes(),
        )
        .await;
    let (status, ty, _) = aws_error(&r);
    assert_eq!(
        (status, ty.as_str()),
        (400, "ClientException"),
        "{}",
        r.text()
    );
    let r = aws
        .signed(
            &key,
            Method::GET,
            &tags_path(&arn("job-queue/nope"), ""),
            vec![],
        )
        .await;
    client_error(&r, "does not exist");
}

/// Whether an object exists is answered before whether the caller may change it: a
/// user key creating an existing object is told it exists (as AWS's samples expect on
/// a re-run), and deleting a missing one that it is missing.
#[tokio::test]
async fn existence_is_checked_before_authorization() {
    let aws = Aws::new(State::new());
    let sp_arn = make_queue(&aws, "sp", "se", "jq", 3).await;
    let share = share_body("jq", "qs", "LEND", "ml.g5.xlarge", 1);
    ok(&aws.op(&aws.admin, "CreateQuotaShare", share.clone()).await);
    let before = aws.h.rig.writes();
    let alice = aws.alice.clone();
    for (op, body, says) in [
        (
            "CreateQuotaShare",
            share,
            "Object already exists: quota share qs already exists in job queue jq",
        ),
        (
            "CreateSchedulingPolicy",
            json!({"name": "sp", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
            "Object already exists",
        ),
        (
            "CreateServiceEnvironment",
            json!({"serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                   "capacityLimits": [{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]}),
            "Object already exists",
        ),
        (
            "CreateJobQueue",
            json!({"jobQueueName": "jq", "priority": 1, "schedulingPolicyArn": sp_arn,
                   "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}]}),
            "Object already exists",
        ),
        (
            "DeleteSchedulingPolicy",
            json!({"arn": arn("scheduling-policy/nope")}),
            "scheduling policy nope does not exist",
        ),
        (
            "DeleteServiceEnvironment",
            json!({"serviceEnvironment": "nope"}),
            "service environment nope does not exist",
        ),
        (
            "DeleteJobQueue",
            json!({"jobQueue": "nope"}),
            "job queue nope does not exist",
        ),
    ] {
        client_error(&aws.op(&alice, op, body).await, says);
    }
    assert_eq!(
        aws.h.rig.writes(),
        before,
        "a refused request reached the node"
    );
}

/// A refusal says what the caller holds: an access key, not a certificate.
#[tokio::test]
async fn a_refusal_to_a_key_names_keys() {
    let aws = Aws::new(State::new());
    let r = aws
        .op(
            &aws.alice,
            "CreateSchedulingPolicy",
            json!({"name": "sp", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        )
        .await;
    client_error(
        &r,
        "not authorized: user:alice: only an admin access key may manage environments, policies, queues, shares and groups",
    );
    assert!(!r.text().contains("certificate"), "{}", r.text());
}
