"""What running a job through Airflow costs per restart round, against ``trainguard run``.

The same 2-rank job (bench/airflow_worker.py: rank 1 fails with a retryable collective
timeout in each of the first K rounds) runs three ways, each ``--repeats`` times:

- ``trainguard run`` on the command line;
- ``TrainingJobOperator(deferrable=False)``: the engine inside the task, via ``dag.test()``;
- ``TrainingJobOperator(deferrable=True)``: a detached supervisor, the task deferred to the
  trigger (polling every 0.2 s) and resumed once per round, via ``dag.test()``.

Printed per way: the job's recovery per round (rank 1's failure to its restart, from the ranks'
own clocks), the whole run's wall time, and for the deferred task the worker time of each
resume (``execute_complete``: read the history, log the round, defer again). ``dag.test()``
runs the trigger inline, so Airflow's scheduling delays (a real deployment's resume waits for
the scheduler and a worker slot) are not in these figures; in deferred mode they do not delay
the job's recovery either, which the detached supervisor does on its own.

    python bench/airflow_overhead.py [--rounds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

HOME = Path(tempfile.mkdtemp(prefix="tg-bench-airflow-"))
(HOME / "dags").mkdir()
os.environ.update({
    "AIRFLOW_HOME": str(HOME), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(HOME / "dags"),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME / 'airflow.db'}",
})
WORKER = Path(__file__).resolve().with_name("airflow_worker.py")
POLICY = {"enable_job_restart": True, "max_num_of_job_restart": 10, "isolate_after_same_fault": 100}
DAGS = f'''
import sys
from datetime import datetime
from airflow.sdk import DAG
from trainguard.airflow import TrainingJobOperator

for deferrable in (False, True):
    with DAG(dag_id=f"bench_{{'deferred' if deferrable else 'in_task'}}", schedule=None,
             start_date=datetime(2026, 1, 1), catchup=False) as dag:
        TrainingJobOperator(task_id="train", command=[sys.executable, {str(WORKER)!r}], nproc=2,
                            policy={POLICY!r}, deferrable=deferrable, poll_interval=0.2)
    globals()[dag.dag_id] = dag
'''


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Airflow's task logs go to file descriptor 1 (structlog holds it): silence it meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def recoveries(events_file: Path) -> list[float]:
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    fails = {e["round"]: e["t"] for e in events if e["event"] == "fail"}
    starts = {e["round"]: e["t"] for e in events if e["event"] == "start" and e["rank"] == 1}
    return [starts[r + 1] - t for r, t in sorted(fails.items())]


def describe(values: list[float], unit: float = 1000.0, name: str = "ms") -> str:
    return f"median {statistics.median(values) * unit:.0f} {name} (min {min(values) * unit:.0f}, max " \
           f"{max(values) * unit:.0f}, n={len(values)})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    (HOME / "dags" / "bench_dags.py").write_text(DAGS)
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    import logging

    logging.disable(logging.CRITICAL)  # dag.test() logs every task step to stdout
    sys.path.insert(0, str(HOME / "dags"))
    import bench_dags  # type: ignore[import-not-found]

    from trainguard.airflow.operators import TrainingJobOperator

    resumes: list[float] = []
    original = TrainingJobOperator.execute_complete

    def timed(self, context, event):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return original(self, context, event)
        finally:
            resumes.append(time.perf_counter() - started)

    # The first dag.test() in a process pays Airflow's warm-up (5-7 s): not what is measured.
    warm = Path(tempfile.mkdtemp(prefix="tg-bench-warm-"))
    os.environ.update({"BENCH_EVENTS": str(warm / "events.jsonl"), "BENCH_FAULTS": "0",
                       "TRAINGUARD_STATE_DIR": str(warm / "state")})
    with quiet():
        bench_dags.bench_in_task.test()
        bench_dags.bench_deferred.test()
    TrainingJobOperator.execute_complete = timed  # type: ignore[method-assign]
    results: dict[str, tuple[list[float], list[float]]] = {}
    for way in ("trainguard run", "operator in the task", "operator deferred"):
        recovered, walls = [], []
        for i in range(args.repeats):
            work = Path(tempfile.mkdtemp(prefix="tg-bench-run-"))
            events = work / "events.jsonl"
            env = {"BENCH_EVENTS": str(events), "BENCH_FAULTS": str(args.rounds), "BENCH_WORK": "0.5",
                   "TRAINGUARD_STATE_DIR": str(work / "state")}
            os.environ.update(env)
            started = time.perf_counter()
            if way == "trainguard run":
                flags = [f"--{k.replace('_', '-')}={v}" for k, v in POLICY.items()]
                subprocess.run([sys.executable, "-m", "trainguard", "--log-level", "ERROR", "run", "--nproc", "2",
                                "--job-id", f"cli-{i}", *flags, "--", sys.executable, str(WORKER)],
                               check=True, capture_output=True)
            else:
                dag = bench_dags.bench_in_task if way == "operator in the task" else bench_dags.bench_deferred
                with quiet():
                    run = dag.test()
                if run.state != "success":
                    raise SystemExit(f"{way}: the DAG run ended {run.state}")
            walls.append(time.perf_counter() - started)
            found = recoveries(events)
            if len(found) != args.rounds:
                raise SystemExit(f"{way}: {len(found)} recoveries, expected {args.rounds}")
            recovered += found
        results[way] = (recovered, walls)
    print(f"2-rank job, {args.rounds} retryable faults (one round each), {args.repeats} runs per way")
    for way, (recovered, walls) in results.items():
        print(f"  {way:21s} recovery per round {describe(recovered)}; whole run median "
              f"{statistics.median(walls):.2f} s")
    base = statistics.median(results["trainguard run"][0])
    extra = {way: (statistics.median(r[0]) - base) * 1000 for way, r in results.items() if way != "trainguard run"}
    print("  task-level overhead per round (recovery median minus trainguard run's): "
          + ", ".join(f"{way} {ms:+.0f} ms" for way, ms in extra.items()))
    print(f"  deferred task, worker time per resume (read history, log the round, defer again): {describe(resumes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
