"""The AWS Batch-compatible endpoint driven by real AWS clients from PyPI (boto3, the
AWS CLI, the SageMaker SDK's `aws_batch`) against `tranche dev`, with only the
environment `tranche dev` prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from aws_image import demo_image

from conftest import start_dev, stop_dev, tranche_bin

REGION = "us-west-2"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/tranche-train:latest"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def issue_key(dev, user: str, role: str = "user") -> tuple[str, str]:
    out = subprocess.run(
        [tranche_bin(), "keys", "issue", "--user", user, "--role", role, "--json"],
        env=dict(os.environ, TRANCHE_CONFIG=dev.config_of("admin", "admin")),
        capture_output=True, text=True, check=True,
    ).stdout
    k = json.loads(out)
    return k["access_key_id"], k["secret_access_key"]


def client(dev, key: tuple[str, str] | None = None, service: str = "batch"):
    env = dev.aws_env
    kid, secret = key or (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    return boto3.client(
        service, region_name=REGION, endpoint_url=env[f"AWS_ENDPOINT_URL_{service.upper()}"],
        verify=env["AWS_CA_BUNDLE"], aws_access_key_id=kid, aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 2, "mode": "standard"}),
    )


@pytest.fixture(scope="module")
def dev():
    """A `tranche dev` cluster of this module's own: the objects and jobs made here stay
    out of the other modules' cluster."""
    with tempfile.TemporaryDirectory(prefix="tranche-py-aws-") as tmp:
        d = start_dev(Path(tmp))
        try:
            yield d
        finally:
            stop_dev(d)


@pytest.fixture(scope="module")
def admin(dev):
    return client(dev, issue_key(dev, "admin", "admin"))


@pytest.fixture(scope="module")
def user(dev):
    return client(dev)


@pytest.fixture(scope="module")
def image(dev) -> str:
    demo_image(Path(dev.dir) / "images" / "tranche-train")
    return IMAGE


def payload(name: str, *, count: int = 1, itype: str = "ml.g5.xlarge", env: dict | None = None,
            hp: dict | None = None, entry: list[str] | None = None) -> str:
    p: dict[str, Any] = {
        "TrainingJobName": name,
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": hp or {"lr": "0.1"},
        "ResourceConfig": {"InstanceType": itype, "InstanceCount": count, "VolumeSizeInGB": 30},
        "RoleArn": ROLE,
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "OutputDataConfig": {"S3OutputPath": "s3://out/x"},
        "Environment": env or {},
    }
    if entry:
        p["AlgorithmSpecification"]["ContainerEntrypoint"] = entry
    return json.dumps(p)


def code_and_message(e: botocore.exceptions.ClientError) -> tuple[str, str]:
    return e.response["Error"]["Code"], e.response["Error"]["Message"]


def expect_client_error(call: Callable[[], Any], contains: str) -> dict:
    with pytest.raises(botocore.exceptions.ClientError) as ei:
        call()
    code, msg = code_and_message(ei.value)
    assert code == "ClientException", (code, msg)
    assert contains in msg, msg
    # botocore copies the modeled member to the top level, as AWS's samples read it.
    assert ei.value.response["message"] == msg
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return ei.value.response


def wait_for(what: str, cond: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last: {last}")


def status(c, job_id: str) -> str:
    return c.describe_service_job(jobId=job_id)["status"]


def make_queue(admin, units: int = 3, itype: str = "ml.g5.xlarge") -> tuple[str, str, str]:
    """A scheduling policy, an environment of `units` instances and a queue: names."""
    sp, se, jq = uniq("sp"), uniq("se"), uniq("jq")
    sp_arn = admin.create_scheduling_policy(
        name=sp, quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})["arn"]
    admin.create_service_environment(
        serviceEnvironmentName=se, serviceEnvironmentType="SAGEMAKER_TRAINING", state="ENABLED",
        capacityLimits=[{"maxCapacity": units, "capacityUnit": itype}])
    admin.create_job_queue(
        jobQueueName=jq, jobQueueType="SAGEMAKER_TRAINING", state="ENABLED", priority=1,
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": se}],
        schedulingPolicyArn=sp_arn)
    return sp, se, jq


def make_share(admin, jq: str, name: str, strategy: str, *, borrow: int | None = None,
               in_share: str = "DISABLED", units: int = 1, itype: str = "ml.g5.xlarge") -> str:
    rs: dict[str, Any] = {"strategy": strategy}
    if borrow is not None:
        rs["borrowLimit"] = borrow
    return admin.create_quota_share(
        quotaShareName=name, jobQueue=jq,
        capacityLimits=[{"capacityUnit": itype, "maxCapacity": units}],
        resourceSharingConfiguration=rs,
        preemptionConfiguration={"inSharePreemption": in_share}, state="ENABLED",
    )["quotaShareArn"]


@pytest.fixture(scope="module")
def dev_short():
    """A `tranche dev` whose controllers move ended jobs out of their state into
    their history store a second after they end."""
    with tempfile.TemporaryDirectory(prefix="tranche-py-aws-history-") as tmp:
        d = start_dev(Path(tmp), "--job-hot-s", "1")
        try:
            yield d
        finally:
            stop_dev(d)


def test_ended_jobs_are_described_and_listed_after_they_leave_the_state(dev_short):
    import tranche

    demo_image(Path(dev_short.dir) / "images" / "tranche-train")
    admin = client(dev_short, issue_key(dev_short, "admin", "admin"))
    user = client(dev_short)
    sp, se, jq = make_queue(admin)
    qs = uniq("qs")
    make_share(admin, jq, qs, "LEND", units=3)

    def submit(name: str, **kw: Any) -> dict:
        return user.submit_service_job(
            jobName=name, jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=qs,
            serviceRequestPayload=payload(name, **kw))

    done = [submit("done-a"), submit("done-b")]
    bad = submit("broken", entry=["/bin/sh", "-c", "exit 4"])
    sdk = tranche.Cluster.from_config(dev_short.config)
    try:
        for j in done + [bad]:
            wait_for(f"job {j['jobId']} to leave the state",
                     lambda: sdk.job(int(j["jobId"])).archived)
    finally:
        sdk.close()
    d = user.describe_service_job(jobId=done[0]["jobArn"])
    assert (d["status"], d["jobName"], d["quotaShareName"]) == ("SUCCEEDED", "done-a", qs)
    assert d["jobQueue"].endswith(f":job-queue/{jq}") and d["stoppedAt"] >= d["startedAt"] > 0
    assert user.describe_service_job(jobId=bad["jobId"])["status"] == "FAILED"
    ok = user.list_service_jobs(jobQueue=jq, jobStatus="SUCCEEDED")["jobSummaryList"]
    assert sorted(j["jobId"] for j in ok) == sorted(j["jobId"] for j in done)
    assert all(j["status"] == "SUCCEEDED" for j in ok)
    failed = user.list_service_jobs(jobQueue=jq, jobStatus="FAILED")["jobSummaryList"]
    assert [j["jobId"] for j in failed] == [bad["jobId"]]
    # The paging token carries on through the history.
    pages = list(user.get_paginator("list_service_jobs").paginate(
        jobQueue=jq, jobStatus="SUCCEEDED", PaginationConfig={"PageSize": 1}))
    assert [[j["jobId"] for j in p["jobSummaryList"]] for p in pages if p["jobSummaryList"]] == \
        [[j["jobId"]] for j in ok]
    expect_client_error(lambda: user.list_service_jobs(
        jobQueue=jq, jobStatus="SUCCEEDED", nextToken="nope"), "nextToken")
    # Nothing of them is RUNNING any more.
    assert user.list_service_jobs(jobQueue=jq)["jobSummaryList"] == []


def test_objects_are_made_described_listed_paged_and_deleted(dev, admin):
    sp, se, jq = make_queue(admin)
    envs = admin.describe_service_environments(serviceEnvironments=[se])["serviceEnvironments"]
    assert envs[0]["state"] == "ENABLED" and envs[0]["status"] == "VALID"
    assert envs[0]["capacityLimits"] == [{"maxCapacity": 3, "capacityUnit": "ml.g5.xlarge"}]
    q = admin.describe_job_queues(jobQueues=[jq])["jobQueues"][0]
    assert q["jobQueueArn"].endswith(f":job-queue/{jq}")
    assert q["computeEnvironmentOrder"] == [] and q["jobQueueType"] == "SAGEMAKER_TRAINING"
    sp_arn = admin.list_scheduling_policies()["schedulingPolicies"]
    sp_arn = [p["arn"] for p in sp_arn if p["arn"].endswith("/" + sp)][0]
    admin.update_scheduling_policy(arn=sp_arn, quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})
    (p,) = admin.describe_scheduling_policies(arns=[sp_arn])["schedulingPolicies"]
    assert p["name"] == sp and p["quotaSharePolicy"] == {"idleResourceAssignmentStrategy": "FIFO"}
    admin.update_service_environment(serviceEnvironment=se, capacityLimits=[{"maxCapacity": 4, "capacityUnit": "ml.g5.xlarge"}])
    envs = admin.describe_service_environments(serviceEnvironments=[se])["serviceEnvironments"]
    # 4 A100s read back in the largest type of the unit that divides them.
    assert envs[0]["capacityLimits"] == [{"maxCapacity": 1, "capacityUnit": "ml.g5.12xlarge"}]
    names = [uniq("qs") for _ in range(3)]
    arns = [make_share(admin, jq, n, "LEND") for n in names]
    tagged = admin.create_quota_share(
        quotaShareName=uniq("qs"), jobQueue=jq, capacityLimits=[{"capacityUnit": "ml.g5.12xlarge", "maxCapacity": 1}],
        resourceSharingConfiguration={"strategy": "RESERVE"}, preemptionConfiguration={"inSharePreemption": "DISABLED"},
        tags={"team": "vision"})
    d = admin.describe_quota_share(quotaShareArn=tagged["quotaShareArn"])
    assert d["tags"] == {"team": "vision"}
    assert d["capacityLimits"] == [{"capacityUnit": "ml.g5.12xlarge", "maxCapacity": 1}]  # 4 A100s
    admin.update_quota_share(quotaShareArn=tagged["quotaShareArn"], state="DISABLED")
    admin.delete_quota_share(quotaShareArn=tagged["quotaShareArn"])
    assert arns[0] == f"{q['jobQueueArn']}/quota-share/{names[0]}"
    d = admin.describe_quota_share(quotaShareArn=arns[0])
    assert d["quotaShareName"] == names[0] and d["status"] == "VALID" and d["state"] == "ENABLED"
    assert d["resourceSharingConfiguration"] == {"strategy": "LEND"}
    # Paging: one share a page, then the paginator.
    first = admin.list_quota_shares(jobQueue=jq, maxResults=1)
    assert len(first["quotaShares"]) == 1 and "nextToken" in first
    pages = admin.get_paginator("list_quota_shares").paginate(
        jobQueue=jq, PaginationConfig={"PageSize": 2})
    got = [s["quotaShareName"] for p in pages for s in p["quotaShares"]]
    assert sorted(got) == sorted(names)
    # The same objects as `tranche apply` makes: `tranche shares` lists them ...
    out = subprocess.run([tranche_bin(), "shares"], capture_output=True, text=True,
                         env=dict(os.environ, TRANCHE_CONFIG=dev.config), check=True).stdout
    assert all(n in out for n in names), out
    # ... and the dev cluster's own shares (made by its policy) are quota shares here.
    demo = {s["quotaShareName"] for s in admin.list_quota_shares(jobQueue="q")["quotaShares"]}
    assert {"research", "vision", "nlp"} <= demo
    # Update, then the deletion order AWS's samples use.
    admin.update_quota_share(quotaShareArn=arns[0], capacityLimits=[{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}])
    d = admin.describe_quota_share(quotaShareArn=arns[0])
    assert d["capacityLimits"] == [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}]
    expect_client_error(lambda: admin.delete_quota_share(quotaShareArn=arns[0]), "DISABLED")
    for a in arns:
        admin.update_quota_share(quotaShareArn=a, state="DISABLED")
        admin.delete_quota_share(quotaShareArn=a)
    expect_client_error(lambda: admin.describe_quota_share(quotaShareArn=arns[0]), "does not exist")
    expect_client_error(lambda: admin.delete_job_queue(jobQueue=jq), "DISABLED")
    admin.update_job_queue(jobQueue=jq, state="DISABLED")
    admin.delete_job_queue(jobQueue=jq)
    sps = [p["arn"] for p in admin.list_scheduling_policies()["schedulingPolicies"] if p["arn"].endswith("/" + sp)]
    admin.delete_scheduling_policy(arn=sps[0])
    admin.update_service_environment(serviceEnvironment=se, state="DISABLED")
    admin.delete_service_environment(serviceEnvironment=se)
    assert admin.describe_service_environments(serviceEnvironments=[se])["serviceEnvironments"] == []


def test_refusals_name_the_rule_with_the_codes_and_messages_clients_match(admin):
    sp, se, jq = make_queue(admin)
    resp = expect_client_error(
        lambda: admin.create_scheduling_policy(name=sp, quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}),
        "Object already exists")
    assert resp["message"] == "Object already exists"
    expect_client_error(
        lambda: admin.create_service_environment(
            serviceEnvironmentName=se, serviceEnvironmentType="SAGEMAKER_TRAINING",
            capacityLimits=[{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]),
        "Object already exists")
    make_share(admin, jq, "dup-" + jq, "LEND")
    expect_client_error(lambda: make_share(admin, jq, "dup-" + jq, "LEND"), "already exists")
    expect_client_error(lambda: make_share(admin, "no-such-queue", uniq("qs"), "LEND"), "job queue no-such-queue does not exist")
    expect_client_error(lambda: make_share(admin, jq, uniq("qs"), "NOPE"), "Member must satisfy enum value set: [RESERVE, LEND, LEND_AND_BORROW]")
    expect_client_error(lambda: make_share(admin, jq, uniq("qs"), "LEND", borrow=100), "borrowLimit can only be applied to quota shares with a strategy of LEND_AND_BORROW")
    expect_client_error(lambda: make_share(admin, jq, uniq("qs"), "LEND", itype="ml.nope.xlarge"), "instance type `ml.nope.xlarge` is not configured")
    expect_client_error(
        lambda: admin.create_service_environment(
            serviceEnvironmentName=uniq("se"), serviceEnvironmentType="ECS",
            capacityLimits=[{"maxCapacity": 1, "capacityUnit": "ml.g5.xlarge"}]),
        "serviceEnvironmentType")
    # A refused request changed nothing.
    names = [s["quotaShareName"] for s in admin.list_quota_shares(jobQueue=jq)["quotaShares"]]
    assert names == ["dup-" + jq]


def test_signatures_keys_and_ownership_are_checked(dev, admin, user, image):
    env = dev.aws_env
    bad = client(dev, (env["AWS_ACCESS_KEY_ID"], "x" * 40))
    with pytest.raises(botocore.exceptions.ClientError) as ei:
        bad.list_scheduling_policies()
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert code_and_message(ei.value)[0] == "InvalidSignatureException"
    unknown = client(dev, ("TK" + "A" * 18, "x" * 40))
    with pytest.raises(botocore.exceptions.ClientError) as ei:
        unknown.list_scheduling_policies()
    assert code_and_message(ei.value)[0] == "UnrecognizedClientException"
    kid, secret = issue_key(dev, "mallory")
    mallory = client(dev, (kid, secret))
    mallory.list_scheduling_policies()
    subprocess.run([tranche_bin(), "keys", "revoke", kid], check=True, capture_output=True,
                   env=dict(os.environ, TRANCHE_CONFIG=dev.config_of("admin", "admin")))
    with pytest.raises(botocore.exceptions.ClientError) as ei:
        mallory.list_scheduling_policies()
    assert code_and_message(ei.value)[0] == "UnrecognizedClientException"
    # A user may not manage quota objects, nor act on another user's job.
    expect_client_error(
        lambda: user.create_scheduling_policy(name=uniq("sp"), quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"}),
        "only an admin")
    bob = client(dev, issue_key(dev, "bob"))
    job = bob.submit_service_job(
        jobName="bobs", jobQueue="q", serviceJobType="SAGEMAKER_TRAINING", quotaShareName="research",
        serviceRequestPayload=payload("bobs", itype="ml.p5.4xlarge", entry=["/bin/sh", "-c", "sleep 30"]))
    # Another user's job is answered as one that does not exist: ids are no oracle.
    expect_client_error(lambda: user.terminate_service_job(jobId=job["jobArn"], reason="mine now"),
                        "does not exist, or user:dev may not terminate it")
    expect_client_error(lambda: user.update_service_job(jobId=job["jobArn"], schedulingPriority=9), "may change only its own jobs")
    bob.terminate_service_job(jobId=job["jobArn"], reason="done")


def test_service_jobs_submit_describe_list_update_terminate_and_snapshot(dev, admin, user, image):
    sp, se, jq = make_queue(admin)
    qs = uniq("qs")
    make_share(admin, jq, qs, "LEND", units=3)
    token = uuid.uuid4().hex
    args = dict(jobName="train-a", jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING",
                quotaShareName=qs, schedulingPriority=7, tags={"team": "a"},
                timeoutConfig={"attemptDurationSeconds": 300},
                retryStrategy={"attempts": 2},
                serviceRequestPayload=payload("train-a", env={"SLEEP_S": "120"}), clientToken=token)
    sub = user.submit_service_job(**args)
    assert sub["jobArn"].endswith(f":service-job/{sub['jobId']}")
    # A retried submit with the same client token is the same job.
    assert user.submit_service_job(**args)["jobId"] == sub["jobId"]
    wait_for("RUNNING", lambda: status(user, sub["jobArn"]) == "RUNNING")
    d = user.describe_service_job(jobId=sub["jobArn"])
    assert d["jobName"] == "train-a" and d["quotaShareName"] == qs
    assert d["jobQueue"].endswith(f":job-queue/{jq}")
    assert d["schedulingPriority"] == 7 and d["tags"] == {"team": "a"}
    assert d["timeoutConfig"] == {"attemptDurationSeconds": 300} and d["retryStrategy"]["attempts"] == 2
    assert d["capacityUsage"] == [{"capacityUnit": "ml.g5.xlarge", "quantity": 1.0}]
    assert d["latestAttempt"]["serviceResourceId"]["name"] == "TrainingJobArn"
    assert d["latestAttempt"]["serviceResourceId"]["value"].startswith("arn:aws:sagemaker:us-west-2:123456789012:training-job/")
    assert json.loads(d["serviceRequestPayload"])["TrainingJobName"] == "train-a"
    assert "preemptionSummary" not in d
    # Listing: RUNNING by default; by name (prefix, any case); by share and status.
    running = user.list_service_jobs(jobQueue=jq)["jobSummaryList"]
    assert [j["jobId"] for j in running] == [sub["jobId"]]
    more = [user.submit_service_job(jobName=f"train-b{i}", jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING",
                                    quotaShareName=qs, serviceRequestPayload=payload(f"train-b{i}", count=1, env={"SLEEP_S": "120"}))
            for i in range(3)]
    by_name = user.list_service_jobs(jobQueue=jq, filters=[{"name": "JOB_NAME", "values": ["TRAIN-B*"]}])["jobSummaryList"]
    assert [j["jobName"] for j in by_name] == ["train-b2", "train-b1", "train-b0"]  # newest first
    pages = list(user.get_paginator("list_service_jobs").paginate(
        jobQueue=jq, filters=[{"name": "JOB_NAME", "values": ["train-*"]}], PaginationConfig={"PageSize": 2}))
    assert [len(p["jobSummaryList"]) for p in pages] == [2, 2]
    wait_for("two more RUNNING", lambda: len(user.list_service_jobs(
        jobQueue=jq, jobStatus="RUNNING", filters=[{"name": "QUOTA_SHARE_NAME", "values": [qs]}])["jobSummaryList"]) == 3)
    runnable = user.list_service_jobs(jobQueue=jq, jobStatus="RUNNABLE")["jobSummaryList"]
    assert len(runnable) == 1
    snap = user.get_job_queue_snapshot(jobQueue=jq)
    assert [j["jobArn"] for j in snap["frontOfQueue"]["jobs"]] == [runnable[0]["jobArn"]]
    assert [j["jobArn"] for j in snap["frontOfQuotaShares"]["quotaShares"][qs]] == [runnable[0]["jobArn"]]
    assert snap["queueUtilization"]["totalCapacityUsage"] == [{"capacityUnit": "ml.g5.xlarge", "quantity": 3.0}]
    top = snap["queueUtilization"]["quotaShareUtilization"]["topCapacityUtilization"]
    assert top == [{"quotaShareName": qs, "capacityUsage": [{"capacityUnit": "ml.g5.xlarge", "quantity": 3.0}]}]
    # Update and terminate, one and many (an unknown job is an error, as another user's
    # job is: the answer tells nothing of which ids exist).
    up = user.update_service_job(jobId=runnable[0]["jobId"], schedulingPriority=42)
    assert up["jobId"] == runnable[0]["jobId"]
    assert user.describe_service_job(jobId=runnable[0]["jobArn"])["schedulingPriority"] == 42
    user.terminate_service_job(jobId=sub["jobId"], reason="enough")
    wait_for("FAILED", lambda: status(user, sub["jobId"]) == "FAILED")
    d = user.describe_service_job(jobId=sub["jobId"])
    assert d["isTerminated"] is True
    bulk = user.terminate_service_jobs(jobs=[m["jobId"] for m in more] + ["999999"], reason="cleanup")
    assert sorted(bulk["successful"]) == sorted([m["jobId"] for m in more])
    assert [e["job"] for e in bulk["errors"]] == ["999999"], bulk["errors"]
    # Tags on objects, through the tag operations.
    q_arn = admin.describe_job_queues(jobQueues=[jq])["jobQueues"][0]["jobQueueArn"]
    admin.tag_resource(resourceArn=q_arn, tags={"owner": "ml", "cost": "7"})
    admin.untag_resource(resourceArn=q_arn, tagKeys=["cost"])
    assert admin.list_tags_for_resource(resourceArn=q_arn)["tags"] == {"owner": "ml"}
    assert user.list_tags_for_resource(resourceArn=sub["jobArn"])["tags"] == {"team": "a"}
    # Bad input names its member.
    expect_client_error(lambda: user.submit_service_job(
        jobName="x", jobQueue=jq, serviceJobType="NOPE", quotaShareName=qs, serviceRequestPayload=payload("x")),
        "serviceJobType")
    expect_client_error(lambda: user.submit_service_job(
        jobName="x", jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=qs,
        serviceRequestPayload=json.dumps({**json.loads(payload("x")), "InputDataConfig": [
            {"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/k", "S3DataType": "ManifestFile"}}}]})),
        "channel `train`: `ManifestFile` is not served; give S3Prefix")
    expect_client_error(lambda: user.submit_service_job(
        jobName="x", jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=qs,
        serviceRequestPayload=json.dumps({**json.loads(payload("x")), "AlgorithmSpecification": {"TrainingImage": "nope:1"}})),
        "image catalog")


def test_the_aws_cli_works_with_only_the_endpoint_variable(dev, admin):
    sp, se, jq = make_queue(admin)
    kid, secret = issue_key(dev, "admin", "admin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL_BATCH=dev.aws_env["AWS_ENDPOINT_URL_BATCH"],
               AWS_CA_BUNDLE=dev.aws_env["AWS_CA_BUNDLE"], AWS_DEFAULT_REGION=REGION,
               AWS_ACCESS_KEY_ID=kid, AWS_SECRET_ACCESS_KEY=secret,
               AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    aws = [str(Path(sys.executable).parent / "aws"), "batch"]
    qs = uniq("qs")
    out = subprocess.run(aws + [
        "create-quota-share", "--quota-share-name", qs, "--job-queue", jq,
        "--capacity-limits", "capacityUnit=ml.g5.xlarge,maxCapacity=1",
        "--resource-sharing-configuration", "strategy=LEND_AND_BORROW,borrowLimit=200",
        "--preemption-configuration", "inSharePreemption=ENABLED"],
        env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["quotaShareName"] == qs
    out = subprocess.run(aws + ["list-service-jobs", "--job-queue", jq, "--job-status", "RUNNABLE"],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["jobSummaryList"] == []
    out = subprocess.run(aws + ["create-quota-share", "--quota-share-name", qs, "--job-queue", jq,
                                "--capacity-limits", "capacityUnit=ml.g5.xlarge,maxCapacity=1",
                                "--resource-sharing-configuration", "strategy=LEND",
                                "--preemption-configuration", "inSharePreemption=DISABLED"],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 255
    assert "An error occurred (ClientException) when calling the CreateQuotaShare operation" in out.stderr
    assert "already exists" in out.stderr


def test_the_quota_management_story_of_the_getting_started_guide(dev, admin, user, image):
    """One queue over 3 x ml.g5.xlarge; QS1 borrows QS2's idle instance, QS2's own job
    reclaims it, and raising a waiting job's priority preempts a lower one in QS1."""
    sp, se, jq = make_queue(admin, units=3)
    qs1, qs2, qs3 = uniq("QS1"), uniq("QS2"), uniq("QS3")
    make_share(admin, jq, qs1, "LEND_AND_BORROW", borrow=200, in_share="ENABLED")
    make_share(admin, jq, qs2, "LEND")
    make_share(admin, jq, qs3, "RESERVE")

    def submit(name: str, share: str, prio: int) -> str:
        return user.submit_service_job(
            jobName=name, jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=share,
            schedulingPriority=prio,
            serviceRequestPayload=payload(name, env={"SLEEP_S": "300"}))["jobArn"]

    high = submit("qs1-high", qs1, 3)
    wait_for("high RUNNING", lambda: status(user, high) == "RUNNING")
    med = submit("qs1-med", qs1, 2)
    wait_for("med RUNNING on QS2's idle instance", lambda: status(user, med) == "RUNNING")
    low = submit("qs1-low", qs1, 1)
    time.sleep(2)
    assert status(user, low) == "RUNNABLE"  # QS3 reserves its instance
    q2 = submit("qs2-job-1", qs2, 1)
    wait_for("med preempted back to RUNNABLE", lambda: status(user, med) == "RUNNABLE", 90)
    wait_for("qs2's job RUNNING", lambda: status(user, q2) == "RUNNING", 60)
    d = user.describe_service_job(jobId=med)
    assert d["preemptionSummary"]["preemptedAttemptCount"] == 1
    reason = d["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"]
    # It got its checkpoint signal and exited within its grace period; then requeued.
    assert "reclaimed" in reason and "exited with code 0 within its grace period" in reason, reason
    assert status(user, high) == "RUNNING"
    user.update_service_job(jobId=low, schedulingPriority=4)
    wait_for("low RUNNING after its priority rose", lambda: status(user, low) == "RUNNING", 90)
    d = user.describe_service_job(jobId=high)
    assert d["status"] == "RUNNABLE"
    assert d["preemptionSummary"]["preemptedAttemptCount"] == 1
    assert "higher-priority" in d["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"]
    bulk = user.terminate_service_jobs(jobs=[high, med, low, q2], reason="end of the story")
    assert bulk["errors"] == []


def test_the_sagemaker_sdk_submits_lists_waits_updates_and_terminates(dev, admin, image, monkeypatch):
    for k, v in dev.aws_env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")
    from sagemaker.train.aws_batch.training_queue import TrainingQueue
    from sagemaker.train.configs import Compute, OutputDataConfig, StoppingCondition
    from sagemaker.train.model_trainer import ModelTrainer

    sp, se, jq = make_queue(admin, units=2)
    qs = uniq("qs")
    make_share(admin, jq, qs, "LEND", units=2)

    def trainer(count: int, hp: dict, env: dict | None = None) -> ModelTrainer:
        return ModelTrainer(
            training_image=IMAGE, role=ROLE, base_job_name="sdk-job",
            compute=Compute(instance_type="ml.g5.xlarge", instance_count=count),
            stopping_condition=StoppingCondition(max_runtime_in_seconds=300),
            output_data_config=OutputDataConfig(s3_output_path="s3://tranche-out/run"),
            hyperparameters=hp, environment=env or {})

    queue = TrainingQueue(jq)
    job = queue.submit(trainer(2, {"lr": "0.25", "epochs": "3"}), inputs=None,
                       job_name="sdk-gang", quota_share_name=qs, priority=5)
    desc = job.wait(timeout=120)
    assert desc["status"] == "SUCCEEDED", desc
    jid = desc["jobId"]
    import tranche
    c = tranche.Cluster.from_config(dev.config)
    logs = c.job(int(jid)).logs()
    c.close()
    assert "args: train" in logs, logs
    assert '"lr": "0.25"' in logs or '"lr":"0.25"' in logs, logs
    assert "hosts: [\"algo-1\", \"algo-2\"]" in logs or 'hosts: ["algo-1","algo-2"]' in logs, logs
    assert "lr: 0.25" in logs and "model: /opt/ml/model" in logs, logs
    found = queue.list_jobs(job_name="sdk-gang")
    assert [j.job_arn for j in found] == [job.job_arn]
    assert queue.get_job("sdk-gang").job_arn == job.job_arn
    long = queue.submit(trainer(1, {"lr": "1"}, {"SLEEP_S": "300"}), inputs=None,
                        job_name="sdk-long", quota_share_name=qs, priority=1)
    wait_for("sdk-long RUNNING", lambda: long.describe()["status"] == "RUNNING")
    by_share = queue.list_jobs_by_share(status="RUNNING", quota_share_name=qs)
    assert [j.job_arn for j in by_share] == [long.job_arn]
    assert [j.job_arn for j in queue.list_jobs()] == [long.job_arn]  # RUNNING is the default
    long.update(scheduling_priority=9)
    assert long.describe()["schedulingPriority"] == 9
    long.terminate(reason="stop it")
    wait_for("sdk-long FAILED", lambda: long.describe()["status"] == "FAILED")
    assert long.describe()["isTerminated"] is True


def test_the_getting_started_fifo_queue_runs_awss_pytorch_image(dev, admin, user, image):
    """AWS's getting-started notebook's plain queue (an environment in NUM_INSTANCES, a
    queue without a scheduling policy, a submit without quotaShareName) and its PyTorch
    training image without ContainerEntrypoint, which `tranche dev`'s catalog runs as its
    demo image: the image's entrypoint runs with `train`."""
    se, jq = uniq("fifo-se"), uniq("fifo-jq")
    admin.create_service_environment(
        serviceEnvironmentName=se, serviceEnvironmentType="SAGEMAKER_TRAINING", state="ENABLED",
        capacityLimits=[{"maxCapacity": 1, "capacityUnit": "NUM_INSTANCES"}])
    admin.create_job_queue(
        jobQueueName=jq, jobQueueType="SAGEMAKER_TRAINING", state="ENABLED", priority=1,
        serviceEnvironmentOrder=[{"order": 1, "serviceEnvironment": se}])
    q = admin.describe_job_queues(jobQueues=[jq])["jobQueues"][0]
    assert (q["state"], q["status"]) == ("ENABLED", "VALID") and "schedulingPolicyArn" not in q, q
    assert admin.list_quota_shares(jobQueue=jq)["quotaShares"] == []
    p = json.loads(payload("fifo"))
    p["AlgorithmSpecification"] = {
        "TrainingImage": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311",
        "TrainingInputMode": "File"}
    job = user.submit_service_job(
        jobName="fifo", jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING",
        serviceRequestPayload=json.dumps(p))
    wait_for("the FIFO job to succeed", lambda: status(user, job["jobArn"]) == "SUCCEEDED")
    d = user.describe_service_job(jobId=job["jobArn"])
    assert "quotaShareName" not in d and d["stoppedAt"] >= d["startedAt"] > 0, d
    assert "timeoutConfig" not in d, d
    import tranche
    c = tranche.Cluster.from_config(dev.config)
    logs = c.job(int(job["jobId"])).logs()
    c.close()
    assert "args: train" in logs and "model: /opt/ml/model" in logs, logs


def test_the_guides_snippet_runs_as_written(dev, image):
    """The guide's boto3 snippet (docs/api/aws-batch.md), in a shell with `tranche dev`'s two
    export lines."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "api" / "aws-batch.md").read_text()
    section = readme[readme.index("## The AWS Batch-compatible endpoint"):]
    snippet = section[section.index("```python\n") + 10:]
    snippet = snippet[: snippet.index("```")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(dev.aws_env)
    env.update(dev.aws_admin_env)
    env.update(AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    out = subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    arn, st = out.stdout.split()
    assert ":service-job/" in arn and st in ("SUBMITTED", "RUNNABLE", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"), out.stdout
    c = client(dev)
    wait_for("the snippet's job to succeed", lambda: status(c, arn) == "SUCCEEDED")
    assert "team-a" in {s["quotaShareName"] for s in c.list_quota_shares(jobQueue="q")["quotaShares"]}


def test_sagemaker_and_cloudwatch_logs_follow_a_training_job(dev, admin, user, image, monkeypatch):
    """SageMaker's DescribeTrainingJob and CloudWatch Logs through boto3 clients that find
    the endpoint in the variables `tranche dev` prints: a training job described through
    its states, its log stream, and its lines read forward, polled, and backward; the
    SageMaker SDK's own log reader and `get_model_trainer()` read them too."""
    for k, v in dev.aws_env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    assert dev.aws_env["AWS_ENDPOINT_URL_SAGEMAKER"] == dev.aws_env["AWS_ENDPOINT_URL_BATCH"]
    assert dev.aws_env["AWS_ENDPOINT_URL_CLOUDWATCH_LOGS"] == dev.aws_env["AWS_ENDPOINT_URL_BATCH"]
    sm, logs = boto3.client("sagemaker"), boto3.client("logs")
    group = "/aws/sagemaker/TrainingJobs"

    sp, se, jq = make_queue(admin)
    qs = uniq("qs")
    make_share(admin, jq, qs, "LEND", units=3)
    # The job prints three lines, waits for a file in its input channel, then prints one
    # more to stdout and one to stderr.
    ctl = uniq("ctl")
    (Path(dev.dir) / "data" / ctl).mkdir()
    script = ('echo "line 1"; echo "line 2"; echo "line 3"; '
              'while [ ! -e /opt/ml/input/data/ctl/go ]; do sleep 1; done; '
              'echo "line 4"; echo "done" >&2')
    p = json.loads(payload("watched", entry=["/bin/sh", "-c", script]))
    p["InputDataConfig"] = [{"ChannelName": "ctl", "DataSource": {"FileSystemDataSource": {
        "FileSystemId": "fs-dev", "FileSystemType": "EFS", "FileSystemAccessMode": "ro",
        "DirectoryPath": f"/{ctl}"}}}]
    job = user.submit_service_job(jobName="watched", jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING",
                                  quotaShareName=qs, serviceRequestPayload=json.dumps(p))
    wait_for("RUNNING", lambda: status(user, job["jobArn"]) == "RUNNING")
    arn = user.describe_service_job(jobId=job["jobArn"])["latestAttempt"]["serviceResourceId"]["value"]
    name = arn.split("training-job/")[1]
    assert name == f"watched-{job['jobId']}-1"

    d = sm.describe_training_job(TrainingJobName=name)
    assert d["TrainingJobArn"] == arn
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("InProgress", "Training"), d
    steps = [t["Status"] for t in d["SecondaryStatusTransitions"]]
    assert steps[0] == "Starting" and steps[-1] == "Training", steps
    assert d["SecondaryStatusTransitions"][-1]["StartTime"] == d["TrainingStartTime"]
    assert d["CreationTime"] <= d["TrainingStartTime"] and "TrainingEndTime" not in d
    assert d["ResourceConfig"] == p["ResourceConfig"] and d["RoleArn"] == ROLE
    assert d["AlgorithmSpecification"]["ContainerEntrypoint"][0] == "/bin/sh"
    assert d["StoppingCondition"] == {"MaxRuntimeInSeconds": 600}
    assert d["OutputDataConfig"] == {"S3OutputPath": "s3://out/x"}
    # Another user's key sees no such training job; a name never given is not found.
    other = boto3.client("sagemaker", aws_access_key_id=(bob := issue_key(dev, "bob"))[0],
                         aws_secret_access_key=bob[1])
    for c, n in [(other, name), (sm, f"watched-{job['jobId']}-2")]:
        with pytest.raises(botocore.exceptions.ClientError) as ei:
            c.describe_training_job(TrainingJobName=n)
        assert code_and_message(ei.value)[0] == "ValidationException", ei.value.response
        assert "Requested resource not found" in code_and_message(ei.value)[1]

    streams = wait_for("a log stream", lambda: logs.describe_log_streams(
        logGroupName=group, logStreamNamePrefix=name + "/", orderBy="LogStreamName")["logStreams"])
    stream = streams[0]["logStreamName"]
    assert len(streams) == 1 and stream.startswith(f"{name}/algo-1-"), streams

    def events(**kw) -> dict:
        return logs.get_log_events(logGroupName=group, logStreamName=stream, **kw)

    first = wait_for("three lines", lambda: (r := events(startFromHead=True))["events"] and len(r["events"]) == 3 and r)
    assert [e["message"] for e in first["events"]] == ["line 1", "line 2", "line 3"]
    start_ms = int(d["TrainingStartTime"].timestamp() * 1000)
    assert {e["timestamp"] for e in first["events"]} == {start_ms}
    # Polling with the forward token: nothing new yet, and the same token.
    again = events(nextToken=first["nextForwardToken"], startFromHead=True)
    assert again["events"] == [] and again["nextForwardToken"] == first["nextForwardToken"]

    (Path(dev.dir) / "data" / ctl / "go").write_text("")
    wait_for("SUCCEEDED", lambda: status(user, job["jobArn"]) == "SUCCEEDED")
    d = sm.describe_training_job(TrainingJobName=name)
    assert d["TrainingJobStatus"] == "Completed", d
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]][-2:] == ["Uploading", "Completed"]
    assert d["TrainingEndTime"] >= d["TrainingStartTime"]
    assert d["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://out/x/{name}/output/model.tar.gz"
    # The rest, from where the poll left off: stdout's last line, then stderr's.
    rest = events(nextToken=first["nextForwardToken"], startFromHead=True)
    assert [e["message"] for e in rest["events"]] == ["line 4", "done"]
    # Without startFromHead: the latest lines; the backward token pages back.
    tail = events(limit=2)
    assert [e["message"] for e in tail["events"]] == ["line 4", "done"]
    back = events(limit=2, nextToken=tail["nextBackwardToken"])
    assert [e["message"] for e in back["events"]] == ["line 2", "line 3"]
    # The time window: the lines carry the attempt's start.
    assert events(startFromHead=True, startTime=start_ms + 1)["events"] == []
    assert len(events(startFromHead=True, endTime=start_ms + 1)["events"]) == 5
    with pytest.raises(botocore.exceptions.ClientError) as ei:
        logs.get_log_events(logGroupName=group, logStreamName=f"{name}/algo-2-1")
    assert code_and_message(ei.value)[0] == "ResourceNotFoundException"

    # The SageMaker SDK's log reader (what its notebooks' log helper calls), and
    # get_model_trainer(), which describes the training job.
    from sagemaker.core.logs import Position, multi_stream_iter
    read = [e["message"] for _, e in multi_stream_iter(logs, group, [stream], {stream: Position(0, 0)})]
    assert read == ["line 1", "line 2", "line 3", "line 4", "done"], read
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")
    from sagemaker.train.aws_batch.training_queued_job import TrainingQueuedJob
    trainer = TrainingQueuedJob(job["jobArn"], "watched").get_model_trainer()
    assert trainer._latest_training_job.training_job_name == name
    assert trainer._latest_training_job.training_job_status == "Completed"
    assert trainer.compute.instance_type == "ml.g5.xlarge"


def s3_client(dev, key: tuple[str, str] | None = None):
    return client(dev, key, "s3")


def test_s3_objects_are_put_read_listed_and_deleted_in_the_users_own_buckets(dev, tmp_path):
    """boto3's S3 client, with the endpoint `tranche dev` prints and the same access keys
    as Batch: buckets and objects made, read, listed and deleted; a multipart upload; the
    files under the store's directory; another user sees none of it; a bad secret is
    refused."""
    s3 = s3_client(dev)
    assert dev.aws_env["AWS_ENDPOINT_URL_S3"] == dev.aws_env["AWS_ENDPOINT_URL_BATCH"]
    bucket = uniq("data")
    s3.create_bucket(Bucket=bucket)
    s3.head_bucket(Bucket=bucket)
    assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.put_object(Bucket=bucket, Key="sets/a/train.csv", Body=b"x,y\n1,2\n")
    s3.put_object(Bucket=bucket, Key="sets/a/sub/val.csv", Body=b"3,4\n")
    s3.put_object(Bucket=bucket, Key="sets/b.csv", Body=b"5\n")
    got = s3.get_object(Bucket=bucket, Key="sets/a/train.csv")
    assert got["Body"].read() == b"x,y\n1,2\n"
    assert s3.head_object(Bucket=bucket, Key="sets/a/sub/val.csv")["ContentLength"] == 4
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="sets/a/")["Contents"]]
    assert sorted(keys) == ["sets/a/sub/val.csv", "sets/a/train.csv"], keys
    listing = s3.list_objects_v2(Bucket=bucket, Prefix="sets/", Delimiter="/")
    assert [p["Prefix"] for p in listing["CommonPrefixes"]] == ["sets/a/"], listing
    assert [o["Key"] for o in listing["Contents"]] == ["sets/b.csv"], listing

    # A multipart upload (the SDK's transfer manager uses one above 8 MiB).
    from boto3.s3.transfer import TransferConfig
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(6 * 1024 * 1024 + 17))
    s3.upload_file(str(big), bucket, "big.bin", Config=TransferConfig(
        multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024))
    assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == big.read_bytes()

    # The objects are files in the user's namespace of the store.
    store = Path(dev.dir) / "s3" / dev.user / bucket
    assert (store / "sets" / "a" / "train.csv").read_bytes() == b"x,y\n1,2\n"
    assert (store / "big.bin").stat().st_size == big.stat().st_size

    # Another user has buckets of their own: none of this one.
    other = s3_client(dev, issue_key(dev, uniq("carol")))
    assert bucket not in [b["Name"] for b in other.list_buckets().get("Buckets", [])]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        other.get_object(Bucket=bucket, Key="sets/a/train.csv")
    assert e.value.response["Error"]["Code"] in ("NoSuchBucket", "NoSuchKey"), e.value.response
    other.create_bucket(Bucket=bucket)  # the same name, the other user's own
    assert other.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    # Keys that climb out of the other user's bucket stay in their own namespace.
    for key in [f"../../{dev.user}/{bucket}/sets/b.csv", f"../{bucket}/../../{dev.user}/{bucket}/sets/b.csv",
                f"../../../s3/{dev.user}/{bucket}/sets/b.csv"]:
        try:
            got = other.get_object(Bucket=bucket, Key=key)["Body"].read()
        except botocore.exceptions.ClientError as e:
            assert e.response["ResponseMetadata"]["HTTPStatusCode"] in (400, 403, 404), e.response
        else:
            raise AssertionError(f"{key}: read {got!r}")

    # A wrong secret, and a key that does not exist.
    kid = dev.aws_env["AWS_ACCESS_KEY_ID"]
    for key, code in [((kid, "x" * 40), "SignatureDoesNotMatch"),
                      ("TKNOSUCHKEY00000000A x".split(), "InvalidAccessKeyId")]:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3_client(dev, tuple(key)).get_object(Bucket=bucket, Key="sets/b.csv")
        assert e.value.response["Error"]["Code"] == code, e.value.response

    s3.delete_object(Bucket=bucket, Key="sets/b.csv")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key="sets/b.csv")
    assert e.value.response["Error"]["Code"] == "404"
    assert not (store / "sets" / "b.csv").exists()


def test_s3_channels_reach_the_job_and_its_model_comes_back(dev, admin, user, image):
    """A training job whose channel is an S3 prefix finds its objects under
    /opt/ml/input/data/<channel>, as its own copy; what it leaves in /opt/ml/model comes
    back as `<S3OutputPath>/<job name>/output/model.tar.gz`, there once it SUCCEEDED."""
    import io
    import tarfile
    s3 = s3_client(dev)
    b = uniq("train-data")
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="sets/a/values.csv", Body=b"answer,42\n")
    s3.put_object(Bucket=b, Key="sets/a/sub/more.txt", Body=b"more\n")
    s3.put_object(Bucket=b, Key="sets/other.csv", Body=b"not in the channel\n")
    sp, se, jq = make_queue(admin)
    qs = uniq("qs")
    make_share(admin, jq, qs, "LEND", units=3)
    name = uniq("s3-job")
    script = ("cat /opt/ml/input/data/train/values.csv; ls /opt/ml/input/data/train; "
              "ls /opt/ml/input/data/train/sub; "
              "echo changed > /opt/ml/input/data/train/values.csv && "
              "echo weights-of-$TRAINING_JOB_NAME > /opt/ml/model/weights.txt")
    p = json.loads(payload(name, entry=["/bin/sh", "-c", script]))
    p["InputDataConfig"] = [{"ChannelName": "train", "DataSource": {"S3DataSource": {
        "S3DataType": "S3Prefix", "S3Uri": f"s3://{b}/sets/a",
        "S3DataDistributionType": "FullyReplicated"}}}]
    p["OutputDataConfig"] = {"S3OutputPath": f"s3://{b}/models/"}
    job = user.submit_service_job(
        jobName=name, jobQueue=jq, serviceJobType="SAGEMAKER_TRAINING", quotaShareName=qs,
        serviceRequestPayload=json.dumps(p))
    wait_for("the S3 job to succeed", lambda: status(user, job["jobArn"]) == "SUCCEEDED")
    import tranche
    c = tranche.Cluster.from_config(dev.config)
    logs = c.job(int(job["jobId"])).logs()
    c.close()
    assert "answer,42" in logs and "more.txt" in logs, logs
    assert "other.csv" not in logs, logs
    got = s3.get_object(Bucket=b, Key=f"models/{name}/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(got)) as t:
        assert t.getnames() == ["weights.txt"], t.getnames()
        assert t.extractfile("weights.txt").read() == f"weights-of-{name}\n".encode()
    # The job changed its copy, not the object.
    assert s3.get_object(Bucket=b, Key="sets/a/values.csv")["Body"].read() == b"answer,42\n"


SDK_CONFIG = """SchemaVersion: '1.0'
SageMaker:
  PythonSDK:
    Modules:
      TelemetryOptOut: true
      Session:
        DefaultS3Bucket: {bucket}
  TrainingJob:
    RoleArn: {role}
"""


def test_the_sagemaker_sdks_source_code_runs_from_a_local_directory(monkeypatch, tmp_path):
    """`ModelTrainer` with `SourceCode(source_dir=<a local directory>, entry_script=...)`
    through `TrainingQueue.submit`, with the environment `tranche dev` prints and the
    SDK's config file giving the default bucket and role: the SDK uploads the code, its
    drivers and a local input channel to S3, the job runs the SDK's driver, which runs the
    entry script in a Python image; the script reads its input channel and writes a
    model, which comes back as model.tar.gz under the output path."""
    import io
    import tarfile
    from aws_image import python_image
    (tmp_path / "dev").mkdir()
    d = start_dev(tmp_path / "dev")
    try:
        # This cluster's training image is one with bash and Python, as SageMaker's are.
        layout = Path(d.dir) / "images" / "tranche-train"
        import shutil
        shutil.rmtree(layout, ignore_errors=True)
        python_image(layout)
        for k, v in d.aws_env.items():
            monkeypatch.setenv(k, v)
        bucket = "sagemaker-us-west-2-123456789012"
        cfg = tmp_path / "sagemaker.yaml"
        cfg.write_text(SDK_CONFIG.format(bucket=bucket, role=ROLE))
        monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(cfg))
        monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        # boto3's default session keeps the first credentials it found: a fresh one reads
        # this cluster's key (as a fresh kernel would).
        boto3.setup_default_session()
        from sagemaker.train.aws_batch.training_queue import TrainingQueue
        from sagemaker.train.configs import Compute, InputData, SourceCode, StoppingCondition
        from sagemaker.train.model_trainer import ModelTrainer

        admin = client(d, issue_key(d, "admin", "admin"))
        sp, se, jq = make_queue(admin, units=1)
        qs = uniq("qs")
        make_share(admin, jq, qs, "LEND", units=1)

        code = tmp_path / "code"
        (code / "lib").mkdir(parents=True)
        (code / "lib" / "__init__.py").write_text("")
        (code / "lib" / "words.py").write_text("GREETING = 'trained on'\n")
        (code / "train.py").write_text(
            "import os, sys\n"
            "from lib.words import GREETING\n"
            "data = os.environ['SM_CHANNEL_TRAIN']\n"
            "value = open(os.path.join(data, 'values.csv')).read().split(',')[1].strip()\n"
            "print(f'{GREETING} value {value} from {data} with lr', sys.argv[1:])\n"
            "with open(os.path.join(os.environ['SM_MODEL_DIR'], 'model.txt'), 'w') as f:\n"
            "    f.write(f'weights for {value}')\n")
        data = tmp_path / "data"
        data.mkdir()
        (data / "values.csv").write_text("answer,42\n")

        trainer = ModelTrainer(
            training_image=IMAGE, base_job_name="src-job",
            source_code=SourceCode(source_dir=str(code), entry_script="train.py"),
            compute=Compute(instance_type="ml.g5.xlarge", instance_count=1),
            stopping_condition=StoppingCondition(max_runtime_in_seconds=300),
            hyperparameters={"lr": 0.5})
        job = TrainingQueue(jq).submit(
            trainer, inputs=[InputData(channel_name="train", data_source=str(data))],
            job_name="src-job", quota_share_name=qs, priority=1)
        desc = job.wait(timeout=180)
        import tranche
        c = tranche.Cluster.from_config(d.config)
        logs = c.job(int(desc["jobId"])).logs()
        c.close()
        assert desc["status"] == "SUCCEEDED", (desc, logs)
        assert "trained on value 42 from /opt/ml/input/data/train with lr" in logs, logs
        assert "--lr" in logs and "0.5" in logs, logs

        s3 = client(d, service="s3")
        payload = json.loads(desc["serviceRequestPayload"])
        channels = {ch["ChannelName"]: ch["DataSource"]["S3DataSource"]["S3Uri"]
                    for ch in payload["InputDataConfig"]}
        assert set(channels) == {"code", "sm_drivers", "train"}, channels
        assert all(u.startswith(f"s3://{bucket}/") for u in channels.values()), channels
        out = payload["OutputDataConfig"]["S3OutputPath"].rstrip("/")
        assert out.startswith(f"s3://{bucket}/"), out
        b, prefix = out[len("s3://"):].split("/", 1)
        name = payload["TrainingJobName"]
        got = s3.get_object(Bucket=b, Key=f"{prefix}/{name}/output/model.tar.gz")["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(got)) as t:
            assert t.extractfile("model.txt").read() == b"weights for 42"
    finally:
        boto3.DEFAULT_SESSION = None
        stop_dev(d)
