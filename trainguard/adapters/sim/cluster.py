"""The simulator's state: virtual nodes, where each instance runs, the event timeline, and the
simulated job's progress, checkpoints and SDK records.

:class:`SimCluster` is the base of :class:`~trainguard.adapters.sim.SimAdapter`; it owns every
attribute and the few steps that move time and the job forward. Memory is O(instances).
"""

from __future__ import annotations

import heapq
import math
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from trainguard.adapters.sim.clock import SimClock
from trainguard.adapters.sim.faults import FaultClass, FaultMix
from trainguard.adapters.sim.workload import Costs, Workload, coerce
from trainguard.errors import AdapterError
from trainguard.model import JobSpec
from trainguard.policy import Policy

SCENARIO_VAR = "TRAINGUARD_SIM_SCENARIO"


class SimCluster:
    """Simulated nodes, instances and job (the state of a :class:`~trainguard.adapters.sim.SimAdapter`,
    whose docstring gives the parameters)."""

    name = "sim"

    def __init__(self, *, spec: JobSpec, policy: Policy | None = None, log_dir: str | Path | None = None,
                 base_env: Mapping[str, str] | None = None, mix: FaultMix | Mapping[str, Any] | str | None = None,
                 workload: Workload | Mapping[str, Any] | None = None, costs: Costs | Mapping[str, Any] | None = None,
                 seed: int = 0, spare_nodes: int = 0, clock: SimClock | None = None) -> None:
        scenario: Mapping[str, Any] = {}
        if mix is None and workload is None and os.environ.get(SCENARIO_VAR):
            with open(os.environ[SCENARIO_VAR], encoding="utf-8") as handle:
                scenario = yaml.safe_load(handle) or {}
            mix, workload, costs = scenario.get("mix"), scenario.get("workload"), scenario.get("costs")
            seed, spare_nodes = int(scenario.get("seed", seed)), int(scenario.get("spare_nodes", spare_nodes))
        if isinstance(mix, (str, os.PathLike)):
            mix = FaultMix.load(mix)
        elif isinstance(mix, Mapping):
            mix = FaultMix.from_dict(mix)
        if spec.nodes < 1 or spec.slots < 1:
            raise AdapterError(self.name, "nodes and slots per node must be at least 1")
        policy = policy or Policy()
        self.job_id = spec.job_id
        self.mix: FaultMix = mix or FaultMix()
        self.workload: Workload = coerce(Workload, workload) or Workload()
        self.costs: Costs = coerce(Costs, costs) or Costs()
        # Hot spares only when asked for: "auto" means the local host's memory headroom.
        self.warm_standby = str(policy.warm_standby).lower() == "true"
        self.clock = clock or SimClock()
        self.pause: Callable[[float], None] = time.sleep  # unused: the simulator never waits on a scheduler
        self.nodes = tuple(f"node-{i}" for i in range(spec.nodes + spare_nodes))
        self.slots_per_node = spec.slots
        self.world_size = spec.nproc
        self._rng = random.Random(seed)
        # Instance state, O(instances) memory: where each rank is, when it started, whether it runs.
        self._node_of: dict[int, str] = {}
        self._scheduled: dict[int, int] = {}
        self._on_node: dict[str, set[int]] = {}
        self._started_at: dict[int, float] = {}
        self._ended_at: dict[int, float] = {}
        self._running: set[int] = set()
        self._running_view: frozenset[int] | None = frozenset()
        self._fault_log: dict[int, str] = {}
        self._broken: dict[str, tuple[float, FaultClass]] = {}
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = 0
        self._t0: float | None = None
        self._closed = False
        # The job: work done (seconds), work at the last checkpoint, whether it stalls (hang, watchdog).
        self.done = 0.0
        self.checkpointed = 0.0
        self._frozen_at: float | None = None
        self._records: list[tuple[int, dict]] = []
        self._reported_step = -1
        self._reported_ckpt = -1
        self._best_step = -1
        # What happened, for benchmarks and tests: ``trained`` counts redone work again.
        self.stats: dict[str, float] = {"faults": 0, "lost_work": 0.0, "starts": 0, "trained": 0.0}

    # -- time and the job's progress ----------------------------------------------------------

    def _push(self, at: float, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, payload))

    @property
    def productive(self) -> bool:
        return (self._frozen_at is None and len(self._running) == self.world_size and self.done < self.workload.work
                and not self._closed)

    def _advance(self, to: float) -> None:
        now = self.clock.now
        if to <= now:
            return
        if self.productive:
            gained = min((to - now) * self.workload.rate, self.workload.work - self.done)
            self.done += gained
            self.stats["trained"] += gained
            interval = self.workload.checkpoint_interval
            self.checkpointed = max(self.checkpointed, math.floor(self.done / interval + 1e-9) * interval)
        self.clock.now = to

    def _finish_at(self) -> float:
        if not self.productive:
            return math.inf
        return self.clock.now + (self.workload.work - self.done) / self.workload.rate

    def _end(self, rank: int, at: float) -> None:
        self._running.discard(rank)
        self._ended_at[rank] = at
        self._running_view = None

    def _report_progress(self) -> None:
        """Rank 0's SDK records: the latest step and checkpoint, as a training script reports them."""
        if 0 not in self._running:
            return
        now, rate, step_time = self.clock.now, self.workload.rate, self.workload.step_time
        ckpt = int(self.checkpointed // step_time)
        if ckpt > self._reported_ckpt:
            self._reported_ckpt = ckpt
            at = now - (self.done - self.checkpointed) / rate if self._frozen_at is None else self._frozen_at
            self._records.append((0, {"v": 1, "t": at, "type": "checkpoint", "step": ckpt}))
        step = int(self.done // step_time)
        if step == self._reported_step or self._frozen_at is not None:
            return
        if step > self._best_step >= 0 and self._best_step > self._reported_step:
            # Work redone after a restart is not progress: say when the job got back to its best step.
            back = now - (self.done - self._best_step * step_time) / rate
            self._records.append((0, {"v": 1, "t": back, "type": "step", "step": self._best_step}))
        self._reported_step = step
        self._best_step = max(self._best_step, step)
        self._records.append((0, {"v": 1, "t": now, "type": "step", "step": step}))
