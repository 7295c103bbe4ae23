#!/usr/bin/env python3
"""Replays a slice of the Microsoft ITP trace through `tranche scenario run` and checks
the quota guarantee for gangs.

    scripts/itp-replay.py [--trace CSV] [--days 2] [--nodes 64] [--tranche BIN]
                          [--scenario OUT.toml] [--keep]

The slice becomes a scenario file: one LEND_AND_BORROW share per tenant whose max is
proportional to the tenant's GPU-hours in the slice (largest remainders, so the maxes
add up to the cluster's GPUs), `--nodes` nodes of 8 h100, each job at its submit time
with its duration, jobs above 8 GPUs as gangs of whole 8-GPU nodes, a grace of 30 s,
and every job exiting at once on its checkpoint signal.

It then runs the scenario (`--json`), rebuilds each share's usage from the
transitions, and lists every gang that had room in its share when it arrived (usage,
plus the share's older jobs still waiting, plus its own need, within max) with how
long it waited for its first start. The guarantee is a start within the grace (30 s)
plus one scheduling interval (1 s). Exit status 0 when every such gang started in
time, 1 when one did not, 2 when the run could not be made.

The trace is MIT-licensed (see its LICENSE beside it).
"""

import argparse
import collections
import csv
import json
import os
import subprocess
import sys
import tempfile

GRACE_S = 30
INTERVAL_S = 1
GPUS_PER_NODE = 8


def load(trace, days):
    rows = list(csv.DictReader(open(trace, newline="")))
    t0 = min(int(r["submit_s"]) for r in rows)
    end = t0 + days * 86400
    jobs = []
    for r in rows:
        t = int(r["submit_s"])
        if t >= end:
            continue
        gpus = int(r["num_gpu"])
        if gpus <= 0:
            continue
        jobs.append(
            {
                "at": t - t0,
                "share": r["tenant"],
                "gpus": gpus,
                "duration": max(1, int(r["duration_s"])),
            }
        )
    jobs.sort(key=lambda j: j["at"])
    for i, j in enumerate(jobs):
        j["name"] = f"j{i + 1}"
    return jobs


def maxes(jobs, total):
    hours = collections.Counter()
    for j in jobs:
        hours[j["share"]] += j["gpus"] * j["duration"]
    whole = sum(hours.values())
    exact = {s: h * total / whole for s, h in hours.items()}
    out = {s: int(v) for s, v in exact.items()}
    rest = sorted(exact, key=lambda s: exact[s] - out[s], reverse=True)
    for s in rest[: total - sum(out.values())]:
        out[s] += 1
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


def check(jobs, share_max, records):
    by_name = {j["name"]: j for j in jobs}
    used = collections.Counter()
    waiting = collections.defaultdict(list)  # share -> names RUNNABLE, in submit order
    first_start = {}
    room_at_arrival = {}
    for r in records:
        j = by_name.get(r["job"])
        if j is None:
            continue
        share, need = j["share"], j["per_node"] * j["nodes"]
        old, new = r["from"], r["to"]
        if old == "SUBMITTED" and new == "RUNNABLE":
            if j["nodes"] > 1:
                ahead = sum(
                    by_name[n]["per_node"] * by_name[n]["nodes"] for n in waiting[share]
                )
                room_at_arrival[j["name"]] = (
                    used[share] + ahead + need <= share_max[share],
                    used[share],
                    ahead,
                )
            waiting[share].append(j["name"])
        if old == "RUNNABLE" and new != "RUNNABLE":
            if j["name"] in waiting[share]:
                waiting[share].remove(j["name"])
        if new == "RUNNABLE" and old in ACTIVE:
            waiting[share].append(j["name"])
            waiting[share].sort(key=lambda n: (by_name[n]["at"], n))
        if new in ACTIVE and old not in ACTIVE:
            used[share] += need
            first_start.setdefault(j["name"], r["t"])
        if old in ACTIVE and new not in ACTIVE:
            used[share] -= need
    report = []
    for name, (room, u, ahead) in sorted(
        room_at_arrival.items(), key=lambda kv: by_name[kv[0]]["at"]
    ):
        if not room:
            continue
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


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--trace",
        default=os.path.join(here, "..", "..", "shared", "traces", "msft-itp", "msft_itp_merged.csv"),
    )
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
    gangs = check(jobs, share_max, records)
    late = [g for g in gangs if not g["in_time"]]
    if a.json:
        print(json.dumps({"jobs": len(jobs), "shares": share_max, "gangs_with_room": gangs}, indent=1))
    else:
        print(f"{len(jobs)} jobs, {len(share_max)} shares: " + ", ".join(f"{s} max {m}" for s, m in sorted(share_max.items())))
        print(f"{len(gangs)} gangs had room in their share on arrival; {len(late)} waited longer than {GRACE_S + INTERVAL_S} s")
        for g in gangs:
            wait = "never started" if g["wait_s"] is None else f"waited {g['wait_s']} s"
            mark = "" if g["in_time"] else "  LATE"
            print(
                f"  {g['job']:>6} {g['share']} {g['gpus']:>3} GPUs at t={g['arrived_s']} s "
                f"(share {g['share_used']}+{g['ahead']} ahead of {g['max']}): {wait}{mark}"
            )
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
