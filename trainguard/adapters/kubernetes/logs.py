"""Follow a pod's container log into the rank's local log file, which outlives the pod.

Hang detection, classification, stacks advice and ``trainguard history`` read that file as
they read a local rank's. A reconnect (the API restarted, the stream broke) gets the log from
its start again; what the file already holds is skipped. Lines carrying an SDK record
(:data:`trainguard.sdk.STDERR_MARKER`) are handed to ``on_records`` and kept in the file.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from trainguard.adapters.kubernetes.client import KubeApi, abort, status_of
from trainguard.sdk import STDERR_MARKER

log = logging.getLogger(__name__)
_MARKER = STDERR_MARKER.encode()
# A log stream silent this long is reconnected (a broken connection can be silent too).
_SILENCE = 3600


def sdk_records(lines: list[bytes]) -> list[dict]:
    """The SDK records in complete log lines (the marker may follow other output on a line)."""
    records = []
    for line in lines:
        at = line.find(_MARKER)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(_MARKER):])
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class LogFollower:
    """Appends pod ``pod``'s log to ``path`` from a daemon thread until the container ends."""

    def __init__(self, kube: KubeApi, namespace: str, pod: str, rank: int, path: Path,
                 on_records: Callable[[int, list[dict]], None], *, job_id: str = "") -> None:
        self.kube = kube
        self.namespace = namespace
        self.pod = pod
        self.rank = rank
        self.path = path
        self.on_records = on_records
        self.job_id = job_id
        # Set by the adapter when the pod runs or ended: asking for the log before is a 400.
        self.container_started = threading.Event()
        self.pod_ended = threading.Event()
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"log-{pod}", daemon=True)

    def start(self) -> "LogFollower":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            abort(response)

    def join(self, timeout: float) -> bool:
        """Wait for the log to be complete; False if it was not within ``timeout``."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        stored = self.path.stat().st_size if self.path.exists() else 0
        partial = b""
        while not self._stopped.is_set():
            if not self.container_started.wait(1.0):
                continue
            try:
                response = self.kube.call(self.kube.core.read_namespaced_pod_log, self.pod, self.namespace,
                                          follow=True, _preload_content=False, _request_timeout=(15, _SILENCE))
            except Exception as exc:
                status = status_of(exc)
                if status == 404:
                    return
                if status == 400 and self.pod_ended.is_set():
                    return  # the container never started
                if status != 400:
                    log.warning("[%s] cannot follow the log of %s (%s); retrying", self.job_id, self.pod, exc)
                time.sleep(0.5 if status == 400 else 1.0)
                continue
            seen = 0
            self._response = response
            try:
                with open(self.path, "ab") as out:
                    for chunk in response.stream(65536, decode_content=False):
                        fresh = chunk[max(0, stored - seen):] if seen + len(chunk) > stored else b""
                        seen += len(chunk)
                        if not fresh:
                            continue
                        out.write(fresh)
                        out.flush()
                        stored += len(fresh)
                        lines = (partial + fresh).split(b"\n")
                        partial = lines.pop()
                        records = sdk_records(lines)
                        if records:
                            self.on_records(self.rank, records)
            except Exception as exc:
                log.info("[%s] log stream of %s broke (%s); reconnecting", self.job_id, self.pod, exc)
            finally:
                response.close()  # never back to the pool: unread stream data would poison it
            if self.pod_ended.is_set():
                return
            time.sleep(0.2)
