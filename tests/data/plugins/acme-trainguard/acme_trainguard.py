"""A site plugin: a pluggy hook wrapper around classification, a log pattern, and a notifier."""

from __future__ import annotations

import json
import os
from dataclasses import replace

from trainguard import Category, LogPattern, hookimpl


@hookimpl
def trainguard_log_patterns():
    return [LogPattern(id="acme-fabric-down", regex=r"ACME fabric link (?P<host>\S+) down", category=Category.NCCL_ERROR,
                       fault_code="ACME-FABRIC", retryable=True, node_fault=True, priority=99, node_group="host",
                       source="acme")]


@hookimpl(wrapper=True)
def trainguard_classify_fault(fault):
    """Sees every classifier's verdict and signs each one (a new-style pluggy wrapper)."""
    verdicts = yield
    return [replace(v, evidence=f"[acme saw {len(verdicts)} verdict(s)] {v.evidence}") for v in verdicts]


@hookimpl
def trainguard_on_event(event):
    """Appends each event to ``$ACME_EVENTS`` (a site's own notifier, run off the critical path)."""
    path = os.environ.get("ACME_EVENTS")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(event.to_json()) + "\n")
