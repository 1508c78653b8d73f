"""What the supervisor knows about the running job, shared by the loop and the round runner."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from trainguard.errors import TrainguardError
from trainguard.model import Instance


class SupervisorInterrupted(TrainguardError):
    """The supervisor received SIGINT or SIGTERM; the job is stopped and may be resumed."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


@dataclass
class Clock:
    """Wall time for records, monotonic time for stage durations.

    An adapter that keeps its own time (the simulator) exposes a clock of this shape as its
    ``clock`` attribute and the supervisor uses it. ``idle_tick`` is the longest the loop
    waits without a deadline: it bounds how late a signal is acted on while blocked in a real
    wait; a simulated wait returns at once, so a simulated clock may take long steps.
    """

    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic
    idle_tick: float = 0.5


@dataclass
class JobState:
    """The running job as the supervisor sees it.

    ``restart_round`` is the round the running instances belong to (0 for the first start);
    ``master`` is the rendezvous of the current whole-job start. ``nproc`` is the current world
    size (an elastic job's changes); ``required`` the ranks whose success ends the job (None:
    every rank; a framework's launcher or a TensorFlow chief otherwise).
    """

    nproc: int
    required: frozenset[int] | None = None
    instances: dict[int, Instance] = field(default_factory=dict)
    succeeded: set[int] = field(default_factory=set)
    isolated: frozenset[str] = frozenset()
    restart_round: int = 0
    master: tuple[str, int] = ("localhost", 0)

    @property
    def finished(self) -> bool:
        if self.required is not None:
            return self.required <= self.succeeded
        return len(self.succeeded) == self.nproc

    def node_of(self, rank: int | None) -> str | None:
        instance = self.instances.get(rank) if rank is not None else None
        return instance.node if instance else None
