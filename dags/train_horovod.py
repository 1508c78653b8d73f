"""A Horovod elastic job whose hosts come from trainguard: isolation feeds Horovod's elastic mode.

trainguard runs the ``horovodrun`` command with ``--host-discovery-script`` pointing at a script
that calls ``trainguard hosts JOB_ID``: the job's healthy hosts as ``host:slots`` lines, less every
node isolated now. Horovod polls it, dropping a node trainguard isolated and taking it back when
the isolation ends, without a restart; a failure of the launcher itself restarts the job, as for
MPI. Needs Horovod (``pip install horovod``, which builds from source: a compiler, CMake and
the framework must be present).
"""

from __future__ import annotations

import sys
from datetime import datetime

from airflow.sdk import DAG, Param

from trainguard.airflow import TrainingJobOperator

with DAG(
    dag_id="trainguard_horovod_elastic",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trainguard", "example"],
    params={"script": Param("train_elastic.py", type="string", description="the Horovod elastic program")},
) as dag:
    TrainingJobOperator(
        task_id="train",
        command=["horovodrun", "--min-np", "2", "--max-np", "4", sys.executable, "{{ params.script }}"],
        framework="horovod",
        nproc=4,
        nodes=2,
        policy={"enable_job_restart": True, "max_num_of_job_restart": 3},
    )
