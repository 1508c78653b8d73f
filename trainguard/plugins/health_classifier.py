"""Classify a failed health check: the node it names is unhealthy.

A runtime probe (seed 001's runtime check) that found a node unreachable or its GPU unhealthy,
with ``isolate`` as its fail action, is a node fault by construction: the check measured it.
"""

from __future__ import annotations

from trainguard.hooks.markers import hookimpl
from trainguard.model import Category, ErrorSource, Fault, Verdict
from trainguard.policy import Policy


@hookimpl
def trainguard_classify_fault(fault: Fault, log_tail: str, policy: Policy) -> Verdict | None:
    if fault.source is not ErrorSource.HEALTH_CHECK:
        return None
    return Verdict(Category.NODE_OR_INFRA, "TG-HEALTH-CHECK", retryable=True, node_fault=True,
                   evidence=fault.message, confidence=0.9, node=fault.node, classifier="health_classifier")
