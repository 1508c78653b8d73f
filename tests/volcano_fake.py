"""A stand-in Volcano for tests: an API server that serves Volcano's resources and a fake job controller.

Not Volcano. :class:`VolcanoApiServer` extends the stand-in API server (:mod:`k8s_cluster`) with
``batch.volcano.sh/v1alpha1`` jobs, ``bus.volcano.sh/v1alpha1`` commands and ``batch/v1`` jobs
(kept apart although the first and last share the plural ``jobs`` and the kind ``Job``).
:class:`FakeVolcano` is a polling job controller that talks to it through the official client and
does what trainguard relies on, simplified:

* pods ``<job>-<task>-<i>`` with labels ``volcano.sh/job-name``, ``volcano.sh/task-spec``, the
  annotation ``volcano.sh/job-version``, an owner reference to the job, and the task template's
  spec (``schedulerName`` is ignored: the stand-in kubelet binds every pod);
* ``status``: ``state.phase`` (Pending → Running → Completed; Restarting, Aborting → Aborted,
  Failed), ``version``, ``retryCount``, ``running``/``succeeded``/``failed``/``pending``;
* a pod missing while the job runs is created again (same version), as Volcano's sync does;
* the job's own ``policies`` for ``PodFailed`` and ``PodEvicted`` (``exitCode`` read from the first
  container): RestartJob, AbortJob, TerminateJob, RestartTask, RestartPod; a failed pod no
  policy matches stays Failed and the job stays Running;
* RestartJob (a policy or a Command) bumps ``retryCount`` and ``version`` and replaces every pod;
  with ``retryCount >= maxRetry`` (default 3) the job is Failed instead, as Volcano does;
* Commands (``action``, ``ownerReferences`` naming the job) are executed and deleted;
* pods whose job is gone, or was recreated under the same name, are deleted.

It also stands in for the batch/v1 Job controller, as far as trainguard needs: ``parallelism``
indexed pods ``<job>-<index>-<random>`` (labels ``batch.kubernetes.io/job-name`` and ``job-name``,
the annotation ``batch.kubernetes.io/job-completion-index``), a failed pod replaced while the
failures stay within ``backoffLimit`` (default 6), then the condition Failed; Complete when every
index succeeded; ``suspend`` deletes the active pods (condition Suspended).
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

import k8s_cluster
from k8s_cluster import StandInApiServer, StandInCluster

VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
BUS = ("bus.volcano.sh", "v1alpha1", "commands")
BATCH_LABEL = "batch.kubernetes.io/job-name"
AGENT = "stand-in-volcano"
# Internal plurals, so that Volcano's and batch/v1's ``jobs`` are different resources here.
_ROUTES = {("batch.volcano.sh", "jobs"): ("vcjobs", "batch.volcano.sh/v1alpha1"),
           ("bus.volcano.sh", "commands"): ("vccommands", "bus.volcano.sh/v1alpha1"),
           ("batch", "jobs"): ("batchjobs", "batch/v1")}
k8s_cluster._KINDS.update(vcjobs="Job", vccommands="Command", batchjobs="Job")
_FINISHED = ("Completed", "Aborted", "Failed", "Terminated")


class VolcanoApiServer(StandInApiServer):
    """The stand-in API server, serving Volcano jobs and commands and batch/v1 jobs too."""

    async def _serve(self, raw: Any, request: Any, plural: str, ns: str | None, name: str | None,
                     sub: str | None) -> Any:
        m = k8s_cluster._PATH.match(raw.path.rstrip("/"))
        group = m.group("group") if m else None
        route = _ROUTES.get((group or "", plural))
        if route is None:
            return await super()._serve(raw, request, plural, ns, name, sub)
        plural, api_version = route
        if raw.method == "GET" and name is None and raw.query.get("watch", "").lower() in ("true", "1"):
            return await self._watch(raw, plural, ns, {**raw.query, "x-api-version": api_version})
        if raw.method == "POST" and isinstance(request.data, dict):
            request.data.setdefault("apiVersion", api_version)
        return await super()._serve(raw, request, plural, ns, name, sub)

    def _selected(self, obj: dict[str, Any], query: Any) -> bool:  # type: ignore[override]
        wanted = query.get("x-api-version")
        if wanted is not None and obj.get("apiVersion") != wanted:
            return False
        return StandInApiServer._selected(obj, query)


class VolcanoCluster(StandInCluster):
    """A stand-in cluster with Volcano's resources and :class:`FakeVolcano` running."""

    def __init__(self, root: Path, *, interval: float = 0.1, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self.server = VolcanoApiServer()
        self.interval = interval
        self.volcano: FakeVolcano | None = None

    def start(self) -> "VolcanoCluster":
        super().start()
        self.volcano = FakeVolcano(self.url, interval=self.interval).start()
        return self

    def stop(self) -> None:
        if self.volcano is not None:
            self.volcano.stop()
        super().stop()

    def vcjob(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        obj = self.server.store.get(("vcjobs", namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def events_for(self, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        return [e for e in self.objects("events", namespace) if e["involvedObject"].get("name") == name]


def _api(url: str) -> client.ApiClient:
    config = client.Configuration()
    config.host = url
    api = client.ApiClient(config)
    api.user_agent = AGENT
    return api


class FakeVolcano:
    """Volcano's job controller, reduced to what the module docstring lists; one thread."""

    def __init__(self, url: str, *, interval: float = 0.1) -> None:
        api = _api(url)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.interval = interval
        self.restarts: list[tuple[str, str, int]] = []  # (job, cause, new version)
        self.commands_done: list[tuple[str, str, str]] = []  # (command, action, job)
        self.passes = 0  # each pass lists Volcano jobs, their pods, commands, batch jobs and their pods: 5 requests
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-volcano", daemon=True)

    def start(self) -> "FakeVolcano":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as exc:  # keep going; a test sees the symptom
                print(f"fake volcano: {type(exc).__name__}: {exc}", flush=True)

    # -- one pass -----------------------------------------------------------------------------

    def sync(self) -> None:
        self.passes += 1
        jobs = json.loads(self.custom.list_cluster_custom_object(*VOLCANO, _preload_content=False).data)["items"]
        pods = json.loads(self.core.list_pod_for_all_namespaces(label_selector="volcano.sh/job-name",
                                                                _preload_content=False).data)["items"]
        commands = json.loads(self.custom.list_cluster_custom_object(*BUS, _preload_content=False).data)["items"]
        by_uid = {j["metadata"]["uid"]: j for j in jobs}
        owned: dict[str, list[dict[str, Any]]] = {uid: [] for uid in by_uid}
        for pod in pods:
            owner = next(iter(pod["metadata"].get("ownerReferences") or []), {}).get("uid")
            if owner in owned:
                owned[owner].append(pod)
            elif not pod["metadata"].get("deletionTimestamp"):
                self._delete_pod(pod)  # its job is gone (or was recreated under the same name)
        for command in commands:
            self._command(command, jobs)
        for job in jobs:
            self._sync_job(job, owned[job["metadata"]["uid"]])
        self._sync_batch()

    # -- batch/v1 -------------------------------------------------------------------------------

    def _sync_batch(self) -> None:
        jobs = json.loads(self.batch.list_job_for_all_namespaces(_preload_content=False).data)["items"]
        pods = json.loads(self.core.list_pod_for_all_namespaces(label_selector=BATCH_LABEL,
                                                                _preload_content=False).data)["items"]
        by_uid = {j["metadata"]["uid"]: (j, []) for j in jobs}
        for pod in pods:
            owner = next(iter(pod["metadata"].get("ownerReferences") or []), {}).get("uid")
            if owner in by_uid:
                by_uid[owner][1].append(pod)
            elif not pod["metadata"].get("deletionTimestamp"):
                self._delete_pod(pod)
        for job, owned in by_uid.values():
            self._sync_batch_job(job, owned)

    def _sync_batch_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec, status = job["metadata"], job["spec"], job.get("status") or {}
        if any(c.get("status") == "True" and c.get("type") in ("Complete", "Failed") for c in status.get("conditions") or []):
            return
        phases = [(int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]),
                   (p.get("status") or {}).get("phase", "Pending"), p) for p in pods]
        failed = sum(1 for _, phase, _ in phases if phase == "Failed")
        active = [p for _, phase, p in phases if phase not in ("Succeeded", "Failed")
                  and not p["metadata"].get("deletionTimestamp")]
        done = {i for i, phase, _ in phases if phase == "Succeeded"}
        width = int(spec.get("parallelism", 1) or 1)
        condition = None
        if spec.get("suspend"):
            for pod in active:
                self._delete_pod(pod)
            condition = "Suspended"
        elif failed > int(spec.get("backoffLimit", 6)):
            for pod in active:
                self._delete_pod(pod)
            condition = "Failed"
        elif len(done) >= width:
            condition = "Complete"
        else:
            busy = {i for i, phase, p in phases if phase not in ("Failed",) and not p["metadata"].get("deletionTimestamp")}
            for index in range(width):
                if index not in busy:
                    self._create_batch_pod(job, index)
        new = {"active": len(active), "failed": failed, "succeeded": len(done)}
        if condition:
            new["conditions"] = [{"type": condition, "status": "True"}]
        if any(status.get(k) != v for k, v in new.items()):
            try:
                self.batch.patch_namespaced_job_status(meta["name"], meta["namespace"], {"status": {**status, **new}})
            except client.ApiException as exc:
                if exc.status != 404:
                    raise

    def _create_batch_pod(self, job: dict[str, Any], index: int) -> None:
        meta = job["metadata"]
        template = copy.deepcopy(job["spec"].get("template") or {})
        labels = {**((template.get("metadata") or {}).get("labels") or {}), BATCH_LABEL: meta["name"],
                  "job-name": meta["name"]}
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{meta['name']}-{index}-{uuid.uuid4().hex[:5]}", "labels": labels,
                             "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                  "uid": meta["uid"], "controller": True}]},
                "spec": template.get("spec") or {}}
        for container in body["spec"].get("containers") or []:
            container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        self.core.create_namespaced_pod(meta["namespace"], body)

    def _command(self, command: dict[str, Any], jobs: list[dict[str, Any]]) -> None:
        meta = command["metadata"]
        target = next(iter(meta.get("ownerReferences") or []), {}) or command.get("target") or {}
        job = next((j for j in jobs if j["metadata"]["name"] == target.get("name")
                    and j["metadata"]["namespace"] == meta["namespace"]), None)
        if job is not None:
            self._act(job, command.get("action", ""), f"command {meta['name']}")
        self.commands_done.append((meta["name"], command.get("action", ""), target.get("name", "")))
        try:
            self.custom.delete_namespaced_custom_object(*BUS[:2], meta["namespace"], BUS[2], meta["name"])
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _act(self, job: dict[str, Any], action: str, cause: str, pod: dict[str, Any] | None = None) -> None:
        status = job.setdefault("status", {})
        phase = (status.get("state") or {}).get("phase", "Pending")
        if phase in _FINISHED:
            return
        if action == "RestartJob":
            retries = int(status.get("retryCount", 0)) + 1
            if retries >= int(job["spec"].get("maxRetry", 3)):
                self._status(job, {"retryCount": retries, "state": {"phase": "Failed",
                                                                    "reason": "MaxRetryReached"}})
                return
            version = int(status.get("version", 0)) + 1
            self._status(job, {"retryCount": retries, "version": version,
                               "state": {"phase": "Restarting", "reason": cause}})
            self.restarts.append((job["metadata"]["name"], cause, version))
        elif action in ("AbortJob", "TerminateJob"):
            self._status(job, {"state": {"phase": "Aborting" if action == "AbortJob" else "Terminating",
                                         "reason": cause}})
        elif action in ("RestartTask", "RestartPod") and pod is not None:
            task = pod["metadata"]["labels"].get("volcano.sh/task-spec")
            for other in self._pods_of(job):
                if other["metadata"]["uid"] == pod["metadata"]["uid"] or (
                        action == "RestartTask" and other["metadata"]["labels"].get("volcano.sh/task-spec") == task):
                    self._delete_pod(other)
        elif action == "CompleteJob":
            self._status(job, {"state": {"phase": "Completed", "reason": cause}})

    def _pods_of(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        meta = job["metadata"]
        listed = self.core.list_namespaced_pod(meta["namespace"], label_selector=f"volcano.sh/job-name={meta['name']}",
                                               _preload_content=False)
        return [p for p in json.loads(listed.data)["items"]
                if (p["metadata"].get("ownerReferences") or [{}])[0].get("uid") == meta["uid"]]

    def _sync_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        status = job.get("status") or {}
        phase = (status.get("state") or {}).get("phase", "Pending")
        version = int(status.get("version", 0))
        if phase in ("Restarting", "Aborting", "Terminating", "Failed", "Aborted", "Terminated"):
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            for pod in live:
                self._delete_pod(pod)
            if phase in ("Aborting", "Terminating") and not pods:
                self._status(job, {"state": {"phase": phase.replace("ing", "ed")}})
            if phase == "Restarting" and not pods:
                self._status(job, {"state": {"phase": "Pending"}})
            return
        if phase == "Completed":
            return
        current = [p for p in pods if int(p["metadata"].get("annotations", {}).get("volcano.sh/job-version", -1))
                   == version and not p["metadata"].get("deletionTimestamp")]
        names = {p["metadata"]["name"] for p in pods}
        for task in job["spec"].get("tasks") or []:
            for i in range(int(task.get("replicas", 1))):
                name = f"{job['metadata']['name']}-{task['name']}-{i}"
                if name not in names:
                    self._create_pod(job, task, i, version)
        for pod in current:
            self._policies(job, pod)
        if ((job.get("status") or {}).get("state") or {}).get("phase", "Pending") != phase:
            return  # a policy acted: the next pass deals with the new phase
        counts = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
        for pod in current:
            counts[{"Running": "running", "Succeeded": "succeeded", "Failed": "failed"}.get(
                (pod.get("status") or {}).get("phase", ""), "pending")] += 1
        total = sum(int(t.get("replicas", 1)) for t in job["spec"].get("tasks") or [])
        new_phase = ("Completed" if counts["succeeded"] == total
                     else "Running" if counts["running"] + counts["succeeded"] + counts["failed"] >= int(
                         job["spec"].get("minAvailable", total)) and counts["running"] else phase)
        wanted = {**counts, "state": {"phase": new_phase}}
        if any(status.get(k) != v for k, v in counts.items()) or new_phase != phase:
            self._status(job, wanted)

    def _policies(self, job: dict[str, Any], pod: dict[str, Any]) -> None:
        pod_status = pod.get("status") or {}
        if pod_status.get("phase") != "Failed" or (pod["metadata"].get("annotations") or {}).get("fake-volcano/handled"):
            return
        evicted = pod_status.get("reason") in ("Evicted", "NodeLost") or any(
            c.get("type") == "DisruptionTarget" for c in pod_status.get("conditions") or [])
        terminated = next(iter(pod_status.get("containerStatuses") or []), {}).get("state", {}).get("terminated") or {}
        code = terminated.get("exitCode")
        task = next((t for t in job["spec"].get("tasks") or []
                     if t["name"] == pod["metadata"]["labels"].get("volcano.sh/task-spec")), {})
        for policy in [*(task.get("policies") or []), *(job["spec"].get("policies") or [])]:
            events = policy.get("events") or ([policy["event"]] if policy.get("event") else [])
            matched = ("*" in events or ("PodEvicted" if evicted else "PodFailed") in events
                       or (policy.get("exitCode") is not None and code == policy["exitCode"]))
            if matched and policy.get("action"):
                self.core.patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                               {"metadata": {"annotations": {"fake-volcano/handled": "true"}}})
                self._act(job, policy["action"], f"policy {policy}", pod)
                return

    # -- writes -------------------------------------------------------------------------------

    def _create_pod(self, job: dict[str, Any], task: dict[str, Any], index: int, version: int) -> None:
        meta = job["metadata"]
        template = copy.deepcopy(task.get("template") or {})
        spec = template.get("spec") or {}
        spec.setdefault("restartPolicy", "Never")
        for container in spec.get("containers") or []:
            container.setdefault("env", []).extend([{"name": "VC_TASK_INDEX", "value": str(index)},
                                                    {"name": "VK_TASK_INDEX", "value": str(index)}])
        labels = {**((template.get("metadata") or {}).get("labels") or {}),
                  "volcano.sh/job-name": meta["name"], "volcano.sh/job-namespace": meta["namespace"],
                  "volcano.sh/task-spec": task["name"]}
        annotations = {**((template.get("metadata") or {}).get("annotations") or {}),
                       "volcano.sh/job-version": str(version), "volcano.sh/task-index": str(index)}
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{meta['name']}-{task['name']}-{index}", "labels": labels,
                             "annotations": annotations,
                             "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                                  "name": meta["name"], "uid": meta["uid"], "controller": True}]},
                "spec": spec}
        try:
            self.core.create_namespaced_pod(meta["namespace"], body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def _delete_pod(self, pod: dict[str, Any]) -> None:
        try:
            self.core.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"], grace_period_seconds=1)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _status(self, job: dict[str, Any], changes: dict[str, Any]) -> None:
        meta = job["metadata"]
        job.setdefault("status", {}).update(changes)
        try:
            self.custom.patch_namespaced_custom_object_status(*VOLCANO[:2], meta["namespace"], VOLCANO[2], meta["name"],
                                                              {"status": job["status"]})
        except client.ApiException as exc:
            if exc.status != 404:
                raise
