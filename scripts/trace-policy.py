#!/usr/bin/env python3
"""Writes a policy for `tranche sim` from a trace: one quota share per share name in
the trace, each share's max proportional to its GPU-hours (largest remainders, so the
maxes add up to --gpus).

    scripts/trace-policy.py --trace CSV --gpus 1280 [--strategy LEND_AND_BORROW]
        [--borrow-limit PCT] [--grace 30] [--unit h100]
        [--share-column share] [--gpus-column gpus] [--duration-column duration_s]

For the Microsoft ITP trace: --share-column tenant --gpus-column num_gpu.
"""

import argparse
import collections
import csv
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trace", required=True)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--strategy", default="LEND_AND_BORROW",
                   choices=["RESERVE", "LEND", "LEND_AND_BORROW"])
    p.add_argument("--borrow-limit", type=int)
    p.add_argument("--grace", type=int, default=30)
    p.add_argument("--unit", default="h100")
    p.add_argument("--share-column", default="share")
    p.add_argument("--gpus-column", default="gpus")
    p.add_argument("--duration-column", default="duration_s")
    a = p.parse_args()
    hours = collections.Counter()
    with open(a.trace, newline="") as f:
        for r in csv.DictReader(f):
            hours[r[a.share_column]] += float(r[a.gpus_column]) * float(r[a.duration_column])
    whole = sum(hours.values())
    exact = {s: h * a.gpus / whole for s, h in hours.items()}
    out = {s: int(v) for s, v in exact.items()}
    for s in sorted(exact, key=lambda s: exact[s] - out[s], reverse=True)[: a.gpus - sum(out.values())]:
        out[s] += 1
    print(f"# One share per share of {a.trace.split('/')[-1]}, max proportional to its")
    print(f"# GPU-hours ({a.gpus} GPUs in all); made by scripts/trace-policy.py.")
    for s in sorted(out):
        print()
        print("[[shares]]")
        print(f'name = "{s}"')
        print(f'capacity_limits = [{{ unit = "{a.unit}", max = {out[s]} }}]')
        print(f'strategy = "{a.strategy}"')
        if a.borrow_limit is not None:
            print(f"borrow_limit = {a.borrow_limit}")
        print(f"default_grace_s = {a.grace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
