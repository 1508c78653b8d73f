"""List+watch: the adapter (a job's pods) and the controller (jobs, pods) learn of every change
as it happens, without polling.

The watch starts from the list's ``resourceVersion``, asks for bookmarks and ends itself after
``timeout_seconds`` (then resumes from the last version seen); a 410 Gone (the version was
compacted away) re-lists. While idle it costs one request per ``timeout_seconds``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from trainguard.adapters.kubernetes.client import KubeApi, abort, status_of

log = logging.getLogger(__name__)

# ``kind`` is ``SYNC`` (``obj`` is the full list of items) or a watch event type.
WatchCallback = Callable[[str, Any], None]
PodCallback = WatchCallback


class ListWatch:
    """Follows one list call in a daemon thread: ``SYNC`` with the full list, then each event.

    ``lister(**kwargs)`` makes the list call and returns the raw (unparsed) response; it is
    called for the lists and, with ``watch=True``, for the watches.
    """

    def __init__(self, name: str, lister: Callable[..., Any], callback: WatchCallback, *,
                 timeout_seconds: int = 300) -> None:
        self.name = name
        self.lister = lister
        self.callback = callback
        self.timeout_seconds = timeout_seconds
        self.synced = threading.Event()
        self.relists = 0
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    def start(self) -> "ListWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            abort(response)  # ends the open watch now, not at its timeout

    def _run(self) -> None:
        version: str | None = None
        while not self._stopped.is_set():
            try:
                if version is None:
                    listed = json.loads(self.lister().data)
                    version = listed["metadata"]["resourceVersion"]
                    self.relists += 1
                    self.callback("SYNC", listed.get("items") or [])
                    self.synced.set()
                version = self._follow(version)
            except Exception as exc:  # keep watching: an API outage is not a job failure
                if self._stopped.is_set():
                    return
                if status_of(exc) == 410:
                    version = None
                    continue
                log.warning("watch of %s interrupted (%s: %s); resuming", self.name, type(exc).__name__, exc)
                time.sleep(1.0)

    def _follow(self, version: str) -> str | None:
        """Stream events from ``version``; returns where to resume, or None to re-list."""
        response = self.lister(watch=True, resource_version=version, timeout_seconds=self.timeout_seconds,
                               allow_watch_bookmarks=True, _request_timeout=(15, self.timeout_seconds + 30))
        self._response = response
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
                        log.info("watch of %s expired (410); re-listing", self.name)
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind != "BOOKMARK":
                    self.callback(kind, obj)
        finally:
            response.close()  # never back to the pool: unread stream data would poison it
        return version


class PodWatch(ListWatch):
    """The pods matching ``selector`` in ``namespace``, listed and watched through ``kube``'s retries."""

    def __init__(self, kube: KubeApi, namespace: str, selector: str, callback: PodCallback, *,
                 timeout_seconds: int = 300, job_id: str = "") -> None:
        def lister(**kwargs: Any) -> Any:
            return kube.call(kube.core.list_namespaced_pod, namespace, label_selector=selector,
                             _preload_content=False, **kwargs)

        super().__init__(f"pods-{job_id}", lister, callback, timeout_seconds=timeout_seconds)
