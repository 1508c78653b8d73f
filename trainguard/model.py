"""The vocabulary of trainguard as plain data; nothing here does I/O.

A *job* (:class:`JobSpec`) is the blueprint; its running *instances* (:class:`Instance`) are what
adapters start and stop. Something observed about an instance is a :class:`Fault`; a classifier
turns it into a :class:`Verdict`; a strategy turns the verdict and the history into a
:class:`Decision`; carrying the decision out is one :class:`Round`.

Error taxonomy used by verdicts (the ``category`` labels are those of the fault-log data set):

=====================  ==========================================  ============================
category               typical evidence                            usual handling
=====================  ==========================================  ============================
nccl_timeout           watchdog collective timeout                 retry (platform)
nccl_error             NCCL/gloo/RDMA transport errors             retry; isolate a named peer
cuda_oom               CUDA/HIP out of memory                      fail (user: batch size)
host_oom               OOM killer, ENOMEM, SIGKILL 137             fail unless infra-caused
gpu_hardware           Xid, ECC, fallen off the bus                isolate the node, retry
node_or_infra          disk, DNS, store/rendezvous, preemption     retry; isolate when named
user_code              Python traceback in the user's code         fail (no free retry)
hang_or_stuck          no progress, exit hang                      restart upon suspension
segfault_or_signal     SIGSEGV/SIGABRT/SIGBUS and other signals    retry once, then user error
success_or_benign      warnings, clean exit                        nothing
=====================  ==========================================  ============================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from trainguard.timefmt import iso_ms


class _Choice(str, enum.Enum):
    """A ``str`` enum whose values parse case-insensitively (``sync`` is ``Sync``)."""

    @classmethod
    def parse(cls, text: str) -> "_Choice":
        for member in cls:
            if member.value.lower() == str(text).strip().lower():
                return member
        allowed = ", ".join(m.value for m in cls)
        raise ValueError(f"{text!r} is not one of {allowed}")

    def __str__(self) -> str:
        return self.value


class ExecutionMode(_Choice):
    """AIMaster ``--job-execution-mode``: Sync restarts the whole job, Async only failed instances."""

    SYNC = "Sync"
    ASYNC = "Async"


class FaultTolerantPolicy(_Choice):
    """AIMaster ``--fault-tolerant-policy``.

    OnFailure restarts unconditionally, ExitCodeAndErrorMsg only when the exit code or the
    failed instance's log tail says the fault is retryable, Never gives up at once.
    """

    ON_FAILURE = "OnFailure"
    EXIT_CODE_AND_ERROR_MSG = "ExitCodeAndErrorMsg"
    NEVER = "Never"


class ErrorSource(_Choice):
    """Where a fault was observed (the ``error_source`` of a restart record)."""

    EXIT_CODE = "exit_code"
    LOG = "log"
    HANG = "hang"
    EXIT_HANG = "exit_hang"
    EVENT = "event"
    SDK = "sdk"
    HEALTH_CHECK = "health_check"


class Category(_Choice):
    """What a fault is, as labelled in ``shared/faultlogs`` (see the module table)."""

    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    GPU_HARDWARE = "gpu_hardware"
    NODE_OR_INFRA = "node_or_infra"
    USER_CODE = "user_code"
    HANG_OR_STUCK = "hang_or_stuck"
    SEGFAULT_OR_SIGNAL = "segfault_or_signal"
    SUCCESS_OR_BENIGN = "success_or_benign"


class Action(_Choice):
    """What a decision does. Every value but ``fail`` and ``notify`` starts a recovery round.

    ``restart_in_place`` and ``restart_instances`` keep placements (the processes start again
    where they were); ``restart_job``, ``reschedule_isolated`` and ``replace_instances`` place
    instances anew (``TRAINGUARD_SCHEDULE_COUNT`` grows, ``TRAINGUARD_PROC_START_COUNT`` resets).
    """

    RESTART_IN_PLACE = "restart_in_place"
    RESTART_INSTANCES = "restart_instances"
    RESTART_JOB = "restart_job"
    RESCHEDULE_ISOLATED = "reschedule_isolated"
    REPLACE_INSTANCES = "replace_instances"
    SCALE_IN = "scale_in"
    FAIL = "fail"
    NOTIFY = "notify"

    @property
    def replaces(self) -> bool:
        """Whether the affected instances are placed anew rather than restarted where they run."""
        return self in (Action.RESTART_JOB, Action.RESCHEDULE_ISOLATED, Action.REPLACE_INSTANCES)

    @property
    def whole_job(self) -> bool:
        """Whether every instance is stopped and started, not only the failed ones."""
        return self in (Action.RESTART_IN_PLACE, Action.RESTART_JOB, Action.RESCHEDULE_ISOLATED)


class JobStatus(_Choice):
    """``running`` → ``succeeded`` | ``failed``; a supervisor that resumes a job keeps ``running``."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class RoundResult(_Choice):
    """``in_progress`` → ``recovered`` (instances running again) | ``requeued`` (the scheduler
    will start the job again in a new allocation) | ``failed`` (the restart broke)."""

    IN_PROGRESS = "in_progress"
    RECOVERED = "recovered"
    REQUEUED = "requeued"
    FAILED = "failed"


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
    role: str = "worker"

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
    """Something a person should see: a round started, a node isolated, a message from the SDK."""

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
            "type": self.type,
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


@dataclass(frozen=True)
class RoundRecord:
    """One recovery round as stored: the fault, the decision taken and how long each stage took."""

    job_id: str
    round: int
    reason: str
    error_code: str
    error_message: str
    error_source: ErrorSource
    action: Action
    started_at: float
    result: RoundResult = RoundResult.IN_PROGRESS
    node: str | None = None
    instance: str | None = None
    ranks: tuple[int, ...] = ()
    stages: Mapping[str, float] = field(default_factory=dict)
    consumes_budget: bool = True
    unconditional: bool = False
    user_error: bool = False
    node_fault: bool = False
    isolated: tuple[str, ...] = ()
    stacks: tuple[Mapping[str, Any], ...] = ()
    transient: bool = False

    def to_json(self) -> dict[str, Any]:
        """The record as ``trainguard history --json`` prints it (DESIGN.md contract)."""
        out: dict[str, Any] = {
            "round": self.round,
            "reason": self.reason,
            "error_code": self.error_code,
            "error_message": self.error_message,
            "error_source": self.error_source.value,
            "node": self.node,
            "instance": self.instance,
            "action": self.action.value,
            "started_at": iso_ms(self.started_at),
            "result": self.result.value,
            "stages": {k: round(v, 4) for k, v in self.stages.items()},
            "consumes_budget": self.consumes_budget,
            "isolated_nodes": list(self.isolated),
        }
        if self.error_source in (ErrorSource.HANG, ErrorSource.EXIT_HANG):
            out["stacks"] = [dict(group) for group in self.stacks]
        if self.action is Action.FAIL:
            out["transient"] = self.transient
        return out


@dataclass(frozen=True)
class NodeFaultEntry:
    """One line of the bad-node ledger: a fault code seen on a node at a time."""

    node: str
    fault_code: str
    at: float
    user_error: bool = False
    device: str | None = None


@dataclass(frozen=True)
class History:
    """What a strategy may know of the past: the rounds so far and the bad-node ledger.

    Every budget and ladder counter is derived from these, so a supervisor that crashed and
    resumed from the store decides exactly as the one before it would have.
    """

    rounds: tuple[RoundRecord, ...] = ()
    ledger: tuple[NodeFaultEntry, ...] = ()
    same_error_counts: Mapping[tuple[int, str], int] = field(default_factory=dict)

    @property
    def budget_used(self) -> int:
        return sum(1 for r in self.rounds if r.consumes_budget)

    def trailing(self, predicate: Any) -> int:
        """How many of the latest rounds in a row satisfy ``predicate``."""
        count = 0
        for record in reversed(self.rounds):
            if not predicate(record):
                break
            count += 1
        return count

    def same_fault_on_node(self, node: str, fault_code: str, since: float, device: str | None = None) -> int:
        """Consecutive ledger entries (newest first) of ``fault_code`` on ``node`` after ``since``.

        With ``device`` (a GPU or an instance), only that device's entries on the node count.
        """
        count = 0
        for entry in reversed(self.ledger):
            if entry.node != node or entry.at < since or (device is not None and entry.device != device):
                continue
            if entry.fault_code != fault_code:
                break
            count += 1
        return count

    @property
    def isolated_nodes(self) -> frozenset[str]:
        return frozenset(node for r in self.rounds for node in r.isolated)


@dataclass(frozen=True)
class Capacity:
    """Where instances can go: the job's (virtual) nodes, their slots, and which are isolated.

    ``can_requeue``: the scheduler can give the job a new allocation (Slurm) when this one has
    no healthy capacity left.
    """

    nodes: tuple[str, ...]
    slots_per_node: int
    world_size: int
    isolated: frozenset[str] = frozenset()
    can_requeue: bool = False

    def healthy_slots(self, excluding: Iterable[str] = ()) -> int:
        out = self.isolated | frozenset(excluding)
        return self.slots_per_node * sum(1 for node in self.nodes if node not in out)
