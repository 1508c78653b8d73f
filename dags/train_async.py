"""An Async job: four independent workers, each restarted alone when it fails.

Async instances share nothing (parameter-server workers, preprocessing or evaluation shards),
so a failed instance is restarted by itself while the others keep working, and it carries on
from its own progress file. ``--max-num-of-same-error`` bounds how often one instance may fail
the same way before the job gives up.

Try it with faults: trigger with ``{"faults": "0:2:5:exit,0:3:9:nccl"}``.
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime

from airflow.sdk import DAG, Param

from trainguard.airflow import TrainingJobOperator

with DAG(
    dag_id="trainguard_async_workers",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trainguard", "example"],
    params={
        "shard_size": Param(20, type="integer", minimum=1, description="items in each worker's shard"),
        "faults": Param("", type="string", description="ROUND:RANK:ITEM:KIND,... (see trainguard.demo.faults)"),
    },
) as dag:
    TrainingJobOperator(
        task_id="shards",
        command=[sys.executable, "-m", "trainguard.demo.shards", "--items", "{{ params.shard_size }}",
                 "--workdir", tempfile.gettempdir() + "/trainguard-examples/{{ run_id | replace(':', '-') }}"],
        nproc=4,
        env={"TRAINGUARD_DEMO_FAULTS": "{{ params.faults }}"},
        # A mapping of AIMaster parameters; Async instances are restarted one by one.
        policy={"job_execution_mode": "Async", "max_num_of_same_error": 3, "fault_tolerant_policy": "OnFailure"},
        deferrable=True,
    )
