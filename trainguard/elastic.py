"""Elastic jobs: go on smaller when a node is lost and no spare is left, grow back later.

A job is elastic when its policy sets ``min_nodes`` (``--min-nodes``, or torchrun's
``--nnodes MIN:MAX``). Its ranks fill whole nodes of ``slots`` ranks each (``JobSpec.slots``);
its full size is ``--nproc``, reached on ``max_nodes`` nodes (by default the nodes ``--nproc``
needs). Nothing here does I/O: the engine asks these functions and carries out the answer.

The rules for scale events (the ladder in :mod:`trainguard.plugins.strategy` decides
``scale_in``; the engine grows a job back):

===========================================  ==============================================
situation                                    what happens
===========================================  ==============================================
node fault, no healthy spare, healthy nodes  ``scale_in``: the node is isolated and the whole
left >= ``min_nodes``                        job restarts from its checkpoint on the nodes
                                             left, ``WORLD_SIZE`` = slots x nodes; ranks are
                                             renumbered 0..N-1 (budgeted: a failure caused it)
node fault, fewer than ``min_nodes`` left    as for a static job: fail (transient)
a whole-job restart while the job runs       grow back: the nodes whose isolation ended (the
smaller than full, and capacity returned     window passed, or ``trainguard nodes release``)
                                             take ranks again, up to the full size; the round
                                             keeps its action and cost (growth is free, as a
                                             membership change is in torch elastic)
an instance-level restart (Async)            no change of size: ``WORLD_SIZE`` cannot change
                                             under running ranks
===========================================  ==============================================

Rounds that change the size record ``world_size_before`` and ``world_size_after``.
"""

from __future__ import annotations

from typing import Iterable

from trainguard.model import Capacity, JobSpec
from trainguard.policy import Policy


def enabled(policy: Policy) -> bool:
    """Whether the job may change size."""
    return policy.min_nodes > 0


def full_size(spec: JobSpec, policy: Policy) -> int:
    """The world size of the job at full strength: ``--nproc``, capped by ``max_nodes``."""
    if policy.max_nodes:
        return min(spec.nproc, policy.max_nodes * spec.slots)
    return spec.nproc


def min_size(spec: JobSpec, policy: Policy) -> int:
    """The smallest world size the job may run at."""
    return min(spec.nproc, policy.min_nodes * spec.slots)


def healthy_nodes(capacity: Capacity, excluding: Iterable[str] = ()) -> list[str]:
    out = capacity.isolated | frozenset(excluding)
    return [node for node in capacity.nodes if node not in out]


def size_for(spec: JobSpec, policy: Policy, capacity: Capacity) -> int:
    """The world size the job runs at on ``capacity``'s healthy nodes: whole nodes of
    ``slots`` ranks, at most the full size. May be below the minimum (see :func:`refusal`)."""
    return min(full_size(spec, policy), len(healthy_nodes(capacity)) * capacity.slots_per_node)


def refusal(spec: JobSpec, policy: Policy, capacity: Capacity) -> str | None:
    """Why the job cannot run on ``capacity`` (None when it can)."""
    if not enabled(policy):
        return "the job is not elastic (set --min-nodes or --nnodes MIN:MAX)"
    if spec.roles:
        return "a job of --roles (TensorFlow) has a fixed number of tasks per role"
    left = len(healthy_nodes(capacity))
    if left < policy.min_nodes or size_for(spec, policy, capacity) < max(1, min_size(spec, policy)):
        return (f"only {left} healthy node(s) left, fewer than --min-nodes={policy.min_nodes} "
                f"(isolated: {', '.join(sorted(capacity.isolated)) or 'none'})")
    return None


def returned(isolated: frozenset[str], still_isolated: frozenset[str]) -> frozenset[str]:
    """Nodes the job kept out that the store no longer isolates (window ended, released)."""
    return isolated - still_isolated


def note(before: int, after: int, nodes: Iterable[str]) -> str:
    """The round's note on a change of size."""
    verb = "scaled in" if after < before else "grew back"
    return f"{verb}: world size {before} -> {after} on {', '.join(nodes)}"
