"""``trainguard run --adapter volcano``: the job as one Volcano Job, supervised from outside it.

Each whole-job start submits one ``batch.volcano.sh/v1alpha1`` Job ``<job>-r<round>``:
``schedulerName: volcano``, gang ``minAvailable`` = every rank, ``--queue``, one task per rank
(``r<rank>``, one replica: each rank has its own environment, as under ``--adapter kubernetes``),
``restartPolicy: Never``, no ``policies`` and ``maxRetry: 1``, so Volcano never restarts, aborts
or retries anything behind trainguard's back: a failed pod stays failed until trainguard decides.
The pods (``<job>-r<round>-r<rank>-0``) carry the Kubernetes adapter's labels, so its watch, log
following, classification, hang detection and adoption work unchanged.

Recovery: a whole-job restart deletes the round's Volcano Job (its pods go with it) and submits
the next round's, with required node anti-affinity (``matchFields metadata.name NotIn``) for the
isolated nodes, since a running Volcano Job's spec cannot change; restarting or replacing single
ranks deletes their pods and Volcano creates them again from the task (same node affinity as the
round was submitted with: to keep a replaced pod off a node found bad mid-round, use
``--taint-bad-nodes``; without it, isolating a node that is still schedulable reschedules the
whole job instead of replacing its pods).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Sequence

from trainguard.adapters import Exit, Launch
from trainguard.adapters.kubernetes import manifests
from trainguard.adapters.kubernetes.adapter import KubernetesAdapter
from trainguard.adapters.volcano import VOLCANO, VolcanoApi
from trainguard.model import Capacity, Instance

log = logging.getLogger(__name__)


class VolcanoAdapter(KubernetesAdapter):
    """The Kubernetes adapter whose rank pods Volcano creates, one Volcano Job per round."""

    name = "volcano"

    def __init__(self, *, queue: str = "default", **options: Any) -> None:
        super().__init__(**options)
        self.queue = queue
        self.volcano = VolcanoApi(self.kube)
        self.vcjob: str | None = None

    def job_name(self, restart_round: int) -> str:
        return manifests.dns_label(f"{manifests.service_name(self.job_id)}-r{restart_round}", 40)

    def manifest(self, launches: Sequence[Launch]) -> dict[str, Any]:
        """The Volcano Job for a whole-job start of ``launches``."""
        round_no = launches[0].restart_round
        tasks = []
        for launch in sorted(launches, key=lambda item: item.instance.rank):
            rank = launch.instance.rank
            pod = self._rank_pod(launch, round_no)
            meta = pod["metadata"]
            tasks.append({"name": f"r{rank}", "replicas": 1, "template": {
                "metadata": {"labels": meta["labels"], "annotations": meta.get("annotations") or {}},
                "spec": pod["spec"]}})
        return {"apiVersion": VOLCANO.api_version, "kind": "Job",
                "metadata": {"name": self.job_name(round_no), "namespace": self.namespace,
                             "labels": {manifests.LABEL_JOB: manifests.label_value(self.job_id),
                                        manifests.LABEL_ROUND: str(round_no)},
                             "annotations": {"trainguard.io/job-id": self.job_id}},
                "spec": {"schedulerName": "volcano", "queue": self.queue, "minAvailable": len(tasks),
                         "maxRetry": 1, "policies": [], "tasks": tasks}}

    def capacity(self, isolated: frozenset[str]) -> Capacity:
        # A replaced rank's pod comes from the round's task, so only the taint keeps it off a node
        # found bad mid-round: without --taint-bad-nodes, isolating a schedulable node takes the
        # whole job's rescheduling (a new round's Job excludes it).
        return replace(super().capacity(isolated), steers_replacements=self.taint_bad_nodes)

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        ranks = {launch.instance.rank for launch in launches}
        if launches and (self.vcjob is None or ranks == set(range(self.spec.nproc))):
            body = self.manifest(launches)
            if self.vcjob and self.vcjob != body["metadata"]["name"]:
                self.volcano.delete_job(VOLCANO, self.namespace, self.vcjob)
            if not self.volcano.create_job(VOLCANO, self.namespace, body):
                log.info("[%s] Volcano Job %s exists already (a retried submit): adopting it", self.job_id,
                         body["metadata"]["name"])
            self.vcjob = body["metadata"]["name"]
        return super().start(launches)

    def _create(self, launch: Launch) -> None:
        """Volcano creates the pod (from the round's Job, or again after a deletion): track it."""
        rank = launch.instance.rank
        with self._cond:
            previous = self._pods.pop(rank, None)
        if previous is not None:
            previous.follower.stop()
        self._track(rank, f"{self.vcjob}-r{rank}-0", self.log_path(rank, launch.restart_round))

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        if self.vcjob is not None and set(ranks) >= set(self._pods):
            self.volcano.delete_job(VOLCANO, self.namespace, self.vcjob)
        return super().stop(ranks, grace)

    def close(self) -> None:
        if self.vcjob is not None:
            self.volcano.delete_job(VOLCANO, self.namespace, self.vcjob)
        super().close()
