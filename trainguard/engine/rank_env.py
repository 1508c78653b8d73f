"""The environment every rank starts with: torchrun's variables, then trainguard's.

A script written for ``torchrun`` must run unchanged, so every variable torchrun 2.x sets for a
worker is set here with the same meaning (checked by a test against a real torchrun); values
that name torchrun's own machinery say what trainguard does instead:

| variable | value here |
| --- | --- |
| ``MASTER_ADDR`` / ``MASTER_PORT`` | the adapter's rendezvous; a fresh port for every whole-job start |
| ``TORCHELASTIC_USE_AGENT_STORE`` | ``False``: rank 0 hosts the TCPStore, as in a plain ``env://`` launch |
| ``TORCHELASTIC_ERROR_FILE`` | set by the adapter beside the rank's log; read back as evidence on failure |
| ``TORCHELASTIC_MAX_RESTARTS`` | the policy's job restart budget |
| ``TORCHELASTIC_RESTART_COUNT`` | the restart round the rank starts in |
| ``OMP_NUM_THREADS`` | ``1`` when more than one rank shares a node and the user set none (torchrun's warning) |
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

from trainguard.model import Instance, JobSpec

log = logging.getLogger(__name__)

# torchrun forwards these signals to its workers' handlers (torch.distributed.elastic).
SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"


def local_ranks(placement: Mapping[int, str]) -> dict[int, int]:
    """Each rank's index among the ranks on its node, in rank order."""
    by_node: dict[str, list[int]] = {}
    for rank in sorted(placement):
        by_node.setdefault(placement[rank], []).append(rank)
    return {rank: index for ranks in by_node.values() for index, rank in enumerate(ranks)}


def node_order(placement: Mapping[int, str]) -> list[str]:
    """Nodes ordered by their lowest rank: ``GROUP_RANK`` is the index in this list."""
    first: dict[str, int] = {}
    for rank, node in placement.items():
        first[node] = min(rank, first.get(node, rank))
    return sorted(first, key=first.__getitem__)


class Layout:
    """What every rank's environment in one start shares, computed once: per rank it would
    make a start of N ranks cost O(N^2)."""

    def __init__(self, placement: Mapping[int, str]) -> None:
        nodes: Sequence[str] = node_order(placement)
        self.group_rank = {node: index for index, node in enumerate(nodes)}
        self.on_node: dict[str, int] = {}
        for node in placement.values():
            self.on_node[node] = self.on_node.get(node, 0) + 1


def omp_threads_default(spec: JobSpec, env: Mapping[str, str]) -> dict[str, str]:
    """torchrun's ``OMP_NUM_THREADS=1`` default (with its warning) when ranks share a node."""
    if "OMP_NUM_THREADS" in env or spec.slots <= 1:
        return {}
    log.warning("[%s] setting OMP_NUM_THREADS=1 for each rank, as torchrun does, to avoid overloading the "
                "node; tune it for your application", spec.job_id)
    return {"OMP_NUM_THREADS": "1"}


def rank_env(
    spec: JobSpec,
    instance: Instance,
    *,
    base: Mapping[str, str],
    plugin_env: Mapping[str, str],
    placement: Mapping[int, str],
    master: tuple[str, int],
    round_no: int,
    max_restarts: int,
    layout: Layout | None = None,
) -> dict[str, str]:
    """The full environment of ``instance`` starting in ``round_no``; trainguard's own variables
    are set last so no plugin or user setting can contradict them. ``layout`` is
    ``Layout(placement)``, passed in when many ranks start together."""
    env = dict(base)
    env.update(spec.env)
    env.setdefault("PYTHONUNBUFFERED", "1")  # log progress is how hangs are seen
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env.update(plugin_env)
    layout = layout or Layout(placement)
    env.update({
        "RANK": str(instance.rank),
        "WORLD_SIZE": str(spec.nproc),
        "LOCAL_RANK": str(instance.local_rank),
        "LOCAL_WORLD_SIZE": str(layout.on_node[instance.node]),
        "GROUP_RANK": str(layout.group_rank[instance.node]),
        "GROUP_WORLD_SIZE": str(len(layout.group_rank)),
        "ROLE_RANK": str(instance.rank),
        "ROLE_WORLD_SIZE": str(spec.nproc),
        "ROLE_NAME": spec.role,
        "MASTER_ADDR": master[0],
        "MASTER_PORT": str(master[1]),
        "TORCHELASTIC_RUN_ID": spec.job_id,
        "TORCHELASTIC_RESTART_COUNT": str(round_no),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": SIGNALS_TO_HANDLE,
        "TRAINGUARD_JOB_ID": spec.job_id,
        "TRAINGUARD_RESTART_ROUND": str(round_no),
        "TRAINGUARD_SCHEDULE_COUNT": str(instance.schedule_count),
        "TRAINGUARD_PROC_START_COUNT": str(instance.proc_start_count),
        "TRAINGUARD_NODE": instance.node,
    })
    return env
