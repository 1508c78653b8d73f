"""trainguard for Apache Airflow 3: the operator, its trigger, a notifier and a web page.

Installed with the ``airflow`` extra (``pip install 'trainguard[airflow]'``)::

    from trainguard.airflow import TrainingJobOperator

    TrainingJobOperator(task_id="train", command=["python", "train.py"], nproc=8, nodes=2,
                        policy="--job-execution-mode=Sync --enable-job-restart=True")
"""

from __future__ import annotations

from trainguard.airflow.notifiers import TrainguardNotifier
from trainguard.airflow.operators import TrainingJobOperator
from trainguard.airflow.triggers import TrainingJobTrigger

__all__ = ["TrainingJobOperator", "TrainingJobTrigger", "TrainguardNotifier"]
