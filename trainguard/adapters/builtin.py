"""Registers the adapters that ship with trainguard."""

from __future__ import annotations

from trainguard.hooks.markers import hookimpl
from trainguard.hooks.registry import AdapterRegistry


@hookimpl
def trainguard_register_adapters(registry: AdapterRegistry) -> None:
    from trainguard.adapters.local import LocalAdapter
    from trainguard.adapters.slurm import SlurmAdapter

    registry.add_adapter("local", LocalAdapter)
    registry.add_adapter("slurm", SlurmAdapter)
