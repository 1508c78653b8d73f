"""The controller: supervises Volcano Jobs and batch/v1 Jobs that carry trainguard annotations.

This module owns the main loop: leadership, the work queue, and reconciling one job from what
the cache says now. It is level-based. Two list+watches per kind (jobs, and pods by their job
label) keep a cache; every change queues the job, and one worker reconciles a job at a time. A
job's recovery is a *round*, as under ``trainguard run``: classify the failed pods (exit code, log
tail, pod status and events) or a hang (no log output for ``job-hang-interval``), decide with the
same hooks, ladder and budgets, act, and record it in the run history.

A round's progress lives on the job itself, in the annotation ``trainguard.io/progress``
(``{"round", "stage", "action", "version", "pods", ...}``), and in the store (the round is opened
``in_progress`` before anything is done and marked acted just before acting), so a controller
killed at any point is replaced by one that finishes the round instead of starting another:

====================  ================================================================
stage                 what a new controller does
====================  ================================================================
(round open, no       annotate and act (nothing was done yet)
annotation)
``acting``            act again; every action is idempotent: a Command has the name
                      ``<job>-tg-<round>`` (409 if sent), the job's ``status.version``
                      tells whether Volcano restarted it, pods are deleted by uid, and a
                      recreation is driven by a ConfigMap ``trainguard-recreate-<job>``
``acted``             wait until the job runs again, then close the round
====================  ================================================================

Rounds are Events on the job (``TrainguardRestart``, ``TrainguardIsolate``, ``TrainguardReplace``,
``TrainguardGiveUp``, ``TrainguardBadAnnotation``, ...) with deterministic names, so a repeat is
refused by the API server; ``trainguard.io/status`` holds the last round's summary.

Only the leader (a coordination Lease) acts. The environment variable
``TRAINGUARD_CONTROLLER_DIE_AT=<stage>`` makes the process SIGKILL itself once right after that
stage: a fault-injection point for the restart tests.

The parts, each in its module of this package:

==================  ==============================================================
``tracked``         one job as the controller knows it; its round progress
``cache``           the watch cache of jobs and pods, and the work queue
``detection``       failed pods' faults, force deletions, hangs
``deciding``        CCE ``faultTolerantPolicy`` rules and the cluster's capacity
``rounds``          a round from fault to closing; resuming a half-done one
``actions``         Commands, pod deletions, recreation, giving up
``recording``       Events, status and progress annotations
==================  ==============================================================
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.adapters.kubernetes.client import KubeApi
from trainguard.adapters.volcano import BATCH, KINDS, VolcanoApi, finished, phase
from trainguard.controller.actions import Actuator
from trainguard.controller.cache import JobCache
from trainguard.controller.detection import Detector
from trainguard.controller.leader import LeaderElector
from trainguard.controller.recording import Recorder
from trainguard.controller.rounds import Rounds
from trainguard.controller.tracked import Tracked, failed_pods, progress_of
from trainguard.hooks import PluginHost
from trainguard.store import RunStore

log = logging.getLogger(__name__)


@dataclass
class ControllerOptions:
    namespace: str | None = None
    state_dir: Path = Path(".")
    state_url: str | None = None
    identity: str = ""
    lease_namespace: str = "default"
    lease_name: str = "trainguard-controller"
    lease_duration: float = 15.0
    watch_timeout: int = 300
    tick: float = 1.0
    kinds: tuple[str, ...] = ("volcano", "batch")


class Controller:
    """Watches, decides and acts; :meth:`run` until ``stop`` is set or leadership is lost."""

    def __init__(self, api_client: Any, options: ControllerOptions, *, host: PluginHost | None = None) -> None:
        self.options = options
        self.kube = KubeApi(api_client, job_id="controller")
        self.api = VolcanoApi(self.kube)
        self.store = RunStore(options.state_dir, url=options.state_url)
        self.host = host or PluginHost()
        self.identity = options.identity or f"{os.uname().nodename}-{os.getpid()}"
        self.elector = LeaderElector(self.kube, options.lease_namespace, options.lease_name, self.identity,
                                     duration=options.lease_duration)
        self.kinds = [KINDS[k] for k in options.kinds]
        self.cache = JobCache()
        self.recorder = Recorder(self.api, self.store)
        self.actuator = Actuator(self.kube, self.api, self.store, self.recorder, self.cache.deleted_by_us)
        self.detector = Detector(self.kube, self.api, options.state_dir)
        self.rounds = Rounds(self.store, self.host, self.kube, self.recorder, self.actuator, self.detector)

    @property
    def jobs(self) -> dict[str, Tracked]:
        """The supervised jobs by key, as the watches last saw them."""
        return self.cache.jobs

    @property
    def actions(self) -> int:
        """Acts carried out by this process (for benchmarks and tests)."""
        return self.actuator.actions

    @property
    def last_action_at(self) -> dict[str, float]:
        """When this process last acted on each job, by job name."""
        return self.actuator.last_action_at

    def run(self, stop: threading.Event) -> int:
        """Lead and reconcile until ``stop``; 0 on a clean stop, 1 when leadership was lost."""
        log.info("controller %s: waiting for the lease %s/%s", self.identity, self.options.lease_namespace,
                 self.options.lease_name)
        if not self.elector.wait_for_leadership(stop):
            return 0
        log.info("controller %s: leading; watching %s in %s", self.identity, ", ".join(k.name for k in self.kinds),
                 self.options.namespace or "all namespaces")
        try:
            self.cache.start(self.kube, self.api, self.kinds, self.options.namespace, self.options.watch_timeout)
            self.actuator.resume_recreations(self.options.namespace)
            next_tick = time.monotonic()
            while not stop.is_set():
                if self.elector.lost.is_set():
                    return 1
                key = self.cache.take(max(0.0, next_tick - time.monotonic()))
                if key is not None:
                    self._reconcile_safely(key)
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self.options.tick
                    for key in self.cache.ticking():
                        self._reconcile_safely(key)
            return 0
        finally:
            self.cache.stop()
            self.elector.release()
            self.store.close()

    def _reconcile_safely(self, key: str) -> None:
        if not self.elector.still_leader():
            return
        try:
            self.reconcile(key)
        except Exception as exc:  # one job's trouble never stops the controller
            log.exception("[%s] reconcile failed: %s", key, exc)

    def reconcile(self, key: str) -> None:
        """Bring one job along from what the cache says now: resume its round, start one for a
        fault, record its end, or check it for hangs."""
        tracked = self.cache.get(key)
        if tracked is None:
            return
        if not self.recorder.read_settings(tracked):
            return
        progress = progress_of(tracked)
        if progress is not None and progress.get("stage") != "done":
            self.rounds.resume(tracked, progress)
            return
        state = phase(tracked.kind, tracked.job)
        # A batch Job its controller failed (backoffLimit) can still be recreated; a Volcano Job
        # that ended cannot be restarted.
        if state not in ("Restarting", "Aborting", "Terminating", "Suspended") and (
                tracked.kind is BATCH and state == "Failed" or not finished(tracked.kind, tracked.job)):
            faults = failed_pods(tracked)
            if faults:
                self.rounds.round(tracked, faults)
                return
        if finished(tracked.kind, tracked.job):
            self.rounds.finish(tracked)
            return
        if state in ("Restarting", "Aborting", "Terminating"):
            return
        if tracked.force_deleted:
            for pod, given in self.detector.force_deleted(tracked):
                self.rounds.round(tracked, [pod], given=given)
            return
        hang = self.detector.hang(tracked)
        if hang is not None:
            self.rounds.round(tracked, [hang[0]], given=hang[1])
