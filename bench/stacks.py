"""Time to capture and aggregate the Python stacks of 8 hung ranks (goal <= 3 s).

Eight real Python processes hang in two different functions under the local adapter; the
adapter takes their stacks with py-spy in parallel and they are grouped as in a hang round.

    python bench/stacks.py [--ranks 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainguard.adapters import Launch  # noqa: E402
from trainguard.adapters.local import LocalAdapter  # noqa: E402
from trainguard.model import Instance, JobSpec  # noqa: E402
from trainguard.stacks import group_stacks  # noqa: E402

HUNG = """
import os, time
def wait_for_peers():
    while True: time.sleep(1)
def stuck_in_io():
    while True: time.sleep(1)
print("ready", flush=True)
stuck_in_io() if os.environ["RANK"] == "5" else wait_for_peers()
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tg-bench-stacks-"))
    spec = JobSpec(job_id="stacks", command=(sys.executable, "-c", HUNG), nproc=args.ranks)
    adapter = LocalAdapter(spec=spec, log_dir=work / "logs")
    try:
        adapter.start([Launch(Instance(rank=r, node="node-0", local_rank=r), spec.command, {"RANK": str(r)},
                              str(work), 0) for r in range(args.ranks)])
        deadline = time.time() + 30
        while time.time() < deadline and not all("ready" in adapter.log_tail(r, 100) for r in range(args.ranks)):
            time.sleep(0.05)
        times, groups = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            groups = group_stacks(adapter.stacks(list(range(args.ranks)), timeout=10))
            times.append(time.perf_counter() - started)
    finally:
        adapter.close()
    suspects = [g["ranks"] for g in groups if g["suspect"]]
    print(f"stacks of {args.ranks} hung ranks captured (py-spy, in parallel) and grouped: median "
          f"{statistics.median(times):.3f} s, max {max(times):.3f} s over {args.repeat} runs (goal <= 3 s); "
          f"{len(groups)} group(s), likely culprit(s): {suspects}")


if __name__ == "__main__":
    main()
