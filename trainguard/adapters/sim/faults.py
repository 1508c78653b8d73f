"""What goes wrong in a simulation: fault classes, scripted faults, and the fault-mix file.

Each fault carries the log line a real rank would have printed (an ECC line for a GPU memory
fault), so the real classifiers judge it. A fault-mix file (YAML) looks like::

    classes:
      gpu_hbm3:                      # a name of your choice
        rate: 0.00065                # faults per node per day
        log: "RuntimeError: CUDA error: uncorrectable ECC error encountered"
        broken: true                 # the node stays bad for `repair` seconds
      switch:
        rate: 0.0003
        burst: 32                    # nodes taken out together
        log: "NCCL WARN NET/IB : Got completion from peer 10.0.3.17<52311> with error 12"
      nccl_watchdog:
        rate: 0.00006
        stall: 600                   # no progress for this long before the fault shows
        log: "Watchdog caught collective operation timeout: ... Timeout(ms)=600000 ..."
      stuck:
        rate: 0.0001
        hang: true                   # no exit: hang detection has to find it
    scripted:                        # optional: faults at fixed simulated times
      - {at: 3600, fault: gpu_hbm3, nodes: [node-3]}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

import yaml

from trainguard.adapters.sim.clock import DAY


@dataclass(frozen=True)
class FaultClass:
    """One kind of fault: how often, how wide, what the rank's log says, what it leaves behind."""

    name: str
    log: str = "RuntimeError: simulated fault"
    rate: float = 0.0
    exit_code: int = 1
    scope: str = "node"
    broken: bool = False
    repair: float = DAY
    stall: float = 0.0
    burst: int = 1
    hang: bool = False

    def __post_init__(self) -> None:
        if self.scope not in ("node", "rank"):
            raise ValueError(f"fault class {self.name}: scope must be node or rank, not {self.scope!r}")
        if self.rate < 0 or self.stall < 0 or self.burst < 1 or self.repair < 0:
            raise ValueError(f"fault class {self.name}: rate, stall and repair must be >= 0, burst >= 1")


# A synchronous job's other ranks block in a collective when one dies; if nobody restarts them,
# the NCCL watchdog ends them this long after (PyTorch's default timeout).
PEER_TIMEOUT = 600.0
WATCHDOG = FaultClass("peer_timeout", exit_code=6, log=(
    "[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88213, "
    "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600031 milliseconds before timing out."))


@dataclass(frozen=True)
class ScriptedFault:
    """A fault of class ``fault`` at ``at`` simulated seconds after the job's first start.

    It hits ``ranks``, or every instance on ``nodes``, or (neither given) one node chosen at
    random; ``spread`` scatters the hits uniformly over that many seconds.
    """

    at: float
    fault: str
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    spread: float = 0.0


@dataclass(frozen=True)
class FaultMix:
    """Fault classes (random faults) and scripted faults."""

    classes: Mapping[str, FaultClass] = field(default_factory=dict)
    scripted: tuple[ScriptedFault, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "FaultMix":
        known = {f.name for f in fields(FaultClass)}
        classes = {}
        for name, raw in (data.get("classes") or {}).items():
            unknown = set(raw) - known
            if unknown:
                raise ValueError(f"fault class {name}: unknown key(s) {sorted(unknown)}")
            classes[name] = FaultClass(name=name, **{k: v for k, v in raw.items() if k != "name"})
        scripted = tuple(
            ScriptedFault(float(s["at"]), str(s["fault"]), tuple(s.get("nodes") or ()), tuple(s.get("ranks") or ()),
                          float(s.get("spread", 0.0)))
            for s in data.get("scripted") or ())
        for s in scripted:
            if s.fault not in classes:
                raise ValueError(f"scripted fault at {s.at}: no fault class {s.fault!r}")
        return cls(classes, scripted)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "FaultMix":
        with open(path, encoding="utf-8") as handle:
            return cls.from_dict(yaml.safe_load(handle) or {})
