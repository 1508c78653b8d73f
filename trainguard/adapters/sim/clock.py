"""The simulator's clock, which the supervisor reads instead of the wall clock, and ``DAY``."""

from __future__ import annotations

import time

DAY = 86400.0


class SimClock:
    """Simulated time: ``wall`` starts at the real time of creation and moves only when the
    simulator says so. ``idle_tick`` tells the supervisor it may wait in long steps: nothing
    sleeps, so a stop signal is still acted on at once."""

    idle_tick = 3600.0

    def __init__(self, start: float | None = None) -> None:
        self.start = time.time() if start is None else start
        self.now = self.start

    def wall(self) -> float:
        return self.now

    def mono(self) -> float:
        return self.now - self.start
