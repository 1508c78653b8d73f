"""Recovery on a real local Slurm cluster: trainguard inside the allocation vs a requeue.

Three measurements of the same 2-rank job, each from the failing task's death to every rank
of the next run having started:

- a retryable task failure restarted by ``trainguard run --adapter slurm`` without leaving
  the allocation (in place, then a job restart),
- a node fault (an ECC error on node tg2) with the job moved to the spare node tg3,
- the usual hand-rolled recovery: the batch script requeues itself (``sbatch --requeue``,
  ``scontrol requeue``) when the step fails, and Slurm starts it again.

The cluster (tests/slurm_cluster.py) runs with ``cred_expire=10`` and a 2-second scheduler
interval, the settings that make a requeue as fast as it gets (ENVIRONMENT.md).

    python bench/slurm_recovery.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from slurm_cluster import LocalSlurmCluster, available  # noqa: E402

WORKER = Path(__file__).with_name("slurm_worker.py")


def wait_gone(cluster: LocalSlurmCluster, job: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not cluster.run("squeue", "--noheader", f"--jobs={job}").stdout.strip():
            return
        time.sleep(0.3)
    raise SystemExit(f"job {job} did not finish in {timeout} s")


def recoveries(events_file: Path, rounds: int) -> list[float]:
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    out = []
    for r in range(rounds):
        fail = [e["t"] for e in events if e["event"] == "fail" and e["round"] == r]
        starts = [e["t"] for e in events if e["event"] == "start" and e["round"] == r + 1]
        if len(fail) != 1 or not starts:
            raise SystemExit(f"round {r}: {len(fail)} failure(s), {len(starts)} start(s) in {events_file}")
        out.append(max(starts) - fail[0])
    return out


def run(cluster: LocalSlurmCluster, work: Path, name: str, script: str, env: dict[str, str], rounds: int,
        requeue: bool = False) -> list[float]:
    events = work / f"{name}.jsonl"
    path = work / f"{name}.sh"
    path.write_text(script)
    options = ["--requeue"] if requeue else []
    job = subprocess.run(["sbatch", "--nodes=3", "--parsable", *options, f"--output={work / name}.out", str(path)],
                         env={**cluster.env, **env, "BENCH_EVENTS": str(events)}, capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    wait_gone(cluster, job)
    times = recoveries(events, rounds)
    print(f"  {name:<44} {' '.join(f'{t:.2f}' for t in times)}  median {statistics.median(times):.2f} s", flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reason = available()
    if reason:
        raise SystemExit(reason)
    work = Path(tempfile.mkdtemp(prefix="tg-bench-slurm-"))
    env = {"PYTHONPATH": str(ROOT), "BENCH_ROUNDS": str(args.rounds)}
    trainguard = (f"exec {sys.executable} -m trainguard --log-level WARNING run --adapter slurm --nproc 2 --nodes 2 "
                  f"--state-dir {work}/state --enable-job-restart --max-num-of-job-restart 10 "
                  f"--isolate-after-same-fault 100 --stop-grace-period 2 -- {sys.executable} {WORKER}\n")
    requeue = ("#!/bin/bash\n"
               f"srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 {sys.executable} {WORKER} "
               "|| scontrol requeue $SLURM_JOB_ID\n")
    cluster = LocalSlurmCluster(nodes=3).start()
    try:
        print(f"recovery on a local Slurm cluster (3 emulated nodes), failure -> all ranks started again, "
              f"{args.rounds} rounds each:", flush=True)
        in_place = run(cluster, work, "trainguard: restart inside the allocation", "#!/bin/bash\n" + trainguard, env,
                       args.rounds)
        spare = run(cluster, work, "trainguard: ECC on tg2 -> moved to spare tg3", "#!/bin/bash\n" + trainguard,
                    {**env, "BENCH_ROUNDS": "1", "BENCH_FAIL_NODE": "tg2",
                     "BENCH_MESSAGE": "RuntimeError: CUDA error: uncorrectable ECC error encountered"}, 1)
        plain = run(cluster, work, "sbatch --requeue + scontrol requeue", requeue, env, args.rounds, requeue=True)
    finally:
        cluster.stop()
    base = statistics.median(plain)
    for label, times in (("restart inside the allocation", in_place), ("move to a spare node", spare)):
        print(f"  {label}: {base / statistics.median(times):.1f}x faster than a requeue (goal >= 5x)")


if __name__ == "__main__":
    main()
