"""Slow-rank detection from step reports (the C4D idea, without a vendor library).

Each rank reports its steps through the SDK. Its step time is the ``step_time`` it reports
(for example its compute time, collectives excluded) or else the time between two of its
reports. A rank whose step time stays above ``factor`` times the median of the other ranks'
latest step times for ``window`` steps in a row is slow, and is reported once until it
recovers. In a synchronous job every rank waits for the slowest in its collectives, so the
time between reports is alike everywhere there; only a reported ``step_time`` tells ranks apart.
"""

from __future__ import annotations

import statistics
from collections import deque


class SlowRankDetector:
    def __init__(self, factor: float = 2.0, window: int = 5) -> None:
        self.factor = factor
        self.window = window
        self._last: dict[int, float] = {}
        self._times: dict[int, deque[float]] = {}
        self._flagged: set[int] = set()

    def reset(self) -> None:
        self._last.clear()
        self._times.clear()
        self._flagged.clear()

    def step(self, rank: int, at: float, step_time: float | None = None) -> tuple[float, float] | None:
        """Feed one step report; returns ``(its step time, peers' median)`` when ``rank`` turns slow."""
        previous = self._last.get(rank)
        self._last[rank] = at
        if step_time is None:
            if previous is None:
                return None
            step_time = at - previous
        times = self._times.setdefault(rank, deque(maxlen=self.window))
        times.append(step_time)
        peers = [t[-1] for r, t in self._times.items() if r != rank and t]
        if len(times) < self.window or not peers:
            return None
        median = statistics.median(peers)
        slow = min(times) > self.factor * median
        if not slow:
            self._flagged.discard(rank)
            return None
        if rank in self._flagged:
            return None
        self._flagged.add(rank)
        return times[-1], median
