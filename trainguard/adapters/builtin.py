"""Registers the adapters that ship with trainguard."""

from __future__ import annotations

from typing import Any

from trainguard.hooks.markers import hookimpl
from trainguard.hooks.registry import AdapterRegistry


@hookimpl
def trainguard_register_adapters(registry: AdapterRegistry) -> None:
    from trainguard.adapters.local import LocalAdapter
    from trainguard.adapters.slurm import SlurmAdapter

    registry.add_adapter("local", LocalAdapter)
    registry.add_adapter("slurm", SlurmAdapter)
    registry.add_adapter("kubernetes", _kubernetes)
    registry.add_adapter("volcano", _volcano)
    registry.add_adapter("sim", _sim)


def _kubernetes(**options: Any) -> Any:
    """The Kubernetes adapter, imported only when used (it needs the ``kubernetes`` extra)."""
    from trainguard.adapters.kubernetes.adapter import KubernetesAdapter

    return KubernetesAdapter(**options)


def _volcano(**options: Any) -> Any:
    """``--adapter volcano``: one Volcano Job per round (:mod:`trainguard.adapters.volcano.adapter`)."""
    from trainguard.adapters.volcano.adapter import VolcanoAdapter

    return VolcanoAdapter(**options)


def _sim(**options: Any) -> Any:
    """The simulator (:mod:`trainguard.adapters.sim`), imported only when used."""
    from trainguard.adapters.sim import SimAdapter

    return SimAdapter(**options)
