"""The SDK against a real `tranche dev` cluster."""

from __future__ import annotations

import os
import pathlib
import signal
import sys
import time

import pytest

import tranche


@pytest.fixture(scope="module")
def cluster(dev):
    c = tranche.Cluster.from_config(dev.config)
    yield c
    c.close()


def test_the_readme_example_submits_waits_and_prints_output(dev, monkeypatch):
    monkeypatch.setenv("TRANCHE_CONFIG", dev.config)
    c = tranche.Cluster.from_config()
    job = c.submit(share="nlp", gpus=1, command=["sh", "-c", "echo hello from tranche"])
    assert job.wait(timeout=60) == "SUCCEEDED"
    assert job.logs() == "hello from tranche\n"
    assert job.exit_code == 0
    assert job.data["spec"]["user"] == dev.user


def test_failure_and_its_exit_code(cluster):
    job = cluster.submit(share="nlp", gpus=1, command=["sh", "-c", "echo oops >&2; exit 3"])
    assert job.wait(timeout=60) == "FAILED"
    assert job.exit_code == 3
    assert job.logs(stderr=True) == "oops\n"


def test_logs_follow_streams_until_the_end(cluster):
    job = cluster.submit(
        share="nlp", gpus=1,
        command=["sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.3; done"],
    )
    deadline = time.monotonic() + 30
    while job.refresh().status not in ("RUNNING", "SUCCEEDED") and time.monotonic() < deadline:
        time.sleep(0.1)
    pieces = list(job.logs(follow=True))
    assert "".join(pieces) == "line 1\nline 2\nline 3\n"
    assert job.wait(timeout=30) == "SUCCEEDED"


def test_submit_fields_reach_the_job(cluster):
    job = cluster.submit(
        share="vision", gpus=2, command=["true"], name="fields", priority=5,
        env={"A": "1"}, time_limit="2h", checkpoint=("SIGUSR1", 120), tags={"team": "x"},
        preemption_retries=2, retry_attempts=3, unit="h100", checkpoint_every="30m",
    )
    spec = job.refresh().data["spec"]
    assert spec["name"] == "fields"
    assert spec["priority"] == 5
    assert spec["env"] == {"A": "1"}
    assert spec["time_limit_s"] == 7200
    assert spec["checkpoint"] == {"signal": "SIGUSR1", "grace_s": 120, "every_s": 1800}
    assert spec["tags"] == {"team": "x"}
    assert (spec["preemption_retries"], spec["retry_attempts"]) == (2, 3)
    assert (spec["unit"], spec["gpus_per_node"], spec["queue"]) == ("h100", 2, "q")
    assert job.wait(timeout=60) == "SUCCEEDED"


def test_a_job_reports_its_checkpoint_and_knows_it_is_not_on_loan(cluster):
    sdk = pathlib.Path(tranche.__file__).resolve().parent.parent
    script = (
        f"import sys, time; sys.path.insert(0, {str(sdk)!r}); import tranche.inside as ti; "
        "print(ti.on_loan(), ti.checkpointed(), flush=True); time.sleep(12)"
    )
    job = cluster.submit(share="vision", gpus=1, command=[sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while True:
        attempts = job.refresh().data["attempts"]
        if attempts and attempts[0].get("checkpointed_at"):
            break
        assert time.monotonic() < deadline, f"no checkpoint reported: {attempts}"
        time.sleep(0.5)
    assert job.wait(timeout=60) == "SUCCEEDED"
    assert job.logs().strip() == "False True"


def test_a_retried_submit_with_one_token_makes_one_job(cluster):
    a = cluster.submit(share="nlp", gpus=1, command=["true"], client_token="same-token-1")
    b = cluster.submit(share="nlp", gpus=1, command=["true"], client_token="same-token-1")
    assert a.id == b.id


def test_cancel_priority_and_explain(cluster):
    # More GPUs than the nlp share and the idle ones lent to it: it waits.
    job = cluster.submit(share="nlp", gpus_per_node=4, nodes=2, command=["sleep", "300"])
    job.set_priority(42)
    assert job.data["spec"]["priority"] == 42
    lines = job.explain()
    assert lines and all(isinstance(x, str) for x in lines)
    job.cancel("not needed")
    assert job.wait(timeout=30) == "CANCELLED"
    assert "not needed" in job.data["transitions"][-1]["reason"]


def test_running_job_cancelled(cluster):
    job = cluster.submit(share="nlp", gpus=1, command=["sleep", "300"])
    for ev in cluster.events(job=job.id, after=0, timeout=30):
        if ev.kind == "job" and ev.data["to"] == "RUNNING":
            break
    job.cancel()
    assert job.wait(timeout=60) == "CANCELLED"


def test_listing_with_filters(cluster):
    job = cluster.submit(share="vision", gpus=1, command=["true"], unit="a100")
    job.wait(timeout=60)
    mine = cluster.jobs(share="vision", state="SUCCEEDED")
    assert job in mine
    assert all(j._data["share"] == "vision" and j._data["status"] == "SUCCEEDED" for j in mine)
    assert job not in cluster.jobs(share="nlp")
    two = cluster.jobs(limit=2)
    assert len(two) == 2 and two[0].id < two[1].id
    everything = cluster.jobs()
    assert [j.id for j in everything] == sorted(j.id for j in everything)


def test_history_lists_ended_jobs_newest_end_first(cluster):
    first = cluster.submit(share="nlp", gpus=1, command=["true"], name="hist-a")
    assert first.wait(timeout=60) == "SUCCEEDED"
    second = cluster.submit(share="nlp", gpus=1, command=["sh", "-c", "exit 2"], name="hist-b")
    assert second.wait(timeout=60) == "FAILED"
    user = first.data["spec"]["user"]
    recent = cluster.history(user=user, since=time.time() - 3600, limit=None)
    ids = [r["job"]["id"] for r in recent]
    assert ids.index(second.id) < ids.index(first.id)
    assert [r["ended_at"] for r in recent] == sorted((r["ended_at"] for r in recent), reverse=True)
    failed = cluster.history(user=user, state="FAILED", limit=None)
    assert second.id in [r["job"]["id"] for r in failed]
    assert all(r["job"]["status"] == "FAILED" for r in failed)
    r = next(r for r in failed if r["job"]["id"] == second.id)
    assert r["exit_code"] == 2 and r["archived"] is False and not second.archived
    # One at a time, the pages follow on.
    one = cluster.history(user=user, limit=1)
    assert len(one) == 1
    after = cluster.history(user=user, limit=1, before=f"{one[0]['ended_at']}.{one[0]['job']['id']}")
    assert after and (after[0]["ended_at"], after[0]["job"]["id"]) < (one[0]["ended_at"], one[0]["job"]["id"])
    with pytest.raises(tranche.BadRequest) as e:
        cluster.history(state="RUNNING")
    assert e.value.field == "state", e.value


def test_cluster_views(cluster):
    names = {s["name"] for s in cluster.shares()}
    assert names == {"research", "vision", "nlp"}
    # The dev cluster's shares stand alone: no groups.
    assert cluster.groups() == []
    nodes = cluster.nodes()
    assert {n["name"] for n in nodes} == {"n1", "n2", "n3", "n4"}
    assert all(len(n["gpus"]) == 4 for n in nodes)
    ctl = cluster.controllers()
    assert len(ctl["members"]) == 3 and ctl["leader"] is not None
    assert "front" in cluster.queue()


def test_errors_map_to_exceptions(dev, cluster, tmp_path):
    with pytest.raises(tranche.NotFound) as e:
        cluster.submit(share="no-such-share", gpus=1, command=["true"])
    assert e.value.status == 404 and e.value.field == "share"
    with pytest.raises(tranche.BadRequest) as e:
        cluster.submit(share="nlp", gpus=1, command=["true"], priority=12000)
    assert e.value.code == "invalid" and e.value.field == "priority"
    with pytest.raises(tranche.BadRequest) as e:
        cluster.submit(share="nlp", gpus=1, command=["true"], colour="red")
    assert e.value.field == "colour"
    with pytest.raises(tranche.NotFound):
        cluster.job(10**9)
    ops = tranche.Cluster.from_config(dev.config_of("operator", "ops"))
    with pytest.raises(tranche.Forbidden) as e:
        ops.submit(share="nlp", gpus=1, command=["true"])
    assert "only user and admin" in e.value.message
    with pytest.raises(tranche.Forbidden):
        cluster.drain("n1", "no")
    policy = tmp_path / "p.toml"
    policy.write_text('[[policies]]\nname = "fifo"\n[[policies]]\nname = "weighted"\n')
    with pytest.raises(tranche.Forbidden):
        cluster.apply(policy)
    admin = tranche.Cluster.from_config(dev.config_of("admin", "admin"))
    r = admin.apply(policy, dry_run=True)
    assert r["dry_run"] is True
    assert {(c["name"], c["action"]) for c in r["changes"]} == {("fifo", "unchanged"), ("weighted", "create")}
    bad = tranche.Cluster(dev.urls, ca=dev.ca, token="tranche1.x.y.z")
    with pytest.raises(tranche.Unauthenticated):
        bad.shares()


def test_token_identity(dev):
    c = tranche.Cluster(dev.urls, ca=dev.ca, token=dev.token)
    who = c.whoami()
    assert (who["role"], who["name"], who["via"]) == ("user", dev.user, "token")
    job = c.submit(share="nlp", gpus=1, command=["true"])
    assert job.wait(timeout=60) == "SUCCEEDED"


def test_training_queue_facade(dev):
    q = tranche.TrainingQueue("q", tranche.Cluster.from_config(dev.config))
    job = q.submit(["sh", "-c", "sleep 1"], share_identifier="nlp", job_name="tq-job", priority=3)
    assert job.wait(timeout=60) == "SUCCEEDED"
    assert job in q.list_jobs_by_share(status="SUCCEEDED", share_identifier="nlp")
    assert job not in q.list_jobs_by_share(status="SUCCEEDED", share_identifier="vision")
    assert q.get_job("tq-job").id == job.id
    assert q.get_job(str(job.id)).describe()["spec"]["priority"] == 3
    with pytest.raises(tranche.NotFound):
        q.get_job("no-such-name")


def test_an_array_runs_a_job_per_task(cluster):
    first = cluster.submit(
        share="nlp", gpus=1, array="0-2",
        command=["sh", "-c", "echo task $TRANCHE_ARRAY_TASK_ID"],
    )
    tasks = cluster.array_tasks(first)
    assert [t.id for t in tasks] == [first.id, first.id + 1, first.id + 2]
    assert [t._data["array"]["index"] for t in tasks] == [0, 1, 2]
    assert [t.refresh().data["job"] for t in tasks] == [f"{first.id}_{i}" for i in range(3)]
    for i, t in enumerate(tasks):
        assert t.wait(timeout=60) == "SUCCEEDED"
        assert t.logs() == f"task {i}\n"
    assert first.refresh().data["array"]["count"] == 3


def test_a_dependency_waits_for_its_job(cluster):
    a = cluster.submit(share="nlp", gpus=1, command=["sleep", "1"])
    b = cluster.submit(share="nlp", gpus=1, command=["true"], dependency=f"afterok:{a.id}")
    assert b.refresh().status == "PENDING"
    assert b.data["waiting_for"] == [f"afterok:{a.id}"]
    assert b.data["spec"]["dependency"] == f"afterok:{a.id}"
    assert b.wait(timeout=60) == "SUCCEEDED"
    ended = a.refresh().data["attempts"][-1]["ended_at"]
    assert b.data["attempts"][0]["scheduled_at"] >= ended


def test_hold_and_release(cluster):
    job = cluster.submit(share="nlp", gpus=1, command=["true"], hold=True)
    assert job.refresh().status == "PENDING" and job.data["held"] is True
    job.release()
    assert job.wait(timeout=60) == "SUCCEEDED"


def test_bad_array_and_dependency_texts_name_their_field(cluster):
    before = len(cluster.jobs())
    for kw, name in (({"array": "0-x"}, "array"), ({"dependency": "after:1"}, "dependency")):
        with pytest.raises(tranche.BadRequest) as e:
            cluster.submit(share="nlp", gpus=1, command=["true"], **kw)
        assert e.value.field == name, e.value
    assert len(cluster.jobs()) == before


def test_events_resume_after_the_controller_is_killed(dev):
    """Runs last in this module: it kills a controller of the session's cluster."""
    pids = dev.controller_pids()
    assert len(pids) == 3, pids
    victim = 1
    first = dev.http_addr_of(victim)
    others = [u for u in dev.urls if u != first]
    # The stream's controller first, so it is the one the stream uses.
    c = tranche.Cluster([first, *others], ca=dev.ca, token=dev.token)
    job = c.submit(share="nlp", gpus=1, command=["sleep", "300"])
    stream = c.events(job=job.id, after=0, timeout=60)
    seen = []
    for ev in stream:
        seen.append(ev)
        if ev.kind == "job" and ev.data["to"] == "RUNNING":
            break
    os.kill(pids[victim], signal.SIGKILL)
    job.cancel("after the kill")
    rest = []
    for ev in stream:
        rest.append(ev)
        if ev.kind == "job" and ev.data["to"] == "CANCELLED":
            break
    assert rest[-1].data["from"] == "RUNNING"
    assert min(e.index for e in rest) > max(e.index for e in seen), "an event came twice"
    assert c._controllers[c._current].url != first, "the stream moved to another controller"
    assert job.wait(timeout=60) == "CANCELLED"
