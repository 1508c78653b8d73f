"""trainguard: fault tolerance for long distributed training jobs.

Detect faults, classify them, recover the cheapest way that works, and record every round.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time they load on first use
    from trainguard.engine import Supervisor, supervise
    from trainguard.errors import AdapterError, JobStateError, PluginError, PolicyError, TrainguardError
    from trainguard.hooks import PluginHost, hookimpl, hookspec
    from trainguard.model import (
        Action, Capacity, Category, Decision, ErrorSource, Event, ExecutionMode, Fault, FaultTolerantPolicy,
        History, Incident, Instance, JobSpec, JobStatus, LogPattern, RoundRecord, RoundResult, Verdict,
    )
    from trainguard.policy import Policy, build_policy, from_annotations, parse_aimaster_args
    from trainguard.store import RunStore

# Where each public name lives. Resolved on first use (PEP 562) so that a training script's
# ``from trainguard import job_monitor`` or ``import trainguard.sdk`` loads the SDK alone, not
# the engine, the plugins and the store.
_EXPORTS = {
    "Supervisor": "trainguard.engine", "supervise": "trainguard.engine",
    "AdapterError": "trainguard.errors", "JobStateError": "trainguard.errors", "PluginError": "trainguard.errors",
    "PolicyError": "trainguard.errors", "TrainguardError": "trainguard.errors",
    "PluginHost": "trainguard.hooks", "hookimpl": "trainguard.hooks", "hookspec": "trainguard.hooks",
    **{name: "trainguard.model" for name in (
        "Action", "Capacity", "Category", "Decision", "ErrorSource", "Event", "ExecutionMode", "Fault",
        "FaultTolerantPolicy", "History", "Incident", "Instance", "JobSpec", "JobStatus", "LogPattern",
        "RoundRecord", "RoundResult", "Verdict")},
    "Policy": "trainguard.policy", "build_policy": "trainguard.policy", "from_annotations": "trainguard.policy",
    "parse_aimaster_args": "trainguard.policy",
    "RunStore": "trainguard.store",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainguard' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__version__ = "0.1.0"

__all__ = [
    "Action",
    "AdapterError",
    "Capacity",
    "Category",
    "Decision",
    "ErrorSource",
    "Event",
    "ExecutionMode",
    "Fault",
    "FaultTolerantPolicy",
    "History",
    "Incident",
    "Instance",
    "JobSpec",
    "JobStateError",
    "JobStatus",
    "LogPattern",
    "PluginError",
    "PluginHost",
    "Policy",
    "PolicyError",
    "RoundRecord",
    "RoundResult",
    "RunStore",
    "Supervisor",
    "TrainguardError",
    "Verdict",
    "build_policy",
    "from_annotations",
    "hookimpl",
    "hookspec",
    "parse_aimaster_args",
    "supervise",
]
