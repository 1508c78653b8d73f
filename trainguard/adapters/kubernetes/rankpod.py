"""The current pod of one rank, as the watch last saw it, and how its end is reported."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trainguard.adapters import Exit
from trainguard.adapters.kubernetes.client import KubeApi
from trainguard.adapters.kubernetes.logs import LogFollower
from trainguard.adapters.kubernetes.status import describe, exit_code, is_terminal

log = logging.getLogger(__name__)


@dataclass
class RankPod:
    """One rank's pod: ``obj`` is its last seen state, ``gone`` once deleted."""

    rank: int
    name: str
    log_path: Path
    follower: LogFollower
    obj: dict[str, Any] = field(default_factory=dict)
    gone: bool = False
    reported: bool = False
    created: float = field(default_factory=time.time)

    @property
    def node(self) -> str | None:
        return (self.obj.get("spec") or {}).get("nodeName")

    @property
    def ended(self) -> bool:
        return self.gone or is_terminal(self.obj)

    @property
    def started(self) -> bool:
        return self.ended or (self.obj.get("status") or {}).get("phase") == "Running"

    def finish(self, events: Callable[[], list[dict[str, Any]]], *, annotate: bool = True) -> Exit:
        """The rank's :class:`Exit` (code 1 for a pod that never left Pending), once its log is
        complete; with ``annotate``, a failure's ``[trainguard]`` lines are appended to the log."""
        self.reported = True
        if self.ended:
            self.follower.pod_ended.set()
            if not self.follower.join(5.0):
                log.warning("the log of pod %s may be incomplete", self.name)
            code = exit_code(self.obj, gone=self.gone)
        else:
            code = 1
        if code != 0 and annotate:
            lines = describe(self.obj, self.name, events(),
                             pending_for=None if self.ended else time.time() - self.created)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a") as out:
                out.writelines(line + "\n" for line in lines)
        return Exit(self.rank, 0, code, time.time())


def events_of(kube: KubeApi, namespace: str, pod: str, job_id: str) -> list[dict[str, Any]]:
    """The pod's Events (one request: only when it failed); none when they cannot be read."""
    try:
        return kube.json(kube.core.list_namespaced_event, namespace, field_selector=f"involvedObject.name={pod}")["items"]
    except Exception as exc:
        log.info("[%s] cannot read the events of %s: %s", job_id, pod, exc)
        return []
