"""Nodes, where RBAC allows reading them: capacity, and the opt-in ``trainguard.io/unhealthy`` taint."""

from __future__ import annotations

import logging
from typing import Any, Mapping

from trainguard.adapters.kubernetes import manifests
from trainguard.adapters.kubernetes.client import KubeApi, status_of

log = logging.getLogger(__name__)

TAINT = "trainguard.io/unhealthy"


def schedulable(kube: KubeApi, template: Mapping[str, Any]) -> list[str] | None:
    """Ready, uncordoned nodes the template's node selector admits; None without the right to list nodes."""
    try:
        items = kube.json(kube.core.list_node)["items"]
    except Exception as exc:
        if status_of(exc) in (401, 403):
            return None
        raise
    return sorted(n["metadata"]["name"] for n in items if manifests.node_matches(n, template) and is_schedulable(n))


def is_schedulable(node: Mapping[str, Any]) -> bool:
    """Ready and not cordoned: where the scheduler may place a new pod."""
    return not (node.get("spec") or {}).get("unschedulable") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or [])


def set_taint(kube: KubeApi, node: str, value: str | None, job_id: str) -> None:
    """Put ``TAINT=value:NoSchedule`` on ``node`` (None: take it off); refusals are logged, not raised."""
    try:
        current = kube.json(kube.core.read_node, node)
        taints = [t for t in (current.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT]
        if value is not None:
            taints.append({"key": TAINT, "value": value, "effect": "NoSchedule"})
        kube.call(kube.core.patch_node, node, {"spec": {"taints": taints}}, _preload_content=False)
    except Exception as exc:
        log.error("[%s] cannot %s node %s (%s): tainting needs the nodes patch right (deploy/kubernetes/"
                  "clusterrole-nodes.yaml); the node is kept out by affinity only", job_id,
                  "taint" if value else "untaint", node, exc)
