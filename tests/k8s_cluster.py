"""A stand-in Kubernetes cluster for tests: no real API server can run on these machines.

It is not Kubernetes. It is kmock's ``KubernetesEmulator`` (a stateful HTTP mock of the
Kubernetes API) served over real HTTP on 127.0.0.1 from its own event loop in a background
thread, subclassed to behave like an API server where trainguard depends on it, plus a fake
scheduler and kubelet thread that talk to it only through the official ``kubernetes`` client:

* :class:`StandInApiServer` keeps core objects (pods, nodes, events, services, configmaps,
  namespaces) and coordination leases with a global ``resourceVersion`` counter, ``uid``,
  ``creationTimestamp`` and ``generateName``; answers 201 on create and 409 on a duplicate;
  honours label and field selectors; merge, strategic (as merge) and JSON patches and PUT with
  a resourceVersion check; graceful pod deletion (``deletionTimestamp``, the kubelet finishes
  it) and finalizers; watches from a ``resourceVersion`` with replay, ``timeoutSeconds``,
  bookmarks and 410 Gone after a compaction; ``pods/log`` with ``follow``, ``tailLines`` and
  ``limitBytes``; and fault windows answering 429 or 5xx to every client but the kubelet.
  It counts the requests of every other client, for the benchmarks.
* :class:`FakeKubelet` binds pending pods to nodes honouring ``nodeSelector``, required node
  affinity (``matchExpressions`` and ``matchFields metadata.name``), taints and tolerations,
  cordons and ``pods`` capacity; runs each container's command as a local process group with
  its environment (downward-API ``fieldRef`` resolved; the kubelet's own environment stands in
  for the image's); writes Running and ``terminated{exitCode, reason}`` (128+signal,
  OOMKilled); stops deleted pods with SIGTERM, the grace period, SIGKILL; and injects faults:
  an OOM kill, an eviction, a node failure (Ready=Unknown, the unreachable NoExecute taint, its
  pods Failed/NodeLost with the DisruptionTarget condition).

:class:`StandInCluster` starts both, writes a kubeconfig for it, and is always torn down.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import os
import re
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import aiohttp.web
import jsonpatch
import kmock
import pytest

from helpers.k8s_kubelet import KUBELET_AGENT, FakeKubelet

_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$")
_KINDS = {"pods": "Pod", "nodes": "Node", "events": "Event", "services": "Service", "configmaps": "ConfigMap",
          "namespaces": "Namespace", "leases": "Lease"}
_CLUSTER_SCOPED = {"nodes", "namespaces"}
_HISTORY = 20000


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code,
            "reason": reason, "message": message}


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        terms.append(current.strip())
    return terms


def label_match(selector: str, labels: dict[str, str]) -> bool:
    for term in _split_terms(selector):
        if m := re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", term):
            values = {v.strip() for v in m.group(3).split(",")}
            present = m.group(1) in labels and labels[m.group(1)] in values
            if present != (m.group(2) == "in"):
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = re.split("==?", term, maxsplit=1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_match(selector: str, obj: dict[str, Any]) -> bool:
    for term in _split_terms(selector):
        if "!=" in term:
            path, value = term.split("!=", 1)
            if field_value(obj, path.strip()) == value.strip():
                return False
        else:
            path, value = re.split("==?", term, maxsplit=1)
            if field_value(obj, path.strip()) != value.strip():
                return False
    return True


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch (strategic merge patches are applied the same way: lists replace)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class StandInApiServer(kmock.KubernetesEmulator):
    """kmock's emulator with the semantics listed in the module docstring; a stand-in."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.store: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.rv = 1
        self.compacted = 0
        self.expiry = 0  # bumped by compact(): open watches end with 410 too
        self.closing = False  # set when the stand-in stops: open streams end
        self.log_streams = 0
        self.pod_changed: dict[str, asyncio.Event] = {}  # by pod uid: wakes its log streams
        self.changed: asyncio.Condition | None = None
        self.fault: tuple[float, int, float | None] | None = None  # until, status, Retry-After
        self.counts: Counter[str] = Counter()
        self.log_dir: Path | None = None
        self.kubelet_logs: Callable[[dict[str, Any]], Path | None] = lambda pod: None

    # -- plumbing ---------------------------------------------------------------------------

    def _bump(self, kind: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, copy.deepcopy(obj)))
        if obj.get("kind") == "Pod" and obj["metadata"].get("uid") in self.pod_changed:
            self.pod_changed[obj["metadata"]["uid"]].set()
        if len(self.history) > _HISTORY:
            drop = len(self.history) - _HISTORY // 2
            self.compacted = self.history[drop - 1][0]
            del self.history[:drop]
        assert self.changed is not None
        self.changed.notify_all()

    def compact(self) -> None:
        """Forget every event so far: a watch from an older resourceVersion gets 410 Gone."""
        self.compacted = self.rv
        self.expiry += 1
        self.history.clear()
        assert self.changed is not None
        self.changed.notify_all()

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:  # type: ignore[override]
        raw = request._raw_request
        assert raw is not None
        if self.changed is None:
            self.changed = asyncio.Condition()
        path = raw.path.rstrip("/")
        is_kubelet = raw.headers.get("User-Agent", "") == KUBELET_AGENT
        m = _PATH.match(path)
        if not is_kubelet:
            watching = raw.query.get("watch", "").lower() in ("true", "1")
            verb = "watch" if watching else raw.method.lower()
            self.counts[f"{verb} {m.group('plural') if m else path}{'/' + m.group('sub') if m and m.group('sub') else ''}"] += 1
            if self.fault is not None:
                until, code, retry_after = self.fault
                if time.monotonic() < until:
                    self.counts[f"refused {code}"] += 1
                    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
                    reason = "TooManyRequests" if code == 429 else "ServiceUnavailable"
                    return aiohttp.web.json_response(status(code, reason, "stand-in fault window"), status=code,
                                                     headers=headers)
        if m is None:
            if path in ("/version", ""):
                return aiohttp.web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-stand-in"})
            return await super()._handle(request)
        async with self.changed:
            try:
                return await self._serve(raw, request, m.group("plural"), m.group("ns"), m.group("name"),
                                         m.group("sub"))
            except _ApiError as exc:
                return aiohttp.web.json_response(status(exc.code, exc.reason, exc.message), status=exc.code)

    async def _serve(self, raw: Any, request: kmock.Request, plural: str, ns: str | None, name: str | None,
                     sub: str | None) -> aiohttp.web.StreamResponse:
        if plural not in _KINDS:
            raise _ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})")
        if plural == "namespaces" and name:
            return aiohttp.web.json_response({"kind": "Namespace", "apiVersion": "v1",
                                              "metadata": {"name": name}, "status": {"phase": "Active"}})
        ns = None if plural in _CLUSTER_SCOPED else ns
        method, query = raw.method, raw.query
        if method == "GET" and name is None:
            if query.get("watch", "").lower() in ("true", "1"):
                return await self._watch(raw, plural, ns, query)
            items = [o for (p, n, _), o in self.store.items() if p == plural and (ns is None or n == ns)
                     and self._selected(o, query)]
            return aiohttp.web.json_response({"kind": _KINDS[plural] + "List", "apiVersion": "v1",
                                              "metadata": {"resourceVersion": str(self.rv)}, "items": items})
        if method == "POST" and name is None:
            return self._create(plural, ns, request.data)
        assert name is not None
        if sub not in (None, "log", "status"):
            raise _ApiError(404, "NotFound", f"the stand-in does not serve {plural}/{sub}")
        key = (plural, ns, name)
        if method == "GET" and sub == "log":
            return await self._log(raw, self._get(key), query)
        if method == "GET":
            return aiohttp.web.json_response(self._get(key))
        if method in ("PATCH", "PUT"):
            return self._update(key, raw, request.data, sub)
        if method == "DELETE":
            return self._delete(key, request.data, query)
        raise _ApiError(405, "MethodNotAllowed", f"{method} {plural}/{sub or ''}")

    def _get(self, key: tuple[str, str | None, str]) -> dict[str, Any]:
        if key not in self.store:
            raise _ApiError(404, "NotFound", f'{key[0]} "{key[2]}" not found')
        return self.store[key]

    @staticmethod
    def _selected(obj: dict[str, Any], query: Any) -> bool:
        labels = obj["metadata"].get("labels") or {}
        return (label_match(query.get("labelSelector", ""), labels)
                and field_match(query.get("fieldSelector", ""), obj))

    # -- writes -----------------------------------------------------------------------------

    def _create(self, plural: str, ns: str | None, body: dict[str, Any]) -> aiohttp.web.Response:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise _ApiError(422, "Invalid", "metadata.name: Required value")
        key = (plural, ns, meta["name"])
        if key in self.store:
            raise _ApiError(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists')
        if ns is not None:
            meta["namespace"] = ns
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_iso())
        obj.setdefault("kind", _KINDS[plural])
        obj.setdefault("apiVersion", "coordination.k8s.io/v1" if plural == "leases" else "v1")
        if plural == "pods":
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        self.store[key] = obj
        self._bump("ADDED", obj)
        return aiohttp.web.json_response(obj, status=201)

    def _update(self, key: tuple[str, str | None, str], raw: Any, body: Any, sub: str | None) -> aiohttp.web.Response:
        obj = self._get(key)
        if raw.method == "PUT":
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != obj["metadata"]["resourceVersion"]:
                raise _ApiError(409, "Conflict", "the object has been modified; please apply your changes to the "
                                                 "latest version and try again")
            new = copy.deepcopy(body)
            new["metadata"] = {**obj["metadata"], **{k: v for k, v in new.get("metadata", {}).items()
                                                     if k in ("labels", "annotations", "finalizers")}}
        elif "json-patch" in raw.headers.get("Content-Type", ""):
            new = jsonpatch.apply_patch(obj, body)
        else:
            new = merge(obj, body)
        if sub == "status":
            new = {**obj, "status": new.get("status")}
        self.store[key] = new
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.store[key]
            self._bump("DELETED", new)
        else:
            self._bump("MODIFIED", new)
        return aiohttp.web.json_response(new)

    def _delete(self, key: tuple[str, str | None, str], body: Any, query: Any) -> aiohttp.web.Response:
        obj = self._get(key)
        grace: Any = (body or {}).get("gracePeriodSeconds") if isinstance(body, dict) else None
        grace = query.get("gracePeriodSeconds", grace)
        meta = obj["metadata"]
        if key[0] == "pods":
            spec, phase = obj.get("spec") or {}, (obj.get("status") or {}).get("phase")
            if grace is None:
                grace = spec.get("terminationGracePeriodSeconds", 30)
            # As the real API server: unbound and finished pods go at once, others via the kubelet.
            if int(grace) > 0 and spec.get("nodeName") and phase not in ("Succeeded", "Failed"):
                if not meta.get("deletionTimestamp"):
                    meta.update(deletionTimestamp=now_iso(), deletionGracePeriodSeconds=int(grace))
                    self._bump("MODIFIED", obj)
                return aiohttp.web.json_response(obj)
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_iso()
                self._bump("MODIFIED", obj)
            return aiohttp.web.json_response(obj)
        del self.store[key]
        meta.setdefault("deletionTimestamp", now_iso())
        self._bump("DELETED", obj)
        return aiohttp.web.json_response(obj)

    # -- streams ----------------------------------------------------------------------------

    async def _watch(self, raw: Any, plural: str, ns: str | None, query: Any) -> aiohttp.web.StreamResponse:
        assert self.changed is not None
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
        since = query.get("resourceVersion") or "0"

        def relevant(obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            return ((ns is None or meta.get("namespace") == ns) and obj.get("kind") == _KINDS[plural]
                    and self._selected(obj, query))

        async def send(kind: str, obj: dict[str, Any]) -> None:
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        position = int(since)
        expiry = self.expiry
        try:
            if since == "0":
                for (p, n, _), obj in list(self.store.items()):
                    if p == plural and relevant(obj):
                        await send("ADDED", obj)
                position = self.rv
            while True:
                if position < self.compacted or expiry != self.expiry:
                    await send("ERROR", status(410, "Expired", f"too old resource version: {position} "
                                                              f"({self.compacted})"))
                    break
                for rv, kind, obj in [e for e in self.history if e[0] > position]:
                    position = rv
                    if relevant(obj):
                        await send(kind, obj)
                position = max(position, self.rv)
                left = deadline - time.monotonic()
                if left <= 0 or self.closing:
                    if query.get("allowWatchBookmarks", "").lower() in ("true", "1"):
                        await send("BOOKMARK", {"kind": _KINDS[plural], "apiVersion": "v1",
                                                "metadata": {"resourceVersion": str(position)}})
                    break
                try:
                    await asyncio.wait_for(self.changed.wait(), timeout=left)
                except asyncio.TimeoutError:
                    pass
        except (ConnectionResetError, RuntimeError):
            return response
        await response.write_eof()
        return response

    async def _log(self, raw: Any, pod: dict[str, Any], query: Any) -> aiohttp.web.StreamResponse:
        path = self.kubelet_logs(pod)
        if path is None or not path.exists():
            reason = "ContainerCreating" if (pod.get("spec") or {}).get("nodeName") else "Pending"
            container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name", "main")
            raise _ApiError(400, "BadRequest", f'container "{container}" in pod "{pod["metadata"]["name"]}" '
                                               f"is waiting to start: {reason}")
        data = path.read_bytes()
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(query["tailLines"]):]) if int(query["tailLines"]) else b""
        if "limitBytes" in query:
            data = data[:int(query["limitBytes"])]
        if query.get("follow", "").lower() not in ("true", "1"):
            return aiohttp.web.Response(body=data, content_type="text/plain")
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(raw)
        key = ("pods", pod["metadata"].get("namespace"), pod["metadata"]["name"])
        uid = pod["metadata"]["uid"]
        offset = path.stat().st_size
        assert self.changed is not None
        self.log_streams += 1
        try:
            if data:  # an empty chunk would end a chunked response
                await response.write(data)
            while True:
                current = self.store.get(key)
                done = (current is None or current["metadata"]["uid"] != uid
                        or (current.get("status") or {}).get("phase") in ("Succeeded", "Failed"))
                chunk = b""
                if path.stat().st_size > offset:
                    with open(path, "rb") as handle:
                        handle.seek(offset)
                        chunk = handle.read()
                if chunk:
                    offset += len(chunk)
                    await response.write(chunk)
                elif done or self.closing:
                    break
                else:
                    # Release the server's lock while waiting for output (polled: many streams poll
                    # less often) or for a change of the pod (its end, at once).
                    changed = self.pod_changed.setdefault(uid, asyncio.Event())
                    self.changed.release()
                    try:
                        await asyncio.wait_for(changed.wait(), 0.05 if self.log_streams < 32 else 0.5)
                    except asyncio.TimeoutError:
                        pass
                    finally:
                        changed.clear()
                        await self.changed.acquire()
        except (ConnectionResetError, RuntimeError):
            return response
        finally:
            self.log_streams -= 1
            self.pod_changed.pop(uid, None)
        await response.write_eof()
        return response


class _ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


class StandInCluster:
    """The stand-in API server and a fake kubelet with ``nodes`` nodes of ``slots`` pods each."""

    def __init__(self, root: Path, *, nodes: int = 3, slots: int = 4, run_processes: bool = True) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.node_names = [f"node-{i}" for i in range(nodes)]
        self.slots = slots
        self.run_processes = run_processes
        self.server = StandInApiServer()
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self.port = 0
        self.kubeconfig = self.root / "kubeconfig"
        self.kubelet: FakeKubelet | None = None

    def start(self) -> "StandInCluster":
        started = threading.Event()

        async def serve() -> None:
            self._stopping = asyncio.Event()
            async with self.server, kmock.Server(self.server) as http:
                self.port = http.port
                started.set()
                await self._stopping.wait()

        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(serve(),), daemon=True,
                                        name="stand-in-api")
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the stand-in API server did not start")
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
            "clusters": [{"name": "stand-in", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "stand-in"}}],
            "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "tester",
                                                          "namespace": "default"}}]}))
        self.kubelet = FakeKubelet(self.url, self.root / "containers", self.node_names, self.slots,
                                   run_processes=self.run_processes).start()
        self.server.kubelet_logs = self.kubelet.log_path
        return self

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        if self._stopping is not None:
            asyncio.run_coroutine_threadsafe(self._close_streams(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join(10)

    # -- fault injection and inspection -----------------------------------------------------

    def api_fault(self, code: int, seconds: float, retry_after: float | None = None) -> None:
        """Answer ``code`` (429, 500, 503) to every client but the kubelet for ``seconds``."""
        self.server.fault = (time.monotonic() + seconds, code, retry_after)

    def expire_watches(self) -> None:
        """Compact the event history: open watches end with 410 Gone, old versions too."""
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._compact()))

    async def _close_streams(self) -> None:
        self.server.closing = True
        if self.server.changed is not None:
            async with self.server.changed:
                self.server.changed.notify_all()

    async def _compact(self) -> None:
        assert self.server.changed is not None
        async with self.server.changed:
            self.server.compact()

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (p, n, _), o in list(self.server.store.items())
                if p == plural and (namespace is None or n == namespace)]

    def pods(self, namespace: str = "default", **labels: str) -> list[dict[str, Any]]:
        return [p for p in self.objects("pods", namespace)
                if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())]

    def request_counts(self) -> Counter[str]:
        """Requests per ``verb resource`` from every client but the kubelet, so far."""
        return Counter(self.server.counts)

    def oom_kill(self, pod: str, namespace: str = "default") -> None:
        assert self.kubelet is not None
        self.kubelet.inject("oom", namespace, pod)

    def evict(self, pod: str, namespace: str = "default") -> None:
        assert self.kubelet is not None
        self.kubelet.inject("evict", namespace, pod)

    def fail_node(self, node: str) -> None:
        assert self.kubelet is not None
        self.kubelet.inject("node", None, node)

    def __enter__(self) -> "StandInCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(predicate: Callable[[], Any], timeout: float = 20, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something true; its value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")


def environ_for(cluster: StandInCluster) -> dict[str, str]:
    """This process's environment pointed at the stand-in cluster."""
    return {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}


@pytest.fixture
def k8s_cluster(tmp_path: Path):
    """A fresh stand-in cluster of 3 nodes (2 pod slots each), torn down after the test."""
    cluster = StandInCluster(tmp_path / "cluster", nodes=3, slots=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kubeconfig(k8s_cluster: StandInCluster) -> Path:
    """The path of a kubeconfig file for the stand-in cluster of :func:`k8s_cluster`."""
    return k8s_cluster.kubeconfig
