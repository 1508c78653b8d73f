"""An MPI job: trainguard writes the hostfile from its placement and runs your ``mpirun``.

The job's ``nproc`` ranks are placed on the healthy (virtual) nodes; trainguard writes them as
a hostfile (``TRAINGUARD_HOSTFILE``; never an isolated node) and runs the ``mpirun`` command with
``--hostfile`` and ``-np`` put in. An MPI job dies as a whole, so any rank's failure restarts
the job, away from isolated nodes; mpirun's own summaries (a rank killed by a signal, a lost
ORTE/PMIx daemon) are classified. As root, OpenMPI's ``OMPI_ALLOW_RUN_AS_ROOT`` variables are
set for you. Needs OpenMPI (``apt-get install openmpi-bin libopenmpi-dev``) and
``pip install trainguard[mpi]`` for mpi4py.
"""

from __future__ import annotations

import sys
from datetime import datetime

from airflow.sdk import DAG, Param

from trainguard.airflow import TrainingJobOperator

with DAG(
    dag_id="trainguard_mpi",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trainguard", "example"],
    params={"script": Param("train_mpi.py", type="string", description="the mpi4py program")},
) as dag:
    TrainingJobOperator(
        task_id="train",
        command=["mpirun", "--bind-to", "none", sys.executable, "{{ params.script }}"],
        framework="mpi",
        nproc=4,
        nodes=3,
        slots_per_node=2,
        policy={"enable_job_restart": True, "max_num_of_job_restart": 3},
    )
