"""The stand-in cluster's fake scheduler and kubelet (see ``tests/k8s_cluster.py``); not Kubernetes.

It talks to the stand-in API server only through the official ``kubernetes`` client, as a real
kubelet would through its own: one watch on all pods feeds a queue; one thread acts on it
(bind, start, stop, report) and on injected faults; one thread per container waits for it to
end. Requests it makes carry the User-Agent ``stand-in-kubelet`` so that the benchmarks count
only the supervisor's, and fault windows spare it.
"""

from __future__ import annotations

import datetime
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

KUBELET_AGENT = "stand-in-kubelet"
_TERMINAL = ("Succeeded", "Failed")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Container:
    key: tuple[str, str]
    uid: str
    node: str
    started: str
    popen: subprocess.Popen[bytes] | None = None
    oom: bool = False
    evicted: bool = False
    lost: bool = False
    kill_at: float | None = None
    exited: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint.get("key")):
            return True
        if tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expression_ok(expr: dict[str, Any], value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or []
    return {"In": value in values, "NotIn": value not in values, "Exists": value is not None,
            "DoesNotExist": value is None}.get(op, False)


def affinity_ok(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True
    labels = node["metadata"].get("labels") or {}
    for term in required.get("nodeSelectorTerms") or []:
        exprs = [(e, labels.get(e["key"])) for e in term.get("matchExpressions") or []]
        exprs += [(e, node["metadata"]["name"] if e["key"] == "metadata.name" else None)
                  for e in term.get("matchFields") or []]
        if exprs and all(_expression_ok(e, v) for e, v in exprs):
            return True
    return False


class FakeKubelet:
    """Scheduler and kubelet for ``nodes`` of ``slots`` pods each; see the module docstring."""

    def __init__(self, url: str, root: Path, nodes: list[str], slots: int, *, run_processes: bool = True) -> None:
        config = client.Configuration()
        config.host = url
        api = client.ApiClient(config)
        api.user_agent = KUBELET_AGENT
        self.core = client.CoreV1Api(api)
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.node_names = nodes
        self.slots = slots
        self.run_processes = run_processes
        self.queue: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.containers: dict[tuple[str, str], _Container] = {}
        self.failed_nodes: set[str] = set()
        self.unschedulable_said: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- life -------------------------------------------------------------------------------

    def start(self) -> "FakeKubelet":
        for name in self.node_names:
            self.core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                           "kubernetes.io/os": "linux"}},
                                   "spec": {},
                                   "status": {"capacity": {"pods": str(self.slots)},
                                              "allocatable": {"pods": str(self.slots)},
                                              "conditions": [{"type": "Ready", "status": "True",
                                                              "reason": "KubeletReady"}]}})
        for target, name in ((self._watch, "kubelet-watch"), (self._run, "kubelet")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for container in list(self.containers.values()):
            self._signal(container, signal.SIGKILL)
        for thread in self._threads:
            thread.join(10)

    def log_path(self, pod: dict[str, Any]) -> Path | None:
        meta = pod["metadata"]
        path = self.root / f"{meta.get('namespace')}_{meta['name']}_{meta['uid']}.log"
        return path if path.exists() else None

    def inject(self, kind: str, namespace: str | None, name: str) -> None:
        self.queue.put(("inject", kind, namespace, name))

    # -- threads ----------------------------------------------------------------------------

    def _watch(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = json.loads(self.core.list_pod_for_all_namespaces(_preload_content=False).data)
                    version = listed["metadata"]["resourceVersion"]
                    for item in listed["items"]:
                        self.queue.put(("pod", "ADDED", item))
                stream = self.core.list_pod_for_all_namespaces(watch=True, resource_version=version, timeout_seconds=2,
                                                               _preload_content=False)
                for line in stream:
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = None
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    self.queue.put(("pod", event["type"], event["object"]))
            except Exception:  # the stand-in is going away, or compacted
                version = None
                time.sleep(0.1)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self.queue.get(timeout=0.2)
            except queue.Empty:
                item = None
            try:
                if item is not None:
                    getattr(self, f"_on_{item[0]}")(*item[1:])
                self._tick()
            except Exception as exc:  # keep the kubelet alive; a test will see the symptom
                print(f"stand-in kubelet: {type(exc).__name__}: {exc}", flush=True)

    # -- reactions --------------------------------------------------------------------------

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        container = self.containers.get(key)
        if container is not None and container.uid != pod["metadata"]["uid"]:
            container = None
        if kind == "DELETED":
            self.pods.pop(key, None)
            if container is not None:
                self._signal(container, signal.SIGKILL)
                self.containers.pop(key, None)
            return
        self.pods[key] = pod
        node = pod["spec"].get("nodeName")
        if pod["metadata"].get("deletionTimestamp"):
            if container is not None and container.popen is not None and not container.exited:
                if container.kill_at is None:
                    grace = pod["metadata"].get("deletionGracePeriodSeconds", 30)
                    container.kill_at = time.monotonic() + grace
                    self._event(pod, "Killing", f"Stopping container {self._cname(pod)}")
                    self._signal(container, signal.SIGTERM)
            elif node not in self.failed_nodes:
                self._final_delete(pod)
            return
        if not node:
            self._schedule(pod)
        elif container is None and pod["status"].get("phase") == "Pending" and node not in self.failed_nodes:
            self._start_container(pod)

    def _on_exit(self, key: tuple[str, str], uid: str, code: int) -> None:
        container = self.containers.get(key)
        if container is None or container.uid != uid:
            return
        container.exited = True
        pod = self.pods.get(key)
        if container.lost or pod is None:
            return
        exit_code = code if code >= 0 else 128 - code
        reason = "OOMKilled" if container.oom else ("Completed" if exit_code == 0 else "Error")
        terminated = {"exitCode": exit_code, "reason": reason, "startedAt": container.started, "finishedAt": _now()}
        if exit_code and pod["spec"]["containers"][0].get("terminationMessagePolicy") == "FallbackToLogsOnError":
            lines = (self.log_path(pod) or Path(os.devnull)).read_bytes()[-2048:].decode(errors="replace")
            terminated["message"] = "\n".join(lines.splitlines()[-80:])
        status: dict[str, Any] = {"phase": "Succeeded" if exit_code == 0 else "Failed",
                                  "containerStatuses": [self._cstatus(pod, {"terminated": terminated}, False)],
                                  "conditions": self._conditions(pod, ready=False)}
        if container.evicted:
            status.update(reason="Evicted", message="The node was low on resource: memory.")
            self._event(pod, "Evicted", "The node was low on resource: memory.")
        self._patch_status(pod, status)
        if pod["metadata"].get("deletionTimestamp"):
            self._final_delete(pod)

    def _on_inject(self, kind: str, namespace: str | None, name: str) -> None:
        if kind == "node":
            self._fail_node(name)
            return
        container = self.containers.get((namespace or "default", name))
        if container is None:
            raise RuntimeError(f"no running container in pod {name}")
        if kind == "oom":
            container.oom = True
        else:
            container.evicted = True
        if container.popen is None:  # no process (benchmark mode): it ends as if killed
            self._on_exit(container.key, container.uid, -signal.SIGKILL)
        self._signal(container, signal.SIGKILL)

    def _fail_node(self, name: str) -> None:
        self.failed_nodes.add(name)
        node = self.core.read_node(name, _preload_content=False)
        taints = [*(json.loads(node.data)["spec"].get("taints") or []),
                  {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": _now()}]
        self.core.patch_node(name, {"spec": {"taints": taints}})
        self.core.patch_node_status(name, {"status": {"conditions": [
            {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
             "message": "Kubelet stopped posting node status."}]}})
        for key, container in list(self.containers.items()):
            pod = self.pods.get(key)
            if container.node != name or pod is None or container.exited:
                continue
            container.lost = True
            self._signal(container, signal.SIGKILL)
            self._event(pod, "NodeNotReady", "Node is not ready")
            self._event(pod, "TaintManagerEviction", f"Marking for deletion Pod {key[0]}/{key[1]}")
            conditions = [*self._conditions(pod, ready=False),
                          {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                           "message": "Taint manager: deleting due to NoExecute taint"}]
            self._patch_status(pod, {"phase": "Failed", "reason": "NodeLost", "conditions": conditions,
                                     "message": f"Node {name} which was running pod {key[1]} is unresponsive"})

    def _tick(self) -> None:
        now = time.monotonic()
        for container in list(self.containers.values()):
            if container.kill_at is not None and now >= container.kill_at and not container.exited:
                self._signal(container, signal.SIGKILL)
                container.kill_at = None
            if container.popen is None and container.kill_at is not None:
                # No process (benchmark mode): stopping it is immediate.
                container.exited = True
                pod = self.pods.get(container.key)
                if pod is not None:
                    self._final_delete(pod)
        if int(now * 2) % 2 == 0:
            for key, pod in list(self.pods.items()):
                if not pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
                    self._schedule(pod)

    # -- scheduling -------------------------------------------------------------------------

    def _schedule(self, pod: dict[str, Any]) -> None:
        nodes = json.loads(self.core.list_node(_preload_content=False).data)["items"]
        used: dict[str, int] = {}
        for other in self.pods.values():
            bound = other["spec"].get("nodeName")
            if bound and other["status"].get("phase") not in _TERMINAL:
                used[bound] = used.get(bound, 0) + 1
        reasons: dict[str, int] = {}
        fits = []
        for node in nodes:
            name = node["metadata"]["name"]
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
            selector = pod["spec"].get("nodeSelector") or {}
            taints = [t for t in node["spec"].get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
            why = ("node(s) were unschedulable" if node["spec"].get("unschedulable") else
                   "node(s) were not ready" if not ready else
                   "node(s) had untolerated taint(s)" if any(not tolerates(pod["spec"].get("tolerations") or [], t)
                                                              for t in taints) else
                   "node(s) didn't match Pod's node affinity/selector"
                   if any((node["metadata"].get("labels") or {}).get(k) != v for k, v in selector.items())
                   or not affinity_ok(pod, node) else
                   "Too many pods" if used.get(name, 0) >= int(node["status"]["allocatable"]["pods"]) else None)
            if why:
                reasons[why] = reasons.get(why, 0) + 1
            else:
                fits.append(name)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if not fits:
            message = f"0/{len(nodes)} nodes are available: " + ", ".join(f"{n} {w}" for w, n in sorted(reasons.items()))
            if self.unschedulable_said.get(key) != message:
                self.unschedulable_said[key] = message
                self._event(pod, "FailedScheduling", message, kind="Warning")
                self._patch_status(pod, {"conditions": [{"type": "PodScheduled", "status": "False",
                                                         "reason": "Unschedulable", "message": message}]})
            return
        node = min(fits, key=lambda n: (used.get(n, 0), n))
        self.core.patch_namespaced_pod(key[1], key[0], {"spec": {"nodeName": node}})
        pod["spec"]["nodeName"] = node
        self._event(pod, "Scheduled", f"Successfully assigned {key[0]}/{key[1]} to {node}")

    # -- containers -------------------------------------------------------------------------

    def _start_container(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        key = (meta["namespace"], meta["name"])
        main = spec["containers"][0]
        container = _Container(key, meta["uid"], spec["nodeName"], _now())
        self.containers[key] = container
        log = self.root / f"{meta['namespace']}_{meta['name']}_{meta['uid']}.log"
        env = dict(os.environ)  # what the image's own environment would be
        for item in main.get("env") or []:
            env[item["name"]] = self._env_value(pod, item)
        argv = [*(main.get("command") or []), *(main.get("args") or [])]
        if self.run_processes:
            with open(log, "ab") as out:
                try:
                    container.popen = subprocess.Popen(argv, env=env, cwd=main.get("workingDir") or None,
                                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                                       start_new_session=True, close_fds=True)
                except OSError as exc:
                    out.write(f"exec {argv[:1]}: {exc.strerror}\n".encode())
                    container.exited = True
                    terminated = {"exitCode": 127, "reason": "ContainerCannotRun", "message": str(exc.strerror),
                                  "startedAt": container.started, "finishedAt": _now()}
                    self._patch_status(pod, {"phase": "Failed", "containerStatuses": [
                        self._cstatus(pod, {"terminated": terminated}, False)]})
                    return
            popen = container.popen
            threading.Thread(target=lambda: self.queue.put(("exit", key, meta["uid"], popen.wait())),
                             daemon=True).start()
        else:
            log.touch()
        self._patch_status(pod, {"phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                                 "startTime": container.started, "conditions": self._conditions(pod, ready=True),
                                 "containerStatuses": [self._cstatus(pod, {"running": {"startedAt": container.started}},
                                                                     True)]})
        self._event(pod, "Started", f"Started container {self._cname(pod)}")

    @staticmethod
    def _env_value(pod: dict[str, Any], item: dict[str, Any]) -> str:
        if "value" in item or "valueFrom" not in item:
            return str(item.get("value", ""))
        path = (item["valueFrom"].get("fieldRef") or {}).get("fieldPath", "")
        if m := re.match(r"metadata\.(labels|annotations)\['(.+)'\]", path):
            return str((pod["metadata"].get(m.group(1)) or {}).get(m.group(2), ""))
        fields = {"spec.nodeName": pod["spec"].get("nodeName"), "metadata.name": pod["metadata"]["name"],
                  "metadata.namespace": pod["metadata"]["namespace"], "metadata.uid": pod["metadata"]["uid"],
                  "status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1"}
        return str(fields.get(path) or "")

    def _signal(self, container: _Container, sig: int) -> None:
        if container.popen is not None and not container.exited:
            try:
                os.killpg(container.popen.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    # -- writing to the API -----------------------------------------------------------------

    @staticmethod
    def _cname(pod: dict[str, Any]) -> str:
        return pod["spec"]["containers"][0].get("name", "main")

    def _cstatus(self, pod: dict[str, Any], state: dict[str, Any], ready: bool) -> dict[str, Any]:
        main = pod["spec"]["containers"][0]
        return {"name": self._cname(pod), "ready": ready, "restartCount": 0, "image": main.get("image", ""),
                "imageID": "", "state": state, "started": "running" in state}

    @staticmethod
    def _conditions(pod: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
        return [{"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"}]

    def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status})
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _final_delete(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0)
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Normal") -> None:
        meta = pod["metadata"]
        self.core.create_namespaced_event(meta["namespace"], {
            "metadata": {"generateName": f"{meta['name']}."},
            "involvedObject": {"kind": "Pod", "name": meta["name"], "namespace": meta["namespace"],
                               "uid": meta["uid"]},
            "reason": reason, "message": message, "type": kind, "count": 1,
            "firstTimestamp": _now(), "lastTimestamp": _now(), "source": {"component": "stand-in-kubelet"}})
