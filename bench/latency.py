"""Shared by the latency benchmarks: one line of median, p99 and max."""

from __future__ import annotations

import statistics


def summary(values_ms: list[float]) -> str:
    ordered = sorted(values_ms)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return f"median {statistics.median(ordered):.2f} ms, p99 {p99:.2f} ms, max {ordered[-1]:.2f} ms"
