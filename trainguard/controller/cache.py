"""The watch cache: supervised jobs and their pods, kept current by list+watches, and the work queue.

Two list+watches per kind (jobs, and pods by their job label) feed it; every change queues the
job's key once until the worker takes it. Pods seen before their job wait as orphans. A pod that
vanishes while Running, deleted by someone other than this controller, is kept on its job as
force-deleted (CCE's PodForceDeleted).
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from trainguard.adapters.kubernetes.client import KubeApi
from trainguard.adapters.volcano import BATCH, VOLCANO, JobKind, VolcanoApi
from trainguard.controller import annotations as notes
from trainguard.controller.tracked import Tracked, stop_followers
from trainguard.controller.watch import ListWatch


class JobCache:
    """The jobs and pods the watches saw, and the keys of jobs waiting to be reconciled."""

    def __init__(self) -> None:
        self.jobs: dict[str, Tracked] = {}
        self.orphan_pods: dict[str, dict[str, dict[str, Any]]] = {}
        self.queue: queue.Queue[str] = queue.Queue()
        self._queued: set[str] = set()
        self.lock = threading.Lock()
        self.watches: list[ListWatch] = []
        # Pod uids this controller deleted: their disappearance is no force deletion.
        self.deleted_by_us: set[str] = set()

    def start(self, kube: KubeApi, api: VolcanoApi, kinds: list[JobKind], namespace: str | None,
              watch_timeout: int) -> None:
        """List+watch jobs and pods of every kind; returns once all are synced (at most 60 s each)."""
        ns = namespace
        for kind in kinds:
            def jobs(k: JobKind = kind, **kw: Any) -> Any:
                return api.list_jobs(k, ns, **kw)

            def pods(k: JobKind = kind, **kw: Any) -> Any:
                if ns:
                    return kube.call(kube.core.list_namespaced_pod, ns, label_selector=k.pod_label,
                                     _preload_content=False, **kw)
                return kube.call(kube.core.list_pod_for_all_namespaces, label_selector=k.pod_label,
                                 _preload_content=False, **kw)

            self.watches.append(ListWatch(f"{kind.name}-jobs", jobs, lambda t, o, k=kind: self.on_job(k, t, o),
                                          timeout_seconds=watch_timeout).start())
            self.watches.append(ListWatch(f"{kind.name}-pods", pods, lambda t, o, k=kind: self.on_pod(k, t, o),
                                          timeout_seconds=watch_timeout).start())
        for watch in self.watches:
            watch.synced.wait(60)

    def stop(self) -> None:
        """Stop the watches and every job's log followers."""
        for watch in self.watches:
            watch.stop()
        for tracked in self.jobs.values():
            stop_followers(tracked)

    def enqueue(self, key: str) -> None:
        with self.lock:
            if key in self._queued:
                return
            self._queued.add(key)
        self.queue.put(key)

    def take(self, timeout: float) -> str | None:
        """The next queued key, or ``None`` after ``timeout`` seconds; it may be queued again at once."""
        try:
            key = self.queue.get(timeout=timeout)
        except queue.Empty:
            return None
        with self.lock:
            self._queued.discard(key)
        return key

    def get(self, key: str) -> Tracked | None:
        with self.lock:
            return self.jobs.get(key)

    def on_job(self, kind: JobKind, event: str, obj: Any) -> None:
        items = obj if event == "SYNC" else [obj]
        with self.lock:
            if event == "SYNC":
                seen = {kind.key(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items}
                for key in [k for k, t in self.jobs.items() if t.kind is kind and k not in seen]:
                    self.jobs.pop(key)
        for job in items:
            meta = job.get("metadata") or {}
            if kind is VOLCANO and job.get("apiVersion") not in (None, VOLCANO.api_version):
                continue
            if kind is BATCH and job.get("apiVersion") not in (None, BATCH.api_version):
                continue
            key = kind.key(meta.get("namespace", ""), meta["name"])
            with self.lock:
                if event == "DELETED":
                    tracked = self.jobs.get(key)
                    if tracked is not None and tracked.uid == meta.get("uid"):
                        self.jobs.pop(key)
                        stop_followers(tracked)
                    continue
                if not notes.supervised(meta.get("annotations") or {}, meta.get("labels") or {}):
                    self.jobs.pop(key, None)
                    continue
                tracked = self.jobs.get(key)
                if tracked is None:
                    tracked = Tracked(kind, meta.get("namespace", ""), meta["name"], job,
                                      pods=self.orphan_pods.pop(key, {}))
                    self.jobs[key] = tracked
                else:
                    tracked.job = job
            self.enqueue(key)

    def on_pod(self, kind: JobKind, event: str, obj: Any) -> None:
        items = obj if event == "SYNC" else [obj]
        for pod in items:
            meta = pod.get("metadata") or {}
            job_name = (meta.get("labels") or {}).get(kind.pod_label)
            if not job_name:
                continue
            key = kind.key(meta.get("namespace", ""), job_name)
            with self.lock:
                tracked = self.jobs.get(key)
                pods = tracked.pods if tracked is not None else self.orphan_pods.setdefault(key, {})
                if event == "DELETED":
                    if pods.get(meta["name"], {}).get("metadata", {}).get("uid") == meta.get("uid"):
                        pods.pop(meta["name"], None)
                    # A graceful deletion ends after the kubelet wrote the container's end; a pod
                    # that vanishes while Running was force-deleted.
                    if (tracked is not None and (pod.get("status") or {}).get("phase") == "Running"
                            and meta.get("uid") not in self.deleted_by_us and tracked.uid in
                            [o.get("uid") for o in meta.get("ownerReferences") or []]):
                        tracked.force_deleted.append(pod)
                else:
                    pods[meta["name"]] = pod
            if tracked is not None:
                self.enqueue(key)

    def ticking(self) -> list[str]:
        """Jobs to look at without a change: hang checks and rounds waiting for recovery."""
        with self.lock:
            return [key for key, t in self.jobs.items()
                    if (t.settings is not None and t.settings.policy.enable_job_hang_detection)
                    or notes.PROGRESS in t.annotations]
