"""One list+watch of a job's pods: the adapter learns of every change as it happens, without polling.

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
PodCallback = Callable[[str, Any], None]


class PodWatch:
    """Follows the pods matching ``selector`` in ``namespace`` in a daemon thread."""

    def __init__(self, kube: KubeApi, namespace: str, selector: str, callback: PodCallback, *,
                 timeout_seconds: int = 300, job_id: str = "") -> None:
        self.kube = kube
        self.namespace = namespace
        self.selector = selector
        self.callback = callback
        self.timeout_seconds = timeout_seconds
        self.job_id = job_id
        self.synced = threading.Event()
        self.relists = 0
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"pod-watch-{job_id}", daemon=True)

    def start(self) -> "PodWatch":
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
                    listed = self.kube.json(self.kube.core.list_namespaced_pod, self.namespace,
                                            label_selector=self.selector)
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
                log.warning("[%s] pod watch interrupted (%s: %s); resuming", self.job_id, type(exc).__name__, exc)
                time.sleep(1.0)

    def _follow(self, version: str) -> str | None:
        """Stream events from ``version``; returns where to resume, or None to re-list."""
        response = self.kube.call(
            self.kube.core.list_namespaced_pod, self.namespace, label_selector=self.selector, watch=True,
            resource_version=version, timeout_seconds=self.timeout_seconds, allow_watch_bookmarks=True,
            _preload_content=False, _request_timeout=(15, self.timeout_seconds + 30))
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
                        log.info("[%s] pod watch expired (410); re-listing", self.job_id)
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if kind != "BOOKMARK":
                    self.callback(kind, obj)
        finally:
            response.close()  # never back to the pool: unread stream data would poison it
        return version
