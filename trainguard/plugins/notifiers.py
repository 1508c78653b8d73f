"""Built-in notifiers: the supervisor's log, and a JSON-lines events file.

The module itself is the log notifier (registered by default). :class:`JsonLinesNotifier` is
registered by the engine when ``--events-file`` is given; each line is ``Event.to_json()``:
``{"job_id", "type", "at" (ISO 8601 UTC, ms), "message", "round", "rank", "node", "data"}``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from trainguard.hooks.markers import hookimpl
from trainguard.model import Event

log = logging.getLogger("trainguard.events")

_WARNINGS = {"fault_detected", "node_isolated", "round_started", "plugin_error"}


@hookimpl
def trainguard_on_event(event: Event) -> None:
    level = logging.ERROR if event.type == "job_failed" else (
        logging.WARNING if event.type in _WARNINGS else logging.INFO)
    log.log(level, "[%s] %s%s", event.job_id, event.type, f": {event.message}" if event.message else "")


class JsonLinesNotifier:
    """Append every event to a file, one JSON object a line, flushed as it happens."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    @hookimpl
    def trainguard_on_event(self, event: Event) -> None:
        line = json.dumps(event.to_json(), sort_keys=True) + "\n"
        with self._lock:
            # O_APPEND keeps lines whole when several supervisors share one file.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
