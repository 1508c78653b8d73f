"""DAGs the Airflow tests run with ``dag.test()``: one task each, running ``tests/helpers/rank.py``
under the operator. ``run_conf`` supplies the rank plan (``plan``, JSON), the file each start is
recorded in (``record``) and, for the notifier, a webhook URL (``webhook``)."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from trainguard.airflow import TrainguardNotifier, TrainingJobOperator

RANK = str(Path(__file__).resolve().parents[1] / "helpers" / "rank.py")


def scenario(dag_id: str, *, policy: object = None, retries: int = 0, deferrable: bool = False,
             notify: bool = False, **operator: object) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
             params={"plan": "[]", "record": "/dev/null", "webhook": ""}) as dag:
        TrainingJobOperator(
            task_id="train", command=[sys.executable, RANK], nproc=2,
            env={"TG_PLAN": "{{ params.plan }}", "TG_RECORD": "{{ params.record }}", "TG_WORK": "0.3"},
            policy=policy if policy is not None else {"enable_job_restart": True, "stop_grace_period": 2},
            deferrable=deferrable, poll_interval=0.2, retries=retries, retry_delay=timedelta(seconds=0),
            on_failure_callback=TrainguardNotifier(webhook_url="{{ params.webhook }}") if notify else None,
            **operator)
    return dag


in_task = scenario("tg_in_task", retries=2, notify=True)
deferred = scenario("tg_deferred", retries=2, deferrable=True, notify=True)
# Restarts are left to Airflow: a retryable fault fails the try as transient, and the retry
# resumes the same trainguard job.
airflow_restarts = scenario("tg_airflow_restarts", retries=1, policy="--enable-job-restart=False")
airflow_restarts_deferred = scenario("tg_airflow_restarts_deferred", retries=1, deferrable=True,
                                     policy="--enable-job-restart=False")
bad_policy = scenario("tg_bad_policy", retries=2, policy="--job-hang-interval=soon")
# Submitted to Slurm from outside an allocation; --no-requeue leaves a lost allocation to the
# operator (Slurm would otherwise requeue it itself).
slurm = scenario("tg_slurm", deferrable=True, adapter="slurm", nodes=2,
                 adapter_options={"sbatch_options": ["--nodes=2", "--no-requeue"], "poll_interval": 0.5})
