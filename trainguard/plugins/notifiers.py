"""Built-in notifiers: the supervisor's log, a JSON-lines events file, and a webhook.

The module itself is the log notifier (registered by default). :class:`JsonLinesNotifier` is
registered when ``--events-file`` is given and :class:`WebhookNotifier` for each
``--notify-webhook URL``. Both send ``Event.to_json()``: ``{"job_id", "type", "at" (ISO 8601
UTC, ms), "message", "round", "rank", "node", "data"}`` (``docs/events.md``).

The log and the events file are *inline* notifiers (``inline_notifier = True``): the plugin
host calls them synchronously, in the supervisor's thread. Both are local writes that take
microseconds, and the events file is what users and tests read to follow a job, so it must
hold every event, in order, by the time the supervisor exits; a queue could only drop or
reorder them. Every other notifier, the webhook included, gets its own bounded queue and
worker thread (:mod:`trainguard.hooks.delivery`), so a host that never answers costs the
supervisor nothing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Collection, Mapping

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from trainguard.errors import TrainguardError
from trainguard.hooks.markers import hookimpl
from trainguard.model import Event, EventType

log = logging.getLogger("trainguard.events")

_WARNINGS = {t.value for t in (EventType.FAULT_DETECTED, EventType.NODE_ISOLATED, EventType.ROUND_STARTED,
                                EventType.PLUGIN_ERROR, EventType.RANK_SLOW)}

# Seconds between two webhook attempts at most.
_MAX_BACKOFF = 10.0

# Read by the plugin host: this module (the log notifier) is called in the supervisor's thread.
inline_notifier = True


@hookimpl
def trainguard_on_event(event: Event) -> None:
    level = logging.ERROR if event.type == EventType.JOB_FAILED else (
        logging.WARNING if str(event.type) in _WARNINGS else logging.INFO)
    log.log(level, "[%s] %s%s", event.job_id, event.type, f": {event.message}" if event.message else "")


class JsonLinesNotifier:
    """Append every event to a file, one JSON object a line, written as it happens (inline)."""

    inline_notifier = True

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
        except OSError as exc:
            raise TrainguardError(f"--events-file {path}: {exc.strerror}") from None
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


def events_file_plugin(path: str | os.PathLike[str]) -> dict[str, JsonLinesNotifier]:
    """``--events-file PATH`` as a plugin to register, by its name (the file is opened now, so a
    path that cannot be written is said at once)."""
    return {f"events-file:{path}": JsonLinesNotifier(path)}


class WebhookError(Exception):
    """A webhook delivery failed; ``transient`` ones are retried."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class WebhookNotifier:
    """POST every event (or the ``types`` given) as JSON to ``url``.

    Each POST has a ``timeout``; connection errors and 5xx answers are retried with exponential
    backoff up to ``attempts`` times, then logged and dropped: a notifier never stops the job.
    The URL's path, query and credentials often hold a token, so only its scheme and host are
    ever logged; ``headers`` (an ``Authorization`` header, say) are never logged.
    """

    def __init__(self, url: str, *, timeout: float = 5.0, attempts: int = 3, types: Collection[str] = (),
                 headers: Mapping[str, str] | None = None, backoff: float = 0.5) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("webhook URL must be http(s)://host/...")
        self.url = url
        self.where = f"{parsed.scheme}://{parsed.hostname}{f':{parsed.port}' if parsed.port else ''}"
        self.timeout = timeout
        self.types = frozenset(types)
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        # The longest one event may take (every attempt times out, every backoff at its cap): the
        # plugin host's per-notifier timeout, past which this webhook counts as stuck.
        self.notify_timeout = attempts * timeout + (attempts - 1) * _MAX_BACKOFF + 1.0
        self._post = retry(stop=stop_after_attempt(attempts),
                           wait=wait_exponential(multiplier=backoff, max=_MAX_BACKOFF),
                           retry=retry_if_exception(lambda e: isinstance(e, WebhookError) and e.transient),
                           reraise=True)(self._post_once)

    def _post_once(self, body: bytes) -> None:
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise WebhookError(f"HTTP {exc.code}", transient=exc.code >= 500 or exc.code == 429) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise WebhookError(f"{type(reason).__name__}", transient=True) from None

    def post(self, payload: Mapping[str, Any], what: str) -> bool:
        """POST ``payload`` as JSON with the retries above; False (logged) if it was not delivered."""
        try:
            self._post(json.dumps(payload).encode())
        except WebhookError as exc:
            log.warning("webhook %s: %s not delivered (%s)", self.where, what, exc)
            return False
        return True

    @hookimpl
    def trainguard_on_event(self, event: Event) -> None:
        if not self.types or event.type in self.types:
            self.post(event.to_json(), f"job {event.job_id}'s {event.type} event")
