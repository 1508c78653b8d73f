"""Job annotations (and labels) → what the controller does about a job's faults.

Vocabularies accepted as users already write them:

* ``trainguard.io/<parameter>`` for every policy parameter (``trainguard.io/max-num-of-job-restart``,
  ``trainguard.io/job-hang-interval``, ...); the older ``trainguard/<parameter>`` keeps working.
* ModelArts (seed 002): ``fault-tolerance/job-retry-num`` (1-128), ``job-unconditional-retry``,
  ``hang-retry``, ``pod-retry-num`` (see :func:`trainguard.policy.from_annotations`).
* MindCluster (seed 003): ``fault-retry-times`` (N job-level retries), ``pod-rescheduling``
  (``on``: pod-level rescheduling first), ``fault-scheduling`` (label or annotation: ``grace``
  stops pods with their grace period, ``force`` deletes them at once, ``off`` turns recovery off),
  and ``recover-strategy`` (comma-separated), mapped so:

  ==================  ================================================================
  value               what the controller does
  ==================  ================================================================
  recover-in-place    in-place recovery first (``restart_in_place``: under Volcano a
                      ``RestartJob``, since a container of a ``restartPolicy: Never`` pod
                      cannot be restarted from outside)
  recover             process-level rescheduling: the failed pods are replaced
                      (``replace_instances``) before the job is restarted
  exit                with no other strategy: give up at the first fault
  retry               cannot apply: online recovery repairs a step inside the running
                      processes (MindIO TTP); the job is restarted instead
  elastic-training    cannot apply: shrinking needs the framework's elastic agent; the
                      job is restarted at its size instead
  dump                cannot apply: the dying-gasp checkpoint is written by the
                      training process itself; pods get their grace period to write it
  ==================  ================================================================

* CCE AI Training (seed 004): ``trainguard.io/cce-replica-specs``, a YAML or JSON mapping of task
  name to the replica spec fields of an ``AITrainingJob`` as written there
  (``faultTolerantPolicy`` rules of ``exitCodes`` / ``exceptionalEvent``, ``restartPolicy``,
  ``restartScope``; ``restartLimit``; ``failPolicy``); see :class:`CceRules`.

Any bad value raises :class:`~trainguard.errors.PolicyError` naming the key; the controller turns
it into an Event on the job and leaves the job to its own policies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

from trainguard.errors import PolicyError
from trainguard.policy import ANNOTATION_PREFIX, Policy, build_policy, from_annotations

DOMAIN = "trainguard.io/"
# trainguard.io/ keys that are the controller's own bookkeeping or non-policy settings.
JOB_ID = DOMAIN + "job-id"
STATUS = DOMAIN + "status"
PROGRESS = DOMAIN + "progress"
CCE = DOMAIN + "cce-replica-specs"
OWN_KEYS = frozenset({JOB_ID, STATUS, PROGRESS, CCE})
MINDCLUSTER_KEYS = ("recover-strategy", "fault-retry-times", "pod-rescheduling", "fault-scheduling")
RECOVER_STRATEGIES = ("retry", "recover", "recover-in-place", "elastic-training", "dump", "exit")
_NOT_APPLICABLE = {
    "retry": "recover-strategy retry (process-level online recovery) needs MindIO TTP inside the training "
             "processes; the controller restarts the job instead",
    "elastic-training": "recover-strategy elastic-training needs the framework's elastic agent; the controller "
                        "restarts the job at its size instead",
    "dump": "recover-strategy dump (dying-gasp checkpoint) is written by the training process; pods get their "
            "grace period to write it",
}


def supervised(annotations: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether a job asks for trainguard: any key of the vocabularies above."""
    for key in annotations:
        if key.startswith((DOMAIN, ANNOTATION_PREFIX, "fault-tolerance/")) and key not in (STATUS, PROGRESS, JOB_ID):
            return True
        if key in MINDCLUSTER_KEYS:
            return True
    return "fault-scheduling" in labels


@dataclass(frozen=True)
class CceRule:
    """One ``faultTolerantPolicy`` rule: exit codes or exceptional events → restart scope."""

    exit_codes: frozenset[int] = frozenset()
    events: frozenset[str] = frozenset()
    restart_policy: str = "ExitCode"
    restart_scope: str = "Pod"


@dataclass(frozen=True)
class CceReplica:
    rules: tuple[CceRule, ...]
    restart_limit: int = 0
    fail_policy: str = "Any"
    restart_scope: str = "Pod"


@dataclass(frozen=True)
class CceRules:
    """Seed 004's per-replica rules. A pod of a listed task that fails with one of a rule's
    ``exitCodes`` (restartPolicy ExitCode / OnNodeFailWithExitCode) or through one of its
    ``exceptionalEvent`` (nodeNotReady, PodEvicted, PodForceDeleted; restartPolicy OnNodeFail /
    OnNodeFailWithExitCode) is restarted at the rule's ``restartScope`` (Pod: only that pod is
    replaced, on another node when its node failed; anything else: the job is restarted),
    at most ``restartLimit`` times per task. A failure no rule covers is not restarted: with
    ``failPolicy: None`` the replica's failure is only reported, otherwise the job fails."""

    replicas: Mapping[str, CceReplica] = field(default_factory=dict)


@dataclass(frozen=True)
class JobSettings:
    """Everything the annotations say: the policy, CCE rules, pod deletion grace, and notes on
    values that cannot apply (reported once as a Normal Event)."""

    policy: Policy
    cce: CceRules | None = None
    grace_seconds: int | None = None
    notes: tuple[str, ...] = ()


def _split(value: str) -> list[str]:
    return [part.strip() for part in str(value).split(",") if part.strip()]


def _cce(text: str) -> CceRules:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(CCE, f"is not YAML or JSON: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict) and isinstance(data.get("replicaSpecs"), dict):
        data = data["replicaSpecs"]
    if not isinstance(data, dict) or not data:
        raise PolicyError(CCE, "must map task names to replica specs (faultTolerantPolicy, restartLimit, ...)")
    replicas = {}
    for task, spec in data.items():
        if not isinstance(spec, dict):
            raise PolicyError(CCE, f"{task}: a replica spec must be a mapping")
        rules = []
        for i, rule in enumerate(spec.get("faultTolerantPolicy") or []):
            if not isinstance(rule, dict):
                raise PolicyError(CCE, f"{task}.faultTolerantPolicy[{i}] must be a mapping")
            try:
                codes = frozenset(int(c) for c in _split(",".join(map(str, rule["exitCodes"])) if isinstance(
                    rule.get("exitCodes"), list) else rule.get("exitCodes", "")))
            except ValueError:
                raise PolicyError(CCE, f"{task}.faultTolerantPolicy[{i}].exitCodes: {rule.get('exitCodes')!r} "
                                       "is not a list of exit codes") from None
            events = frozenset(e.lower() for e in _split(rule.get("exceptionalEvent", "")))
            unknown = events - {"nodenotready", "podevicted", "podforcedeleted"}
            if unknown:
                raise PolicyError(CCE, f"{task}.faultTolerantPolicy[{i}].exceptionalEvent: unknown "
                                       f"{', '.join(sorted(unknown))} (nodeNotReady, PodEvicted, PodForceDeleted)")
            policy = str(rule.get("restartPolicy", "OnNodeFailWithExitCode"))
            if policy not in ("ExitCode", "OnNodeFail", "OnNodeFailWithExitCode", "Never"):
                raise PolicyError(CCE, f"{task}.faultTolerantPolicy[{i}].restartPolicy: {policy!r} is not "
                                       "ExitCode, OnNodeFail, OnNodeFailWithExitCode or Never")
            if not codes and not events:
                raise PolicyError(CCE, f"{task}.faultTolerantPolicy[{i}] needs exitCodes or exceptionalEvent")
            rules.append(CceRule(codes, events, policy, str(rule.get("restartScope", spec.get("restartScope", "Pod")))))
        try:
            limit = int(spec.get("restartLimit", 0))
        except (TypeError, ValueError):
            raise PolicyError(CCE, f"{task}.restartLimit: {spec.get('restartLimit')!r} is not a number") from None
        replicas[str(task)] = CceReplica(tuple(rules), max(limit, 0), str(spec.get("failPolicy", "Any")),
                                         str(spec.get("restartScope", "Pod")))
    return CceRules(replicas)


def parse(annotations: Mapping[str, str], labels: Mapping[str, str] | None = None) -> JobSettings:
    """The job's settings; :class:`PolicyError` (naming the key) for any bad value."""
    labels = labels or {}
    ours = {ANNOTATION_PREFIX + k[len(DOMAIN):]: v for k, v in annotations.items()
            if k.startswith(DOMAIN) and k not in OWN_KEYS}
    policy = from_annotations({**{k: v for k, v in annotations.items() if not k.startswith(DOMAIN)}, **ours})
    layer: dict[str, Any] = {}
    notes: list[str] = []
    grace: int | None = None
    retries = annotations.get("fault-retry-times")
    if retries is not None:
        try:
            layer.update(enable_job_restart=True, max_num_of_job_restart=int(retries))
        except ValueError:
            raise PolicyError("fault-retry-times", f"{retries!r} is not a whole number") from None
        if int(retries) < 0:
            raise PolicyError("fault-retry-times", f"{retries!r} must be 0 or more")
    budget = layer.get("max_num_of_job_restart", policy.max_num_of_job_restart)
    rescheduling = annotations.get("pod-rescheduling")
    if rescheduling is not None:
        if rescheduling.strip().lower() not in ("on", "off"):
            raise PolicyError("pod-rescheduling", f"{rescheduling!r} is not on or off")
        layer["max_num_of_pod_restart"] = budget if rescheduling.strip().lower() == "on" else 0
    strategies = annotations.get("recover-strategy")
    if strategies is not None:
        chosen = [s.lower() for s in _split(strategies)]
        unknown = [s for s in chosen if s not in RECOVER_STRATEGIES]
        if unknown or not chosen:
            raise PolicyError("recover-strategy", f"{strategies!r}: each value must be one of "
                                                  f"{', '.join(RECOVER_STRATEGIES)}")
        if "recover-in-place" in chosen:
            layer["enable_in_place_restart"] = True
        if "recover" in chosen:
            layer["max_num_of_pod_restart"] = max(layer.get("max_num_of_pod_restart", 0), budget, 1)
        if chosen == ["exit"]:
            layer["fault_tolerant_policy"] = "Never"
        notes.extend(_NOT_APPLICABLE[s] for s in chosen if s in _NOT_APPLICABLE)
    scheduling = labels.get("fault-scheduling", annotations.get("fault-scheduling"))
    if scheduling is not None:
        value = scheduling.strip().lower()
        if value not in ("grace", "force", "off"):
            raise PolicyError("fault-scheduling", f"{scheduling!r} is not grace, force or off")
        if value == "force":
            grace = 0
        elif value == "off":
            layer.update(enable_job_restart=False, max_num_of_pod_restart=0)
    cce = _cce(annotations[CCE]) if CCE in annotations else None
    return JobSettings(build_policy(layer, base=policy), cce, grace, tuple(notes))


def fingerprint(annotations: Mapping[str, str], labels: Mapping[str, str]) -> str:
    """A stable digest of what :func:`parse` reads, to notice a change."""
    relevant = {k: v for k, v in annotations.items() if k not in (STATUS, PROGRESS)}
    relevant["label:fault-scheduling"] = labels.get("fault-scheduling", "")
    return json.dumps(relevant, sort_keys=True)
