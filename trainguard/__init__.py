"""trainguard: fault tolerance for long distributed training jobs.

Detect faults, classify them, recover the cheapest way that works, and record every round.
"""

from __future__ import annotations

from trainguard.engine import Supervisor, supervise
from trainguard.errors import AdapterError, JobStateError, PluginError, PolicyError, TrainguardError
from trainguard.hooks import PluginHost, hookimpl, hookspec
from trainguard.model import (
    Action,
    Capacity,
    Category,
    Decision,
    ErrorSource,
    Event,
    ExecutionMode,
    Fault,
    FaultTolerantPolicy,
    History,
    Incident,
    Instance,
    JobSpec,
    JobStatus,
    LogPattern,
    RoundRecord,
    RoundResult,
    Verdict,
)
from trainguard.policy import Policy, build_policy, from_annotations, parse_aimaster_args
from trainguard.store import RunStore

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
