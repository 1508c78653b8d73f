"""Pod and Service manifests: the user's pod template plus only trainguard's own fields.

A template (``--pod-template FILE.yaml``) is a Pod, a PodTemplate, a PodTemplateSpec, or any
object with ``spec.template`` (a Job, a Deployment); its image, resources, volumes,
tolerations, node selector, affinity, service account and the rest are kept. trainguard sets:

* ``metadata.name`` ``<job>-<rank>-r<round>`` (deterministic, so a retried create that gets 409
  finds its own pod) and the labels ``trainguard.io/job-id``, ``trainguard.io/rank``,
  ``trainguard.io/round``;
* ``restartPolicy: Never`` (trainguard, not the kubelet, decides about restarts);
* the first container's ``command`` (its ``args`` are dropped), ``image`` when ``--image`` is
  given, ``terminationMessagePolicy: FallbackToLogsOnError``, and the variables every rank
  gets, ``TRAINGUARD_NODE`` from the downward API (``spec.nodeName``);
* ``hostname``/``subdomain`` under the job's headless Service, so rank 0 is reachable as
  ``<job>-0.<job>.<namespace>.svc`` (``MASTER_ADDR``);
* required node affinity ``matchFields metadata.name NotIn [isolated nodes]`` added to every
  node selector term (or ``In [node]`` for a replacement pinned to its node).
"""

from __future__ import annotations

import copy
import hashlib
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from trainguard.errors import AdapterError

LABEL_JOB = "trainguard.io/job-id"
LABEL_RANK = "trainguard.io/rank"
LABEL_ROUND = "trainguard.io/round"
CONTAINER = "main"
# Variables that differ per pod or per node: computed in the pod, not by the supervisor.
POD_LOCAL = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
# Variables the pod learns from the downward API.
FROM_POD = ("TRAINGUARD_NODE", "TRAINGUARD_POD_NAME")


def dns_label(text: str, limit: int = 63) -> str:
    """``text`` as a DNS-1035 label (lower case, starts with a letter), shortened with a hash."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "job"
    if not label[0].isalpha():
        label = "tg-" + label
    if len(label) > limit:
        digest = hashlib.sha1(text.encode()).hexdigest()[:6]
        label = label[:limit - 7].rstrip("-") + "-" + digest
    return label


def service_name(job_id: str) -> str:
    return dns_label(job_id, 50)


def pod_name(job_id: str, rank: int, restart_round: int) -> str:
    return f"{service_name(job_id)}-{rank}-r{restart_round}"


def master_address(job_id: str, namespace: str) -> str:
    """Rank 0's DNS name under the job's headless Service."""
    service = service_name(job_id)
    return f"{service}-0.{service}.{namespace}.svc"


def job_selector(job_id: str) -> str:
    return f"{LABEL_JOB}={label_value(job_id)}"


def label_value(text: str) -> str:
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return value if len(value) <= 63 else value[:56] + "-" + hashlib.sha1(text.encode()).hexdigest()[:6]


def load_template(path: str | Path | None) -> dict[str, Any]:
    """The PodTemplateSpec (``metadata`` and ``spec``) in ``path``; an empty one without a file."""
    if path is None:
        return {"metadata": {}, "spec": {"containers": [{"name": CONTAINER}]}}
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise AdapterError("kubernetes", f"cannot read the pod template {path}: {exc}") from None
    if not isinstance(document, dict):
        raise AdapterError("kubernetes", f"{path}: a pod template must be a YAML mapping")
    if document.get("kind") == "PodTemplate":
        document = document.get("template") or {}
    elif isinstance((document.get("spec") or {}).get("template"), dict):
        document = document["spec"]["template"]
    spec = document.get("spec")
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise AdapterError("kubernetes", f"{path}: the template has no spec.containers")
    return {"metadata": dict(document.get("metadata") or {}), "spec": spec}


def _exclude_nodes(spec: dict[str, Any], operator: str, nodes: Sequence[str]) -> None:
    field = {"key": "metadata.name", "operator": operator, "values": sorted(nodes)}
    required = (spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:  # terms are ORed: each must carry the condition
        term.setdefault("matchFields", []).append(dict(field))


def pod_manifest(template: Mapping[str, Any], *, job_id: str, namespace: str, rank: int, restart_round: int,
                 command: Sequence[str], env: Mapping[str, str], image: str | None = None,
                 isolated: Iterable[str] = (), pin_node: str | None = None,
                 annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Pod for one rank in one round; see the module docstring for what is added."""
    pod = copy.deepcopy(dict(template))
    meta = pod.setdefault("metadata", {})
    meta.pop("generateName", None)
    meta.update(name=pod_name(job_id, rank, restart_round), namespace=namespace)
    meta["labels"] = {**(meta.get("labels") or {}), LABEL_JOB: label_value(job_id), LABEL_RANK: str(rank),
                      LABEL_ROUND: str(restart_round)}
    meta["annotations"] = {**(meta.get("annotations") or {}), "trainguard.io/job-id": job_id,
                           **(annotations or {})}
    spec = pod["spec"]
    spec["restartPolicy"] = "Never"
    service = service_name(job_id)
    spec.update(hostname=f"{service}-{rank}", subdomain=service)
    main = spec["containers"][0]
    main.setdefault("name", CONTAINER)
    main["image"] = image or main.get("image")
    if not main["image"]:
        raise AdapterError("kubernetes", "no image: give --image or an image in the pod template")
    main["command"] = list(command)
    main.pop("args", None)
    main["terminationMessagePolicy"] = "FallbackToLogsOnError"
    ours = {k: v for k, v in {**env, **POD_LOCAL, "GROUP_RANK": str(rank)}.items() if k not in FROM_POD}
    kept = [item for item in main.get("env") or [] if item.get("name") not in ours and item.get("name") not in FROM_POD]
    main["env"] = kept + [{"name": key, "value": str(value)} for key, value in sorted(ours.items())] + [
        {"name": "TRAINGUARD_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "TRAINGUARD_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    if pin_node:
        _exclude_nodes(spec, "In", [pin_node])
    elif isolated:
        _exclude_nodes(spec, "NotIn", list(isolated))
    return pod


def service_manifest(job_id: str, namespace: str) -> dict[str, Any]:
    """The headless Service that gives every rank pod a DNS name (``publishNotReadyAddresses``
    so rank 0 is resolvable before it is ready: rendezvous happens before readiness)."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(job_id), "namespace": namespace,
                         "labels": {LABEL_JOB: label_value(job_id)}},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {LABEL_JOB: label_value(job_id)},
                     "ports": [{"name": "rendezvous", "port": 29500}]}}


def node_matches(node: Mapping[str, Any], template: Mapping[str, Any]) -> bool:
    """Whether the template's ``nodeSelector`` admits ``node`` (capacity counting)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = (template.get("spec") or {}).get("nodeSelector") or {}
    return all(labels.get(key) == value for key, value in selector.items())
