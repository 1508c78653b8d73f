"""What is remembered: restart rounds, the bad-node ledger, the history strategies read, capacity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from trainguard.model.choices import Action, ErrorSource, RoundResult
from trainguard.timefmt import iso_ms


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
    notes: tuple[str, ...] = ()
    # An elastic job's world size before and after this round, when the round changed it
    # (scale_in, or growing back at a restart); 0 when it did not.
    world_size_before: int = 0
    world_size_after: int = 0

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
        # What a person needs beyond the stages: a wait for the scheduler, stacks not taken and why.
        out["notes"] = list(self.notes)
        if self.world_size_after:
            out["world_size_before"] = self.world_size_before
            out["world_size_after"] = self.world_size_after
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
    # Set by the store: the nodes to avoid now (this job's isolations and, until their window
    # ends, other jobs' in the same store, less released ones); None derives them from ``rounds``.
    isolated: frozenset[str] | None = None

    @property
    def budget_used(self) -> int:
        return sum(1 for r in self.rounds if r.consumes_budget)

    def trailing(self, predicate: Any) -> int:
        """How many of the latest rounds in a row satisfy ``predicate``.

        Interrupted rounds (their supervisor died mid-way) neither count nor break the run.
        """
        count = 0
        for record in reversed(self.rounds):
            if record.result is RoundResult.INTERRUPTED:
                continue
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
        if self.isolated is not None:
            return self.isolated
        return frozenset(node for r in self.rounds for node in r.isolated)

@dataclass(frozen=True)
class Capacity:
    """Where instances can go: the job's (virtual) nodes, their slots, and which are isolated.

    ``can_requeue``: the scheduler can give the job a new allocation (Slurm) when this one has
    no healthy capacity left. ``steers_replacements``: an instance replaced on its own can be kept
    off a given node (an adapter that places instances itself, or pins them by affinity). Where
    another operator recreates a replaced pod from the job's template (Volcano, under the
    controller or ``--adapter volcano`` without ``--taint-bad-nodes``) it cannot: the pod may land
    on the node it left, so isolating a node that is still schedulable takes rescheduling the job.
    """

    nodes: tuple[str, ...]
    slots_per_node: int
    world_size: int
    isolated: frozenset[str] = frozenset()
    can_requeue: bool = False
    steers_replacements: bool = True

    def keeps_off(self, node: str) -> bool:
        """Whether instances replaced one by one will not be placed on ``node`` again."""
        return self.steers_replacements or node not in self.nodes

    def healthy_slots(self, excluding: Iterable[str] = ()) -> int:
        out = self.isolated | frozenset(excluding)
        return self.slots_per_node * sum(1 for node in self.nodes if node not in out)
