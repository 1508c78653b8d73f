"""A third-party plugin as a separate package would ship it (loaded through a faked entry point)."""

from __future__ import annotations

from trainguard import Category, LogPattern, hookimpl


@hookimpl
def trainguard_log_patterns():
    return [LogPattern(id="acme-fabric-down", regex=r"ACME fabric link (?P<host>\S+) down", category=Category.NCCL_ERROR,
                       fault_code="ACME-FABRIC", retryable=True, node_fault=True, priority=99, node_group="host",
                       source="acme")]
