"""Faults no exit announces: a job that stopped making progress, or does not finish after a
rank did. Sync jobs only, as AIMaster supports them."""

from __future__ import annotations

from trainguard.adapters import Adapter
from trainguard.detectors import ExitHangDetector, HangDetector
from trainguard.engine.inbox import SdkInbox
from trainguard.engine.state import Clock
from trainguard.model import ExecutionMode, Fault
from trainguard.policy import Policy


class Watch:
    """Hang and exit-hang detection over the adapter's log progress and the SDK's marks."""

    def __init__(self, policy: Policy, adapter: Adapter, inbox: SdkInbox, clock: Clock, nproc: int) -> None:
        self.policy = policy
        self.adapter = adapter
        self.inbox = inbox
        self.clock = clock
        self.nproc = nproc
        self.sync = policy.job_execution_mode is ExecutionMode.SYNC
        self.hang = HangDetector(policy.job_hang_interval if policy.enable_job_hang_detection else None)
        self.exit_hang = ExitHangDetector(policy.job_exit_hang_interval)
        self.exit_hang_on = self.sync and policy.enable_job_exit_hang_detection
        # The hang deadline ``check`` found, for the ``timeout`` that follows it in the same tick
        # (nothing happens in between): judging every rank once a tick, not twice.
        self._judged: list[float | None] = []

    def reset(self) -> None:
        """Ranks (re)started: silence is timed from now."""
        self.hang.reset(self.clock.wall())
        self.exit_hang.reset()
        self._judged.clear()

    def timeout(self) -> float:
        """How long the loop may sleep before a detector's deadline."""
        hang = self._judged.pop() if self._judged else self._hang_deadline()
        self._judged.clear()
        deadlines = [d for d in (hang, self.exit_hang.deadline() if self.exit_hang_on else None) if d is not None]
        now = self.clock.wall()
        return max(0.0, min([self.clock.idle_tick, *(d - now for d in deadlines)]))

    def check(self) -> Fault | None:
        now = self.clock.wall()
        if self.exit_hang_on:
            fault = self.exit_hang.check(now, self.adapter.running())
            if fault is not None:
                return fault
        running = self.adapter.running() if self.sync else frozenset()
        if not running or not self._may_hang():
            return None
        progress = self.progress()
        deadline = self.hang.deadline(progress, self.inbox.hang_overrides, running)
        self._judged[:] = [deadline]
        if deadline is None or now < deadline:
            return None
        return self.hang.check(now, progress, self.inbox.hang_overrides, self.inbox.stages, running)

    def progress(self) -> dict[int, float | None]:
        """Last sign of life (log output or SDK record) of every rank, finished ones included."""
        last_output, sdk = self.adapter.last_output, self.inbox.progress
        out: dict[int, float | None] = {}
        for rank in range(self.nproc):
            seen, said = last_output(rank), sdk.get(rank)
            out[rank] = said if seen is None else seen if said is None or seen >= said else said
        return out

    def _may_hang(self) -> bool:
        """Whether any interval applies: with none, judging every rank's silence is wasted."""
        return self.hang.interval is not None or bool(self.inbox.hang_overrides)

    def _hang_deadline(self) -> float | None:
        running = self.adapter.running() if self.sync else frozenset()
        if not running or not self._may_hang():
            return None
        return self.hang.deadline(self.progress(), self.inbox.hang_overrides, running)
