#!/usr/bin/env python3
"""Benchmarks of the HTTPS API through the Python SDK, on a `tranche dev` cluster it
starts (3 controllers, 4 agents; every node drained first, so the submitted jobs wait
and the benchmark measures the API and Raft, not job execution).

    scripts/bench-http.py [--bin target/release/tranche] [--submits 2000] [--threads 16]
                          [--events 300] [--json]

Figures:
- submits/s from one Python thread, one submit after another (each acknowledged:
  committed on a majority, fsync'd);
- submits/s from 16 threads of one Python process sharing one `tranche.Cluster`;
- the delay from a submit's acknowledgement to its first event on an open event
  stream (`GET /api/v1/events`), p50 and p99: submits spaced 20 ms apart, each
  timed from the moment its POST returned (an event that arrives before the answer
  counts 0), and from the moment the POST was sent.

Needs the SDK importable (`pip install ./python`) and a built `tranche` (release).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "python" / "tests"))

import tranche  # noqa: E402
from conftest import start_dev, stop_dev  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def sequential(c: tranche.Cluster, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        c.submit(share="nlp", gpus=1, command=["true"])
    return n / (time.perf_counter() - t0)


def threaded(c: tranche.Cluster, n: int, threads: int) -> float:
    per = n // threads
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(per):
                c.submit(share="nlp", gpus=1, command=["true"])
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return per * threads / took


def events(c: tranche.Cluster, n: int) -> dict[str, float]:
    arrived: dict[int, float] = {}
    seen: "queue.Queue[int]" = queue.Queue()
    start = c._applied()
    ready = threading.Event()

    def listen() -> None:
        for ev in c.events(after=start, timeout=120):
            ready.set()
            if ev.kind == "job" and ev.data.get("from") is None:
                arrived[ev.data["job"]] = time.perf_counter()
                seen.put(ev.data["job"])
                if len(arrived) >= n + 1:
                    return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    # A first job opens the stream's flow before the measured ones.
    c.submit(share="nlp", gpus=1, command=["true"])
    ready.wait(30)
    sent: dict[int, tuple[float, float]] = {}
    for _ in range(n):
        t_send = time.perf_counter()
        j = c.submit(share="nlp", gpus=1, command=["true"])
        sent[j.id] = (t_send, time.perf_counter())
        time.sleep(0.02)
    t.join(60)
    after_ack = [max(0.0, arrived[j] - ack) * 1000 for j, (_, ack) in sent.items() if j in arrived]
    after_send = [(arrived[j] - s) * 1000 for j, (s, _) in sent.items() if j in arrived]
    if len(after_ack) < n:
        raise SystemExit(f"only {len(after_ack)} of {n} submits' events arrived")
    return {
        "events_after_ack_p50_ms": pct(after_ack, 50),
        "events_after_ack_p99_ms": pct(after_ack, 99),
        "events_after_send_p50_ms": pct(after_send, 50),
        "events_after_send_p99_ms": pct(after_send, 99),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "tranche"))
    ap.add_argument("--submits", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.environ["TRANCHE_BIN"] = a.bin
    with tempfile.TemporaryDirectory(prefix="tranche-bench-http-") as tmp:
        d = start_dev(Path(tmp))
        try:
            ops = tranche.Cluster.from_config(d.config_of("operator", "ops"))
            for node in ops.nodes():
                ops.drain(node["name"], "benchmark: jobs wait")
            c = tranche.Cluster.from_config(d.config)
            for _ in range(50):  # warm-up: connections, the leader preferred
                c.submit(share="nlp", gpus=1, command=["true"])
            out = {
                "sequential_submits_per_s": sequential(c, a.submits // 2),
                f"threads_{a.threads}_submits_per_s": threaded(c, a.submits * 2, a.threads),
            }
            out.update(events(c, a.events))
        finally:
            stop_dev(d)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            print(f"{k:32} {v:10.1f}")


if __name__ == "__main__":
    main()
