"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

A replica becomes leader by creating the Lease or, once the holder's ``renewTime`` is older than
``leaseDurationSeconds``, by replacing it with a PUT that carries the ``resourceVersion`` it read
(a 409 means another replica won). The leader renews every third of the duration; if it cannot
renew before the duration has passed it must stop acting, because another replica may already
lead. Only the leader acts on jobs, so two replicas never both do.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from typing import Any

from trainguard.adapters.kubernetes.client import KubeApi, status_of

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    try:
        return datetime.datetime.strptime(stamp.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        try:
            return datetime.datetime.strptime(stamp.rstrip("Z"), "%Y-%m-%dT%H:%M:%S").replace(
                tzinfo=datetime.timezone.utc).timestamp()
        except ValueError:
            return 0.0


class LeaderElector:
    """Holds (or waits for) the Lease ``name`` in ``namespace`` for ``identity``."""

    def __init__(self, kube: KubeApi, namespace: str, name: str, identity: str, *, duration: float = 15.0) -> None:
        from kubernetes import client

        self.kube = kube
        self.coordination = client.CoordinationV1Api(kube.api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.renewed_at = 0.0
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self, lease: dict[str, Any] | None, transitions: int) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        now = _now()
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, round(self.duration)),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": transitions}}

    def try_acquire(self) -> bool:
        """One attempt to become (or stay) leader."""
        try:
            lease = self.kube.json(self.coordination.read_namespaced_lease, self.name, self.namespace)
        except Exception as exc:
            if status_of(exc) != 404:
                raise
            lease = None
        if lease is None:
            try:
                self.kube.call(self.coordination.create_namespaced_lease, self.namespace, self._body(None, 0),
                               _preload_content=False)
            except Exception as exc:
                if status_of(exc) == 409:
                    return False
                raise
            self.renewed_at = time.monotonic()
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        expired = time.time() - _parse(spec.get("renewTime")) > float(spec.get("leaseDurationSeconds") or 15)
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        body = self._body(lease, transitions)
        if holder == self.identity:
            body["spec"]["acquireTime"] = spec.get("acquireTime") or body["spec"]["acquireTime"]
        try:
            self.kube.call(self.coordination.replace_namespaced_lease, self.name, self.namespace, body,
                           _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 409:
                return False
            raise
        if holder != self.identity:
            log.info("leader election: %s took the lease %s/%s over from %s", self.identity, self.namespace,
                     self.name, holder or "nobody")
        self.renewed_at = time.monotonic()
        return True

    def wait_for_leadership(self, stop: threading.Event) -> bool:
        """Block until leader (True) or ``stop`` is set (False), then keep renewing."""
        while not stop.is_set():
            try:
                if self.try_acquire():
                    self._thread = threading.Thread(target=self._renew, name="lease-renew", daemon=True)
                    self._thread.start()
                    return True
            except Exception as exc:  # an API outage: keep trying
                log.warning("leader election: %s", exc)
            stop.wait(max(0.2, self.duration / 5))
        return False

    def _renew(self) -> None:
        while not self._stop.wait(self.duration / 3):
            try:
                if not self.try_acquire():
                    break
            except Exception as exc:
                log.warning("leader election: cannot renew (%s)", exc)
            if time.monotonic() - self.renewed_at > self.duration:
                break
        if not self._stop.is_set():
            log.error("leader election: lost the lease %s/%s", self.namespace, self.name)
            self._lost.set()

    @property
    def lost(self) -> threading.Event:
        return self._lost

    def still_leader(self) -> bool:
        return not self._lost.is_set() and time.monotonic() - self.renewed_at < self.duration

    def release(self) -> None:
        """Give the lease up (an orderly shutdown), so another replica need not wait it out."""
        self._stop.set()
        if self._lost.is_set():
            return
        try:
            lease = self.kube.json(self.coordination.read_namespaced_lease, self.name, self.namespace, patience=5)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["renewTime"] = None
                self.kube.call(self.coordination.replace_namespaced_lease, self.name, self.namespace, lease,
                               _preload_content=False, patience=5)
        except Exception as exc:
            log.info("leader election: could not release the lease (%s)", exc)
