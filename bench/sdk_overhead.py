"""SDK call overhead in the training loop: microseconds per call, supervised and not.

    python bench/sdk_overhead.py [--calls 100000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainguard import sdk  # noqa: E402


def per_call(fn, calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - started) / calls * 1e6


def measure(label: str, calls: int) -> None:
    monitor = sdk.Monitor()
    scope = monitor.hang_detect(180)
    figures = {
        "report_step": per_call(lambda i: monitor.report_step(i, loss=0.25, lr=3e-4), calls),
        "heartbeat": per_call(lambda i: monitor.heartbeat(), calls),
        "send_custom_message": per_call(lambda i: monitor.send_custom_message(content="loss is NaN"), calls // 10),
        "hang_detect enter+exit": per_call(lambda i: (scope.__enter__(), scope.__exit__(None, None, None)), calls // 10),
    }
    print(f"  {label}: " + "   ".join(f"{name} {us:.2f} us" for name, us in figures.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    args = parser.parse_args()
    print(f"SDK call overhead (mean over {args.calls} calls; goal: microseconds):")
    os.environ.pop(sdk.CHANNEL_VAR, None)
    sdk._channels.clear()
    measure("outside a supervised job (no-op)", args.calls)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[sdk.CHANNEL_VAR] = os.path.join(tmp, "rank-0.jsonl")
        sdk._channels.clear()
        measure("supervised (one append per record)", args.calls)


if __name__ == "__main__":
    main()
