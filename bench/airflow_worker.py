"""A rank for bench/airflow_overhead.py: records when it starts and when it fails, and rank 1
fails with a retryable collective timeout in each of the first ``BENCH_FAULTS`` rounds."""

import json
import os
import sys
import time

rank, rnd = int(os.environ["RANK"]), int(os.environ["TRAINGUARD_RESTART_ROUND"])


def record(event: str) -> None:
    with open(os.environ["BENCH_EVENTS"], "a") as out:
        out.write(json.dumps({"event": event, "rank": rank, "round": rnd, "t": time.time()}) + "\n")


record("start")
time.sleep(float(os.environ.get("BENCH_WORK", "0.5")))
if rank == 1 and rnd < int(os.environ["BENCH_FAULTS"]):
    print("[E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
          "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.",
          file=sys.stderr, flush=True)
    record("fail")
    sys.exit(6)
