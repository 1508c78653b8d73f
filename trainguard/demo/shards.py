"""Independent workers for an Async job: each rank works through its own shard and remembers
how far it got, so a restarted rank carries on where it stopped and the others never notice.

This is the shape of parameter-server workers, data preprocessing or evaluation shards:
nothing is shared between ranks, so trainguard restarts only a failed instance. Faults are
injected as :mod:`trainguard.demo.faults` describes; ``--workdir`` holds the progress files.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from trainguard.demo.faults import faults_for, inject, restart_round


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=20, help="items in each rank's shard")
    parser.add_argument("--item-time", type=float, default=0.05)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    progress = Path(args.workdir) / f"shard-{rank}.progress"
    progress.parent.mkdir(parents=True, exist_ok=True)
    start = int(progress.read_text()) if progress.exists() else 0
    print(f"shard {rank}: starting at item {start} of {args.items}", flush=True)
    faults = faults_for(rank, restart_round())
    for item in range(start, args.items):
        if item in faults:
            inject(faults[item], rank, item)
        time.sleep(args.item_time)
        progress.write_text(str(item + 1))
        print(f"shard {rank}: item {item + 1}/{args.items}", flush=True)
    print(f"shard {rank}: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
