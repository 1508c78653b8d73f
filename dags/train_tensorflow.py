"""A TensorFlow ParameterServerStrategy job: every task gets its TF_CONFIG, and each role has
its own recovery.

``roles`` gives the tasks in rank order; trainguard builds ``TF_CONFIG`` (the cluster's
``host:port`` per task, the task's own type and index) from the placement at every start. The
job runs Async, as AIMaster advises for TensorFlow: a lost worker is restarted alone, a lost
parameter server or chief restarts the job, a lost evaluator is reported and the job goes on;
``role_policy`` changes a role's behaviour (``job``, ``instance`` or ``ignore``). The job
succeeds when the chief does; the parameter servers are then stopped.

``script`` is your TensorFlow program (``tensorflow-cpu`` is not one of trainguard's
dependencies); it reads ``TF_CONFIG`` through ``tf.distribute.cluster_resolver.TFConfigClusterResolver``.
"""

from __future__ import annotations

import sys
from datetime import datetime

from airflow.sdk import DAG, Param

from trainguard.airflow import TrainingJobOperator

with DAG(
    dag_id="trainguard_tensorflow_ps",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trainguard", "example"],
    params={
        "script": Param("train_ps.py", type="string", description="the TensorFlow program"),
        "role_policy": Param("evaluator=ignore", type="string", description="ROLE=job|instance|ignore,..."),
    },
) as dag:
    TrainingJobOperator(
        task_id="train",
        command=[sys.executable, "{{ params.script }}"],
        framework="tensorflow",
        roles="chief=1,worker=4,ps=2,evaluator=1",
        nodes=2,
        policy={"job_execution_mode": "Async", "enable_job_restart": True, "max_num_of_job_restart": 3,
                "fault_tolerant_policy": "OnFailure", "role_policy": "{{ params.role_policy }}"},
    )
