"""The simulated scheduler as the engine sees it: the adapter methods of ``--adapter sim``.

Placing and starting instances, stopping them, and waiting, which moves simulated time to the
next event (a fault, the job's end) instead of sleeping. The state lives in :mod:`.cluster`,
the faults in :mod:`.injection`.
"""

from __future__ import annotations

import heapq
import math
import signal
from dataclasses import replace
from typing import Mapping, Sequence

from trainguard.adapters import Exit, Launch
from trainguard.adapters.sim.injection import FaultInjection
from trainguard.errors import AdapterError
from trainguard.model import Capacity, Instance
from trainguard.stacks import ThreadStack

# A node that is broken fails the instances placed on it this long after they start.
_BROKEN_FAILS_AFTER = 30.0


class SimAdapter(FaultInjection):
    """Simulated instances on virtual nodes; see :mod:`trainguard.adapters.sim`.

    :param spec: the job; ``spec.nodes`` nodes of ``spec.slots`` slots, plus ``spare_nodes``.
    :param mix: random and scripted faults (a :class:`FaultMix`, a mapping, or a YAML path);
        default: ``$TRAINGUARD_SIM_SCENARIO`` (a YAML file with ``mix``, ``workload``,
        ``costs``, ``seed``, ``spare_nodes``), else no faults.
    :param workload: the training job; :param costs: recovery costs; :param seed: randomness.
    """

    # Simulated starts never wait for a scheduler and have nothing more to say.
    last_wait: tuple[str, float] | None = None

    def start_notes(self) -> tuple[str, ...]:
        return ()

    # -- the scheduler ------------------------------------------------------------------------

    def capacity(self, isolated: frozenset[str]) -> Capacity:
        return Capacity(self.nodes, self.slots_per_node, self.world_size, frozenset(isolated))

    def place(self, ranks: Sequence[int], current: Mapping[int, str], isolated: frozenset[str]) -> dict[int, str]:
        moving = set(ranks)
        used: dict[str, int] = {}
        placement: dict[int, str] = {}
        for rank, node in current.items():
            if rank not in moving:
                placement[rank] = node
                used[node] = used.get(node, 0) + 1
        free = (n for n in self.nodes if n not in isolated)
        node, left = None, 0
        for rank in sorted(moving):
            while left <= 0:
                node = next(free, None)
                if node is None:
                    healthy = sum(1 for n in self.nodes if n not in isolated)
                    raise AdapterError(self.name, f"no free slot for rank {rank}: {healthy} healthy node(s) of "
                                       f"{self.slots_per_node} slot(s), {len(isolated)} isolated")
                left = self.slots_per_node - used.get(node, 0)
            assert node is not None
            placement[rank] = node
            used[node] = used.get(node, 0) + 1
            left -= 1
        return placement

    def isolate(self, nodes: Sequence[str], reason: str) -> None:
        """Virtual nodes need no more than leaving them out of placement."""

    def requeue(self, reason: str) -> bool:
        return False

    def rendezvous(self, placement: Mapping[int, str]) -> tuple[str, int]:
        return placement[min(placement)] if placement else self.nodes[0], 29500

    def adopt(self) -> dict[int, Instance]:
        return {}

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        if self._closed:
            raise AdapterError(self.name, "the simulation is closed")
        # The engine counts placements: a grown schedule count is a (re)scheduled instance.
        moved = sum(1 for launch in launches
                    if launch.instance.schedule_count != self._scheduled.get(launch.instance.rank))
        if self._t0 is None or moved >= self.world_size:
            placing = self.costs.schedule
        elif moved:
            placing = self.costs.spare_schedule if self.warm_standby else self.costs.pod_schedule
        else:
            placing = 0.0
        if launches:
            # Every start of a synchronous job resumes from the last checkpoint.
            self.stats["lost_work"] += self.done - self.checkpointed
            self.done = self.checkpointed
            self._frozen_at = None
            self._advance(self.clock.now + placing + self.costs.init)
        now = self.clock.now
        started: dict[int, Instance] = {}
        for launch in launches:
            rank, node = launch.instance.rank, launch.instance.node
            if rank in self._running:
                raise AdapterError(self.name, f"rank {rank} is still running")
            old = self._node_of.get(rank)
            if old is not None and old != node:
                self._on_node[old].discard(rank)
                if not self._on_node[old]:
                    del self._on_node[old]
            self._node_of[rank] = node
            self._scheduled[rank] = launch.instance.schedule_count
            self._on_node.setdefault(node, set()).add(rank)
            self._started_at[rank] = now
            self._ended_at.pop(rank, None)
            self._fault_log.pop(rank, None)
            self._running.add(rank)
            broken = self._broken.get(node)
            if broken is not None and broken[0] > now:
                self._push(now + _BROKEN_FAILS_AFTER, "exit", (rank, broken[1], now))
            started[rank] = replace(launch.instance, pid=None, log_path=None)
        self._running_view = None
        self.stats["starts"] += 1
        if self._t0 is None:
            self._begin()  # once the nodes in use are known: random faults scale with them
        if 0 in started:
            self._reported_step = int(self.done // self.workload.step_time)
            self._records.append((0, {"v": 1, "t": now, "type": "step", "step": self._reported_step}))
        return started

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        targets = [rank for rank in ranks if rank in self._running]
        if not targets:
            return []
        self._advance(self.clock.now + self.costs.stop)
        now = self.clock.now
        for rank in targets:
            self._end(rank, now)
        return [Exit(rank, 0, -signal.SIGTERM, now) for rank in targets]

    def wait(self, timeout: float) -> list[Exit]:
        deadline = self.clock.now + max(0.0, timeout)
        exits: list[Exit] = []
        while not exits and not self._closed:
            finish = self._finish_at()
            upcoming = self._events[0][0] if self._events else math.inf
            at = min(finish, upcoming)
            if at > deadline:
                self._advance(deadline)
                break
            self._advance(at)
            if finish <= upcoming:
                self._report_progress()  # the last step and checkpoint, as the script ends
                now = self.clock.now
                exits = [Exit(rank, 0, 0, now) for rank in sorted(self._running)]
                for exit_ in exits:
                    self._end(exit_.rank, now)
                break
            # Everything due now is one batch: simultaneous failures arrive together.
            while self._events and self._events[0][0] <= self.clock.now:
                _, _, kind, payload = heapq.heappop(self._events)
                exits.extend(self._fire(kind, payload))
        self._report_progress()
        return exits

    # -- what the engine reads ----------------------------------------------------------------

    def running(self) -> frozenset[int]:
        if self._running_view is None:
            self._running_view = frozenset(self._running)
        return self._running_view

    def last_output(self, rank: int) -> float | None:
        if rank in self._running:
            return self._frozen_at if self._frozen_at is not None else self.clock.now
        return self._ended_at.get(rank)

    def sdk_records(self) -> list[tuple[int, dict]]:
        records, self._records = self._records, []
        return records

    def stacks(self, ranks: Sequence[int], timeout: float) -> list[ThreadStack]:
        raise AdapterError(self.name, "simulated instances have no processes to take stacks from")

    def log_tail(self, rank: int, nbytes: int) -> str:
        if rank not in self._node_of:
            return ""
        step = int(self.done // self.workload.step_time)
        tail = f"simulated rank {rank} up on {self._node_of[rank]}\nstep {step}\n"
        line = self._fault_log.get(rank)
        return (tail + line + "\n")[-nbytes:] if line else tail[-nbytes:]

    def close(self) -> None:
        if self._closed:
            return
        now = self.clock.now
        for rank in list(self._running):
            self._end(rank, now)
        self._closed = True

    # -- for benchmarks -----------------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        """Simulated seconds since the first start."""
        return self.clock.now - (self._t0 if self._t0 is not None else self.clock.now)
