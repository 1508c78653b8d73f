"""What ``trainguard run`` takes from a Slurm allocation when it is not told.

Inside ``sbatch -N2 -n2``, ``srun python train.py`` runs two tasks on two nodes without being
told; ``trainguard run -- python train.py`` does the same: with no ``--adapter`` it uses the
slurm adapter, and with no ``--nodes``/``--nproc`` it takes them from the allocation, as srun
does:

- nodes: ``SLURM_JOB_NUM_NODES`` (``SLURM_NNODES``);
- ranks: ``SLURM_NTASKS`` (``SLURM_NPROCS``), else ``SLURM_NTASKS_PER_NODE`` x nodes, else one
  per GPU (``SLURM_GPUS_ON_NODE`` x nodes, as ``torchrun --nproc-per-node gpu``), else one per
  node.

Outside an allocation, or with another adapter named, the defaults stay one rank on one node.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Mapping

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunShape:
    """The adapter, ranks and nodes a run uses; ``source`` says what came from the allocation."""

    adapter: str
    nproc: int
    nodes: int
    source: str = ""


def _count(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        # Slurm writes plain numbers here; a value such as "2(x3)" counts as its leading number.
        found = re.match(r"\s*(\d+)", env.get(name, ""))
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
    return None


def run_shape(adapter: str | None, nproc: int | None, nodes: int | None, env: Mapping[str, str]) -> RunShape:
    """Fill in what the command line left out (None) from the allocation in ``env``, if any."""
    slurm_job = env.get("SLURM_JOB_ID")
    chosen = adapter or ("slurm" if slurm_job else "local")
    if chosen != "slurm" or not slurm_job:
        return RunShape(chosen, 1 if nproc is None else nproc, 1 if nodes is None else nodes)
    taken = [] if adapter else ["the slurm adapter"]
    if nodes is None:
        nodes = _count(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES") or 1
        taken.append(f"--nodes {nodes}")
    if nproc is None:
        per_node = _count(env, "SLURM_NTASKS_PER_NODE") or _count(env, "SLURM_GPUS_ON_NODE")
        nproc = _count(env, "SLURM_NTASKS", "SLURM_NPROCS") or (per_node or 1) * nodes
        taken.append(f"--nproc {nproc}")
    source = f"inside Slurm allocation {slurm_job}: {', '.join(taken)} from the allocation" if taken else ""
    if source:
        log.info("%s", source)
    return RunShape(chosen, nproc, nodes, source)
