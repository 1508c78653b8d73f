"""Pre-start sanity checks and the runtime health probe (seed 001), naming the bad node.

:func:`preflight` checks the nodes before a job starts and returns a :class:`SanityReport`;
:func:`runtime_check` is the light probe the supervisor loop calls every few seconds while
the job runs. Items are plugins (hook ``trainguard_sanity_items``).
"""

from __future__ import annotations

from trainguard.sanity.config import (
    DEFAULT_ITEMS, ITEMS, FailAction, RuntimeConfig, RuntimeFailAction, SanityConfig, add_arguments,
    config_from_args, config_from_json, load_config_file,
)
from trainguard.sanity.items import SanityItem, Scope
from trainguard.sanity.report import CheckVerdict, ItemReport, NodeResult, Outcome, PairResult, SanityReport
from trainguard.sanity.runner import preflight
from trainguard.sanity.runtime import NodeHealth, RuntimeReport, runtime_check

__all__ = [
    "DEFAULT_ITEMS", "ITEMS", "CheckVerdict", "FailAction", "ItemReport", "NodeHealth", "NodeResult", "Outcome",
    "PairResult", "RuntimeConfig", "RuntimeFailAction", "RuntimeReport", "SanityConfig", "SanityItem",
    "SanityReport", "Scope", "add_arguments", "config_from_args", "config_from_json", "load_config_file",
    "preflight", "runtime_check",
]
