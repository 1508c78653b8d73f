"""Exit-hang detection: an instance succeeded but the job did not finish within the interval.

A rank that finished while a peer is stuck in a final barrier, a checkpoint upload or a
process-group teardown leaves the job "running" forever; AIMaster restarts it after
``--job-exit-hang-interval`` seconds counted from the first instance that succeeded.
"""

from __future__ import annotations

from typing import Collection

from trainguard.model import ErrorSource, Fault


class ExitHangDetector:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.first_success: float | None = None

    def reset(self) -> None:
        self.first_success = None

    def on_success(self, at: float) -> None:
        if self.first_success is None:
            self.first_success = at

    def deadline(self) -> float | None:
        return None if self.first_success is None else self.first_success + self.interval

    def check(self, now: float, running: Collection[int]) -> Fault | None:
        if self.first_success is None or not running or now - self.first_success < self.interval:
            return None
        ranks = ", ".join(str(r) for r in sorted(running))
        return Fault(ErrorSource.EXIT_HANG, detected_at=now,
                     message=f"rank(s) {ranks} still running {now - self.first_success:.1f} s after the "
                             f"first instance succeeded (--job-exit-hang-interval={self.interval:g})")
