"""What plugins hand back, validated: registries with typed ``add_*`` methods for registration
hooks, and the checks :class:`~trainguard.hooks.PluginHost` runs on every other hook's result."""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from trainguard.errors import AdapterError, PluginError
from trainguard.model import LogPattern

__all__ = ["AdapterRegistry", "Check", "LogPattern", "anything", "each", "env_items", "optional", "pattern_batch"]

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")

# A result check: None if a hook's result is acceptable, else what is wrong with it.
Check = Callable[[Any], "str | None"]


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

    def check(self, name: str) -> Callable[..., Any]:
        """The factory of the adapter called ``name``; an unknown name lists the known ones."""
        factory = self._factories.get(name)
        if factory is None:
            known = ", ".join(sorted(self._factories)) or "none"
            raise AdapterError(name, f"no such adapter (known: {known})")
        return factory

    def create(self, name: str, **options: Any) -> Any:
        """Make the adapter called ``name``; an unknown name lists the known ones."""
        return self.check(name)(**options)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))


def _short(value: Any) -> str:
    text = repr(value)
    return f"{text[:77]}..." if len(text) > 80 else text


def optional(kind: type, what: str) -> Check:
    """Checks a firstresult hook's result: one ``kind`` or None."""
    return lambda result: None if result is None or isinstance(result, kind) else \
        f"{_short(result)} where {what} or None is expected"


def each(valid: Callable[[Any], bool], what: str) -> Check:
    """A fan-out hook's result: a list whose every item passes ``valid``."""
    def check(results: Any) -> str | None:
        if not isinstance(results, list):
            return f"{_short(results)} where a list of results is expected (a hook wrapper's bug)"
        bad = [item for item in results if not valid(item)]
        return f"{_short(bad[0])} where {what} is expected" if bad else None
    return check


def env_items(item: Any) -> bool:
    return isinstance(item, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in item.items())


def pattern_batch(item: Any) -> bool:
    return isinstance(item, (list, tuple)) and all(isinstance(p, LogPattern) for p in item)


def anything(_result: Any) -> None:
    return None
