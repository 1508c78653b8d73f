"""Restart-round time of a 4-rank gloo job: trainguard vs ``torchrun --max-restarts``.

The same script (bench/restart_worker.py) runs under each launcher; rank 1 fails with a
retryable error a few seconds into every round. A round's time is from the failing rank's
last breath to the moment every new rank has its process group up and a first all-reduce
done. Three launchers, in the same run:

- torchrun with ``--max-restarts`` (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, see ENVIRONMENT.md)
- ``trainguard run --warm-standby=false`` restarting cold (new interpreters, ``import torch`` again)
- ``trainguard run --warm-standby --preload torch``: spare interpreters with torch imported

    python bench/restart_round.py [--rounds 4] [--run-seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = Path(__file__).with_name("restart_worker.py")


def round_times(events_file: Path, rounds: int) -> list[float]:
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    times = []
    for r in range(rounds):
        fail = [e["t"] for e in events if e["event"] == "fail" and e["round"] == r]
        ready = [e["t"] for e in events if e["event"] == "ready" and e["round"] == r + 1]
        if len(fail) != 1 or len(ready) != 4:
            raise SystemExit(f"round {r}: {len(fail)} failure(s), {len(ready)} ready rank(s) in {events_file}")
        times.append(max(ready) - fail[0])
    return times


def run(name: str, command: list[str], rounds: int, run_seconds: float, workdir: Path) -> list[float]:
    events = workdir / f"{name}.jsonl"
    env = {**os.environ, "BENCH_EVENTS": str(events), "BENCH_ROUNDS": str(rounds),
           "BENCH_RUN_SECONDS": str(run_seconds), "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    started = time.time()
    result = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise SystemExit(f"{name} exited {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
    times = round_times(events, rounds)
    print(f"  {name:<28} rounds {' '.join(f'{t:.2f}' for t in times)}  median {statistics.median(times):.2f} s"
          f"  (whole run {time.time() - started:.0f} s)", flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--run-seconds", type=float, default=8.0,
                        help="how long each round trains before the fault (standbys warm up meanwhile)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tg-bench-restart-"))
    python = sys.executable
    worker = [python, str(WORKER)]
    policy = ["--enable-job-restart", "--max-num-of-job-restart", str(args.rounds + 1),
              "--isolate-after-same-fault", "1000", "--log-level", "WARNING"]
    print(f"restart round of a 4-rank gloo job, failure -> all new ranks past their first all-reduce "
          f"({args.rounds} rounds each, {os.cpu_count()} CPUs):", flush=True)
    torchrun = run("torchrun --max-restarts", [python, "-m", "torch.distributed.run", "--standalone",
                                               "--nproc-per-node", "4", "--max-restarts", str(args.rounds),
                                               str(WORKER)], args.rounds, args.run_seconds, workdir)
    cold = run("trainguard run", [python, "-m", "trainguard", *policy[-2:], "run", "--nproc", "4",
                                  "--state-dir", str(workdir / "state"), *policy[:-2], "--warm-standby=false",
                                  "--", *worker],
               args.rounds, args.run_seconds, workdir)
    warm = run("trainguard run --warm-standby", [python, "-m", "trainguard", *policy[-2:], "run", "--nproc", "4",
                                                 "--state-dir", str(workdir / "state"), *policy[:-2],
                                                 "--warm-standby", "--preload", "torch", "--", *worker],
               args.rounds, args.run_seconds, workdir)
    base = statistics.median(torchrun)
    for name, times in (("trainguard run", cold), ("trainguard run --warm-standby", warm)):
        print(f"  {name}: {statistics.median(times) / base:.2f}x torchrun's median (goal <= 0.8x)")


if __name__ == "__main__":
    main()
