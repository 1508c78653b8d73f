"""The plugin contract: markers, hook specifications and the plugin host."""

from __future__ import annotations

from trainguard.hooks.host import PluginHost
from trainguard.hooks.markers import hookimpl, hookspec
from trainguard.hooks.registry import AdapterRegistry, LogPattern

__all__ = ["AdapterRegistry", "LogPattern", "PluginHost", "hookimpl", "hookspec"]
