"""``TrainguardNotifier``: an Airflow notifier that says what happened to a training job.

Use it as a task's ``on_failure_callback`` (or ``on_success_callback``), or in a
:class:`~trainguard.airflow.operators.TrainingJobOperator`'s ``event_notifiers`` to be told of
rounds and SDK messages as they happen. It reads the job's restart records from the run history
and sends one JSON summary to a webhook (with trainguard's retries and timeouts), or logs it
when no webhook is given::

    {"job_id": ..., "status": "failed", "error_code": "TG-CUDA-OOM", "reason": ..., "transient": false,
     "rounds": 2, "restarts": 1, "last_round": {...}, "event": {...} | null,
     "dag_id": ..., "task_id": ..., "run_id": ..., "try_number": ...}
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from airflow.sdk import BaseNotifier, Context

from trainguard.airflow.jobs import job_id_for, read_report, resolve_state_dir
from trainguard.plugins.notifiers import WebhookNotifier


def summarize(report: Mapping[str, Any] | None, job_id: str, event: Mapping[str, Any] | None) -> dict[str, Any]:
    """The notification's payload (see the module docstring)."""
    report = report or {}
    failure = report.get("failure") or {}
    rounds = report.get("rounds") or []
    return {"job_id": job_id, "status": report.get("status", "unknown"), "error_code": failure.get("error_code"),
            "reason": failure.get("reason"), "transient": failure.get("transient"), "rounds": len(rounds),
            "restarts": report.get("restarts", 0), "last_round": rounds[-1] if rounds else None,
            "event": dict(event) if event else None}


class TrainguardNotifier(BaseNotifier):
    """Send a training job's outcome (and the trainguard event at hand, if any) to a webhook.

    :param webhook_url: where to POST the JSON summary; None logs it instead.
    :param job_id: the trainguard job (default: the task's, as the operator chose it).
    :param state_dir: the run history (default as the operator resolves it).
    :param headers: extra HTTP headers (an ``Authorization`` header, say); never logged.
    :param timeout: seconds per POST attempt.
    """

    template_fields: Sequence[str] = ("webhook_url", "job_id", "state_dir")

    def __init__(self, *, webhook_url: str | None = None, job_id: str | None = None, state_dir: str | None = None,
                 headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> None:
        super().__init__()
        self.webhook_url = webhook_url
        self.job_id = job_id
        self.state_dir = state_dir
        self.headers = dict(headers or {})
        self.timeout = timeout

    def notify(self, context: Context) -> None:
        event = context.get("trainguard_event")  # type: ignore[call-overload]
        job_id = self.job_id or (event or {}).get("job_id") or job_id_for(context)
        payload = summarize(read_report(resolve_state_dir(self.state_dir), job_id), job_id, event)
        ti = context.get("ti")
        if ti is not None:
            payload.update(dag_id=ti.dag_id, task_id=ti.task_id, run_id=context.get("run_id"),
                           try_number=getattr(ti, "try_number", None))
        if not self.webhook_url:
            self.log.info("trainguard job %s: %s", job_id, payload)
            return
        WebhookNotifier(self.webhook_url, timeout=self.timeout, headers=self.headers).post(
            payload, f"job {job_id}'s summary")
