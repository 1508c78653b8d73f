"""Recovery time with trainguard's defaults (warm spares, learned preload) vs ``torchrun --max-restarts``.

Two gloo ranks on this machine; rank 1 is SIGKILLed mid-run in every round but the last
(bench/warm_restart_worker.py). A recovery is timed from outside, from the moment the rank is
killed to the moment every rank of the next round has resumed training (its first all-reduce;
for the Trainer job, its first step). In the same run, for each job:

- ``torchrun --max-restarts`` with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (without it, a
  restart of this job often fails or hangs: a rank stays blocked in a collective);
- ``trainguard run --enable-job-restart`` with no warm-standby or preload flag (the default,
  ``--warm-standby=auto``: spares learn the job's imports from its first start);
- ``trainguard run --warm-standby=false``: cold restarts, for reference.

Jobs: a small torch job, and a Hugging Face ``Trainer`` job on a tiny GPT-2 built from a config
(no hub download; needs ``pip install transformers accelerate``, skipped when missing), killed
``--hf-fail-after`` seconds into each round.

    python bench/warm_restart.py [--faults 3] [--jobs torch,hf]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = Path(__file__).with_name("warm_restart_worker.py")
REPO = Path(__file__).resolve().parents[1]


def recoveries(events_file: Path, faults: int) -> list[float]:
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    times = []
    for r in range(faults):
        fail = [e["t"] for e in events if e["event"] == "fail" and e["round"] == r]
        ready = [e["t"] for e in events if e["event"] == "ready" and e["round"] == r + 1]
        if len(fail) != 1 or len(ready) != 2:
            raise SystemExit(f"round {r}: {len(fail)} fault(s), {len(ready)} resumed rank(s) in {events_file}")
        times.append(max(ready) - fail[0])
    return times


def run(name: str, command: list[str], env: dict[str, str], faults: int, workdir: Path) -> list[float]:
    events = workdir / f"{env['BENCH_JOB']}-{name.replace(' ', '_').replace('=', '-')}.jsonl"
    env = {**env, "BENCH_EVENTS": str(events)}
    started = time.time()
    result = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        raise SystemExit(f"{name} exited {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    times = recoveries(events, faults)
    print(f"    {name:<34} {' '.join(f'{t:6.2f}' for t in times)}   median {statistics.median(times):6.2f} s"
          f"   (whole run {time.time() - started:.0f} s)", flush=True)
    return times


def bench_job(job: str, faults: int, fail_after: float, workdir: Path, goal: float) -> None:
    python = sys.executable
    env = {**os.environ, "BENCH_JOB": job, "BENCH_FAULTS": str(faults), "BENCH_FAIL_AFTER": str(fail_after),
           "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    trainguard = [python, "-m", "trainguard", "--log-level", "WARNING", "run", "--nproc", "2",
                  "--enable-job-restart", "--max-num-of-job-restart", str(faults + 1),
                  "--isolate-after-same-fault", "1000"]
    print(f"  {job} job, rank 1 killed {fail_after:g} s into each of {faults} rounds; "
          "seconds from the kill to every rank training again:", flush=True)
    base = run("torchrun --max-restarts", [python, "-m", "torch.distributed.run", "--standalone",
                                           "--nproc-per-node", "2", "--max-restarts", str(faults), str(WORKER)],
               env, faults, workdir)
    default = run("trainguard run (defaults)", [*trainguard, "--state-dir", str(workdir / f"{job}-default"),
                                                "--", python, str(WORKER)], env, faults, workdir)
    cold = run("trainguard run --warm-standby=false", [*trainguard, "--state-dir", str(workdir / f"{job}-cold"),
                                                       "--warm-standby=false", "--", python, str(WORKER)],
               env, faults, workdir)
    reference = statistics.median(base)
    for name, times in (("trainguard run (defaults)", default), ("trainguard run --warm-standby=false", cold)):
        ratio = statistics.median(times) / reference
        print(f"    {name}: {ratio:.3f} x torchrun's median" + (f" (goal <= {goal:g} x)" if "defaults" in name else ""),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", type=int, default=3)
    parser.add_argument("--jobs", default="torch,hf")
    parser.add_argument("--torch-fail-after", type=float, default=12.0)
    parser.add_argument("--hf-fail-after", type=float, default=15.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="tg-bench-warm-"))
    print(f"warm restarts: 2 gloo ranks, {os.cpu_count()} CPUs, workdir {workdir}", flush=True)
    jobs = args.jobs.split(",")
    if "torch" in jobs:
        bench_job("torch", args.faults, args.torch_fail_after, workdir, 0.1)
    if "hf" in jobs:
        if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("accelerate") is None:
            print("  hf job skipped: pip install transformers accelerate", flush=True)
        else:
            bench_job("hf", args.faults, args.hf_fail_after, workdir, 0.25)


if __name__ == "__main__":
    main()
