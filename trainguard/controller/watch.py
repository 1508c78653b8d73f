"""One list+watch of a resource across a namespace (or all): the controller's only reads while idle.

Like :class:`trainguard.adapters.kubernetes.watch.PodWatch`, for any list call: the watch resumes
from the last ``resourceVersion`` after ``timeout_seconds``, asks for bookmarks, and re-lists on
410 Gone. ``callback(kind, obj)`` gets ``SYNC`` with the full list, then each event.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from trainguard.adapters.kubernetes.client import status_of

log = logging.getLogger(__name__)


class ListWatch:
    """``lister(**kwargs)`` returns a raw (unparsed) response; it is called for lists and watches."""

    def __init__(self, name: str, lister: Callable[..., Any], callback: Callable[[str, Any], None], *,
                 timeout_seconds: int = 300, **kwargs: Any) -> None:
        self.name = name
        self.lister = lister
        self.callback = callback
        self.timeout_seconds = timeout_seconds
        self.kwargs = kwargs
        self.synced = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> "ListWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        version: str | None = None
        while not self._stopped.is_set():
            try:
                if version is None:
                    listed = json.loads(self.lister(**self.kwargs).data)
                    version = listed["metadata"]["resourceVersion"]
                    self.callback("SYNC", listed.get("items") or [])
                    self.synced.set()
                version = self._follow(version)
            except Exception as exc:  # an API outage is not a reason to stop watching
                if self._stopped.is_set():
                    return
                if status_of(exc) == 410:
                    version = None
                    continue
                log.warning("watch of %s interrupted (%s: %s); resuming", self.name, type(exc).__name__, exc)
                time.sleep(1.0)

    def _follow(self, version: str) -> str | None:
        response = self.lister(watch=True, resource_version=version, timeout_seconds=self.timeout_seconds,
                               allow_watch_bookmarks=True, _request_timeout=(15, self.timeout_seconds + 30),
                               **self.kwargs)
        try:
            for line in response:
                if self._stopped.is_set():
                    return version
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind != "BOOKMARK":
                    self.callback(kind, obj)
        finally:
            response.close()
        return version
