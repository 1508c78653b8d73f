"""Kubernetes, launcher mode: one pod per rank, watched through the API, logs followed locally.

The adapter creates pods (:mod:`.manifests`), learns of every change through one watch of
the job's pods (:mod:`.watch`) and follows each container's log into the rank's log file
(:mod:`.logs`). When a pod ends, the container's exit code becomes the rank's :class:`Exit`
(128+N becomes -N, a signal), and what Kubernetes says about it, the termination reason, the
pod's status reason, the DisruptionTarget condition and the pod's warning Events, is appended
to the rank's log as ``[trainguard] ...`` lines, so the classifiers judge it with the output.

Recovery as Kubernetes allows it: there is no in-place restart with ``restartPolicy: Never``,
so ``restart_in_place`` and ``restart_instances`` create a new pod pinned to the same node
(required node affinity ``metadata.name In``); moved ranks get new pods the scheduler places,
kept off isolated nodes with ``metadata.name NotIn``. Stopping deletes the pods with the grace
period and waits until they are gone, so a whole-job restart never overlaps two generations.
Pods are named ``<job>-<rank>-r<round>`` and labelled with the job id, rank and round: they
are the truth, and a supervisor restarted with the same job id adopts them (:meth:`adopt`).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from trainguard.adapters import Exit, Launch
from trainguard.adapters.kubernetes import manifests
from trainguard.adapters.kubernetes import nodes as node_api
from trainguard.adapters.kubernetes.badnodes import BadNodeList
from trainguard.adapters.kubernetes.client import KubeApi, load_api_client, status_of
from trainguard.adapters.kubernetes.logs import LogFollower
from trainguard.adapters.kubernetes.rankpod import RankPod, events_of
from trainguard.adapters.kubernetes.watch import PodWatch
from trainguard.errors import AdapterError
from trainguard.logtail import read_tail
from trainguard.model import Capacity, Instance, JobSpec
from trainguard.policy import Policy
from trainguard.sdk import CHANNEL_VAR, STDERR_CHANNEL
from trainguard.stacks import ThreadStack

log = logging.getLogger(__name__)

# Placement of a rank the Kubernetes scheduler will place (the real node is known once bound).
SCHEDULER = "scheduler:"


class KubernetesAdapter:
    """See the module docstring; the options are the ``--namespace`` ... flags of :mod:`.options`."""

    name = "kubernetes"

    def __init__(self, *, spec: JobSpec, log_dir: str | Path, policy: Policy | None = None,
                 base_env: Mapping[str, str] | None = None, namespace: str = "default", image: str | None = None,
                 pod_template: str | None = None, taint_bad_nodes: bool = False, spare_nodes: int = 0,
                 pending_timeout: float = 300.0, kubeconfig: str | None = None, context: str | None = None,
                 api_patience: float = 120.0, watch_timeout: int = 300, api_client: Any = None) -> None:
        self.spec = spec
        self.job_id = spec.job_id
        self.policy = policy or Policy()
        self.log_dir = Path(log_dir)
        self.base_env = dict(base_env or {})
        self.namespace = namespace
        self.image = image
        self.template = manifests.load_template(pod_template)
        manifests.pod_manifest(self.template, job_id=self.job_id, namespace=namespace, rank=0, restart_round=0,
                               command=spec.command, env={}, image=image)  # fail now on a bad template
        self.taint_bad_nodes = taint_bad_nodes
        self.spare_nodes = spare_nodes
        self.pending_timeout = pending_timeout
        self.pause: Callable[[float], None] = time.sleep
        self.kube = KubeApi(api_client or load_api_client(kubeconfig, context), patience=api_patience,
                            job_id=self.job_id, sleep=lambda seconds: self.pause(seconds))
        self.bad_nodes = BadNodeList(self.kube, namespace, job_id=self.job_id)
        self.isolated: set[str] = set(self.bad_nodes.live())
        if self.isolated:
            log.warning("[%s] nodes isolated by jobs in namespace %s are avoided: %s", self.job_id, namespace,
                        ", ".join(sorted(self.isolated)))
        self._lift_expired_taints()
        self._pods: dict[int, RankPod] = {}
        self._seen: dict[str, dict[str, Any]] = {}  # every pod of the job, by name
        self._records: list[tuple[int, dict]] = []
        self._cond = threading.Condition()
        self._service = False
        self._closed = False
        self.last_wait: tuple[str, float] | None = None
        self._notes: list[str] = []
        self.watch = PodWatch(self.kube, namespace, manifests.job_selector(self.job_id), self._on_pods,
                              timeout_seconds=watch_timeout, job_id=self.job_id).start()
        if not self.watch.synced.wait(api_patience):
            raise AdapterError(self.name, f"cannot list pods in namespace {namespace}", permanent=False)

    # -- what the watch and the log followers report ----------------------------------------

    def _on_pods(self, kind: str, obj: Any) -> None:
        with self._cond:
            if kind == "SYNC":
                self._seen = {p["metadata"]["name"]: p for p in obj}
                for pod in self._pods.values():
                    pod.gone = pod.name not in self._seen
                    pod.obj = self._seen.get(pod.name, pod.obj)
            else:
                name = obj["metadata"]["name"]
                if kind == "DELETED":
                    self._seen.pop(name, None)
                else:
                    self._seen[name] = obj
                for pod in self._pods.values():
                    if pod.name == name:
                        pod.obj, pod.gone = obj, kind == "DELETED"
            for pod in self._pods.values():
                if pod.started:
                    pod.follower.container_started.set()
                if pod.ended:
                    pod.follower.pod_ended.set()
            self._cond.notify_all()

    def _on_records(self, rank: int, records: list[dict]) -> None:
        with self._cond:
            self._records.extend((rank, record) for record in records)
            self._cond.notify_all()

    # -- placement --------------------------------------------------------------------------

    def _nodes(self) -> list[str] | None:
        return node_api.schedulable(self.kube, self.template)

    def capacity(self, isolated: frozenset[str]) -> Capacity:
        nodes = self._nodes()
        if nodes is None:
            needed = math.ceil(self.spec.nproc / self.spec.slots)
            nodes = [f"unknown-{i}" for i in range(needed + self.spare_nodes)]
        return Capacity(tuple(nodes), self.spec.slots, self.spec.nproc, frozenset(isolated) | frozenset(self.isolated))

    def place(self, ranks: Sequence[int], current: Mapping[int, str], isolated: frozenset[str]) -> dict[int, str]:
        placement = {rank: node for rank, node in current.items() if rank not in ranks}
        placement.update({rank: f"{SCHEDULER}{rank}" for rank in ranks})
        nodes = self._nodes()
        if nodes is not None:
            healthy = [n for n in nodes if n not in isolated and n not in self.isolated]
            if len(healthy) * self.spec.slots < len(placement):
                raise AdapterError(self.name, f"no room for {len(placement)} rank pod(s): {len(healthy)} healthy "
                                              f"node(s) of {self.spec.slots} slot(s), isolated: "
                                              f"{sorted(set(isolated) | self.isolated) or 'none'}")
        return placement

    def rendezvous(self, placement: Mapping[int, str]) -> tuple[str, int]:
        return manifests.master_address(self.job_id, self.namespace), random.randrange(20000, 60000)

    def isolate(self, nodes: Sequence[str], reason: str) -> None:
        """Keep ``nodes`` out of this job's new pods and, through the shared list, other jobs'."""
        self.isolated.update(nodes)
        self.bad_nodes.add(nodes, reason, self.policy.isolate_window, tainted=self.taint_bad_nodes)
        if self.taint_bad_nodes:
            code = reason.split(":", 1)[0].strip() or "fault"
            for node in nodes:
                self._set_taint(node, manifests.label_value(code))

    def _set_taint(self, node: str, value: str | None) -> None:
        node_api.set_taint(self.kube, node, value, self.job_id)

    def _lift_expired_taints(self) -> None:
        for node, entry in self.bad_nodes.expired().items():
            if entry.get("tainted"):
                self._set_taint(node, None)

    def requeue(self, reason: str) -> bool:
        return False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        """Create the pods and return once each runs (or already ended: ``wait`` reports it).

        A pod still Pending after ``pending_timeout`` fails the start (not permanently), with
        the scheduler's message in the rank's log; time spent retrying an API server that did
        not answer is left in :attr:`last_wait`.
        """
        waited = self.kube.waited
        self.last_wait = None
        self._notes = []
        try:
            self._ensure_service()
            for launch in launches:
                self._create(launch)
            deadline = time.monotonic() + self.pending_timeout
            ranks = [launch.instance.rank for launch in launches]
            with self._cond:
                self._cond.wait_for(lambda: all(self._pods[r].started for r in ranks),
                                    max(0.0, deadline - time.monotonic()))
                pending = [self._pods[r] for r in ranks if not self._pods[r].started]
        finally:
            if self.kube.waited > waited:
                self.last_wait = (self.kube.wait_reason, self.kube.waited - waited)
        if pending:
            for pod in pending:
                self._report(pod)
            raise AdapterError(self.name, f"pod(s) {', '.join(p.name for p in pending)} still Pending after "
                                          f"{self.pending_timeout:g} s (see the rank logs for the scheduler's "
                                          "reasons)", permanent=False)
        started = {}
        for launch in launches:
            pod = self._pods[launch.instance.rank]
            node = pod.node or launch.instance.node
            # The command is the container's PID 1 (in the pod's own PID namespace).
            started[pod.rank] = replace(launch.instance, node=node, local_rank=0, pid=1, log_path=str(pod.log_path))
        return started

    def _rank_pod(self, launch: Launch, round_no: int) -> dict[str, Any]:
        """The pod of one rank's start: the user's template, trainguard's fields, and the
        environment trainguard and --env set (not the launcher's own)."""
        env = {k: v for k, v in launch.env.items() if k in self.spec.env or self.base_env.get(k) != v}
        env[CHANNEL_VAR] = STDERR_CHANNEL
        node = launch.instance.node
        return manifests.pod_manifest(
            self.template, job_id=self.job_id, namespace=self.namespace, rank=launch.instance.rank,
            restart_round=round_no, command=launch.command, env=env, image=self.image,
            isolated=sorted(self.isolated), pin_node=None if node.startswith(SCHEDULER) else node,
            annotations={"trainguard.io/schedule-count": str(launch.instance.schedule_count),
                         "trainguard.io/proc-start-count": str(launch.instance.proc_start_count)})

    def _create(self, launch: Launch) -> None:
        rank, round_no = launch.instance.rank, launch.restart_round
        with self._cond:
            previous = self._pods.pop(rank, None)
        if previous is not None:
            previous.follower.stop()
            self._delete(previous.name, grace=0)
        node = launch.instance.node
        pod = self._rank_pod(launch, round_no)
        name = pod["metadata"]["name"]
        if not node.startswith(SCHEDULER):
            self._notes.append(f"rank {rank}: no in-place restart with restartPolicy Never; new pod {name} "
                               f"pinned to node {node}")
        try:
            self.kube.call(self.kube.core.create_namespaced_pod, self.namespace, pod, _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 409:
                raise AdapterError(self.name, f"cannot create pod {name}: {exc}",
                                   permanent=status_of(exc) in (400, 403, 422)) from None
            log.info("[%s] pod %s already exists (a retried create): adopting it", self.job_id, name)
        self._track(rank, name, self.log_path(rank, round_no))

    def start_notes(self) -> tuple[str, ...]:
        """Restarts in place done as replacement pods pinned to their nodes, by the last start."""
        return tuple(self._notes)

    def _track(self, rank: int, name: str, log_path: Path) -> RankPod:
        follower = LogFollower(self.kube, self.namespace, name, rank, log_path, self._on_records, job_id=self.job_id)
        with self._cond:
            pod = RankPod(rank, name, log_path, follower, obj=self._seen.get(name, {}))
            self._pods[rank] = pod
            if pod.started:
                follower.container_started.set()
        follower.start()
        return pod

    def _ensure_service(self) -> None:
        if self._service:
            return
        try:
            self.kube.call(self.kube.core.create_namespaced_service, self.namespace,
                           manifests.service_manifest(self.job_id, self.namespace), _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 409:
                log.warning("[%s] cannot create the headless Service (%s): MASTER_ADDR will not resolve",
                            self.job_id, exc)
        self._service = True

    def adopt(self) -> dict[int, Instance]:
        """The job's pods of its latest round, left by a previous supervisor; older ones are deleted."""
        with self._cond:
            pods = [p for p in self._seen.values() if not p["metadata"].get("deletionTimestamp")]
        rounds = [int(p["metadata"]["labels"].get(manifests.LABEL_ROUND, -1)) for p in pods]
        if not pods:
            return {}
        latest = max(rounds)
        found: dict[int, Instance] = {}
        for pod, round_no in zip(pods, rounds):
            meta = pod["metadata"]
            if round_no != latest:
                self._delete(meta["name"], grace=0)
                continue
            rank = int(meta["labels"][manifests.LABEL_RANK])
            notes = meta.get("annotations") or {}
            tracked = self._track(rank, meta["name"], self.log_path(rank, round_no))
            self._ensure_service()
            found[rank] = Instance(rank=rank, node=(pod.get("spec") or {}).get("nodeName") or f"{SCHEDULER}{rank}",
                                   local_rank=0, pid=1, schedule_count=int(notes.get("trainguard.io/schedule-count", 1)),
                                   proc_start_count=int(notes.get("trainguard.io/proc-start-count", 1)),
                                   log_path=str(tracked.log_path))
        log.warning("[%s] adopted %d running pod(s) of round %d", self.job_id, len(found), latest)
        return found

    def wait(self, timeout: float) -> list[Exit]:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._cond.wait_for(lambda: self._records or self._due(), max(0.0, deadline - time.monotonic()))
            due = self._due()
        return [self._report(pod) for pod in due]

    def _due(self) -> list[RankPod]:
        stuck = time.time() - self.pending_timeout
        return [p for p in self._pods.values() if not p.reported and (p.ended or (
            (p.obj.get("status") or {}).get("phase", "Pending") == "Pending" and p.created < stuck))]

    def _report(self, pod: RankPod, *, stopped: bool = False) -> Exit:
        """The rank's Exit; what Kubernetes said about the pod goes to its log first."""
        return pod.finish(lambda: events_of(self.kube, self.namespace, pod.name, self.job_id), annotate=not stopped)

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        targets = [self._pods[r] for r in ranks if r in self._pods and not self._pods[r].reported]
        for pod in targets:
            self._delete(pod.name, grace=math.ceil(grace))
        deadline = time.monotonic() + grace + 15
        with self._cond:
            if not self._cond.wait_for(lambda: all(p.gone for p in targets), max(0.0, deadline - time.monotonic())):
                stuck = [p.name for p in targets if not p.gone]
                log.warning("[%s] pods %s did not end in time (node unreachable?): force-deleting", self.job_id, stuck)
        for pod in targets:
            if not pod.gone:
                self._delete(pod.name, grace=0)
        return [self._report(pod, stopped=True) for pod in targets if not pod.reported]

    def _delete(self, name: str, *, grace: int) -> None:
        try:
            self.kube.call(self.kube.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=grace,
                           _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 404:
                log.warning("[%s] cannot delete pod %s: %s", self.job_id, name, exc)

    def running(self) -> frozenset[int]:
        with self._cond:
            return frozenset(r for r, p in self._pods.items() if not p.ended and not p.reported)

    def last_output(self, rank: int) -> float | None:
        pod = self._pods.get(rank)
        try:
            return pod.log_path.stat().st_mtime if pod else None
        except OSError:
            return None

    def sdk_records(self) -> list[tuple[int, dict]]:
        with self._cond:
            records, self._records = self._records, []
        return records

    def stacks(self, ranks: Sequence[int], timeout: float) -> list[ThreadStack]:
        from trainguard.adapters.kubernetes.stacks import pod_stacks

        return pod_stacks(self.kube, self.namespace, {r: (self._pods[r].name, self._pods[r].log_path)
                                                      for r in ranks if r in self._pods}, timeout, self.job_id)

    def log_path(self, rank: int, restart_round: int) -> Path:
        return self.log_dir / f"round-{restart_round}" / f"rank-{rank}.log"

    def log_tail(self, rank: int, nbytes: int) -> str:
        pod = self._pods.get(rank)
        return read_tail(str(pod.log_path), nbytes) if pod else ""

    def close(self) -> None:
        """Delete the job's pods and Service (their logs stay in the log directory)."""
        if self._closed:
            return
        self._closed = True
        live = [r for r, p in self._pods.items() if not p.ended]
        if live:
            self.stop(live, self.policy.stop_grace_period)
        with self._cond:
            names = list(self._seen)
        for name in names:
            self._delete(name, grace=0)
        for pod in self._pods.values():
            pod.follower.stop()
        self.watch.stop()
        try:
            self.kube.call(self.kube.core.delete_namespaced_service, manifests.service_name(self.job_id),
                           self.namespace, patience=10, _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 404:
                log.warning("[%s] cannot delete the Service: %s", self.job_id, exc)
