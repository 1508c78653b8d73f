"""One supervised job as the controller knows it, and where its round stands.

:class:`Tracked` holds the latest job object, its pods, the parsed annotations and the log
followers of a hang check; the functions here read it without touching the cluster: the job id,
the round progress annotation, and which pods belong to the job's current run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trainguard.adapters.kubernetes.logs import LogFollower
from trainguard.adapters.volcano import VOLCANO, JobKind, pod_version, version
from trainguard.controller import annotations as notes


@dataclass
class Tracked:
    """What the controller knows of one job: the latest object and its pods."""

    kind: JobKind
    namespace: str
    name: str
    job: dict[str, Any]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    fingerprint: str = ""
    settings: notes.JobSettings | None = None
    problem: str | None = None
    followers: dict[str, LogFollower] = field(default_factory=dict)
    started_watching: dict[str, float] = field(default_factory=dict)
    handled: set[str] = field(default_factory=set)  # failed pod uids already judged
    # Pods deleted at once while running, by someone else (CCE's PodForceDeleted).
    force_deleted: list[dict[str, Any]] = field(default_factory=list)

    @property
    def annotations(self) -> dict[str, str]:
        return (self.job.get("metadata") or {}).get("annotations") or {}

    @property
    def uid(self) -> str:
        return (self.job.get("metadata") or {}).get("uid", "")


def stop_followers(tracked: Tracked) -> None:
    """Stop the job's log followers (a round begins, the job ends or leaves the cache)."""
    for follower in tracked.followers.values():
        follower.stop()
    tracked.followers.clear()


def job_id(tracked: Tracked) -> str:
    """The run history's id of the job: its annotation, else namespace, name and uid."""
    given = tracked.annotations.get(notes.JOB_ID)
    if given:
        return given
    return f"{tracked.namespace}.{tracked.name}.{tracked.uid[:8]}"


def progress_of(tracked: Tracked) -> dict[str, Any] | None:
    """The round progress annotation, or ``None`` when absent or unreadable."""
    text = tracked.annotations.get(notes.PROGRESS)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def current_pods(tracked: Tracked) -> list[dict[str, Any]]:
    """The pods of the job's current object and, for Volcano, its current version."""
    current = version(tracked.kind, tracked.job)
    uid = tracked.uid
    out = []
    for pod in list(tracked.pods.values()):
        owners = (pod.get("metadata") or {}).get("ownerReferences") or []
        if owners and owners[0].get("uid") not in (None, uid):
            continue
        if tracked.kind is VOLCANO and pod_version(pod) != current:
            continue
        out.append(pod)
    return out


def failed_pods(tracked: Tracked) -> list[dict[str, Any]]:
    """Current pods that failed and were not judged yet."""
    return [p for p in current_pods(tracked)
            if (p.get("status") or {}).get("phase") == "Failed" and not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["uid"] not in tracked.handled]
