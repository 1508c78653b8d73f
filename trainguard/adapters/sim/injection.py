"""Faults put on the simulator's timeline and what they do when their time comes.

Random faults of each :class:`~trainguard.adapters.sim.faults.FaultClass` arrive as a Poisson
process scaled by the nodes in use; scripted ones at their time. A fault ends the instances it
hits (or stalls the job first, or hangs it), may leave its nodes broken until repaired, and,
unless something restarts them, the NCCL watchdog ends the other ranks ``PEER_TIMEOUT`` later.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from trainguard.adapters import Exit
from trainguard.adapters.sim.clock import DAY
from trainguard.adapters.sim.cluster import SimCluster
from trainguard.adapters.sim.faults import PEER_TIMEOUT, WATCHDOG, FaultClass, ScriptedFault


class FaultInjection(SimCluster):
    """Scheduling and firing the simulator's faults (part of :class:`~trainguard.adapters.sim.SimAdapter`)."""

    def _schedule_random(self, cls: FaultClass, after: float) -> None:
        nodes_in_use = max(1, len(self._on_node))
        per_second = cls.rate * nodes_in_use / DAY
        if per_second > 0:
            self._push(after + self._rng.expovariate(per_second), "random", cls)

    def _begin(self) -> None:
        """The first start: random faults begin, scripted ones are placed on the timeline."""
        self._t0 = self.clock.now
        for cls in self.mix.classes.values():
            self._schedule_random(cls, self._t0)
        for scripted in self.mix.scripted:
            self._push(self._t0 + scripted.at, "scripted", scripted)

    def _fire(self, kind: str, payload: Any) -> list[Exit]:
        now = self.clock.now
        if kind == "random":
            cls: FaultClass = payload
            self._schedule_random(cls, now)
            in_use = list(self._on_node)
            if not in_use:
                return []
            first = self._rng.randrange(len(in_use))
            nodes = [in_use[(first + i) % len(in_use)] for i in range(min(cls.burst, len(in_use)))]
            return self._hit(cls, nodes, (), now)
        if kind == "scripted":
            scripted: ScriptedFault = payload
            cls = self.mix.classes[scripted.fault]
            nodes = list(scripted.nodes) or ([] if scripted.ranks else [self._rng.choice(list(self._on_node))])
            if scripted.spread > 0:
                for rank in scripted.ranks or [r for n in nodes for r in self._on_node.get(n, ())]:
                    self._push(now + self._rng.uniform(0, scripted.spread), "exit", (rank, cls, now))
                return []
            return self._hit(cls, nodes, scripted.ranks, now)
        if kind == "stall_exit":
            ranks, cls, since = payload
            return self._exit(ranks, cls, since, now)
        if kind == "exit":
            rank, cls, since = payload
            return self._exit([rank], cls, since, now)
        if kind == "peers":
            return self._exit(sorted(self._running), WATCHDOG, payload, now)
        raise AssertionError(kind)

    def _hit(self, cls: FaultClass, nodes: Iterable[str], ranks: Iterable[int], now: float) -> list[Exit]:
        nodes = list(nodes)
        targets = list(ranks) or [rank for node in nodes for rank in sorted(self._on_node.get(node, ()))]
        targets = [rank for rank in targets if rank in self._running]
        if cls.broken:
            for node in nodes or {self._node_of[r] for r in targets}:
                self._broken[node] = (now + cls.repair, cls)
        if not targets:
            return []
        self.stats["faults"] += 1
        if cls.hang or cls.stall:
            # The job stops making progress now; a watchdog makes it exit ``stall`` seconds later.
            if self._frozen_at is None:
                self._frozen_at = now
            if not cls.hang:
                self._push(now + cls.stall, "stall_exit", (targets, cls, now))
            return []
        return self._exit(targets, cls, now, now)

    def _exit(self, ranks: Sequence[int], cls: FaultClass, since: float, now: float) -> list[Exit]:
        exits = []
        for rank in ranks:
            # The fault hit the process running then: one started since is not affected.
            if rank not in self._running or self._started_at.get(rank, math.inf) > since:
                continue
            self._fault_log[rank] = cls.log
            self._end(rank, now)
            exits.append(Exit(rank, 0, cls.exit_code, now))
        if exits and cls is not WATCHDOG and self._running:
            self._push(now + PEER_TIMEOUT, "peers", now)
        return exits
