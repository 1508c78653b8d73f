"""A job's rounds: diagnose the fault, decide, open the round, act; carry on a half-done round
from its progress annotation; and record the job's end.

A round's progress lives on the job in ``trainguard.io/progress`` (``{"round", "stage", "action",
"version", "pods", ...}``) and in the store (opened ``in_progress`` before anything is done, marked
acted just before acting). :meth:`Rounds.resume` goes on from the stage: ``acting`` acts again
(:mod:`trainguard.controller.actions` is idempotent), ``acted`` waits for the job to run again and
closes the round, as recovered or, after :data:`RECOVERY_DEADLINE`, as failed.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import Any

from trainguard.adapters.kubernetes.client import KubeApi
from trainguard.adapters.volcano import VOLCANO, phase, pod_rank, version, world_size
from trainguard.controller import annotations as notes
from trainguard.controller.actions import Actuator, maybe_die
from trainguard.controller.deciding import capacity, cce_decision
from trainguard.controller.detection import Detector
from trainguard.controller.recording import Recorder
from trainguard.controller.tracked import Tracked, current_pods, job_id, stop_followers
from trainguard.hooks import PluginHost
from trainguard.model import (
    Action,
    ErrorSource,
    Fault,
    Incident,
    JobStatus,
    NodeFaultEntry,
    RoundRecord,
    RoundResult,
)
from trainguard.store import RunStore

log = logging.getLogger(__name__)

# Rounds whose job is not running again after this long are closed as failed.
RECOVERY_DEADLINE = 600.0


class Rounds:
    """Runs, resumes and closes the rounds of the jobs the controller supervises."""

    def __init__(self, store: RunStore, host: PluginHost, kube: KubeApi, recorder: Recorder, actuator: Actuator,
                 detector: Detector) -> None:
        self.store = store
        self.host = host
        self.kube = kube
        self.recorder = recorder
        self.actuator = actuator
        self.detector = detector

    def _begin(self, tracked: Tracked, jid: str) -> None:
        if self.store.job(jid) is None:
            spec = {"command": [f"{tracked.kind.name}-job", f"{tracked.namespace}/{tracked.name}"],
                    "nproc": world_size(tracked.kind, tracked.job), "nodes": None,
                    "kind": tracked.kind.name, "namespace": tracked.namespace, "name": tracked.name}
            assert tracked.settings is not None
            self.store.begin_job(jid, spec, tracked.settings.policy.to_json())
        else:
            # Not begin_job: a round a dead controller left in progress is to be finished, not
            # closed as interrupted.
            self.store.acquire(jid, takeover=True)

    def round(self, tracked: Tracked, pods: list[dict[str, Any]], *, given: tuple[Fault, str] | None = None) -> None:
        """One fault → diagnose → decide → act; ``given`` is a fault found otherwise than by a
        pod's failure (a hang, a force deletion) with its log tail."""
        settings = tracked.settings
        assert settings is not None
        started = time.monotonic()
        jid = job_id(tracked)
        self._begin(tracked, jid)
        if given is not None:
            faults, root_tail = [given[0]], given[1]
        else:
            judged = [self.detector.fault_of(tracked, pod) for pod in pods]
            judged.sort(key=lambda pair: pair[0].detected_at)
            faults, root_tail = [f for f, _ in judged], judged[0][1]
            pods = sorted(pods, key=lambda p: next(f.detected_at for f, _ in judged
                                                   if f.rank == pod_rank(tracked.kind, tracked.job, p)))
        incident = Incident(tuple(faults))
        root = incident.root
        verdict = self.host.classify(root, root_tail, settings.policy)
        history = self.store.history(jid)
        avoided = frozenset(history.isolated_nodes)
        decision = cce_decision(tracked, pods, root, verdict, history) or self.host.decide(
            incident, verdict, history, settings.policy, capacity(self.kube, tracked, avoided))
        diagnose = time.monotonic() - started
        stop_followers(tracked)
        tracked.started_watching.clear()
        node = verdict.node or root.node
        self.store.add_faults(jid, [(f, verdict if f is root else None, None, f is root) for f in faults])
        if node and (verdict.node_fault or decision.isolate):
            self.store.add_ledger(jid, NodeFaultEntry(node, verdict.fault_code, root.detected_at,
                                                      verdict.user_error, verdict.gpu))
        for pod in pods:
            tracked.handled.add(pod["metadata"]["uid"])
        record = RoundRecord(
            jid, self.store.next_round(jid), decision.reason, verdict.fault_code, verdict.evidence[:500],
            root.source, decision.action, root.detected_at, node=node, instance=pods[0]["metadata"]["name"],
            ranks=incident.failed_ranks, stages={"diagnose": diagnose}, consumes_budget=decision.consumes_budget,
            unconditional=decision.unconditional, user_error=verdict.user_error, node_fault=verdict.node_fault,
            isolated=tuple(decision.isolate))
        if decision.action is Action.FAIL:
            self.actuator.give_up(tracked, replace(record, result=RoundResult.FAILED))
            return
        if decision.action is Action.NOTIFY:
            self.recorder.event(tracked, f"tg-notify-{pods[0]['metadata']['uid'][:8]}", "TrainguardNotice",
                                f"{verdict.fault_code}: {decision.reason}", warning=True)
            return
        self.store.open_round(record)
        progress = {"round": record.round, "stage": "acting", "action": record.action.value,
                    "version": version(tracked.kind, tracked.job), "uid": tracked.uid, "jobId": jid,
                    "pods": {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods},
                    "since": time.time()}
        self.recorder.annotate(tracked, {notes.PROGRESS: json.dumps(progress), notes.JOB_ID: jid})
        maybe_die("acting")
        self.actuator.act(tracked, record, progress)

    def _record(self, jid: str, round_no: int) -> RoundRecord | None:
        return next((r for r in self.store.rounds(jid) if r.round == round_no), None)

    def resume(self, tracked: Tracked, progress: dict[str, Any]) -> None:
        """Carry a round on from where the annotation says it is."""
        jid = progress.get("jobId") or job_id(tracked)
        round_no = int(progress.get("round", 0))
        record = self._record(jid, round_no)
        if record is None or record.result is not RoundResult.IN_PROGRESS:
            self.recorder.annotate(tracked, {notes.PROGRESS: None})
            return
        self._begin(tracked, jid)
        if progress.get("stage") == "acting":
            log.info("[%s] round %s was interrupted before it was acted on; acting now", jid, round_no)
            tracked.handled.update(progress.get("pods", {}).values())
            self.actuator.act(tracked, record, progress)
            return
        kind = tracked.kind
        state = phase(kind, tracked.job)
        recovered = False
        if state == "Completed":
            recovered = True
        elif state in ("Failed", "Aborted", "Terminated"):
            reason = ((tracked.job.get("status") or {}).get("state") or {}).get("reason") or state
            self.recorder.close(tracked, replace(record, result=RoundResult.FAILED,
                                                 notes=(*record.notes, f"the job ended {state} ({reason}) before "
                                                                       "it ran again")))
            self.finish(tracked)
            return
        elif state == "Running":
            running = [p for p in current_pods(tracked)
                       if (p.get("status") or {}).get("phase") in ("Running", "Succeeded")]
            if record.action is Action.REPLACE_INSTANCES:
                recovered = all(tracked.pods.get(name, {}).get("metadata", {}).get("uid") not in (None, uid)
                                and (tracked.pods[name].get("status") or {}).get("phase") in ("Running", "Succeeded")
                                for name, uid in progress.get("pods", {}).items())
            elif kind is VOLCANO and record.action is not Action.RESCHEDULE_ISOLATED:
                recovered = (version(kind, tracked.job) > int(progress.get("version", 0))
                             and len(running) >= world_size(kind, tracked.job))
            else:
                recovered = tracked.uid != progress.get("uid") and len(running) >= world_size(kind, tracked.job)
        if recovered:
            restart = time.time() - float(progress.get("acted", time.time()))
            stages = {**record.stages, "stop": float(progress.get("stop", 0.0)), "restart": restart}
            self.recorder.close(tracked, replace(record, result=RoundResult.RECOVERED, stages=stages))
        elif time.time() - float(progress.get("acted", time.time())) > RECOVERY_DEADLINE:
            self.recorder.close(tracked, replace(record, result=RoundResult.FAILED,
                                                 notes=(*record.notes, f"not running again {RECOVERY_DEADLINE:g} s "
                                                                       "after the action")))

    def finish(self, tracked: Tracked) -> None:
        """The job ended: record it as succeeded or failed, unless it was recorded already."""
        stop_followers(tracked)
        jid = job_id(tracked)
        known = self.store.job(jid)
        if known is None or known["status"] is not JobStatus.RUNNING:
            return
        state = phase(tracked.kind, tracked.job)
        if state == "Completed":
            self.store.finish_job(jid, JobStatus.SUCCEEDED)
        else:
            reason = ((tracked.job.get("status") or {}).get("state") or {}).get("reason") or state
            rounds = self.store.rounds(jid)
            failure = RoundRecord(jid, len(rounds) + 1, f"the job ended {state} ({reason})", "TG-JOB-" + state.upper(),
                                  "", ErrorSource.EVENT, Action.FAIL, time.time(), result=RoundResult.FAILED)
            self.store.finish_job(jid, JobStatus.FAILED, failure)
