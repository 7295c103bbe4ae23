#!/usr/bin/env python3
"""Writes jobs.csv and policy.toml: Kueue's scheduler performance test
(test/performance/scheduler/configs/baseline/generator.yaml in kubernetes-sigs/kueue)
as a Tranche trace and policy.

Kueue's test: 5 cohorts of 6 ClusterQueues, each with a nominal quota of 20 units and a
borrowing limit of 100, reclaim within the cohort, and preemption of lower priority
inside a queue. Per ClusterQueue: 350 small workloads (1 unit, 200 ms, priority 50, one
every 100 ms), 100 medium (5 units, 500 ms, priority 100, one every 500 ms) and 50
large (20 units, 1 s, priority 200, one every 1.2 s); 15,000 in all.

In Tranche: a cohort is a queue on its own environment (borrowing happens inside an
environment), a ClusterQueue a LEND_AND_BORROW share of 20 GPUs with a borrow limit of
500% (100 units above its 20) and in-share preemption on. Kueue's test has no nodes;
here each cohort has 2 nodes of 60 GPUs, so that every workload fits on a node and
placement is not what is measured. Jobs exit at once on their signal.

policy-one-node.toml is the same with one node of 120 GPUs per cohort: a cohort's
quota then never comes in pieces, as in Kueue, which has no nodes.

`make.py --layout 80,40 FILE` writes only a policy, to FILE, with one node of each of
those sizes in every cohort (named c<cohort>n<i>): for trying other layouts with
`tranche sim`.
"""

import argparse

COHORTS, QUEUES = 5, 6
CLASSES = [  # name, count, units, duration s, priority, interval s
    ("small", 350, 1, 0.2, 50, 0.1),
    ("medium", 100, 5, 0.5, 100, 0.5),
    ("large", 50, 20, 1.0, 200, 1.2),
]

def policy(layout):
    """A policy whose every cohort has the nodes of `layout`, a list of (count, GPUs)."""
    nodes = " + ".join(f"{n} node{'s' if n > 1 else ''} of {g} GPUs" for n, g in layout)
    out = [
        "# Kueue's scheduler performance test as a Tranche policy; made by make.py beside it.",
        f"# 5 cohorts, each a queue on its own environment of {nodes}; 6 shares",
        "# of 20 GPUs per cohort, each borrowing up to 100 more (500%), in-share preemption on.",
    ]
    for c in range(1, COHORTS + 1):
        out += ["", "[[environments]]", f'name = "cohort{c}"', f'selector = {{ cohort = "c{c}" }}']
    for c in range(1, COHORTS + 1):
        out += ["", "[[queues]]", f'name = "cohort{c}"', f'environment = "cohort{c}"']
    for c in range(1, COHORTS + 1):
        for i, (n, g) in enumerate(layout):
            name = f"c{c}n" if len(layout) == 1 else f"c{c}n{i}"
            out += ["", "[[nodes]]", f'name = "{name}"', f"count = {n}", 'unit = "h100"', f"gpus = {g}",
                    f'labels = {{ cohort = "c{c}" }}']
    for c in range(1, COHORTS + 1):
        for q in range(1, QUEUES + 1):
            out += [
                "",
                "[[shares]]",
                f'name = "c{c}-cq{q}"',
                f'queue = "cohort{c}"',
                'capacity_limits = [{ unit = "h100", max = 20 }]',
                'strategy = "LEND_AND_BORROW"',
                "borrow_limit = 500",
                "in_share_preemption = true",
                "default_grace_s = 1",
            ]
    return "\n".join(out) + "\n"


args = argparse.ArgumentParser(description="Kueue's scheduler benchmark as a trace and policy")
args.add_argument("--layout", help="GPUs of each node of a cohort, e.g. 80,40: write only a policy, to OUT")
args.add_argument("out", nargs="?", help="the policy file --layout writes")
args = args.parse_args()
if args.layout:
    if not args.out:
        raise SystemExit("--layout needs the file to write the policy to")
    sizes = args.layout.split(",")
    if not all(x.isdigit() and 1 <= int(x) <= 128 for x in sizes):
        raise SystemExit(f"--layout {args.layout}: GPUs per node, separated by commas, each 1 to 128")
    with open(args.out, "w") as f:
        f.write(policy([(1, int(x)) for x in sizes]))
    raise SystemExit(0)

rows = []
for c in range(1, COHORTS + 1):
    for q in range(1, QUEUES + 1):
        share = f"c{c}-cq{q}"
        for name, count, units, dur, prio, every in CLASSES:
            for i in range(count):
                rows.append((round(i * every, 3), f"{share}-{name}-{i}", share, units, dur, prio))
rows.sort(key=lambda r: r[0])
with open("jobs.csv", "w") as f:
    f.write("submit_s,name,share,gpus,duration_s,priority\n")
    for t, n, s, g, d, p in rows:
        f.write(f"{t:.3f},{n},{s},{g},{d},{p}\n")

with open("policy.toml", "w") as f:
    f.write(policy([(2, 60)]))
with open("policy-one-node.toml", "w") as f:
    f.write(policy([(1, 120)]))
