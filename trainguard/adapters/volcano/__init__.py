"""Volcano Jobs (and batch/v1 Jobs) as trainguard acts on them: the only module that writes them.

Volcano (``batch.volcano.sh/v1alpha1`` Job) facts this relies on: a running job's spec is
immutable except ``minAvailable``, ``tasks[*].replicas`` and ``priorityClassName``; pods are
``<job>-<task>-<i>`` labelled ``volcano.sh/job-name`` and ``volcano.sh/task-spec`` and annotated
``volcano.sh/job-version``; ``status.version`` grows on every restart and ``status.retryCount``
against ``spec.maxRetry`` (default 3; reaching it fails the job, whoever asked for the restart); a
``bus.volcano.sh/v1alpha1`` Command (``action``, the job as its owner) acts on a job from outside,
bypassing its ``policies``. So trainguard recovers through

=======================  ==========================================================
trainguard action        what happens to a Volcano Job
=======================  ==========================================================
restart_job,             Command ``RestartJob`` (every pod replaced, version + 1)
restart_in_place,
restart_instances
replace_instances        delete the failed pods; Volcano's sync creates them again
reschedule_isolated      recreate the job under the same name with required node
                         anti-affinity (``matchFields metadata.name NotIn``) on every
                         task: the only way to move a running job off a node
fail                     Command ``AbortJob``
=======================  ==========================================================

A batch/v1 Job has no commands: restarts and isolation recreate it, replacing pods deletes them
(its controller creates replacements within ``backoffLimit``), and failing suspends it.
Commands have deterministic names (``<job>-tg-<round>``), so a retried or repeated create
answers 409 instead of acting twice.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable

from trainguard.adapters.kubernetes.client import KubeApi, status_of

log = logging.getLogger(__name__)

VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
BUS_GROUP, BUS_VERSION, BUS_PLURAL = "bus.volcano.sh", "v1alpha1", "commands"
JOB_NAME_LABEL = "volcano.sh/job-name"
TASK_LABEL = "volcano.sh/task-spec"
VERSION_ANNOTATION = "volcano.sh/job-version"
BATCH_JOB_LABEL = "batch.kubernetes.io/job-name"
# Fields the API server owns: never sent back when a job is created again.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                    "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences", "selfLink")
_FINISHED = {"Completed", "Failed", "Aborted", "Terminated", "Suspended"}


@dataclass(frozen=True)
class JobKind:
    """One kind of job the controller supervises: where it lives and how its pods are found."""

    name: str  # "volcano" or "batch"
    api_version: str
    kind: str
    pod_label: str

    def key(self, namespace: str, name: str) -> str:
        return f"{self.name}/{namespace}/{name}"


VOLCANO = JobKind("volcano", f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", "Job", JOB_NAME_LABEL)
BATCH = JobKind("batch", "batch/v1", "Job", BATCH_JOB_LABEL)
KINDS = {VOLCANO.name: VOLCANO, BATCH.name: BATCH}


def phase(kind: JobKind, job: dict[str, Any]) -> str:
    """Volcano's phase; for a batch Job the same words (Running, Completed, Failed, Suspended)."""
    status = job.get("status") or {}
    if kind is VOLCANO:
        return (status.get("state") or {}).get("phase") or "Pending"
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed", "Suspended"):
            return {"Complete": "Completed"}.get(condition["type"], condition["type"])
    return "Running" if status.get("active") else "Pending"


def finished(kind: JobKind, job: dict[str, Any]) -> bool:
    return phase(kind, job) in _FINISHED


def version(kind: JobKind, job: dict[str, Any]) -> int:
    """Volcano's ``status.version``; 0 for a batch Job (each recreation is a new object)."""
    return int((job.get("status") or {}).get("version") or 0) if kind is VOLCANO else 0


def tasks(kind: JobKind, job: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """``(task, replicas, pod template)`` in spec order; a batch Job is one task ``main``."""
    spec = job.get("spec") or {}
    if kind is VOLCANO:
        return [(t.get("name", f"task{i}"), int(t.get("replicas", 1)), t.get("template") or {})
                for i, t in enumerate(spec.get("tasks") or [])]
    return [("main", int(spec.get("parallelism", 1) or 1), spec.get("template") or {})]


def world_size(kind: JobKind, job: dict[str, Any]) -> int:
    return sum(replicas for _, replicas, _ in tasks(kind, job))


def pod_rank(kind: JobKind, job: dict[str, Any], pod: dict[str, Any]) -> int:
    """The pod's rank across the job's tasks (task order, then index)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if kind is BATCH:
        return int(annotations.get("batch.kubernetes.io/job-completion-index", 0) or 0)
    task = (meta.get("labels") or {}).get(TASK_LABEL)
    try:
        index = int(annotations.get("volcano.sh/task-index") or meta["name"].rsplit("-", 1)[1])
    except (ValueError, IndexError):
        index = 0
    offset = 0
    for name, replicas, _ in tasks(kind, job):
        if name == task:
            return offset + index
        offset += replicas
    return index


def pod_version(pod: dict[str, Any]) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("annotations") or {}).get(VERSION_ANNOTATION, 0))
    except ValueError:
        return 0


def with_node_anti_affinity(pod_spec: dict[str, Any], nodes: Iterable[str]) -> dict[str, Any]:
    """``pod_spec`` with a required node affinity term ``metadata.name NotIn nodes`` in every
    node selector term (terms are ORed, so each needs it); other affinity is kept."""
    avoid = sorted(set(nodes))
    spec = copy.deepcopy(pod_spec)
    if not avoid:
        return spec
    required = (spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        fields = [f for f in term.get("matchFields") or []
                  if not (f.get("key") == "metadata.name" and f.get("operator") == "NotIn")]
        fields.append({"key": "metadata.name", "operator": "NotIn", "values": avoid})
        term["matchFields"] = fields
    required["nodeSelectorTerms"] = terms
    return spec


def recreated(kind: JobKind, job: dict[str, Any], *, avoid: Iterable[str],
              annotations: dict[str, str]) -> dict[str, Any]:
    """The manifest that recreates ``job`` under its name, kept off ``avoid``, with
    ``annotations`` added; what the server owns (uid, status, selectors) is left out."""
    meta = {k: v for k, v in (job.get("metadata") or {}).items() if k not in _SERVER_METADATA}
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    spec = copy.deepcopy(job.get("spec") or {})
    avoid = list(avoid)
    if kind is VOLCANO:
        for task in spec.get("tasks") or []:
            template = task.setdefault("template", {})
            template["spec"] = with_node_anti_affinity(template.get("spec") or {}, avoid)
    else:
        spec.pop("selector", None)
        spec.pop("suspend", None)
        template = spec.setdefault("template", {})
        labels = (template.get("metadata") or {}).get("labels") or {}
        for generated in ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", BATCH_JOB_LABEL):
            labels.pop(generated, None)
        template["spec"] = with_node_anti_affinity(template.get("spec") or {}, avoid)
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta, "spec": spec}


class VolcanoApi:
    """Retried reads and idempotent writes of Volcano Jobs, Commands, batch Jobs and their pods."""

    def __init__(self, kube: KubeApi) -> None:
        from kubernetes import client

        self.kube = kube
        self.custom = client.CustomObjectsApi(kube.api_client)
        self.batch = client.BatchV1Api(kube.api_client)
        self.core = kube.core

    # -- jobs ----------------------------------------------------------------------------------

    def list_jobs(self, kind: JobKind, namespace: str | None, **kwargs: Any) -> Any:
        """The raw list (or, with ``watch=True``, the stream) of ``kind`` jobs."""
        if kind is VOLCANO:
            if namespace:
                return self.kube.call(self.custom.list_namespaced_custom_object, VOLCANO_GROUP, VOLCANO_VERSION,
                                      namespace, VOLCANO_PLURAL, _preload_content=False, **kwargs)
            return self.kube.call(self.custom.list_cluster_custom_object, VOLCANO_GROUP, VOLCANO_VERSION,
                                  VOLCANO_PLURAL, _preload_content=False, **kwargs)
        if namespace:
            return self.kube.call(self.batch.list_namespaced_job, namespace, _preload_content=False, **kwargs)
        return self.kube.call(self.batch.list_job_for_all_namespaces, _preload_content=False, **kwargs)

    def get_job(self, kind: JobKind, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            if kind is VOLCANO:
                response = self.kube.call(self.custom.get_namespaced_custom_object, VOLCANO_GROUP, VOLCANO_VERSION,
                                          namespace, VOLCANO_PLURAL, name, _preload_content=False)
            else:
                response = self.kube.call(self.batch.read_namespaced_job, name, namespace, _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise
        return json.loads(response.data)

    def annotate(self, kind: JobKind, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        """Merge ``annotations`` into the job's (None removes one); False if the job is gone."""
        body = {"metadata": {"annotations": annotations}}
        try:
            if kind is VOLCANO:
                self.kube.call(self.custom.patch_namespaced_custom_object, VOLCANO_GROUP, VOLCANO_VERSION, namespace,
                               VOLCANO_PLURAL, name, body, _preload_content=False)
            else:
                self.kube.call(self.batch.patch_namespaced_job, name, namespace, body, _preload_content=False,
                               _content_type="application/merge-patch+json")
        except Exception as exc:
            if status_of(exc) == 404:
                return False
            raise
        return True

    def create_job(self, kind: JobKind, namespace: str, body: dict[str, Any]) -> bool:
        """Create a job; False when one of that name exists already (a repeated create)."""
        try:
            if kind is VOLCANO:
                self.kube.call(self.custom.create_namespaced_custom_object, VOLCANO_GROUP, VOLCANO_VERSION, namespace,
                               VOLCANO_PLURAL, body, _preload_content=False)
            else:
                self.kube.call(self.batch.create_namespaced_job, namespace, body, _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 409:
                return False
            raise
        return True

    def delete_job(self, kind: JobKind, namespace: str, name: str) -> None:
        """Delete a job and (background propagation) its pods; a job already gone is fine."""
        try:
            if kind is VOLCANO:
                self.kube.call(self.custom.delete_namespaced_custom_object, VOLCANO_GROUP, VOLCANO_VERSION, namespace,
                               VOLCANO_PLURAL, name, propagation_policy="Background", _preload_content=False)
            else:
                self.kube.call(self.batch.delete_namespaced_job, name, namespace, propagation_policy="Background",
                               _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 404:
                raise

    def suspend(self, namespace: str, name: str) -> None:
        """Stop a batch Job for good: suspended, its active pods are deleted by its controller."""
        self.kube.call(self.batch.patch_namespaced_job, name, namespace, {"spec": {"suspend": True}},
                       _preload_content=False, _content_type="application/merge-patch+json")

    # -- commands and pods ---------------------------------------------------------------------

    def command(self, job: dict[str, Any], action: str, name: str) -> bool:
        """Send a ``bus.volcano.sh`` Command; False if one of that name exists (already sent)."""
        meta = job["metadata"]
        body = {"apiVersion": f"{BUS_GROUP}/{BUS_VERSION}", "kind": "Command",
                "metadata": {"name": name, "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": VOLCANO.api_version, "kind": "Job",
                                                  "name": meta["name"], "uid": meta["uid"], "controller": True}]},
                "action": action, "target": {"apiVersion": VOLCANO.api_version, "kind": "Job", "name": meta["name"]}}
        try:
            self.kube.call(self.custom.create_namespaced_custom_object, BUS_GROUP, BUS_VERSION, meta["namespace"],
                           BUS_PLURAL, body, _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 409:
                return False
            raise
        return True

    def pods(self, kind: JobKind, namespace: str, name: str) -> list[dict[str, Any]]:
        listed = self.kube.json(self.core.list_namespaced_pod, namespace, label_selector=f"{kind.pod_label}={name}")
        return listed.get("items") or []

    def delete_pod(self, namespace: str, name: str, uid: str, *, grace: int | None = None) -> None:
        """Delete the pod ``name`` only if it is still the one with ``uid`` (a replacement is not)."""
        body = {"preconditions": {"uid": uid}}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        try:
            self.kube.call(self.core.delete_namespaced_pod, name, namespace, body=body, _preload_content=False)
        except Exception as exc:
            if status_of(exc) not in (404, 409):
                raise

    def pod_log_tail(self, namespace: str, name: str, lines: int = 200, limit: int = 65536) -> str:
        try:
            response = self.kube.call(self.core.read_namespaced_pod_log, name, namespace, tail_lines=lines,
                                      limit_bytes=limit, _preload_content=False, patience=10)
        except Exception as exc:
            log.info("no log for pod %s/%s: %s", namespace, name, exc)
            return ""
        return response.data.decode("utf-8", errors="replace")

    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        try:
            listed = self.kube.json(self.core.list_namespaced_event, namespace,
                                    field_selector=f"involvedObject.name={name}")
        except Exception as exc:
            log.info("no events for pod %s/%s: %s", namespace, name, exc)
            return []
        return listed.get("items") or []

    def event(self, kind: JobKind, job: dict[str, Any], name: str, reason: str, message: str, *,
              warning: bool = False, now: str) -> bool:
        """Record a Kubernetes Event on the job under a deterministic ``name`` (a repeat is a 409)."""
        meta = job["metadata"]
        body = {"metadata": {"name": name, "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": kind.api_version, "kind": kind.kind, "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta.get("uid")},
                "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
                "count": 1, "firstTimestamp": now, "lastTimestamp": now,
                "source": {"component": "trainguard-controller"}, "reportingComponent": "trainguard-controller"}
        try:
            self.kube.call(self.core.create_namespaced_event, meta["namespace"], body, _preload_content=False)
        except Exception as exc:
            if status_of(exc) == 409:
                return False
            log.warning("cannot record event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc)
            return False
        return True
