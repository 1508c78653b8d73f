"""Exit-detection latency: from a rank's death to the supervisor recording the fault.

A 4-rank Async job of shell loops runs under the real engine (local adapter, SQLite store);
this script kills one rank at a time with SIGTERM (a preemption), waits for its replacement,
and repeats. The latency of each kill is the fault's ``detected_at`` in the store minus the
moment ``kill()`` returned. Prints median, p99 and max over the kills.

    python bench/exit_latency.py [--kills 60]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latency import summary  # noqa: E402  (bench/latency.py, beside this script)
from trainguard.engine import supervise  # noqa: E402
from trainguard.model import JobSpec  # noqa: E402
from trainguard.policy import build_policy  # noqa: E402

RANK = 'echo $$ > "$D/$RANK.$TRAINGUARD_PROC_START_COUNT.pid"; while [ ! -f "$D/stop" ]; do sleep 0.05; done'


def wait_for(path: Path, timeout: float = 10.0) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    raise SystemExit(f"timed out waiting for {path}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=60)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the figures, not the supervisor's event log
    work = Path(tempfile.mkdtemp(prefix="tg-bench-exit-"))
    spec = JobSpec(job_id="latency", command=("sh", "-c", RANK), nproc=4, env={"D": str(work)}, cwd=str(work))
    policy = build_policy({"job_execution_mode": "Async", "max_num_of_same_error": 100_000, "failure_window": 0.01,
                           "isolate_after_same_fault": 100_000})
    job = threading.Thread(target=supervise, args=(spec, policy), kwargs={"state_dir": work / "state"})
    job.start()
    kills: list[tuple[int, float]] = []
    starts = {rank: 1 for rank in range(4)}
    for i in range(args.kills):
        rank = i % 4
        pid = wait_for(work / f"{rank}.{starts[rank]}.pid")
        time.sleep(0.05)  # let the supervisor settle back into its wait
        os.kill(pid, signal.SIGTERM)
        kills.append((rank, time.time()))
        starts[rank] += 1
    for rank in range(4):
        wait_for(work / f"{rank}.{starts[rank]}.pid")
    (work / "stop").touch()
    job.join(timeout=30)
    db = sqlite3.connect(work / "state" / "trainguard.sqlite")
    detected: dict[int, list[float]] = {}
    for rank, at in db.execute("SELECT rank, detected_at FROM faults WHERE job_id = 'latency' ORDER BY id"):
        detected.setdefault(rank, []).append(at)
    latencies = []
    seen = {rank: 0 for rank in range(4)}
    for rank, killed_at in kills:
        latencies.append((detected[rank][seen[rank]] - killed_at) * 1000)
        seen[rank] += 1
    print(f"exit-detection latency over {len(latencies)} kills (4-rank job, local adapter, pidfd wait):")
    print(f"  {summary(latencies)}   (goal: median <= 20 ms, p99 <= 100 ms)")


if __name__ == "__main__":
    main()
