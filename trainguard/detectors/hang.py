"""Hang detection by progress: the job is hung when every instance is silent past its interval.

AIMaster restarts a job when "the stdout and stderr logs of all instances are not updated
within" ``--job-hang-interval``. Progress is a rank's log growing or any record from its SDK
(heartbeats, steps), so a quiet rank that reports steps is alive. With staged detection an
instance's interval comes from its own code (``monitor.hang_detect(180)``): each instance is
judged against its own interval, and an instance at -1 (detection off in this stage) keeps the
job from being called hung. The clock starts again at every (re)start.

Only instances still running are judged: one that exited 0 can make no more progress, and its
interval (the job's, once its stages are over) must not hold a hang in another instance. Its
last output still counts as the job's last sign of life, so the others get a full interval
from it.
"""

from __future__ import annotations

import re
from typing import Collection, Mapping

from trainguard.model import ErrorSource, Fault

_NCCL_TIMEOUT = re.compile(r"Timeout\(ms\)=(\d+)")


class HangDetector:
    """``interval`` is the job's (None when the policy leaves detection off)."""

    def __init__(self, interval: float | None) -> None:
        self.interval = interval
        self.since = 0.0

    def reset(self, now: float) -> None:
        self.since = now

    def intervals(self, ranks: Mapping[int, object], overrides: Mapping[int, float | None]) -> dict[int, float | None]:
        """Each rank's interval: its own from the SDK, else the job's; None or -1: not watched."""
        return {rank: overrides[rank] if overrides.get(rank) is not None else self.interval for rank in ranks}

    def _judge(self, progress: Mapping[int, float | None], overrides: Mapping[int, float | None],
               running: Collection[int]) -> tuple[dict[int, float], dict[int, float | None], float | None]:
        """Each running rank's silence start and interval, and the job's deadline (None: never).

        A rank's silence starts at its last progress, the last output of a rank that has ended,
        or the (re)start, whichever is latest."""
        ended = max((progress[r] or 0.0 for r in progress if r not in running), default=0.0)
        starts = {rank: max(self.since, progress[rank] or 0.0, ended) for rank in progress if rank in running}
        limits = self.intervals(starts, overrides)
        if not limits or any(limit is None or limit < 0 for limit in limits.values()):
            return starts, limits, None
        return starts, limits, max(starts[rank] + limit for rank, limit in limits.items())  # type: ignore[operator]

    def deadline(self, progress: Mapping[int, float | None], overrides: Mapping[int, float | None],
                 running: Collection[int]) -> float | None:
        """When the job becomes hung if no running rank makes progress before then; None: never."""
        return self._judge(progress, overrides, running)[2]

    def check(self, now: float, progress: Mapping[int, float | None], overrides: Mapping[int, float | None],
              stages: Mapping[int, str | None], running: Collection[int]) -> Fault | None:
        starts, limits, deadline = self._judge(progress, overrides, running)
        if deadline is None or now < deadline:
            return None
        detail = "; ".join(
            f"rank {rank}{f' in stage {stages[rank]!r}' if stages.get(rank) else ''} silent "
            f"{now - starts[rank]:.1f} s (interval {limits[rank]:g})" for rank in sorted(starts))
        stage = ",".join(sorted({stages[r] for r in starts if stages.get(r)})) or None  # type: ignore[misc]
        return Fault(ErrorSource.HANG, detected_at=now, stage=stage,
                     message=f"no progress from any of {len(starts)} running instance(s): {detail}")


def advise_hang_interval(text: str) -> tuple[float, float] | None:
    """``(nccl_timeout_s, advised_interval_s)`` from a collective timeout in a log, or None.

    Seed 000: set the hang interval 150-200 s below the job's collective timeout, so the
    supervisor catches a hang (and takes stacks) before the watchdog kills the processes.
    """
    found = _NCCL_TIMEOUT.findall(text)
    if not found:
        return None
    timeout = int(found[-1]) / 1000
    return timeout, max(timeout - 150, timeout / 2)
