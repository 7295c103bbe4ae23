#!/usr/bin/env python3
"""Benchmark of the AWS Batch-compatible endpoint: `SubmitServiceJob` calls/s from one
boto3 client, one call after another, on a `tranche dev` cluster it starts (3
controllers, 4 agents; every node drained first, so the jobs wait and the figure is the
endpoint's, SigV4's and Raft's, not job execution's). Each call is acknowledged:
committed on a majority, fsync'd.

    scripts/bench-aws.py [--bin target/release/tranche] [--submits 500] [--runs 3] [--json]

Needs boto3 and the SDK's test helpers (`pip install './python[test]'`) and a built
`tranche` (release).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "python" / "tests"))

import boto3  # noqa: E402

import tranche  # noqa: E402
from conftest import start_dev, stop_dev  # noqa: E402

PAYLOAD = json.dumps({
    "TrainingJobName": "bench",
    "AlgorithmSpecification": {"TrainingImage": "123456789012.dkr.ecr.us-west-2.amazonaws.com/tranche-train:latest",
                               "ContainerEntrypoint": ["/bin/true"]},
    "ResourceConfig": {"InstanceType": "ml.p5.4xlarge", "InstanceCount": 1},
    "StoppingCondition": {"MaxRuntimeInSeconds": 600},
})


def submits(c, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        c.submit_service_job(jobName=f"bench-{i}", jobQueue="q", serviceJobType="SAGEMAKER_TRAINING",
                             quotaShareName="research", serviceRequestPayload=PAYLOAD)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "tranche"))
    ap.add_argument("--submits", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.environ["TRANCHE_BIN"] = a.bin
    with tempfile.TemporaryDirectory(prefix="tranche-bench-aws-") as tmp:
        d = start_dev(Path(tmp))
        try:
            ops = tranche.Cluster.from_config(d.config_of("operator", "ops"))
            for node in ops.nodes():
                ops.drain(node["name"], "benchmark: jobs wait")
            env = d.aws_env
            c = boto3.client("batch", region_name=env["AWS_DEFAULT_REGION"],
                             endpoint_url=env["AWS_ENDPOINT_URL_BATCH"], verify=env["AWS_CA_BUNDLE"],
                             aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                             aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
            submits(c, 50)  # warm-up: the connection
            runs = [submits(c, a.submits) for _ in range(a.runs)]
        finally:
            stop_dev(d)
    out = {"submit_service_job_per_s": runs}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print("SubmitServiceJob calls/s, one boto3 client: " + " / ".join(f"{r:.0f}" for r in runs))


if __name__ == "__main__":
    main()
