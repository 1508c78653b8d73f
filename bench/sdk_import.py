"""What a training script pays to import the SDK: ``import trainguard.job_monitor`` (and
``trainguard.sdk``), against the whole package, each in a fresh interpreter.

Prints the median wall time over repeated runs and the trainguard modules each import loads.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

RUNS = 15
PROBE = ("import sys, time; t = time.perf_counter(); import {module}{touch}; "
         "print(time.perf_counter() - t); print(sorted(m for m in sys.modules if m.startswith('trainguard')))")


def measure(module: str, touch: str = "") -> tuple[float, list[str]]:
    times, modules = [], []
    for _ in range(RUNS):
        out = subprocess.run([sys.executable, "-c", PROBE.format(module=module, touch=touch)],
                             capture_output=True, text=True, check=True).stdout.splitlines()
        times.append(float(out[0]))
        modules = json.loads(out[1].replace("'", '"'))
    return statistics.median(times), modules


def main() -> None:
    started = time.perf_counter()
    print(f"import cost, median of {RUNS} fresh interpreters each")
    for label, module, touch in (("trainguard.job_monitor", "trainguard.job_monitor", ""),
                                 ("trainguard.sdk", "trainguard.sdk", ""),
                                 ("trainguard + engine", "trainguard", "; trainguard.supervise")):
        seconds, modules = measure(module, touch)
        print(f"  {label:<24} {seconds * 1000:7.1f} ms  {len(modules):3d} trainguard module(s)")
    print(f"(took {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
