"""The controller's actions on the cluster: Commands, pod deletions, job recreation, giving up.

Every action is idempotent, so a controller killed half way acts again safely: a Command has the
name ``<job>-tg-<round>`` (409 if sent), the job's ``status.version`` tells whether Volcano
restarted it already, pods are deleted by uid, and a recreation is driven by a ConfigMap
``trainguard-recreate-<job>`` holding the new manifest, which a new leader finishes.

The environment variable ``TRAINGUARD_CONTROLLER_DIE_AT=<stage>`` makes the process SIGKILL itself
once right after that stage (``acting``, ``acted``, ``deleted``): a fault-injection point for the
restart tests.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from typing import Any

from trainguard.adapters.kubernetes.client import KubeApi, status_of
from trainguard.adapters.volcano import BATCH, KINDS, VOLCANO, VolcanoApi, recreated, version
from trainguard.controller import annotations as notes
from trainguard.controller.recording import Recorder, status_note
from trainguard.controller.tracked import Tracked
from trainguard.errors import TrainguardError
from trainguard.model import Action, JobStatus, RoundRecord
from trainguard.store import RunStore

log = logging.getLogger(__name__)

RECREATE_LABEL = "trainguard.io/recreate"
DIE_VAR = "TRAINGUARD_CONTROLLER_DIE_AT"


def maybe_die(stage: str) -> None:
    """SIGKILL this process once if ``TRAINGUARD_CONTROLLER_DIE_AT`` names ``stage``."""
    if os.environ.get(DIE_VAR) == stage:
        os.environ.pop(DIE_VAR)
        log.warning("%s=%s: the controller kills itself now", DIE_VAR, stage)
        os.kill(os.getpid(), signal.SIGKILL)


class Actuator:
    """Carries rounds' actions out and counts them."""

    def __init__(self, kube: KubeApi, api: VolcanoApi, store: RunStore, recorder: Recorder,
                 deleted_by_us: set[str]) -> None:
        self.kube = kube
        self.api = api
        self.store = store
        self.recorder = recorder
        self.deleted_by_us = deleted_by_us
        self.actions = 0  # acts carried out by this process (for benchmarks and tests)
        self.last_action_at: dict[str, float] = {}

    def _count(self, tracked: Tracked) -> None:
        self.actions += 1
        self.last_action_at[tracked.name] = time.time()

    def act(self, tracked: Tracked, record: RoundRecord, progress: dict[str, Any]) -> None:
        """Carry the round's action out, idempotently, and mark the progress ``acted``."""
        acting = time.monotonic()
        self.store.mark_acted(record.job_id, record.round)
        action = record.action
        kind = tracked.kind
        done_note = ""
        if action is Action.REPLACE_INSTANCES:
            grace = tracked.settings.grace_seconds if tracked.settings else None
            for name, uid in progress["pods"].items():
                if tracked.pods.get(name, {}).get("metadata", {}).get("uid") != uid:
                    continue  # gone already, or replaced: never delete the replacement
                self.deleted_by_us.add(uid)
                self.api.delete_pod(tracked.namespace, name, uid, grace=grace)
        elif action is Action.RESCHEDULE_ISOLATED or (kind is BATCH and action is not Action.FAIL):
            self._recreate(tracked, record, progress)
            self._count(tracked)
            return  # the recreated job carries its progress (acted) already
        else:
            if version(kind, tracked.job) > int(progress.get("version", 0)):
                done_note = "Volcano had restarted the job already"
            elif not self.api.command(tracked.job, "RestartJob", f"{tracked.name}-tg-{record.round}"):
                done_note = "the Command had been sent already"
        self._count(tracked)
        self.recorder.round_event(tracked, record)
        progress = {**progress, "stage": "acted", "acted": time.time(), "stop": time.monotonic() - acting}
        if done_note:
            log.info("[%s] round %s: %s", record.job_id, record.round, done_note)
        self.recorder.annotate(tracked, {notes.PROGRESS: json.dumps(progress)})
        maybe_die("acted")

    def _recreate(self, tracked: Tracked, record: RoundRecord, progress: dict[str, Any]) -> None:
        """Recreate the job under its name, away from the avoided nodes; driven by a ConfigMap
        holding the new manifest, so a controller killed half way finishes it."""
        avoid = sorted(self.store.avoided_nodes(record.job_id) | set(record.isolated))
        acted = {**progress, "stage": "acted", "acted": time.time(), "avoid": avoid}
        manifest = recreated(tracked.kind, tracked.job, avoid=avoid,
                             annotations={notes.PROGRESS: json.dumps(acted), notes.JOB_ID: record.job_id})
        cm_name = f"trainguard-recreate-{tracked.name}"[:253]
        body = {"metadata": {"name": cm_name, "namespace": tracked.namespace,
                             "labels": {RECREATE_LABEL: "true"}},
                "data": {"kind": tracked.kind.name, "old-uid": tracked.uid, "manifest": json.dumps(manifest)}}
        try:
            self.kube.call(self.kube.core.create_namespaced_config_map, tracked.namespace, body, _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 409:
                raise
        self.recorder.round_event(tracked, record)
        self._finish_recreation(tracked.namespace, cm_name)

    def _finish_recreation(self, namespace: str, cm_name: str) -> None:
        try:
            cm = self.kube.json(self.kube.core.read_namespaced_config_map, cm_name, namespace)
        except Exception as exc:
            if status_of(exc) == 404:
                return
            raise
        kind = KINDS[cm["data"]["kind"]]
        manifest = json.loads(cm["data"]["manifest"])
        name = manifest["metadata"]["name"]
        old_uid = cm["data"]["old-uid"]
        deadline = time.monotonic() + 120
        while True:
            current = self.api.get_job(kind, namespace, name)
            if current is None:
                break
            if current["metadata"].get("uid") != old_uid:
                break  # created already
            self.api.delete_job(kind, namespace, name)
            if time.monotonic() > deadline:
                raise TrainguardError(f"job {namespace}/{name} was not deleted within 120 s")
            time.sleep(0.2)
        maybe_die("deleted")
        if current is None:
            self.api.create_job(kind, namespace, manifest)
        try:
            self.kube.call(self.kube.core.delete_namespaced_config_map, cm_name, namespace, _preload_content=False)
        except Exception as exc:
            if status_of(exc) != 404:
                raise

    def resume_recreations(self, namespace: str | None) -> None:
        """Recreations a dead controller left half done (the job deleted, not yet created)."""
        ns = namespace
        try:
            if ns:
                listed = self.kube.json(self.kube.core.list_namespaced_config_map, ns, label_selector=RECREATE_LABEL)
            else:
                listed = self.kube.json(self.kube.core.list_config_map_for_all_namespaces, label_selector=RECREATE_LABEL)
        except Exception as exc:
            log.warning("cannot look for unfinished recreations: %s", exc)
            return
        for cm in listed.get("items") or []:
            log.info("finishing the recreation %s/%s a previous controller began", cm["metadata"]["namespace"],
                     cm["metadata"]["name"])
            self._finish_recreation(cm["metadata"]["namespace"], cm["metadata"]["name"])

    def give_up(self, tracked: Tracked, failure: RoundRecord) -> None:
        """Fail the job for good: record why, abort it, say so on the job."""
        job_id = failure.job_id
        self.store.finish_job(job_id, JobStatus.FAILED, failure)
        if tracked.kind is VOLCANO:
            self.api.command(tracked.job, "AbortJob", f"{tracked.name}-tg-abort")
        else:
            self.api.suspend(tracked.namespace, tracked.name)
        self._count(tracked)
        self.recorder.event(tracked, "tg-giveup", "TrainguardGiveUp",
                            f"giving up after {failure.error_code} in {failure.instance}: {failure.reason}",
                            warning=True)
        status = status_note(failure.round - 1, "fail", failure.reason, "failed")
        self.recorder.annotate(tracked, {notes.STATUS: status, notes.JOB_ID: job_id})
        log.warning("[%s] giving up: %s", job_id, failure.reason)
