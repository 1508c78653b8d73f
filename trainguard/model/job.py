"""A job and what happens to it: blueprint, instances, faults, verdicts, decisions, events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from trainguard.model.choices import Action, Category, ErrorSource
from trainguard.timefmt import iso_ms


@dataclass(frozen=True)
class JobSpec:
    """The blueprint of a job: what to run, how many ranks, on how many (virtual) nodes."""

    job_id: str
    command: tuple[str, ...]
    nproc: int = 1
    nodes: int = 1
    slots_per_node: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    role: str = "default"
    # How ranks are launched and what they are told (trainguard/frameworks): ``pytorch``,
    # ``tensorflow`` (TF_CONFIG from ``roles``: (type, count) pairs in rank order), ``mpi``,
    # ``horovod``.
    framework: str = "pytorch"
    roles: tuple[tuple[str, int], ...] = ()

    @property
    def slots(self) -> int:
        """Ranks a node holds; 0 in the spec means spread evenly over ``nodes``."""
        return self.slots_per_node or -(-self.nproc // self.nodes)

@dataclass(frozen=True)
class Instance:
    """One running rank of a job: where it is placed and how often it was (re)started."""

    rank: int
    node: str
    local_rank: int
    schedule_count: int = 1
    proc_start_count: int = 1
    pid: int | None = None
    log_path: str | None = None

@dataclass(frozen=True)
class Fault:
    """Something observed about one instance (or the whole job when ``rank`` is None)."""

    source: ErrorSource
    detected_at: float
    rank: int | None = None
    node: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    message: str = ""
    log_path: str | None = None
    stage: str | None = None

    @property
    def instance(self) -> str | None:
        return None if self.rank is None else f"rank-{self.rank}"

@dataclass(frozen=True)
class Verdict:
    """What a classifier says a fault is.

    ``node_fault`` means the evidence points at hardware or the host, so the node should be
    isolated; ``node`` names it when the log does (otherwise the faulty instance's node is meant).
    ``user_error`` means a restart cannot help until the user changes code, data or config.
    """

    category: Category
    fault_code: str
    retryable: bool
    node_fault: bool = False
    user_error: bool = False
    evidence: str = ""
    confidence: float = 0.5
    node: str | None = None
    gpu: str | None = None
    classifier: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category.value,
            "fault_code": self.fault_code,
            "retryable": self.retryable,
            "node_fault": self.node_fault,
            "user_error": self.user_error,
            "evidence": self.evidence,
            "confidence": round(self.confidence, 3),
            "node": self.node,
            "gpu": self.gpu,
            "classifier": self.classifier,
        }

@dataclass(frozen=True)
class Decision:
    """What a strategy says to do about an incident, and why.

    ``consumes_budget`` is False for recoveries that seed 002 says are free (in-place recovery,
    restart upon suspension); ``isolate`` lists nodes to keep out from now on; ``ranks`` limits
    an instance-level action to those ranks.

    ``transient`` marks a ``fail`` that a later attempt of the same job could get past (no spare
    capacity now, restarts left to an outer layer such as Airflow's retries): the job may be
    resumed under its id with its budgets intact. Other failures are permanent: user code, a
    budget spent, a fault repeated too often.
    """

    action: Action
    reason: str
    consumes_budget: bool = True
    isolate: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    unconditional: bool = False
    strategy: str = ""
    transient: bool = False

@dataclass(frozen=True)
class Incident:
    """Faults that arrived together and are handled as one round; the first in time is the root."""

    faults: tuple[Fault, ...]

    @property
    def root(self) -> Fault:
        return min(self.faults, key=lambda f: f.detected_at)

    @property
    def failed_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({f.rank for f in self.faults if f.rank is not None}))

@dataclass(frozen=True)
class Event:
    """Something a person should see: a round started, a node isolated, a message from the SDK.

    ``type`` is an :class:`EventType` (or its string value); ``to_json`` is the one serialised
    form that notifiers, the events file and webhooks share (``docs/events.md``).
    """

    job_id: str
    type: str
    at: float
    message: str = ""
    round: int | None = None
    rank: int | None = None
    node: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "type": str(self.type),
            "at": iso_ms(self.at),
            "message": self.message,
            "round": self.round,
            "rank": self.rank,
            "node": self.node,
            "data": dict(self.data),
        }

@dataclass(frozen=True)
class LogPattern:
    """One entry of the log-pattern catalog: a regular expression and the verdict it implies.

    ``priority`` orders root causes over cascades: when several patterns match a tail, the
    highest priority wins, then the earliest line (the first error in time). ``node_group`` and
    ``gpu_group`` name regex groups that capture the faulty host or GPU.
    """

    id: str
    regex: str
    category: Category
    fault_code: str
    retryable: bool
    node_fault: bool = False
    user_error: bool = False
    priority: int = 50
    confidence: float = 0.8
    node_group: str | None = None
    gpu_group: str | None = None
    source: str = "builtin"
