"""Goodput of a job: how much of its wall time went into training that was kept.

Computed from what the run history already holds, the ``history --json`` report (rounds and
their stages) and the job's events (the SDK progress marks that ``fault_detected``,
``job_succeeded`` and ``job_failed`` carry, see ``docs/events.md``), so it works for any job
in any store, live or finished, and needs no state of its own.

| quantity | how |
| --- | --- |
| ``wall_seconds`` | first ``job_started``/``job_resumed`` event to the final event (or now) |
| ``recovery_seconds`` | sum of the rounds' stages (diagnose, decide, stop, isolate, restart) |
| ``lost_work_seconds`` | per round, run time since the last checkpoint reported before the fault (only when checkpoints are reported) |
| ``productive_seconds`` | time spent reaching new training steps (``report_step``) when ranks report steps; else wall minus recovery minus lost work |
| ``ettr`` | productive / wall: the effective training time ratio |

``source`` says which way productive time was found: ``sdk_steps``, ``checkpoints`` or
``run_time`` (no SDK reports: lost work since a checkpoint cannot be known and counts as 0).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Iterable, Mapping

from trainguard.timefmt import iso_ms

__all__ = ["STAGES", "describe", "epoch_seconds", "goodput"]

STAGES = ("diagnose", "decide", "stop", "isolate", "restart")
_START = ("job_started", "job_resumed")
_FINAL = ("job_succeeded", "job_failed", "job_requeued")


def goodput(report: Mapping[str, Any], events: Iterable[Mapping[str, Any]], now: float | None = None) -> dict[str, Any]:
    """The ``goodput`` object of ``trainguard history --json`` for one job.

    :param report: the job's history report (:meth:`trainguard.store.RunStore.report`).
    :param events: the job's events in order (:meth:`trainguard.store.RunStore.events`).
    :param now: the end of a job still running (default: the time now).
    """
    start = end = None
    progress: Mapping[str, Any] = {}
    fault_progress: Mapping[str, Any] = {}
    round_progress: dict[int, Mapping[str, Any]] = {}
    run_started: dict[int, float] = {}
    last_run_start: float | None = None
    for event in events:
        kind, at = event["type"], epoch_seconds(event["at"])
        data = event.get("data") or {}
        if kind in _START:
            if start is None:
                start = at
            last_run_start = at
        elif kind == "fault_detected":
            fault_progress = data.get("progress") or {}
            progress = fault_progress or progress
        elif kind == "round_started" and event.get("round") is not None:
            round_progress[event["round"]] = fault_progress
            run_started[event["round"]] = last_run_start if last_run_start is not None else at
        elif kind == "round_finished":
            last_run_start = at
        if kind in _FINAL:
            end = at
            progress = data.get("progress") or progress
    if start is None:
        start = epoch_seconds(report["created_at"])
    if end is None:
        end = now if now is not None else time.time()
    wall = max(0.0, end - start)

    rounds = []
    stage_totals = dict.fromkeys(STAGES, 0.0)
    recovery = lost = 0.0
    checkpoints = progress.get("checkpoint") is not None
    for record in report.get("rounds", []):
        stages = {k: float(v) for k, v in (record.get("stages") or {}).items()}
        for name, seconds in stages.items():
            stage_totals[name] = stage_totals.get(name, 0.0) + seconds
        spent = sum(stages.values())
        marks = round_progress.get(record["round"], {})
        fault_at = epoch_seconds(record["started_at"])
        lost_here = None
        if marks.get("checkpoint_at") is not None or checkpoints:
            since = max(float(marks.get("checkpoint_at") or 0.0), run_started.get(record["round"], start))
            lost_here = max(0.0, fault_at - since)
            lost += lost_here
        recovery += spent
        rounds.append({"round": record["round"], "action": record.get("action"), "error_code": record.get("error_code"),
                       "stages": {k: round(v, 3) for k, v in stages.items()}, "recovery_seconds": round(spent, 3),
                       "lost_work_seconds": None if lost_here is None else round(lost_here, 3),
                       "lost_seconds": round(spent + (lost_here or 0.0), 3)})
    reported = float(progress.get("productive") or 0.0)
    if progress.get("step") is not None and reported > 0:
        productive, source = reported, "sdk_steps"
    elif checkpoints:
        productive, source = wall - recovery - lost, "checkpoints"
    else:
        productive, source = wall - recovery, "run_time"
    productive = min(max(0.0, productive), wall)
    return {
        "started_at": iso_ms(start),
        "ended_at": iso_ms(end),
        "wall_seconds": round(wall, 3),
        "productive_seconds": round(productive, 3),
        "recovery_seconds": round(recovery, 3),
        "lost_work_seconds": round(lost, 3),
        "ettr": round(productive / wall, 4) if wall > 0 else None,
        "source": source,
        "last_step": progress.get("step"),
        "last_checkpoint": progress.get("checkpoint"),
        "stages": {k: round(v, 3) for k, v in stage_totals.items()},
        "rounds": rounds,
    }


def epoch_seconds(value: Any) -> float:
    """Epoch seconds from a number or an ISO 8601 string as the history writes it."""
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def describe(data: Mapping[str, Any]) -> str:
    """One line for people: ``goodput: ETTR 0.84 (4.0 h productive of 4.8 h; ...)``."""
    ettr = data.get("ettr")
    if ettr is None:
        return "goodput: no wall time yet"
    return (f"goodput: ETTR {ettr:.3f} ({_hours(data['productive_seconds'])} productive of "
            f"{_hours(data['wall_seconds'])}; recovery {_hours(data['recovery_seconds'])}, lost work "
            f"{_hours(data['lost_work_seconds'])}; from {data['source'].replace('_', ' ')})")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds:.1f} s"
