"""A gloo training rank under ``@inprocess.restartable()`` for tests/test_inprocess.py.

Each step is an allreduce. ``TG_FAULT`` (JSON) says what goes wrong: ``{"rank": 2, "step": 5,
"iteration": 0, "do": "raise" | "keyerror" | "kill" | "hang" | "raise-always"}`` (``iteration``
absent: any; ``round``: the supervisor's restart round, absent: any). ``TG_WRAPPED=0`` runs the same loop without the wrapper (one call, no re-entry). ``TG_BLOCK``
(JSON ``{"rank": 1, "step": 5}``, iteration 0, round 0) makes that rank block where no interrupt
reaches it — the interrupt signal masked before that step's allreduce, a long sleep after it — as
a rank blocked in C code does (DDP's backward waiting on a gloo allreduce whose peers are gone).
Every entry into the function appends ``{"rank", "pid", "iteration", "env_iteration"}`` to
``$TG_RECORD``; the state is "loaded" once per process (``loads`` counts it).
"""

import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from trainguard import inprocess

FAULT = json.loads(os.environ.get("TG_FAULT") or "{}")
STEPS = int(os.environ.get("TG_STEPS", "10"))
LOADS = {"count": 0}
ROUND = int(os.environ.get("TRAINGUARD_RESTART_ROUND", "0"))
BLOCK = json.loads(os.environ.get("TG_BLOCK") or "{}")


def record(**fields):
    with open(os.environ["TG_RECORD"], "a") as out:
        out.write(json.dumps(fields) + "\n")


def load_state():
    if LOADS["count"] == 0:
        LOADS["count"] += 1  # once per process: a re-entered rank keeps its state in memory
    return LOADS["count"]


def train(attempt):
    record(rank=attempt.rank, pid=os.getpid(), iteration=attempt.iteration,
           env_iteration=os.environ.get(inprocess.ITERATION_VAR), loads=load_state(),
           fault=str(attempt.fault) if attempt.fault else None)
    dist.init_process_group("gloo", store=attempt.store, rank=attempt.rank, world_size=attempt.world_size,
                            timeout=timedelta(seconds=60))
    for step in range(STEPS):
        blocks = (BLOCK.get("rank"), BLOCK.get("step"), attempt.iteration, ROUND) == (attempt.rank, step, 0, 0)
        if blocks:
            # Masked before this step's allreduce: a peer's fault in the same step comes after
            # it, so its interrupt can never reach this rank before the mask does.
            signal.pthread_sigmask(signal.SIG_BLOCK, {inprocess.INTERRUPT_SIGNAL})
        value = torch.ones(4)
        dist.all_reduce(value)
        assert value[0].item() == attempt.world_size
        print(f"rank {attempt.rank} iteration {attempt.iteration} step {step}", flush=True)
        matches = FAULT.get("rank") == attempt.rank and FAULT.get("step") == step and (
            FAULT.get("iteration", attempt.iteration) == attempt.iteration) and (
            FAULT.get("round", ROUND) == ROUND)
        do = FAULT.get("do") if matches else None
        if do == "raise" or do == "raise-always":
            raise RuntimeError("transient glitch in the data pipeline")
        if do == "keyerror":
            raise KeyError("labels")
        if do == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if do == "hang":
            time.sleep(600)
        if blocks:
            time.sleep(600)
        time.sleep(0.05)
    dist.barrier()
    dist.destroy_process_group()
    return attempt.iteration


def main():
    if os.environ.get("TG_WRAPPED", "1") == "1":
        inprocess.restartable()(train)()
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=rank == 0,
                              wait_for_workers=False)
        train(inprocess.Attempt(0, rank, world, store))
    print("done", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
