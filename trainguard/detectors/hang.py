"""Hang detection by log progress: every running instance silent for the interval is a hang.

AIMaster restarts a job when "the stdout and stderr logs of all instances are not updated
within" ``--job-hang-interval``. One chatty rank is enough to show progress, so the job is
hung only when the newest output of any instance is older than the interval. The clock starts
again at every (re)start, so slow start-up is not a hang until the interval has passed.
"""

from __future__ import annotations

from typing import Mapping

from trainguard.model import ErrorSource, Fault


class HangDetector:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.since = 0.0

    def reset(self, now: float) -> None:
        self.since = now

    def last_progress(self, outputs: Mapping[int, float | None]) -> float:
        return max([self.since, *(t for t in outputs.values() if t is not None)])

    def deadline(self, outputs: Mapping[int, float | None]) -> float:
        """When the job becomes hung if nothing is written before then."""
        return self.last_progress(outputs) + self.interval

    def check(self, now: float, outputs: Mapping[int, float | None]) -> Fault | None:
        if not outputs:
            return None
        silent = now - self.last_progress(outputs)
        if silent < self.interval:
            return None
        return Fault(ErrorSource.HANG, detected_at=now,
                     message=f"no output from any of {len(outputs)} instance(s) for {silent:.1f} s "
                             f"(--job-hang-interval={self.interval:g})")
