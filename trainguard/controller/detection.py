"""Finding faults in a job: a failed pod's fault and log tail, pods force-deleted while running,
and hangs (no log output from a running pod for ``job-hang-interval``).

Nothing here decides or acts; the finds go to a round (:mod:`trainguard.controller.rounds`).
"""

from __future__ import annotations

import datetime
import logging
import time
from pathlib import Path
from typing import Any

from trainguard.adapters.kubernetes import status as pod_status
from trainguard.adapters.kubernetes.client import KubeApi
from trainguard.adapters.kubernetes.logs import LogFollower
from trainguard.adapters.volcano import VolcanoApi, phase, pod_rank
from trainguard.controller.tracked import Tracked, current_pods, job_id
from trainguard.model import ErrorSource, Fault

log = logging.getLogger(__name__)

# A fault found otherwise than by a pod's failure, with the pod and the text to classify.
Found = tuple[dict[str, Any], tuple[Fault, str]]


def _stamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.datetime.strptime(text.rstrip("Z")[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


class Detector:
    """Reads pods, their events and logs; follows running pods' logs for the hang check."""

    def __init__(self, kube: KubeApi, api: VolcanoApi, state_dir: Path) -> None:
        self.kube = kube
        self.api = api
        self.state_dir = state_dir

    def fault_of(self, tracked: Tracked, pod: dict[str, Any]) -> tuple[Fault, str]:
        """A failed pod's fault and the text to classify: its log tail, status and events."""
        meta = pod["metadata"]
        state = pod_status.terminated(pod) or {}
        finished_at = _stamp(state.get("finishedAt")) or time.time()
        code = pod_status.exit_code(pod)
        events = self.api.pod_events(tracked.namespace, meta["name"])
        lines = pod_status.describe(pod, meta["name"], events)
        tail = self.api.pod_log_tail(tracked.namespace, meta["name"])
        source = ErrorSource.EXIT_CODE
        if (pod.get("status") or {}).get("reason") in ("Evicted", "NodeLost") and code < 0:
            source = ErrorSource.EVENT
        fault = Fault(source, finished_at, rank=pod_rank(tracked.kind, tracked.job, pod),
                      node=(pod.get("spec") or {}).get("nodeName"), exit_code=code if code >= 0 else None,
                      signal=-code if code < 0 else None, message="; ".join(lines)[:500])
        return fault, tail + ("\n" if tail and not tail.endswith("\n") else "") + "\n".join(lines) + "\n"

    @staticmethod
    def force_deleted(tracked: Tracked) -> list[Found]:
        """Pods force-deleted while running, as faults when a CCE rule names PodForceDeleted;
        the others are only logged (Volcano creates the pod again)."""
        pods, tracked.force_deleted = tracked.force_deleted, []
        cce = tracked.settings.cce if tracked.settings else None
        found: list[Found] = []
        for pod in pods:
            task = (pod["metadata"].get("labels") or {}).get("volcano.sh/task-spec", "main")
            replica = cce.replicas.get(task) if cce else None
            if replica is None or not any("podforcedeleted" in rule.events for rule in replica.rules):
                log.info("[%s/%s] pod %s was force-deleted while running", tracked.namespace, tracked.name,
                         pod["metadata"]["name"])
                continue
            fault = Fault(ErrorSource.EVENT, time.time(), rank=pod_rank(tracked.kind, tracked.job, pod),
                          node=(pod.get("spec") or {}).get("nodeName"),
                          message=f"pod {pod['metadata']['name']} was force-deleted while running (PodForceDeleted)")
            found.append((pod, (fault, f"[trainguard] {fault.message}\n")))
        return found

    def hang(self, tracked: Tracked) -> Found | None:
        """The first running pod silent for ``job-hang-interval``; starts following new pods' logs
        and stops following pods that are gone."""
        settings = tracked.settings
        assert settings is not None
        if not settings.policy.enable_job_hang_detection or phase(tracked.kind, tracked.job) != "Running":
            return None
        jid = job_id(tracked)
        now = time.time()
        live = set()
        for pod in current_pods(tracked):
            meta = pod["metadata"]
            if (pod.get("status") or {}).get("phase") != "Running" or meta.get("deletionTimestamp"):
                continue
            uid = meta["uid"]
            live.add(uid)
            follower = tracked.followers.get(uid)
            path = self.state_dir / "logs" / jid / f"{meta['name']}-{uid[:8]}.log"
            if follower is None:
                follower = LogFollower(self.kube, tracked.namespace, meta["name"],
                                       pod_rank(tracked.kind, tracked.job, pod), path, lambda *_: None,
                                       job_id=jid)
                follower.container_started.set()
                tracked.followers[uid] = follower.start()
                tracked.started_watching[uid] = now
                continue
            last = max(tracked.started_watching[uid], path.stat().st_mtime if path.exists() else 0.0)
            silent = now - last
            if silent >= settings.policy.job_hang_interval:
                fault = Fault(ErrorSource.HANG, now, rank=pod_rank(tracked.kind, tracked.job, pod),
                              node=(pod.get("spec") or {}).get("nodeName"),
                              message=f"pod {meta['name']} wrote no output for {silent:.0f} s "
                                      f"(job-hang-interval {settings.policy.job_hang_interval:g} s)")
                tail = path.read_text(errors="replace")[-8192:] if path.exists() else ""
                return pod, (fault, tail)
        for uid in [u for u in tracked.followers if u not in live]:
            tracked.followers.pop(uid).stop()
            tracked.started_watching.pop(uid, None)
        return None
