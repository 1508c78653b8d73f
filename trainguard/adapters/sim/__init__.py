"""A simulated scheduler: thousands of instances on virtual nodes, no processes, simulated time.

It is an adapter like the others (``--adapter sim``), so the real engine, policy, classifiers,
strategies and store run in the loop; only the scheduler and the training job are simulated:

* **time** is the adapter's :class:`SimClock`, which the supervisor uses instead of the wall
  clock (an adapter that keeps its own time exposes it as ``clock``): ``wait(timeout)``
  advances it to the next event instead of sleeping, ``start`` and ``stop`` advance it by what
  placing, starting and stopping cost (:class:`Costs`);
* **faults** come from a :class:`FaultMix` (rates per class and node-day, correlated bursts
  such as a switch taking out 32 nodes, nodes that stay broken until repaired) or a script of
  :class:`ScriptedFault`; each carries the log line a real rank would have printed (an ECC
  line for a GPU memory fault), so the real classifiers judge it;
* **the job** (:class:`Workload`) makes progress while every instance runs, checkpoints every
  ``checkpoint_interval`` seconds of work, loses the work since its last checkpoint when it is
  restarted, and reports steps and checkpoints through SDK records from rank 0, as a training
  script using :mod:`trainguard.sdk` would. It finishes (every instance exits 0) once ``work``
  seconds of training are done.

Every per-tick method is O(1) or O(instances); nothing is O(instances^2).

The fault-mix file format is in :mod:`.faults`. The package, one module per concept:
:mod:`.clock` (simulated time), :mod:`.faults` (fault classes and the fault-mix file),
:mod:`.workload` (the job and recovery costs), :mod:`.cluster` (the simulator's state and the
job's progress), :mod:`.injection` (faults on the timeline), :mod:`.adapter` (the adapter
methods) and :mod:`.run` (:func:`simulate`).
"""

from __future__ import annotations

from trainguard.adapters.sim.adapter import SimAdapter
from trainguard.adapters.sim.clock import SimClock
from trainguard.adapters.sim.cluster import SCENARIO_VAR
from trainguard.adapters.sim.faults import PEER_TIMEOUT, FaultClass, FaultMix, ScriptedFault
from trainguard.adapters.sim.run import SimResult, simulate
from trainguard.adapters.sim.workload import Costs, Workload

__all__ = [
    "PEER_TIMEOUT",
    "SCENARIO_VAR",
    "Costs",
    "FaultClass",
    "FaultMix",
    "ScriptedFault",
    "SimAdapter",
    "SimClock",
    "SimResult",
    "Workload",
    "simulate",
]
