"""The training script both launchers restart in bench/restart_round.py.

Each rank appends JSON lines to ``$BENCH_EVENTS``: ``ready`` once the gloo process group is up
and a first all-reduce went through (training has resumed), and ``fail`` just before rank 1
dies with a retryable NCCL-style error after about ``$BENCH_RUN_SECONDS`` of training in every
round but the last. The round comes from ``TORCHELASTIC_RESTART_COUNT``, which torchrun
and trainguard both set.
"""

import json
import os
import sys
import time


def emit(event, **fields):
    with open(os.environ["BENCH_EVENTS"], "a") as out:
        out.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")


def main():
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rounds = int(os.environ["BENCH_ROUNDS"])
    dist.init_process_group("gloo")
    tensor = torch.ones(1024)
    dist.all_reduce(tensor)
    emit("ready", rank=rank, round=restart)
    # A step count, not a deadline: every rank must issue the same collectives, or gloo
    # pairs one rank's all_reduce with another's barrier and hangs.
    for _ in range(int(float(os.environ["BENCH_RUN_SECONDS"]) / 0.01)):
        dist.all_reduce(tensor)
        time.sleep(0.01)
    if restart < rounds and rank == 1:
        emit("fail", rank=rank, round=restart)
        print("torch.distributed.DistBackendError: NCCL error in: bench.cpp:1, unhandled system error",
              file=sys.stderr, flush=True)
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
