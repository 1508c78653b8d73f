"""Deciding a controller round beyond the hooks: a job's CCE ``faultTolerantPolicy`` rules, which
decide before the hooks when the job has them, and the cluster's capacity the hooks decide with.
"""

from __future__ import annotations

from typing import Any

from trainguard.adapters.kubernetes import nodes as node_api
from trainguard.adapters.kubernetes import status as pod_status
from trainguard.adapters.kubernetes.client import KubeApi
from trainguard.adapters.volcano import world_size
from trainguard.controller.tracked import Tracked
from trainguard.model import Action, Capacity, Decision, ErrorSource, Fault, History, Verdict


def capacity(kube: KubeApi, tracked: Tracked, avoided: frozenset[str]) -> Capacity:
    """The schedulable (Ready, uncordoned) nodes and pods per node, from the Node list; a
    stand-in when unreadable. Volcano and the Job controller recreate a deleted pod from the
    job's template, so a replacement cannot be steered off a node that is still schedulable."""
    size = world_size(tracked.kind, tracked.job)
    try:
        listed = kube.json(kube.core.list_node, patience=10)
        nodes = tuple(n["metadata"]["name"] for n in listed.get("items") or [] if node_api.is_schedulable(n))
        slots = max(1, -(-size // max(1, len(nodes))))
        per_node = max(slots, max((int((n.get("status") or {}).get("allocatable", {}).get("pods", 0) or 0)
                                   for n in listed.get("items") or []), default=slots))
        return Capacity(nodes, per_node, size, isolated=avoided, steers_replacements=False)
    except Exception:  # nodes may not be readable: the scheduler will say if nothing fits
        return Capacity(("(cluster)", "(spare)"), size, size, isolated=frozenset(), steers_replacements=False)


def cce_decision(tracked: Tracked, pods: list[dict[str, Any]], fault: Fault, verdict: Verdict,
                 history: History) -> Decision | None:
    """The decision of the failed pod's task's ``faultTolerantPolicy``; ``None`` leaves it to the hooks."""
    cce = tracked.settings.cce if tracked.settings else None
    if cce is None or fault.source is ErrorSource.HANG:
        return None
    pod = pods[0]
    task = (pod["metadata"].get("labels") or {}).get("volcano.sh/task-spec", "main")
    replica = cce.replicas.get(task)
    if replica is None:
        return None
    status = pod.get("status") or {}
    node_failed = status.get("reason") == "NodeLost" or any(
        c.get("type") == "DisruptionTarget" for c in status.get("conditions") or [])
    events = {"nodenotready"} if node_failed else ({"podevicted"} if status.get("reason") == "Evicted" else set())
    if "PodForceDeleted" in fault.message:
        events = {"podforcedeleted"}
    # The container's own exit code as the rules write it (129 is a code here, not SIGHUP).
    raw = (pod_status.terminated(pod) or {}).get("exitCode")
    code = int(raw) if raw is not None else None
    for rule in replica.rules:
        by_code = (rule.restart_policy in ("ExitCode", "OnNodeFailWithExitCode") and code is not None
                   and code in rule.exit_codes)
        by_event = rule.restart_policy in ("OnNodeFail", "OnNodeFailWithExitCode") and bool(events & rule.events)
        if not (by_code or by_event):
            continue
        used = sum(1 for r in history.rounds if f"task {task}" in r.reason)
        if replica.restart_limit and used >= replica.restart_limit:
            return Decision(Action.FAIL, f"faultTolerantPolicy of task {task}: restartLimit {replica.restart_limit} "
                                         "reached", consumes_budget=False, strategy="cce")
        why = f"exit code {code}" if by_code else f"{', '.join(sorted(events))}"
        isolate = (fault.node,) if by_event and fault.node else ()
        if rule.restart_scope == "Pod":
            return Decision(Action.REPLACE_INSTANCES, f"faultTolerantPolicy of task {task}: {why} → restart the "
                                                      "pod", consumes_budget=False, isolate=isolate,
                            ranks=(fault.rank,) if fault.rank is not None else (), strategy="cce")
        return Decision(Action.RESTART_JOB, f"faultTolerantPolicy of task {task}: {why} → restart the job",
                        isolate=isolate, strategy="cce")
    if replica.fail_policy == "None":
        return Decision(Action.NOTIFY, f"task {task} failed ({verdict.fault_code}); no faultTolerantPolicy rule "
                                       "covers it and its failPolicy is None", consumes_budget=False, strategy="cce")
    return Decision(Action.FAIL, f"task {task} failed ({verdict.fault_code}, exit code {code}); no "
                                 "faultTolerantPolicy rule covers it", consumes_budget=False, strategy="cce")
