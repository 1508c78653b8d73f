"""What the operator, the notifier and the web page agree on: job ids, the state directory, and
how a job's end becomes a task's end.

How trainguard's recovery composes with Airflow's retries
=========================================================

trainguard recovers faults inside one task try: restart rounds, isolation and hang handling
all happen while the task runs (or is deferred), within the policy's budgets. When the policy
gives up, the failure record says whether it is permanent or transient:

=====================================================  ==========  =============================
the job failed because                                  failure     the task
=====================================================  ==========  =============================
user code, a non-retryable fault, the restart budget    permanent   fails without Airflow retries
spent, the same error too often, too many instances                 (``AirflowFailException``)
failed, a job that hangs again and again
restarts disabled with a retryable fault, no spare      transient   fails normally, so Airflow's
capacity for a node fault, the supervisor stopped or                ``retries`` apply
lost, a requeue refused
=====================================================  ==========  =============================

Every try of a task instance is the same trainguard job (the id is made of the dag, task, run
and map index, not the try number), so a retry resumes the history: the rounds, the budget
spent and the isolated nodes carry over and budgets do not multiply. ``retries=R`` thus adds at
most R resumptions after transient give-ups to the ``--max-num-of-job-restart`` budget; a
permanent failure is never retried, and a job that already succeeded is not run again by a
retry (its records are returned). ``enable_job_restart=False`` with Airflow retries makes
Airflow do the restarting, but only for faults trainguard classifies as retryable.

Clearing the task is a person asking for a new run: Airflow then starts a new series of tries
(it sets ``max_tries`` to the current try plus ``retries``), and the operator starts a new
trainguard job for it, ``<id>.try<N>`` where N is the series' first try.
"""

from __future__ import annotations

import os
import hashlib
import re
from pathlib import Path
from typing import Any, Mapping

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from trainguard.store import RunStore, resumable_failure

# Job ids name directories and appear in Slurm job names: keep them to a safe alphabet.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MAX_BASE = 112


def base_job_id(dag_id: str, task_id: str, run_id: str, map_index: int | None = -1) -> str:
    """``dag.task.run[.map_index]`` in the job-id alphabet."""
    parts = [dag_id, task_id, run_id, *([str(map_index)] if map_index is not None and map_index >= 0 else [])]
    job_id = _UNSAFE.sub("-", ".".join(parts)).strip("-")
    if len(job_id) > _MAX_BASE:
        # Job ids are at most 128 characters (trainguard.ids), ``.try<N>`` included: keep it unique.
        job_id = job_id[:_MAX_BASE - 13] + "-" + hashlib.sha256(job_id.encode()).hexdigest()[:12]
    return job_id


def default_job_id(context: Mapping[str, Any]) -> str:
    """:func:`base_job_id`, plus ``.try<N>`` once the task was cleared (see the module docstring):
    the same for every try of one series of tries."""
    ti = context["ti"]
    base = base_job_id(ti.dag_id, ti.task_id, context["run_id"], getattr(ti, "map_index", -1))
    # Airflow's own reckoning of a series' first try (RuntimeTaskInstance.get_first_reschedule_date).
    retries = getattr(context.get("task"), "retries", 0) or 0
    first_try = getattr(ti, "max_tries", retries) - retries + 1
    return base if first_try <= 1 else f"{base}.try{first_try}"


def job_id_for(context: Mapping[str, Any]) -> str:
    """The trainguard job id of the task in ``context``: its ``job_id`` if set, else the default."""
    task = context.get("task")
    return getattr(task, "job_id", None) or default_job_id(context)


def resolve_state_dir(state_dir: str | os.PathLike[str] | None = None) -> Path:
    """``state_dir``, else ``$TRAINGUARD_STATE_DIR``, else ``[trainguard] state_dir`` in Airflow's
    configuration, else ``$AIRFLOW_HOME/trainguard``. It must be shared by the workers, the
    triggerer and the API server that shows the page (and by Slurm's nodes for Slurm jobs)."""
    if state_dir:
        return Path(state_dir).resolve()
    if os.environ.get("TRAINGUARD_STATE_DIR"):
        return Path(os.environ["TRAINGUARD_STATE_DIR"]).resolve()
    from airflow.sdk.configuration import conf

    configured = conf.get("trainguard", "state_dir", fallback=None)
    if configured:
        return Path(configured).resolve()
    return (Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "trainguard").resolve()


def read_report(state_dir: Path, job_id: str) -> dict[str, Any] | None:
    """The job's ``trainguard history --json`` object, or None if there is no such job."""
    if not (state_dir / RunStore.FILENAME).exists():
        return None
    with RunStore(state_dir) as store:
        return store.report(job_id) if store.job(job_id) is not None else None


def resumable(report: Mapping[str, Any]) -> bool:
    """:func:`trainguard.store.is_resumable`, read from a ``history --json`` object."""
    return report["status"] == "running" or resumable_failure(report.get("failure"))


def failure_message(report: Mapping[str, Any]) -> str:
    failure = report.get("failure") or {}
    return (f"trainguard job {report['job_id']} failed: {failure.get('error_code', 'unknown')}: "
            f"{failure.get('reason', 'no failure recorded')}")


def raise_for_report(report: Mapping[str, Any]) -> None:
    """Nothing for a job that succeeded; else the task's failure, permanent or transient (see
    the module docstring)."""
    status = report["status"]
    if status == "succeeded":
        return
    if status == "running":
        raise AirflowException(f"trainguard job {report['job_id']} is still running elsewhere "
                               "(requeued by its scheduler); a retry follows it")
    if resumable(report):
        raise AirflowException(f"{failure_message(report)} (transient: a retry resumes the job with its history "
                               "and budgets)")
    raise AirflowFailException(f"{failure_message(report)} (permanent: not retried)")
