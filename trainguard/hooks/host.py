"""The plugin host: the one place that owns the pluggy ``PluginManager``.

Built-in plugins are registered first as ordinary plugins, then third-party plugins from the
entry-point group ``trainguard``. ``TRAINGUARD_DISABLE_PLUGINS`` (comma-separated plugin names)
keeps named plugins, built-in or not, from loading; ``TRAINGUARD_TRACE_HOOKS=1`` logs every
hook call and result at DEBUG, which is what an operator needs on a cluster with an
unexpected plugin.

The host calls implementations one at a time, in pluggy's order, so that one plugin's
exception is reported to ``on_plugin_error`` and skipped instead of killing the supervisor;
hook wrappers are therefore not part of the contract.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from typing import Any, Callable, Iterator, Mapping

import pluggy

from trainguard.errors import PluginError
from trainguard.hooks import specs
from trainguard.hooks.markers import PROJECT
from trainguard.hooks.registry import AdapterRegistry
from trainguard.model import (
    Action,
    Capacity,
    Category,
    Decision,
    ErrorSource,
    Event,
    Fault,
    History,
    Incident,
    Instance,
    JobSpec,
    LogPattern,
    Verdict,
)
from trainguard.policy import Policy

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = PROJECT
DISABLE_VAR = "TRAINGUARD_DISABLE_PLUGINS"
TRACE_VAR = "TRAINGUARD_TRACE_HOOKS"

# Registration order matters for firstresult hooks only through tryfirst/trylast marks.
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("adapters", "trainguard.adapters.builtin"),
    ("exit_classifier", "trainguard.plugins.exit_classifier"),
    ("log_classifier", "trainguard.plugins.log_classifier"),
    ("strategy", "trainguard.plugins.strategy"),
    ("log_notifier", "trainguard.plugins.notifiers"),
)

PluginErrorSink = Callable[[str, str, BaseException], None]


def _log_plugin_error(plugin: str, hook: str, exc: BaseException) -> None:
    log.error("plugin %s failed in %s: %s: %s", plugin, hook, type(exc).__name__, exc)


def unknown_verdict(fault: Fault) -> Verdict:
    """The conservative verdict when no classifier recognised a fault: no free retry."""
    if fault.source in (ErrorSource.HANG, ErrorSource.EXIT_HANG):
        code = "TG-HANG" if fault.source is ErrorSource.HANG else "TG-EXIT-HANG"
        return Verdict(Category.HANG_OR_STUCK, code, retryable=True, evidence=fault.message,
                       confidence=0.1, classifier="default")
    if fault.source is ErrorSource.LOG and not fault.exit_code:
        return Verdict(Category.SUCCESS_OR_BENIGN, "TG-NO-FAULT", retryable=True,
                       evidence="no failure pattern in the log", confidence=0.0, classifier="default")
    return Verdict(Category.USER_CODE, "TG-UNKNOWN", retryable=False, evidence=fault.message,
                   confidence=0.0, classifier="default")


class PluginHost:
    """Typed facade over the plugin manager; the engine never touches ``pm.hook`` directly."""

    def __init__(
        self,
        *,
        load_entry_points: bool = True,
        plugins: Mapping[str, object] | None = None,
        disabled: set[str] | None = None,
        on_plugin_error: PluginErrorSink = _log_plugin_error,
    ) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(specs)
        self.on_plugin_error = on_plugin_error
        blocked = disabled if disabled is not None else _disabled_from_env()
        for name in blocked:
            self.pm.set_blocked(name)
        for name, module in DEFAULT_PLUGINS:
            if not self.pm.is_blocked(name):
                self.pm.register(importlib.import_module(module), name=name)
        if load_entry_points:
            try:
                self.pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
            except Exception as exc:  # a broken third-party package must say which one
                raise PluginError(f"cannot load a plugin of entry-point group {ENTRY_POINT_GROUP!r}: "
                                  f"{type(exc).__name__}: {exc}") from exc
        for name, plugin in (plugins or {}).items():
            self.pm.register(plugin, name=name)
        self._trace = os.environ.get(TRACE_VAR, "") not in ("", "0")
        self._adapters: AdapterRegistry | None = None
        self._patterns: tuple[LogPattern, ...] | None = None

    @property
    def plugin_names(self) -> list[str]:
        return sorted(name for name, plugin in self.pm.list_name_plugin() if plugin is not None)

    def _call(self, hook: str, firstresult: bool = False, **kwargs: Any) -> Iterator[Any]:
        """Yield each implementation's non-None result in call order, isolating failures."""
        caller = getattr(self.pm.hook, hook)
        for impl in reversed(caller.get_hookimpls()):
            args = [kwargs[name] for name in impl.argnames]
            try:
                result = impl.function(*args)
            except Exception as exc:
                self.on_plugin_error(impl.plugin_name, hook, exc)
                continue
            if self._trace:
                log.debug("hook %s <- %s: %r", hook, impl.plugin_name, result)
            if result is not None:
                yield result
                if firstresult:
                    return

    def adapters(self) -> AdapterRegistry:
        """The adapters every plugin registered (collected once)."""
        if self._adapters is None:
            registry = AdapterRegistry()
            caller = self.pm.hook.trainguard_register_adapters
            # Registration errors are the plugin author's bug and must be loud, not skipped.
            caller(registry=registry)
            self._adapters = registry
        return self._adapters

    def patterns(self) -> tuple[LogPattern, ...]:
        """Every plugin's log patterns, validated once: ids unique, regular expressions valid."""
        if self._patterns is None:
            seen: dict[str, LogPattern] = {}
            for batch in self._call("trainguard_log_patterns"):
                for pattern in batch:
                    if not isinstance(pattern, LogPattern):
                        raise PluginError(f"log pattern {pattern!r} is not a LogPattern")
                    if pattern.id in seen:
                        raise PluginError(f"log pattern id {pattern.id!r} is contributed twice")
                    try:
                        re.compile(pattern.regex, re.MULTILINE)
                    except re.error as exc:
                        raise PluginError(f"log pattern {pattern.id!r} ({pattern.source}): {exc}") from None
                    seen[pattern.id] = pattern
            self._patterns = tuple(seen.values())
        return self._patterns

    def classify(self, fault: Fault, log_tail: str, policy: Policy) -> Verdict:
        """Merge every classifier's verdict: the most confident wins, ties to the earlier one."""
        best: Verdict | None = None
        for verdict in self._call("trainguard_classify_fault", fault=fault, log_tail=log_tail,
                                  policy=policy, patterns=self.patterns()):
            if best is None or verdict.confidence > best.confidence:
                best = verdict
        return best or unknown_verdict(fault)

    def decide(self, incident: Incident, verdict: Verdict, history: History, policy: Policy,
               capacity: Capacity) -> Decision:
        """Ask the strategies in order; if none decides (or all fail) the job fails."""
        for decision in self._call("trainguard_decide_recovery", firstresult=True, incident=incident,
                                   verdict=verdict, history=history, policy=policy, capacity=capacity):
            return decision
        return Decision(Action.FAIL, "no recovery strategy decided", consumes_budget=False, strategy="default")

    def instance_env(self, job: JobSpec, instance: Instance, restart_round: int) -> dict[str, str]:
        env: dict[str, str] = {}
        for extra in self._call("trainguard_instance_env", job=job, instance=instance, restart_round=restart_round):
            env.update({str(k): str(v) for k, v in extra.items()})
        return env

    def notify(self, event: Event) -> None:
        for _ in self._call("trainguard_on_event", event=event):
            pass


def _disabled_from_env() -> set[str]:
    return {name.strip() for name in os.environ.get(DISABLE_VAR, "").split(",") if name.strip()}
