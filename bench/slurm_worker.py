"""The job bench/slurm_recovery.py recovers: records when each rank starts, and rank 1 fails
in every round below ``BENCH_ROUNDS`` (on ``BENCH_FAIL_NODE`` only, when that is set)."""

import json
import os
import sys
import time


def emit(event, **fields):
    with open(os.environ["BENCH_EVENTS"], "a") as out:
        out.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")


def main():
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    restart = int(os.environ.get("TRAINGUARD_RESTART_ROUND", os.environ.get("SLURM_RESTART_COUNT", "0")))
    node = os.environ.get("SLURMD_NODENAME", "?")
    emit("start", rank=rank, round=restart, node=node)
    time.sleep(1.0)
    fail_node = os.environ.get("BENCH_FAIL_NODE")
    if restart < int(os.environ["BENCH_ROUNDS"]) and rank == 1 and (not fail_node or fail_node == node):
        emit("fail", rank=rank, round=restart, node=node)
        message = os.environ.get("BENCH_MESSAGE", "NCCL error in: bench.cpp:1, unhandled system error")
        print(message, file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
