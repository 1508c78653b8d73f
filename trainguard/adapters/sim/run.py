"""Running a whole simulated job from Python: :func:`simulate` and its :class:`SimResult`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from trainguard.adapters.sim.adapter import SimAdapter
from trainguard.adapters.sim.faults import FaultMix
from trainguard.adapters.sim.workload import Costs, Workload
from trainguard.model import JobSpec
from trainguard.policy import Policy


@dataclass
class SimResult:
    """What :func:`simulate` returns: the job's status, the adapter (``stats``, ``elapsed``) and
    how long the simulation took on this machine."""

    job_id: str
    status: Any
    adapter: SimAdapter
    state_dir: Path
    real_seconds: float


def simulate(nproc: int, *, state_dir: str | os.PathLike[str], policy: Policy | None = None, nodes: int | None = None,
             slots_per_node: int = 8, spare_nodes: int = 0, mix: FaultMix | Mapping[str, Any] | str | None = None,
             workload: Workload | Mapping[str, Any] | None = None, costs: Costs | Mapping[str, Any] | None = None,
             seed: int = 0, job_id: str = "sim-job", host: Any = None) -> SimResult:
    """Supervise a simulated job of ``nproc`` instances with the real engine and store.

    The Python face of ``--adapter sim`` for tests and benchmarks: ``nodes`` nodes of
    ``slots_per_node`` instances (default: just enough), plus ``spare_nodes``; the history is
    written under ``state_dir`` as for any job.
    """
    # The engine is imported here, not at module level: adapters sit below the engine.
    from trainguard.engine import Supervisor
    from trainguard.hooks import PluginHost
    from trainguard.store import RunStore

    policy = policy or Policy()
    nodes = nodes or -(-nproc // slots_per_node)
    spec = JobSpec(job_id=job_id, command=("simulated-training",), nproc=nproc, nodes=nodes,
                   slots_per_node=slots_per_node)
    adapter = SimAdapter(spec=spec, policy=policy, mix=mix or FaultMix(), workload=workload, costs=costs, seed=seed,
                         spare_nodes=spare_nodes)
    started = time.perf_counter()
    with RunStore(state_dir) as store:
        status = Supervisor(spec, policy, adapter, store, host or PluginHost(load_entry_points=False)).run()
    return SimResult(job_id, status, adapter, Path(state_dir), time.perf_counter() - started)
