"""The trigger a deferred :class:`~trainguard.airflow.operators.TrainingJobOperator` waits on.

It polls two things every ``poll_interval`` seconds, off the event loop: the run history (the
job's status, its rounds, its events) and whatever runs the job (a detached supervisor process,
a Slurm job; see :mod:`trainguard.airflow.runners`). It fires once, with one of::

    {"kind": "finished", "status": "succeeded" | "failed", ...}   the supervisor ended the job
    {"kind": "round", "rounds": N, ...}                             a new restart round began
    {"kind": "runner_ended", "state": {...}, ...}                   the runner is gone, the job is not done

and every event carries ``job_id`` and the trigger's own arguments ``watch``, ``rounds_seen`` and
``events_seen`` as given (the task resumes from the event alone). New events (SDK messages,
rounds, isolations) are written to the trigger's log as they appear, which Airflow shows in the
task's log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from trainguard.airflow.runners import Watch, runner_ended, stop_watched
from trainguard.errors import TrainguardError
from trainguard.model import JobStatus
from trainguard.store import RunStore, cut_off


def read_progress(state_dir: str, job_id: str, events_seen: int,
                  since: float = 0.0) -> tuple[JobStatus | None, int, list[dict[str, Any]]]:
    """The job's status, round count and new events. The status is None until a supervisor has
    decided the job's end at or after ``since``: a resumed job's record says how the previous
    try ended until the new supervisor takes it up, and a supervisor cut off (interrupted with
    its allocation, say) leaves the decision to the runner once it is seen to have ended."""
    with RunStore(Path(state_dir)) as store:
        job = store.job(job_id)
        if job is None:
            return None, 0, []
        status = job["status"] if job["updated_at"] >= since and not cut_off(job) else None
        return status, store.next_round(job_id) - 1, list(store.events(job_id, after=events_seen))


def event_line(event: dict[str, Any]) -> str:
    """One log line for a stored event: ``round 2 rank 1 node-0 sdk_message: ...``."""
    where = " ".join(part for part in (
        f"round {event['round']}" if event.get("round") else "",
        f"rank {event['rank']}" if event.get("rank") is not None else "",
        event.get("node") or "") if part)
    return f"[{event['at']}] {where + ' ' if where else ''}{event['type']}: {event['message']}"


class TrainingJobTrigger(BaseTrigger):
    """Wait until the job ends, a new round begins, or what runs the job is gone.

    :param job_id: the trainguard job id.
    :param state_dir: the run history's directory.
    :param watch: what runs the job (see :mod:`trainguard.airflow.runners`).
    :param rounds_seen: rounds the task has already logged; a later one fires ``round``.
    :param events_seen: the last event id already logged.
    :param poll_interval: seconds between polls.
    :param stop_grace_period: seconds a stopped supervisor gets to stop its ranks (``on_kill``).
    """

    def __init__(self, *, job_id: str, state_dir: str, watch: Watch, rounds_seen: int = 0, events_seen: int = 0,
                 poll_interval: float = 2.0, stop_grace_period: float = 10.0) -> None:
        super().__init__()
        self.job_id = job_id
        self.state_dir = state_dir
        self.watch = dict(watch)
        self.rounds_seen = rounds_seen
        self.events_seen = events_seen
        self.poll_interval = poll_interval
        self.stop_grace_period = stop_grace_period

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_id": self.job_id, "state_dir": self.state_dir, "watch": self.watch,
            "rounds_seen": self.rounds_seen, "events_seen": self.events_seen,
            "poll_interval": self.poll_interval, "stop_grace_period": self.stop_grace_period})

    def _event(self, kind: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent({"kind": kind, "job_id": self.job_id, "watch": self.watch,
                             "rounds_seen": self.rounds_seen, "events_seen": self.events_seen, **fields})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        logged = self.events_seen
        while True:
            try:
                # The runner first: a supervisor records the job's end before it exits, so a
                # runner gone with the job still running was cut off.
                ended = await asyncio.to_thread(runner_ended, self.watch)
                status, rounds, events = await asyncio.to_thread(
                    read_progress, self.state_dir, self.job_id, logged, self.watch.get("launched_at", 0.0))
            except TrainguardError as exc:
                yield self._event("error", message=str(exc))
                return
            for event in events:
                self.log.info("trainguard %s %s", self.job_id, event_line(event))
                logged = event["id"]
            if status is not None and status is not JobStatus.RUNNING:
                yield self._event("finished", status=status.value)
                return
            if ended is not None:
                yield self._event("runner_ended", state=ended)
                return
            if rounds > self.rounds_seen:
                yield self._event("round", rounds=rounds)
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """A person marked the deferred task failed or cleared it: stop the job."""
        self.log.info("trainguard %s: stopping the job (%s)", self.job_id, self.watch["kind"])
        await asyncio.to_thread(stop_watched, self.watch, self.stop_grace_period)
