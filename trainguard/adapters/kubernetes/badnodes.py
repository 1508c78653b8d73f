"""Bad nodes shared by every trainguard job in a namespace, without cluster-admin rights.

A ConfigMap (``trainguard-bad-nodes``) maps a node name to a JSON entry
``{"until": <epoch seconds>, "reason": "...", "job": "...", "tainted": bool}``; the isolation
window (``--isolate-window``) is its time to live. A job reads it when it starts and keeps the
live entries' nodes out of its pods (required node affinity), so the next job avoids a node the
last one found broken. Writes are read-modify-replace with the resourceVersion, retried on 409.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Iterable

from trainguard.adapters.kubernetes.client import KubeApi, status_of

log = logging.getLogger(__name__)

CONFIGMAP = "trainguard-bad-nodes"


class BadNodeList:
    """The namespace's isolated nodes; every method tolerates missing RBAC rights (it logs)."""

    def __init__(self, kube: KubeApi, namespace: str, *, job_id: str = "") -> None:
        self.kube = kube
        self.namespace = namespace
        self.job_id = job_id

    def _read(self) -> dict[str, Any] | None:
        try:
            return self.kube.json(self.kube.core.read_namespaced_config_map, CONFIGMAP, self.namespace)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise

    @staticmethod
    def _entries(configmap: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
        entries = {}
        for node, text in ((configmap or {}).get("data") or {}).items():
            try:
                entry = json.loads(text)
            except ValueError:
                continue
            if isinstance(entry, dict):
                entries[node] = entry
        return entries

    def live(self) -> dict[str, dict[str, Any]]:
        """Entries whose window has not ended, by node."""
        try:
            entries = self._entries(self._read())
        except Exception as exc:
            log.warning("[%s] cannot read the shared bad-node list %s: %s", self.job_id, CONFIGMAP, exc)
            return {}
        now = time.time()
        return {node: e for node, e in entries.items() if float(e.get("until", 0)) > now}

    def expired(self) -> dict[str, dict[str, Any]]:
        """Drop the entries whose window has ended and return them (their taints may be lifted)."""
        dropped: dict[str, dict[str, Any]] = {}

        def change(entries: dict[str, dict[str, Any]]) -> None:
            now = time.time()
            for node in [n for n, e in entries.items() if float(e.get("until", 0)) <= now]:
                dropped[node] = entries.pop(node)

        self._update(change)
        return dropped

    def add(self, nodes: Iterable[str], reason: str, ttl: float, *, tainted: bool = False) -> None:
        until = time.time() + ttl

        def change(entries: dict[str, dict[str, Any]]) -> None:
            for node in nodes:
                entries[node] = {"until": until, "reason": reason[:300], "job": self.job_id, "tainted": tainted}

        self._update(change)

    def _update(self, change: Any) -> None:
        for _ in range(5):
            try:
                current = self._read()
                entries = self._entries(current)
                before = dict(entries)
                change(entries)
                if entries == before:
                    return
                data = {node: json.dumps(entry) for node, entry in sorted(entries.items())}
                if current is None:
                    self.kube.call(self.kube.core.create_namespaced_config_map, self.namespace, {
                        "metadata": {"name": CONFIGMAP, "labels": {"app.kubernetes.io/managed-by": "trainguard"}},
                        "data": data})
                else:
                    body = {"metadata": {"name": CONFIGMAP, "resourceVersion": current["metadata"]["resourceVersion"],
                                         "labels": current["metadata"].get("labels") or {}}, "data": data}
                    self.kube.call(self.kube.core.replace_namespaced_config_map, CONFIGMAP, self.namespace, body)
                return
            except Exception as exc:
                if status_of(exc) == 409:
                    continue  # another job wrote it meanwhile: read again
                log.warning("[%s] cannot update the shared bad-node list %s: %s", self.job_id, CONFIGMAP, exc)
                return
        log.warning("[%s] the shared bad-node list kept changing under us; not updated", self.job_id)
