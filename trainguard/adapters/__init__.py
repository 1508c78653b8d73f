"""Adapters: the only code that talks to a scheduler.

The engine relies on exactly the methods of :class:`Adapter`; identity is the job id and the
rank, never a scheduler-side name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from trainguard.model import Capacity, Instance
from trainguard.stacks import ThreadStack


@dataclass(frozen=True)
class Launch:
    """Start ``command`` as ``instance`` with ``env``; ``restart_round`` names its log."""

    instance: Instance
    command: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    restart_round: int


@dataclass(frozen=True)
class Exit:
    """An instance's process ended: ``exit_code`` is negative for a fatal signal (``-9``)."""

    rank: int
    pid: int
    exit_code: int
    at: float


class Adapter(Protocol):
    """What the engine needs from a scheduler.

    An adapter that keeps its own time (the simulator, :mod:`trainguard.adapters.sim`) also
    has a ``clock`` attribute shaped like :class:`trainguard.engine.state.Clock`; the
    supervisor then records and times everything by it.
    """

    name: str
    # What the last ``start`` waited for the scheduler, ``(why, seconds)``: its controller did
    # not answer or refused for now; None when it started at once.
    last_wait: tuple[str, float] | None
    # How the adapter sleeps while it waits on its scheduler (a launch the controller refuses for
    # now, an API server that does not answer): ``time.sleep`` until the engine replaces it with
    # a sleep that a stop signal (SIGTERM, SIGINT) ends by raising, so that a supervisor told to
    # stop does not first wait out the outage. Pause only where every process already started
    # is known to ``running()``: the engine stops those.
    pause: Callable[[float], None]

    def capacity(self, isolated: frozenset[str]) -> Capacity:
        """The job's nodes and slots, with ``isolated`` ones marked."""

    def place(self, ranks: Sequence[int], current: Mapping[int, str], isolated: frozenset[str]) -> dict[int, str]:
        """Choose nodes for ``ranks``; ranks in ``current`` but not in ``ranks`` stay where they are."""

    def isolate(self, nodes: Sequence[str], reason: str) -> None:
        """Keep ``nodes`` out of this job (and, where the scheduler allows, out of others)."""

    def requeue(self, reason: str) -> bool:
        """Ask the scheduler to start the job again in a new allocation; False if it cannot."""

    def rendezvous(self, placement: Mapping[int, str]) -> tuple[str, int]:
        """A fresh ``(MASTER_ADDR, MASTER_PORT)`` for a whole-job start placed as given."""

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        """Start the launches; returns each rank's instance with ``pid`` and ``log_path`` set.

        Returns only when every instance is running (a scheduler that accepted a launch but
        has not started it yet is waited for); raises :class:`~trainguard.errors.AdapterError`
        otherwise, ``permanent=False`` when a later attempt could succeed.
        """

    def start_notes(self) -> tuple[str, ...]:
        """What the last ``start`` did that its round should say (ranks started in warm spares
        or cold, and why); ``()`` when there is nothing to say."""

    def adopt(self) -> dict[int, Instance]:
        """Instances of this job already running, left by a previous supervisor of the same job
        id (pods outlive their launcher); the engine starts only what is missing. ``{}`` when
        the scheduler cannot outlive the supervisor (local processes)."""

    def wait(self, timeout: float) -> list[Exit]:
        """Block up to ``timeout`` seconds for instances to end; returns those that did."""

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        """Stop ``ranks`` (SIGTERM, ``grace`` seconds, SIGKILL) and return how they ended."""

    def running(self) -> frozenset[int]:
        """Ranks whose process is alive."""

    def last_output(self, rank: int) -> float | None:
        """When the rank's current log last grew (epoch seconds), running or not; None if unknown."""

    def sdk_records(self) -> list[tuple[int, dict]]:
        """SDK records (see :mod:`trainguard.sdk`) written since the last call, with their rank.

        ``wait`` returns early when records arrive, so they are handled as promptly as exits.
        """

    def stacks(self, ranks: Sequence[int], timeout: float) -> list[ThreadStack]:
        """Python stacks of every thread of the ranks' processes, taken in parallel; raises
        :class:`~trainguard.errors.AdapterError` saying why when none can be taken."""

    def log_tail(self, rank: int, nbytes: int) -> str:
        """The last ``nbytes`` of the rank's current log, decoded, starting at a whole line."""

    def close(self) -> None:
        """Stop everything still running (with the policy's stop grace period) and release
        resources; safe to call twice."""
