"""A small data-parallel training loop (PyTorch, gloo) that checkpoints, resumes and can be
told to fail.

Started by ``trainguard run`` (or torchrun: it reads the same variables). Faults are injected
as :mod:`trainguard.demo.faults` describes. The checkpoint is resumed from ``--checkpoint``, so
every restart continues where the last checkpoint left off.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

# Progress before the slow import: the supervisor's hang detector watches log output.
print(f"rank {os.environ.get('RANK')}: starting", flush=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from trainguard.demo.faults import faults_for, inject  # noqa: E402
from trainguard.demo.faults import restart_round as current_round  # noqa: E402

# Importing torch takes seconds when ranks and their warm spares start at once on a few cores;
# saying so keeps the start's silent stretches well inside the hang interval.
print(f"rank {os.environ.get('RANK')}: torch imported", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restart_round = current_round()
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    print(f"rank {rank}: process group of {world} ready", flush=True)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    os.makedirs(os.path.dirname(os.path.abspath(args.checkpoint)), exist_ok=True)
    if os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    print(f"rank {rank}/{world} round {restart_round} node {os.environ.get('TRAINGUARD_NODE', '?')} "
          f"resuming at step {start}", flush=True)
    faults = faults_for(rank, restart_round)
    generator = torch.Generator().manual_seed(rank)
    for step in range(start, args.steps):
        if step in faults:
            inject(faults[step], rank, step)
        x = torch.randn(32, 16, generator=generator)
        loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            print(f"step {step + 1}/{args.steps} loss {loss.item():.4f}", flush=True)
        if (step + 1) % args.checkpoint_every == 0 and rank == 0:
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1}, tmp)
            os.replace(tmp, args.checkpoint)
        time.sleep(args.step_time)
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank} finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
