"""A training loop that tells trainguard, through the SDK, how long each stage may be silent.

Loading data may take minutes, a training step a few seconds, and a checkpoint upload longer
than any sensible hang interval. One job-wide ``--job-hang-interval`` cannot fit them all, so
each stage declares its own (``hang_detect``), steps are reported (``report_step``: progress
without printing), the upload turns detection off (-1), and a message marks each epoch
(``send_custom_message``: it appears in the job's events and the Airflow task log).

``--step-interval`` is the training stage's interval. Faults are injected as
:mod:`trainguard.demo.faults` describes (a ``hang`` stops inside a training step).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from trainguard.demo.faults import faults_for, inject, restart_round
from trainguard.job_monitor import Monitor, PyTorchConfig


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--step-time", type=float, default=0.1)
    parser.add_argument("--step-interval", type=float, default=60.0, help="hang interval of a training step (s)")
    parser.add_argument("--load-interval", type=float, default=600.0, help="hang interval while loading data (s)")
    parser.add_argument("--upload-time", type=float, default=0.5, help="a silent checkpoint upload (s)")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    monitor = Monitor(config=PyTorchConfig())
    faults = faults_for(rank, restart_round())

    with monitor.hang_detect(args.load_interval, stage="load-data"):
        time.sleep(args.step_time)
    with monitor.hang_detect(args.step_interval, stage="train"):
        for step in range(args.steps):
            if step in faults:
                inject(faults[step], rank, step)
            time.sleep(args.step_time)
            monitor.report_step(step + 1, loss=1.0 / (step + 1))
            if (step + 1) % 6 == 0:
                # Uploads are silent and slow, and that is fine: no hang detection meanwhile.
                with monitor.hang_detect(-1, stage="upload-checkpoint"):
                    time.sleep(args.upload_time)
                if rank == 0:
                    monitor.send_custom_message(f"epoch {(step + 1) // 6} done at step {step + 1}")
    print(f"rank {rank}: finished {args.steps} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
