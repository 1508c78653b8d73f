"""The SDK inbox: what the ranks' ``trainguard.sdk`` monitors said (format in :mod:`trainguard.sdk`).

Records only ever come from the ranks of the current start: the adapter opens a fresh channel
for every start, so a resumed or restarted job never hears an earlier run's messages again.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from trainguard.detectors import SlowRankDetector
from trainguard.engine.recorder import Recorder
from trainguard.engine.state import Clock, JobState
from trainguard.model import EventType, ErrorSource, Fault
from trainguard.policy import Policy


class SdkInbox:
    """Applies SDK records: progress marks, staged hang intervals, messages, slow ranks."""

    def __init__(self, policy: Policy, state: JobState, recorder: Recorder, clock: Clock) -> None:
        self.policy = policy
        self.state = state
        self.recorder = recorder
        self.clock = clock
        self.slow = SlowRankDetector(policy.slow_rank_factor, policy.slow_rank_window)
        # Last record time, hang interval and stage per rank.
        self.progress: dict[int, float] = {}
        self.hang_overrides: dict[int, float | None] = {}
        self.stages: dict[int, str | None] = {}
        self.runtime_retryable: tuple[str, ...] = ()
        # Training progress for goodput and the no-progress guard: the highest step and
        # checkpoint reported, when, and the time spent reaching new steps (work not redone).
        self.step: int | None = None
        self.step_at: float | None = None
        self.checkpoint: int | None = None
        self.checkpoint_at: float | None = None
        self.productive = 0.0
        self._step_seen: dict[int, float] = {}
        # Records of the in-process wrapper (``type: inprocess``), for engine/inprocess.py.
        self.on_inprocess: Callable[[int, Mapping[str, Any]], Fault | None] | None = None

    def marks(self) -> dict[str, Any]:
        """The progress reported so far (``docs/events.md``, ``progress``)."""
        return {"step": self.step, "step_at": self.step_at, "checkpoint": self.checkpoint,
                "checkpoint_at": self.checkpoint_at, "productive": round(self.productive, 3)}

    def forget(self, rank: int) -> None:
        """A new process states its own stage and interval."""
        for per_rank in (self.progress, self.hang_overrides, self.stages, self._step_seen):
            per_rank.pop(rank, None)

    def apply(self, rank: int, record: Mapping[str, Any]) -> Fault | None:
        """Apply one record; a persistently slow rank may become a fault."""
        at = _number(record.get("t")) or self.clock.wall()
        self.progress[rank] = max(at, self.progress.get(rank, 0.0))
        kind = record.get("type")
        node = self.state.node_of(rank)
        emit = self.recorder.emit
        if kind == "config":
            self.hang_overrides[rank] = _number(record.get("job_hang_interval"))
            stage = record.get("stage")
            self.stages[rank] = str(stage) if stage is not None else None
        elif kind == "message":
            emit(EventType.SDK_MESSAGE, str(record.get("content", "")), round_no=self.state.restart_round, rank=rank,
                 node=node, data={"content": record.get("content")})
        elif kind == "retryable_errors":
            errors = [str(e) for e in record.get("errors") or [] if str(e).strip()]
            self.runtime_retryable = tuple(dict.fromkeys((*self.runtime_retryable, *errors)))
            emit(EventType.SDK_RETRYABLE_ERRORS, ", ".join(errors), rank=rank, data={"errors": errors})
        elif kind == "inprocess" and self.on_inprocess is not None:
            return self.on_inprocess(rank, record)
        elif kind == "checkpoint":
            step = _number(record.get("step"))
            if step is not None and (self.checkpoint is None or step > self.checkpoint):
                self.checkpoint, self.checkpoint_at = int(step), at
        elif kind == "step":
            self._on_step(rank, at, _number(record.get("step")))
            metrics = record.get("metrics")
            step_time = _number(metrics.get("step_time")) if isinstance(metrics, dict) else None
            slow = self.slow.step(rank, at, step_time)
            if slow is not None:
                message = (f"rank {rank} on {node} is persistently slow: step {slow[0]:.3f} s vs peers' median "
                           f"{slow[1]:.3f} s (x{self.policy.slow_rank_factor:g} for "
                           f"{self.policy.slow_rank_window} steps)")
                emit(EventType.RANK_SLOW, message, round_no=self.state.restart_round, rank=rank, node=node,
                     data={"step_time": slow[0], "median": slow[1]})
                if self.policy.isolate_slow_nodes:
                    return Fault(ErrorSource.SDK, at, rank=rank, node=node, message=message)
        return None


    def _on_step(self, rank: int, at: float, step: float | None) -> None:
        """A new highest step is productive time since the rank's previous step in this start;
        steps redone after a restart are not."""
        previous = self._step_seen.get(rank)
        self._step_seen[rank] = at
        if step is None or (self.step is not None and step <= self.step):
            return
        if previous is not None and at > previous:
            self.productive += at - previous
        self.step, self.step_at = int(step), at


def _number(value: Any) -> float | None:
    """A finite number from a record, or None: a rank's bad record must not poison the loop."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and value not in (float("inf"), float("-inf")) else None
