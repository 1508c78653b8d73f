"""An elastic PyTorch job: it goes on smaller when a node is lost, and grows back later.

Four ranks on two (virtual) nodes, no spare: ``nnodes: "1:2"`` (torchrun's ``--nnodes MIN:MAX``)
lets the job continue on one node from its checkpoint when the other one is isolated for a
hardware fault (a ``scale_in`` round, budgeted, recording the world size before and after),
instead of failing for want of a spare. When the node's isolation ends (``isolate_window``
seconds, or ``trainguard nodes release``), the next restart grows the job back to four ranks.

Try it with faults: trigger with ``{"faults": "0:2:3:ecc,1:1:12:nccl"}`` (rank 2 on node-1 hits
an ECC error at step 3; the job goes on as two ranks; at step 12 a collective timeout restarts
it, by then on both nodes again).
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime

from airflow.sdk import DAG, Param

from trainguard.airflow import TrainingJobOperator

with DAG(
    dag_id="trainguard_elastic_training",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trainguard", "example"],
    params={
        "steps": Param(16, type="integer", minimum=1),
        "faults": Param("", type="string", description="ROUND:RANK:STEP:KIND,... (see trainguard.demo.faults)"),
        "isolate_window": Param(30, type="integer", minimum=1, description="seconds a lost node stays out"),
    },
) as dag:
    TrainingJobOperator(
        task_id="train",
        command=[sys.executable, "-m", "trainguard.demo.train", "--steps", "{{ params.steps }}",
                 "--checkpoint-every", "2", "--step-time", "0.2",
                 "--checkpoint", tempfile.gettempdir() + "/trainguard-examples/{{ run_id | replace(':', '-') }}.pt"],
        nproc=4,
        nodes=2,
        slots_per_node=2,
        env={"TRAINGUARD_DEMO_FAULTS": "{{ params.faults }}", "OMP_NUM_THREADS": "1"},
        policy={"enable_job_restart": True, "max_num_of_job_restart": 3, "nnodes": "1:2",
                "isolate_window": "{{ params.isolate_window }}"},
    )
