"""The simulated training job and what recovering it costs, in simulated seconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from trainguard.adapters.sim.clock import DAY


@dataclass(frozen=True)
class Workload:
    """The simulated training job, in seconds of (simulated) time."""

    work: float = DAY
    step_time: float = 10.0
    checkpoint_interval: float = 1800.0
    checkpoint_cost: float = 0.0

    @property
    def rate(self) -> float:
        """Work done per second of running: checkpoint saves pause training."""
        return self.checkpoint_interval / (self.checkpoint_interval + self.checkpoint_cost)


@dataclass(frozen=True)
class Costs:
    """Simulated seconds the scheduler and the job take to recover.

    ``schedule``: placing the whole job anew (a new allocation, every pod rescheduled);
    ``pod_schedule``: placing a few instances anew; ``spare_schedule``: the same onto warm
    standby nodes (``warm_standby`` in the policy); ``init``: starting the processes,
    rendezvous and loading the checkpoint, paid by every start; ``stop``: stopping instances.
    """

    stop: float = 30.0
    schedule: float = 600.0
    pod_schedule: float = 120.0
    spare_schedule: float = 15.0
    init: float = 180.0


def coerce(kind: type, value: Any) -> Any:
    """``value`` as a ``kind``: kept if it is one (or None), built from it if it is a mapping."""
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, Mapping):
        return kind(**value)
    raise TypeError(f"expected {kind.__name__} or a mapping, got {type(value).__name__}")
