#!/usr/bin/env python3
"""Replays a slice of the Microsoft ITP trace through `tranche scenario run` and checks
the quota guarantee for every job.

    scripts/itp-replay.py --trace CSV [--days 2] [--nodes 64] [--tranche BIN]
                          [--scenario OUT.toml] [--json]

The slice (jobs submitted in the first `--days` days of the trace's clock, with a
positive duration and GPU count) becomes a scenario file: one LEND_AND_BORROW share
per tenant whose max is its share of the slice's GPU-seconds times the cluster's GPUs,
rounded (at least 1; the largest trimmed while they add up to more than the cluster),
`--nodes` nodes of 8 GPUs, each job at its submit time with its duration, jobs above 8
GPUs as gangs of whole 8-GPU nodes, a grace of 30 s, and every job exiting at once on
its checkpoint signal.

It then runs the scenario (`--json`), rebuilds each share's usage from the
transitions, and lists every job that had room in its share when it arrived: the
share's running GPUs (counting the jobs started at that instant), plus its jobs still
waiting, plus its own need, within max. The guarantee is a first start within the
grace (30 s) plus one scheduling interval (1 s). Exit status 0 when every such job
started in time, 1 when one did not, 2 when the run could not be made.

The trace is MIT-licensed (see its LICENSE beside it).
"""

import argparse
import collections
import csv
import itertools
import json
import os
import subprocess
import sys
import tempfile

GRACE_S = 30
INTERVAL_S = 1
GPUS_PER_NODE = 8


def load(trace, days):
    rows = []
    for r in csv.DictReader(open(trace, newline="")):
        t, d, g = int(r["submit_s"]), int(r["duration_s"]), int(r["num_gpu"])
        if 0 <= t < days * 86400 and d > 0 and g > 0:
            rows.append((t, r["tenant"], d, g))
    rows.sort()
    t0 = rows[0][0]
    return [
        {"name": f"j{i}", "at": t - t0, "share": tenant, "gpus": g, "duration": d}
        for i, (t, tenant, d, g) in enumerate(rows)
    ]


def maxes(jobs, total):
    seconds = collections.Counter()
    for j in jobs:
        seconds[j["share"]] += j["gpus"] * j["duration"]
    whole = sum(seconds.values())
    out = {s: max(1, round(total * v / whole)) for s, v in sorted(seconds.items())}
    while sum(out.values()) > total:
        out[max(out, key=out.get)] -= 1
    return out


def scenario(jobs, nodes, share_max):
    lines = [
        "# The first days of the Microsoft ITP trace (MIT licence), made by",
        "# scripts/itp-replay.py.",
        "",
        "[[nodes]]",
        'name = "n"',
        f"count = {nodes}",
        'unit = "h100"',
        f"gpus = {GPUS_PER_NODE}",
        "",
    ]
    for s in sorted(share_max):
        lines += [
            "[[shares]]",
            f'name = "{s}"',
            f'capacity_limits = [ {{ unit = "h100", max = {share_max[s]} }} ]',
            'strategy = "LEND_AND_BORROW"',
            f"default_grace_s = {GRACE_S}",
            "",
        ]
    for j in jobs:
        g = j["gpus"]
        if g > GPUS_PER_NODE:
            per, count = GPUS_PER_NODE, (g + GPUS_PER_NODE - 1) // GPUS_PER_NODE
        else:
            per, count = g, 1
        j["per_node"], j["nodes"] = per, count
        lines += [
            "[[events]]",
            f"at = {j['at']}",
            f'submit = {{ name = "{j["name"]}", share = "{j["share"]}", unit = "h100", '
            f"gpus = {per}, nodes = {count}, runtime_s = {j['duration']}, "
            f'grace_s = {GRACE_S}, on_signal = "exit_after:0" }}',
            "",
        ]
    first = jobs[0]
    lines += [
        "[[expect]]",
        f"at = {first['at']}",
        f'job = "{first["name"]}"',
        'state = "RUNNING"',
        "",
    ]
    return "\n".join(lines)


ACTIVE = {"SCHEDULED", "STARTING", "RUNNING"}


def need(j):
    """GPUs the job's submit asks for: a gang's whole nodes."""
    return j["per_node"] * j["nodes"]


def check(jobs, share_max, records):
    """Every job with room in its share on arrival, with its wait for its first start."""
    by_name = {j["name"]: j for j in jobs}
    starts = collections.defaultdict(list)  # t -> (job, +1 start / -1 stop, requeued)
    for r in records:
        if r["job"] not in by_name:
            continue
        if r["to"] == "RUNNING" and r["from"] != "RUNNING":
            starts[r["t"]].append((r["job"], 1, False))
        elif r["from"] == "RUNNING" and r["to"] != "RUNNING":
            starts[r["t"]].append((r["job"], -1, r["to"] == "RUNNABLE"))
    times = sorted(starts)
    used, waiting = collections.Counter(), collections.Counter()
    first_start, running = {}, set()
    room = {}
    ti = 0
    for j in sorted(jobs, key=lambda j: (j["at"], int(j["name"][1:]))):
        # Transitions up to and at the arrival's instant come first.
        while ti < len(times) and times[ti] <= j["at"]:
            t = times[ti]
            ti += 1
            for name, d, requeued in starts[t]:
                k = by_name[name]
                if d == 1:
                    first_start.setdefault(name, t)
                    running.add(name)
                    used[k["share"]] += need(k)
                    waiting[k["share"]] -= need(k)
                elif name in running:
                    running.discard(name)
                    used[k["share"]] -= need(k)
                    if requeued:
                        waiting[k["share"]] += need(k)
        share = j["share"]
        if used[share] + waiting[share] + need(j) <= share_max[share]:
            room[j["name"]] = (used[share], waiting[share])
        waiting[share] += need(j)
    for t in times[ti:]:
        for name, d, _ in starts[t]:
            if d == 1:
                first_start.setdefault(name, t)
    report = []
    for name, (u, ahead) in room.items():
        j = by_name[name]
        start = first_start.get(name)
        wait = None if start is None else start - j["at"]
        report.append(
            {
                "job": name,
                "share": j["share"],
                "gpus": j["gpus"],
                "arrived_s": j["at"],
                "share_used": u,
                "ahead": ahead,
                "max": share_max[j["share"]],
                "wait_s": wait,
                "in_time": wait is not None and wait <= GRACE_S + INTERVAL_S,
            }
        )
    return report


def reclaim_could_start(job, jobs, share_max, records):
    """Whether, at some instant the job waited, rule 3 could have freed its nodes: the
    instant, or None. At each instant (each transition from its arrival to its first
    start) with room in its share, nodes are freed by taking victims only from shares
    over their max, each only while its share is still over max when taken (largest
    first), across the nodes tried together (every set of the job's node count among
    the nodes that free and over-max GPUs could fill)."""
    by_name = {j["name"]: j for j in jobs}
    on = {}  # running job -> its nodes
    start = next((r["t"] for r in records if r["job"] == job["name"] and r["to"] == "SCHEDULED"), None)
    times = sorted({r["t"] for r in records if job["at"] <= r["t"] and (start is None or r["t"] < start)})
    ri = 0
    for t in times:
        while ri < len(records) and records[ri]["t"] <= t:
            r = records[ri]
            ri += 1
            if r["job"] not in by_name:
                continue
            if r["to"] == "SCHEDULED":
                on[r["job"]] = r["nodes"]
            elif r["from"] in ACTIVE and r["to"] not in ACTIVE:
                on.pop(r["job"], None)
        used = collections.Counter()
        per_node = collections.defaultdict(list)
        for name, nodes in on.items():
            k = by_name[name]
            used[k["share"]] += need(k)
            for n in nodes:
                per_node[n].append((k["share"], k["per_node"]))
        if used[job["share"]] + need(job) > share_max[job["share"]]:
            continue
        excess = {s: used[s] - m for s, m in share_max.items()}
        cands = [
            n
            for n, js in per_node.items()
            if GPUS_PER_NODE - sum(g for _, g in js) + sum(g for s, g in js if excess[s] > 0)
            >= job["per_node"]
        ]
        for combo in itertools.combinations(sorted(cands), job["nodes"]):
            left = dict(excess)
            ok = True
            for n in combo:
                js = per_node[n]
                freed = GPUS_PER_NODE - sum(g for _, g in js)
                for s, g in sorted(js, key=lambda x: -x[1]):
                    if freed >= job["per_node"]:
                        break
                    if left[s] > 0:
                        left[s] -= g
                        freed += g
                if freed < job["per_node"]:
                    ok = False
                    break
            if ok:
                return t
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True, help="msft_itp_merged.csv (see docs/simulation.md)")
    ap.add_argument("--days", type=float, default=2)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--tranche", default=os.path.join(here, "..", "target", "release", "tranche"))
    ap.add_argument("--scenario", help="write the scenario file here and keep it")
    ap.add_argument("--json", action="store_true", help="print the gangs as JSON")
    a = ap.parse_args()
    try:
        jobs = load(a.trace, a.days)
    except OSError as e:
        print(f"itp-replay: {e}", file=sys.stderr)
        return 2
    share_max = maxes(jobs, a.nodes * GPUS_PER_NODE)
    text = scenario(jobs, a.nodes, share_max)
    path = a.scenario or tempfile.mkstemp(suffix=".toml")[1]
    with open(path, "w") as f:
        f.write(text)
    run = subprocess.run([a.tranche, "scenario", "run", "--json", path], capture_output=True, text=True)
    if not a.scenario:
        os.unlink(path)
    if run.returncode == 2 or not run.stdout:
        print(f"itp-replay: tranche scenario run failed: {run.stderr.strip()}", file=sys.stderr)
        return 2
    records = []
    for line in run.stdout.splitlines():
        v = json.loads(line)
        if "job" in v and "to" in v:
            records.append(v)
    with_room = check(jobs, share_max, records)
    by_name = {j["name"]: j for j in jobs}
    late = [g for g in with_room if not g["in_time"]]
    if a.json:
        print(json.dumps({"jobs": len(jobs), "shares": share_max, "with_room": with_room}, indent=1))
    else:
        print(f"{len(jobs)} jobs, {len(share_max)} shares: " + ", ".join(f"{s} max {m}" for s, m in sorted(share_max.items())))
        print(f"{len(with_room)} jobs had room in their share on arrival; {len(late)} waited longer than {GRACE_S + INTERVAL_S} s")
        for g in late:
            wait = "never started" if g["wait_s"] is None else f"waited {g['wait_s']} s"
            print(
                f"  {g['job']:>6} {g['share']} {g['gpus']:>3} GPUs at t={g['arrived_s']} s "
                f"(share {g['share_used']}+{g['ahead']} ahead of {g['max']}): {wait}  LATE"
            )
            at = reclaim_could_start(by_name[g["job"]], jobs, share_max, records)
            if at is None:
                print("         no reclaim that rule 3 allows could free its nodes while it waited")
            else:
                print(f"         reclaim could have freed its nodes at t={at} s")
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
