#!/usr/bin/env python3
"""Writes jobs.csv: the trace `tranche bench replay` checks the simulator against.

Three shares on 32 GPUs (policy.toml), 120 jobs over 180 s, each 3-30 s long on 1, 2,
4 or 8 GPUs; about what the cluster can run, in bursts, so queues form, borrowers are
reclaimed, and waits are long next to the daemons' own delays. Seeded: the same file
every time.
"""
import random

r = random.Random(18)
shares = [("train", 0.45), ("infer", 0.25), ("research", 0.30)]
rows = []
t = 0.0
for i in range(120):
    t += r.expovariate(120 / 180)
    share = r.choices([s for s, _ in shares], [w for _, w in shares])[0]
    gpus = r.choices([1, 2, 4, 8], [0.4, 0.25, 0.2, 0.15])[0]
    dur = round(r.uniform(3, 30), 1)
    ckpt = "2" if r.random() < 0.2 else ""
    rows.append(f"{t:.3f},{share},{gpus},{dur},{ckpt}")
with open("jobs.csv", "w") as f:
    f.write("submit_s,share,gpus,duration_s,checkpoint_s\n")
    f.write("\n".join(rows) + "\n")
