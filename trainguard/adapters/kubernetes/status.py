"""What a pod's status says about how its rank ended, as an exit code and as log lines.

The lines go to the end of the rank's log, where the classifiers read them with the output::

    [trainguard] pod job-1-r0 on node node-2: terminated reason=OOMKilled exitCode=137
    [trainguard] pod job-1-r0 on node node-1: status reason=NodeLost: Node node-1 ... is unresponsive
    [trainguard] pod job-1-r0: condition DisruptionTarget reason=DeletionByTaintManager: ...
    [trainguard] pod job-1-r0: event FailedScheduling (Warning): 0/3 nodes are available: ...
"""

from __future__ import annotations

import signal
from typing import Any, Iterable

_TERMINAL = ("Succeeded", "Failed")
# Events worth a line: every Warning, and these Normal ones that explain an ending.
_NOTABLE = {"Killing", "Evicted", "Preempted", "Preempting", "TaintManagerEviction", "NodeNotReady"}


def is_terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in _TERMINAL


def terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The main container's ``terminated`` state, if it has one."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if state:
            return state
    return None


def exit_code(pod: dict[str, Any], *, gone: bool = False) -> int:
    """The rank's exit code: the container's, negative for 128+signal; SIGKILL when the pod
    ended without one (evicted, node lost, deleted under it)."""
    if (pod.get("status") or {}).get("phase") == "Succeeded":
        return 0
    state = terminated(pod)
    if state is None or state.get("exitCode") is None:
        return -signal.SIGKILL
    code = int(state["exitCode"])
    if 128 < code < 128 + 65:
        return -(code - 128)
    return code


def describe(pod: dict[str, Any], name: str, events: Iterable[dict[str, Any]], *,
             pending_for: float | None = None) -> list[str]:
    """``[trainguard]`` lines saying what Kubernetes reported about the pod's end."""
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    where = f"pod {name} on node {node}" if node else f"pod {name}"
    lines = []
    if pending_for is not None:
        lines.append(f"[trainguard] {where}: pending for {pending_for:.0f} s (phase {status.get('phase', 'Pending')})")
    state = terminated(pod)
    if state:
        message = (state.get("message") or "").strip().splitlines()
        lines.append(f"[trainguard] {where}: terminated reason={state.get('reason')} exitCode={state.get('exitCode')}"
                     + (f" signal={state['signal']}" if state.get("signal") else ""))
        if state.get("reason") not in ("Error", "Completed") and message:
            lines.append(f"[trainguard] {where}: termination message: {message[-1][:300]}")
    if status.get("reason"):
        lines.append(f"[trainguard] {where}: status reason={status['reason']}: {status.get('message', '')}".rstrip(": "))
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            lines.append(f"[trainguard] pod {name}: condition DisruptionTarget reason={condition.get('reason')}: "
                         f"{condition.get('message', '')}".rstrip(": "))
    for event in events:
        if event.get("type") == "Warning" or event.get("reason") in _NOTABLE:
            lines.append(f"[trainguard] pod {name}: event {event.get('reason')} ({event.get('type')}): "
                         f"{(event.get('message') or '').strip()[:300]}")
    if not state and not status.get("reason") and pending_for is None:
        lines.append(f"[trainguard] {where}: ended in phase {status.get('phase')} with no container status")
    return lines
