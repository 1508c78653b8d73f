"""Classifier quality on shared/faultlogs/dev.jsonl, and classification time.

Prints per-label precision and recall, category accuracy, retryable and node-fault accuracy,
how many user_code excerpts were marked retryable, the time to classify the whole dev set, and
the time to classify a 1 GB log file (only its tail is read, so it costs what a small one does).

    python bench/classify.py [--big-log-gb 1]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainguard.hooks import PluginHost  # noqa: E402
from trainguard.logtail import read_tail  # noqa: E402
from trainguard.model import ErrorSource, Fault  # noqa: E402
from trainguard.policy import Policy  # noqa: E402

DEV = Path(__file__).resolve().parents[2] / "shared" / "faultlogs" / "dev.jsonl"


def quality(host: PluginHost, policy: Policy) -> None:
    rows = [json.loads(line) for line in DEV.read_text().splitlines()]
    started = time.perf_counter()
    verdicts = [host.classify(Fault(ErrorSource.LOG, 0.0), row["text"][-policy.log_tail_bytes:], policy) for row in rows]
    elapsed = time.perf_counter() - started
    labels = sorted({row["label"] for row in rows})
    print(f"dev set: {len(rows)} excerpts")
    print(f"  {'label':<20} {'precision':>9} {'recall':>7} {'n':>4}")
    for label in labels:
        predicted = [r for r, v in zip(rows, verdicts) if v.category.value == label]
        actual = [r for r in rows if r["label"] == label]
        hits = sum(1 for r, v in zip(rows, verdicts) if v.category.value == label == r["label"])
        precision = hits / len(predicted) if predicted else 0.0
        print(f"  {label:<20} {precision:>9.2f} {hits / len(actual):>7.2f} {len(actual):>4}")
    n = len(rows)
    category = sum(v.category.value == r["label"] for r, v in zip(rows, verdicts)) / n
    retryable = sum(v.retryable == r["retryable"] for r, v in zip(rows, verdicts)) / n
    node = sum(v.node_fault == r["node_fault"] for r, v in zip(rows, verdicts)) / n
    user_retryable = sum(1 for r, v in zip(rows, verdicts) if r["label"] == "user_code" and v.retryable)
    print(f"  category accuracy {category:.3f} (goal >= 0.95)   retryable accuracy {retryable:.3f} (goal >= 0.95)   "
          f"node-fault accuracy {node:.3f}")
    print(f"  user_code excerpts marked retryable: {user_retryable} (goal 0)")
    confusion = collections.Counter((r["label"], v.category.value) for r, v in zip(rows, verdicts)
                                    if r["label"] != v.category.value)
    if confusion:
        print("  confusions (label -> verdict): " + ", ".join(f"{a}->{b} x{c}" for (a, b), c in confusion.items()))
    print(f"  whole dev set classified in {elapsed * 1000:.1f} ms ({elapsed / n * 1e6:.0f} us per excerpt)")


def big_log(host: PluginHost, policy: Policy, gigabytes: float) -> None:
    size = int(gigabytes * 1024**3)
    chunk = b"".join(f"step {i} loss {1.0 / (i + 1):.5f} lr 0.0003 tokens/s 81234\n".encode() for i in range(20000))
    with tempfile.NamedTemporaryFile(prefix="tg-big-", suffix=".log", delete=False) as handle:
        path = Path(handle.name)
        written = 0
        while written < size:
            handle.write(chunk)
            written += len(chunk)
        handle.write(b"[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: "
                     b"WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 milliseconds\n")
    try:
        times = []
        for _ in range(20):
            started = time.perf_counter()
            verdict = host.classify(Fault(ErrorSource.EXIT_CODE, 0.0, exit_code=-6),
                                    read_tail(path, policy.log_tail_bytes), policy)
            times.append(time.perf_counter() - started)
        assert verdict.fault_code == "TG-NCCL-TIMEOUT", verdict
        print(f"{os.path.getsize(path) / 1024**3:.2f} GB log (tail {policy.log_tail_bytes // 1024} KiB read): "
              f"median {statistics.median(times) * 1000:.2f} ms, max {max(times) * 1000:.2f} ms over {len(times)} "
              f"runs (goal <= 20 ms) -> {verdict.fault_code}")
    finally:
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big-log-gb", type=float, default=1.0)
    args = parser.parse_args()
    host = PluginHost(load_entry_points=False)
    policy = Policy()
    started = time.perf_counter()
    host.patterns()
    print(f"catalog: {len(host.patterns())} patterns loaded and compiled in "
          f"{(time.perf_counter() - started) * 1000:.1f} ms")
    quality(host, policy)
    big_log(host, policy, args.big_log_gb)


if __name__ == "__main__":
    main()
