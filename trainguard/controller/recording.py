"""What the controller says on a job: Events, the ``trainguard.io/status`` and progress annotations.

Events have deterministic names (``<job>.tg-round-<n>``, ``<job>.tg-bad-<digest>``, ...), so a
repeat after a controller restart is refused by the API server. Closing a round writes it to the
store and replaces the progress annotation by the round's summary in the status annotation. The
job's annotations are parsed here too, since a bad one is reported as an Event, once.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import time

from trainguard.adapters.volcano import VolcanoApi
from trainguard.controller import annotations as notes
from trainguard.controller.tracked import Tracked
from trainguard.errors import PolicyError
from trainguard.model import Action, RoundRecord
from trainguard.store import RunStore
from trainguard.timefmt import iso_ms

log = logging.getLogger(__name__)

_EVENT_REASONS = {
    Action.RESTART_JOB: "TrainguardRestart", Action.RESTART_IN_PLACE: "TrainguardRestart",
    Action.RESTART_INSTANCES: "TrainguardRestart", Action.SCALE_IN: "TrainguardRestart",
    Action.RESCHEDULE_ISOLATED: "TrainguardIsolate", Action.REPLACE_INSTANCES: "TrainguardReplace",
}


def _now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_note(round_no: int, action: str, reason: str, result: str) -> str:
    """The ``trainguard.io/status`` value: the last round's summary."""
    return json.dumps({"round": round_no, "action": action, "reason": reason, "result": result,
                       "at": iso_ms(time.time())})


class Recorder:
    """Writes Events and annotations on jobs, and closes rounds in the store."""

    def __init__(self, api: VolcanoApi, store: RunStore) -> None:
        self.api = api
        self.store = store

    def annotate(self, tracked: Tracked, values: dict[str, str | None]) -> None:
        """Set (or, for ``None``, remove) annotations on the job and on the cached object."""
        self.api.annotate(tracked.kind, tracked.namespace, tracked.name, values)
        annotations = dict(tracked.annotations)
        for k, v in values.items():
            if v is None:
                annotations.pop(k, None)
            else:
                annotations[k] = v
        tracked.job.setdefault("metadata", {})["annotations"] = annotations

    def event(self, tracked: Tracked, suffix: str, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event on the job named ``<job>.<suffix>``."""
        self.api.event(tracked.kind, tracked.job, f"{tracked.name}.{suffix}", reason, message, warning=warning,
                       now=_now_iso())

    def round_event(self, tracked: Tracked, record: RoundRecord) -> None:
        """The Event saying what a round did and why."""
        reason = _EVENT_REASONS.get(record.action, "TrainguardRestart")
        where = f" on node {record.node}" if record.node else ""
        isolated = f"; avoiding {', '.join(record.isolated)}" if record.isolated else ""
        self.event(tracked, f"tg-round-{record.round}", reason,
                   f"round {record.round}: {record.action.value} after {record.error_code} in "
                   f"{record.instance}{where}: {record.reason}{isolated}")

    def close(self, tracked: Tracked, record: RoundRecord) -> None:
        """Close the round in the store; its summary replaces the progress annotation."""
        self.store.close_round(record)
        self.annotate(tracked, {notes.PROGRESS: None, notes.STATUS: status_note(
            record.round, record.action.value, record.reason, record.result.value)})
        log.info("[%s] round %s %s: %s", record.job_id, record.round, record.result.value, record.reason)

    def read_settings(self, tracked: Tracked) -> bool:
        """Parse the annotations when they changed; a bad value is an Event, once."""
        meta = tracked.job.get("metadata") or {}
        labels = meta.get("labels") or {}
        fingerprint = notes.fingerprint(tracked.annotations, labels)
        if fingerprint != tracked.fingerprint:
            tracked.fingerprint = fingerprint
            try:
                tracked.settings, tracked.problem = notes.parse(tracked.annotations, labels), None
            except PolicyError as exc:
                tracked.settings, tracked.problem = None, str(exc)
                digest = hashlib.sha1(fingerprint.encode()).hexdigest()[:10]
                log.warning("[%s/%s] bad annotation: %s; leaving the job to its own policies", tracked.namespace,
                            tracked.name, exc)
                self.event(tracked, f"tg-bad-{digest}", "TrainguardBadAnnotation",
                           f"trainguard ignores this job: {exc}. The job is left to its own policies.", warning=True)
            else:
                settings = tracked.settings
                if settings.notes:
                    digest = hashlib.sha1("|".join(settings.notes).encode()).hexdigest()[:10]
                    self.event(tracked, f"tg-note-{digest}", "TrainguardAnnotationNote", "; ".join(settings.notes))
        return tracked.settings is not None
