"""Registries handed to registration hooks, with typed ``add_*`` methods that validate input."""

from __future__ import annotations

import re
from typing import Any, Callable

from trainguard.errors import AdapterError, PluginError
from trainguard.model import LogPattern

__all__ = ["AdapterRegistry", "LogPattern"]

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


class AdapterRegistry:
    """Adapter factories by name (``local``, ``slurm``, ...)."""

    def __init__(self) -> None:
        self._factories: dict[str, Callable[..., Any]] = {}

    def add_adapter(self, name: str, factory: Callable[..., Any]) -> None:
        """Register ``factory(**options)`` under ``name``; names are lower-case and unique."""
        if not _NAME.match(name):
            raise PluginError(f"adapter name {name!r} must be lower-case letters, digits, - or _")
        if not callable(factory):
            raise PluginError(f"adapter {name!r}: factory {factory!r} is not callable")
        if name in self._factories:
            raise PluginError(f"adapter {name!r} is registered twice")
        self._factories[name] = factory

    def create(self, name: str, **options: Any) -> Any:
        """Make the adapter called ``name``; an unknown name lists the known ones."""
        factory = self._factories.get(name)
        if factory is None:
            known = ", ".join(sorted(self._factories)) or "none"
            raise AdapterError(name, f"no such adapter (known: {known})")
        return factory(**options)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))
