"""A data-parallel PyTorch job under a Sync policy with hang detection.

All ranks step together (gloo here, NCCL on GPUs), so any fault restarts the whole job: in
place first (free of the budget), then as a job restart within ``--max-num-of-job-restart``.
A hang is caught after ``--job-hang-interval`` seconds of silence (set it 150-200 s below the
collective timeout, which would otherwise kill the job first), with call stacks, and the job is
restarted upon suspension. Everything happens inside one task try; the restart records are
the task's return value (XCom) and the "Training jobs" page draws them.

Try it with faults: trigger with ``{"faults": "0:1:4:nccl,1:0:8:hang", "hang_interval": 20}``
(rank 1 hits a collective timeout at step 4, then rank 0 hangs at step 8 of the next round).
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from trainguard.airflow import TrainguardNotifier, TrainingJobOperator

with DAG(
    dag_id="trainguard_sync_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trainguard", "example"],
    params={
        "steps": Param(20, type="integer", minimum=1),
        "faults": Param("", type="string", description="ROUND:RANK:STEP:KIND,... (see trainguard.demo.faults)"),
        "hang_interval": Param(450, type="integer", minimum=1, description="--job-hang-interval, seconds"),
    },
) as dag:
    TrainingJobOperator(
        task_id="train",
        command=[sys.executable, "-m", "trainguard.demo.train", "--steps", "{{ params.steps }}",
                 "--checkpoint", tempfile.gettempdir() + "/trainguard-examples/{{ run_id | replace(':', '-') }}.pt"],
        nproc=2,
        env={"TRAINGUARD_DEMO_FAULTS": "{{ params.faults }}", "OMP_NUM_THREADS": "1"},
        # An AIMaster argument string, as it would be written for a PAI-DLC job.
        policy="--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3 "
               "--enable-job-hang-detection=True --job-hang-interval={{ params.hang_interval }} "
               "--fault-tolerant-policy=ExitCodeAndErrorMsg",
        # Airflow retries only follow transient give-ups and resume the same job (same budget).
        retries=1,
        retry_delay=timedelta(seconds=30),
        on_failure_callback=TrainguardNotifier(),
    )
