"""Fault injection for the demo workloads, without importing anything heavy.

``TRAINGUARD_DEMO_FAULTS="ROUND:RANK:STEP:KIND,..."``: at that step of that restart round that
rank does KIND: ``nccl`` (a collective timeout, retryable), ``ecc`` (an uncorrectable ECC error:
a node fault), ``hang`` (stops making progress), ``user`` (a KeyError in user code), ``exit``
(exits 1 silently). The round is ``TRAINGUARD_RESTART_ROUND`` (or torchrun's
``TORCHELASTIC_RESTART_COUNT``).
"""

from __future__ import annotations

import os
import sys
import time


def restart_round() -> int:
    return int(os.environ.get("TRAINGUARD_RESTART_ROUND", os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))


def faults_for(rank: int, restart_round: int) -> dict[int, str]:
    out = {}
    for item in filter(None, os.environ.get("TRAINGUARD_DEMO_FAULTS", "").split(",")):
        r_round, r_rank, step, kind = item.split(":")
        if int(r_round) == restart_round and int(r_rank) == rank:
            out[int(step)] = kind
    return out


def inject(kind: str, rank: int, step: int) -> None:
    if kind == "nccl":
        print(f"[rank{rank}]:[E ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective operation "
              f"timeout: WorkNCCL(SeqNum={step}, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 "
              "milliseconds before timing out.", file=sys.stderr, flush=True)
        os._exit(6)
    if kind == "ecc":
        print("RuntimeError: CUDA error: uncorrectable ECC error encountered", file=sys.stderr, flush=True)
        os._exit(1)
    if kind == "hang":
        print(f"rank {rank}: stuck at step {step}", flush=True)
        while True:
            time.sleep(3600)
    if kind == "user":
        batch: dict[str, object] = {}
        batch["labels"]  # noqa: B018 - the injected user error is this KeyError
    if kind == "exit":
        os._exit(1)
