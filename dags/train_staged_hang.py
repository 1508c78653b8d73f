"""Staged hang detection from the SDK: each stage of training declares its own hang interval.

The job-wide ``--job-hang-interval`` is long (data loading can be slow), but the training
script narrows it to ``step_interval`` seconds while it trains and turns it off (-1) while it
uploads a checkpoint, through ``trainguard.job_monitor`` (see ``trainguard/demo/staged.py``).
A rank stuck in a training step is therefore caught in seconds, not half an hour, and the
fault names the stage. The script's custom messages ("epoch 1 done") reach the task log, and
``event_notifiers`` passes them to any Airflow notifier.

Try it with a hang: trigger with ``{"faults": "0:1:5:hang", "step_interval": 3}``.
"""

from __future__ import annotations

import sys
from datetime import datetime

from airflow.sdk import DAG, Param

from trainguard.airflow import TrainguardNotifier, TrainingJobOperator

with DAG(
    dag_id="trainguard_staged_hang_detection",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["trainguard", "example"],
    params={
        "faults": Param("", type="string", description="ROUND:RANK:STEP:KIND,... (see trainguard.demo.faults)"),
        "step_interval": Param(60, type="number", exclusiveMinimum=0, description="a training step's hang interval"),
        "job_hang_interval": Param(1800, type="integer", minimum=1, description="the job-wide hang interval"),
    },
) as dag:
    TrainingJobOperator(
        task_id="train",
        command=[sys.executable, "-m", "trainguard.demo.staged", "--step-interval", "{{ params.step_interval }}"],
        nproc=2,
        env={"TRAINGUARD_DEMO_FAULTS": "{{ params.faults }}"},
        policy={"job_execution_mode": "Sync", "enable_job_restart": True, "enable_job_hang_detection": True,
                "job_hang_interval": "{{ params.job_hang_interval }}"},
        event_notifiers=[TrainguardNotifier()],
        notify_events=["sdk_message", "round_started"],
    )
