"""Events and final verdicts: the one place the engine writes what a person will read."""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from trainguard.engine.state import Clock
from trainguard.hooks import PluginHost
from trainguard.model import (
    EventType,
    Action,
    Decision,
    ErrorSource,
    Event,
    Fault,
    JobStatus,
    RoundRecord,
    RoundResult,
    Verdict,
)
from trainguard.store import RunStore

log = logging.getLogger(__name__)


def describe_message(root: Fault, verdict: Verdict | None) -> str:
    """A round's ``error_message``: what was seen, then the evidence line when it adds to it."""
    if verdict is not None and verdict.evidence and verdict.evidence != root.message:
        return f"{root.message}: {verdict.evidence}"
    return root.message


class Recorder:
    """Writes events to the history and the notifiers, and closes a job that failed."""

    def __init__(self, job_id: str, store: RunStore, host: PluginHost, clock: Clock) -> None:
        self.job_id = job_id
        self.store = store
        self.host = host
        self.clock = clock
        # The SDK progress marks (the supervisor sets it), carried by job_failed for goodput.
        self.progress: Callable[[], Mapping[str, Any]] | None = None

    def emit(self, kind: EventType, message: str = "", *, round_no: int | None = None, rank: int | None = None,
             node: str | None = None, data: Mapping[str, Any] | None = None) -> None:
        event = Event(self.job_id, kind, self.clock.wall(), message, round_no, rank, node, dict(data or {}))
        self.store.add_event(event)
        self.host.notify(event)

    def plugin_error(self, plugin: str, hook: str, exc: BaseException) -> None:
        # Recorded but not re-notified: a notifier that always fails must not recurse.
        log.error("[%s] plugin %s failed in %s: %s: %s", self.job_id, plugin, hook, type(exc).__name__, exc)
        self.store.add_event(Event(self.job_id, EventType.PLUGIN_ERROR, self.clock.wall(),
                                   f"{plugin} failed in {hook}: {type(exc).__name__}: {exc}",
                                   data={"plugin": plugin, "hook": hook}))

    def failure(self, round_no: int, root: Fault, decision: Decision, *, verdict: Verdict | None = None,
                stages: Mapping[str, float] | None = None, error_code: str | None = None) -> RoundRecord:
        """The top-level ``failure`` record of a job that failed for good."""
        return RoundRecord(
            job_id=self.job_id, round=round_no, reason=decision.reason,
            error_code=error_code or (verdict.fault_code if verdict else "TG-UNKNOWN"),
            error_message=describe_message(root, verdict), error_source=root.source, action=Action.FAIL,
            started_at=root.detected_at, result=RoundResult.FAILED,
            node=(verdict.node if verdict else None) or root.node, instance=root.instance,
            stages=dict(stages or {}), consumes_budget=False,
            user_error=bool(verdict and verdict.user_error), node_fault=bool(verdict and verdict.node_fault),
            transient=decision.transient)

    def give_up(self, round_no: int, error_code: str, reason: str, message: str, *,
                transient: bool = False, stages: Mapping[str, float] | None = None) -> None:
        """Fail the job for a reason that is no instance's fault: capacity, start-up, a signal."""
        self.finish_failed(self.failure(
            round_no, Fault(ErrorSource.EVENT, self.clock.wall(), message=message),
            Decision(Action.FAIL, reason, consumes_budget=False, transient=transient),
            error_code=error_code, stages=stages))

    def finish_failed(self, failure: RoundRecord) -> None:
        self.store.finish_job(self.job_id, JobStatus.FAILED, failure)
        self.emit(EventType.JOB_FAILED, f"{failure.error_code}: {failure.reason}",
                  data={"error_code": failure.error_code, "error_message": failure.error_message,
                        "transient": failure.transient,
                        **({"progress": dict(self.progress())} if self.progress is not None else {})})
