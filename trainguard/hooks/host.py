"""The plugin host: the one place that owns the pluggy ``PluginManager``.

Built-in plugins are registered first as ordinary plugins, then third-party plugins from the
entry-point group ``trainguard``. ``TRAINGUARD_DISABLE_PLUGINS`` (comma-separated plugin names)
keeps named plugins, built-in or not, from loading; ``TRAINGUARD_TRACE_HOOKS=1`` turns on
pluggy's own tracing, logged at DEBUG with the plugins each call reaches.

Every hook is called through pluggy, so ``firstresult``, ``tryfirst``/``trylast``, hook
wrappers, ``historic`` hooks and tracing behave as pluggy documents, and what comes back is
validated. A plugin that raises or returns what its hook does not allow is named to
``on_plugin_error``, blocked for the rest of the job, and the call is made again without it,
so the conservative default still decides. The culprit is the innermost implementation in the
traceback or, for a bad result, the plugin without which the call succeeds.

Notifications are off the critical path: ``notify`` calls the *inline* notifiers (plugins with
a true ``inline_notifier``: the log and the JSON-lines file, local and read in order) at once,
and hands the event to a :class:`~trainguard.hooks.delivery.Lane` (a bounded queue and worker
thread) per other notifier. A final event and ``close`` wait for the lanes ``drain_timeout`` s.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import pluggy

from trainguard.errors import PluginError
from trainguard.hooks import specs
from trainguard.hooks.delivery import Lane, deliverer, raised_in, split_notifiers
from trainguard.hooks.markers import PROJECT
from trainguard.hooks.registry import AdapterRegistry, Check, anything, each, env_items, optional, pattern_batch
from trainguard.model import (
    Action,
    Capacity,
    Category,
    Decision,
    ErrorSource,
    Event,
    EventType,
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
    ("health_classifier", "trainguard.plugins.health_classifier"),
    ("log_classifier", "trainguard.plugins.log_classifier"),
    ("learned_classifier", "trainguard.plugins.learned_classifier"),
    ("strategy", "trainguard.plugins.strategy"),
    ("log_notifier", "trainguard.plugins.notifiers"),
    ("sanity_items", "trainguard.sanity.items"),
)

PluginErrorSink = Callable[[str, str, BaseException], None]

UNIDENTIFIED = "(unidentified plugin)"  # neither the traceback nor elimination points at one


def _log_plugin_error(plugin: str, hook: str, exc: BaseException) -> None:
    log.error("plugin %s failed in %s: %s: %s", plugin, hook, type(exc).__name__, exc)




def unknown_verdict(fault: Fault) -> Verdict:
    """The verdict when no classifier recognised a fault.

    Silence is not health: a log without failure evidence is ``unknown``, and only a clean exit
    (code 0, no signal) is benign. Nor is it a bug: nothing shows the job's own code caused it, so
    a restart plausibly succeeds (``retryable``); the ladder never retries it in place for free,
    and gives up when it keeps coming back (see docs/fault-codes.md).
    """
    if fault.source in (ErrorSource.HANG, ErrorSource.EXIT_HANG):
        code = "TG-HANG" if fault.source is ErrorSource.HANG else "TG-EXIT-HANG"
        return Verdict(Category.HANG_OR_STUCK, code, retryable=True, evidence=fault.message,
                       confidence=0.1, classifier="default")
    if fault.source is ErrorSource.EXIT_CODE and fault.exit_code == 0 and not fault.signal:
        return Verdict(Category.SUCCESS_OR_BENIGN, "TG-CLEAN-EXIT", retryable=True,
                       evidence="exited with code 0", confidence=0.0, classifier="default")
    return Verdict(Category.UNKNOWN, "TG-UNKNOWN", retryable=True, evidence=fault.message,
                   confidence=0.0, classifier="default")


class PluginHost:
    """Typed facade over the plugin manager; the engine never touches ``pm.hook`` directly.

    :param load_entry_points: load third-party plugins from the entry-point group ``trainguard``.
    :param plugins: more plugins by name (registered last).
    :param disabled: plugin names to keep out (default: ``TRAINGUARD_DISABLE_PLUGINS``).
    :param on_plugin_error: told ``(plugin, hook, error)`` when a plugin is disabled; the
        supervisor records it as a ``plugin_error`` event. Always called on the thread that
        calls the host, never on a notifier's worker.
    :param notify_queue_size: how many events may wait for one queued notifier.
    :param notify_timeout: seconds one notifier call may take before the notifier counts as
        stuck and further events for it are dropped until it returns; a notifier's own
        ``notify_timeout`` attribute overrides it.
    :param drain_timeout: seconds a job's final event and :meth:`close` wait for the queues.
    """

    def __init__(
        self,
        *,
        load_entry_points: bool = True,
        plugins: Mapping[str, object] | None = None,
        disabled: set[str] | None = None,
        on_plugin_error: PluginErrorSink = _log_plugin_error,
        notify_queue_size: int = 256,
        notify_timeout: float = 30.0,
        drain_timeout: float = 5.0,
    ) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(specs)
        self.on_plugin_error = on_plugin_error
        self.notify_queue_size = notify_queue_size
        self.notify_timeout = notify_timeout
        self.drain_timeout = drain_timeout
        self.disabled: dict[str, str] = {}
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
        if os.environ.get(TRACE_VAR, "") not in ("", "0"):
            self.pm.trace.root.setwriter(lambda text: log.debug("%s", text.rstrip()))
            self.pm.enable_tracing()
            self.pm.add_hookcall_monitoring(_trace_plugins, lambda *_: None)
        self._adapters: AdapterRegistry | None = None
        self._patterns: tuple[LogPattern, ...] | None = None
        self._lanes: dict[str, Lane] = {}
        self._missed: dict[str, int] = {}
        self._late: list[tuple[str, BaseException]] = []
        self._late_lock = threading.Lock()

    @property
    def plugin_names(self) -> list[str]:
        return sorted(name for name, plugin in self.pm.list_name_plugin() if plugin is not None)

    @property
    def dropped_notifications(self) -> dict[str, int]:
        """How many events each queued notifier missed (full queue, stuck, disabled, or still
        waiting when its queue was closed)."""
        missed = dict(self._missed)
        for name, lane in self._lanes.items():
            missed[name] = missed.get(name, 0) + lane.dropped
        return missed

    # -- calling hooks ----------------------------------------------------------------------

    def _call(self, hook: str, check: Check, *, remove: Iterable[object] = (), pure: bool = True,
              **kwargs: Any) -> Any:
        """Call ``hook`` through pluggy and return its result, or None if no valid one came.

        A plugin that raises or makes ``check`` fail is reported and blocked, and the call is
        made again without it. ``pure`` hooks may be called again without each plugin in turn
        to find which one returned garbage; notifiers are not, since that would repeat them.
        """
        remove = list(remove)
        while True:
            caller = self.pm.subset_hook_caller(hook, remove) if remove else getattr(self.pm.hook, hook)
            culprit: str | None = None
            try:
                result = caller(**kwargs)
            except Exception as exc:
                error: BaseException = exc
                culprit = raised_in(self.pm, hook, exc)
            else:
                problem = check(result)
                if problem is None:
                    return result
                error = PluginError(f"returned {problem}")
            if culprit is None and pure:
                culprit = self._eliminate(hook, check, remove, kwargs)
            if culprit is None:
                self._report(UNIDENTIFIED, hook, error, disable=False)
                return None
            self._report(culprit, hook, error)

    def _eliminate(self, hook: str, check: Check, remove: Sequence[object], kwargs: Mapping[str, Any]) -> str | None:
        """Leave plugins out one by one, in call order, until ``hook`` gives a valid result: the
        last one left out is to blame."""
        removed = list(remove)
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            if impl.plugin in removed:
                continue
            removed.append(impl.plugin)
            try:
                result = self.pm.subset_hook_caller(hook, removed)(**kwargs)
            except Exception:
                continue
            if check(result) is None:
                return impl.plugin_name
        return None

    def _report(self, plugin: str, hook: str, error: BaseException, *, disable: bool = True) -> None:
        """Tell ``on_plugin_error`` and, unless the culprit is unknown, block it for the job."""
        what = str(error) if isinstance(error, PluginError) else f"{type(error).__name__}: {error}"
        if disable:
            self.pm.set_blocked(plugin)
            self.disabled[plugin] = hook
            lane = self._lanes.get(plugin)
            if lane is not None:
                lane.close()
            what += "; disabled for the rest of the job"
        reported = PluginError(what)
        reported.__cause__ = error
        self.on_plugin_error(plugin, hook, reported)

    def _late_failure(self, plugin: str, exc: BaseException) -> None:
        # On a notifier's worker thread: the sink (which writes the store) runs on the host's.
        with self._late_lock:
            self._late.append((plugin, exc))

    def _report_late(self) -> None:
        with self._late_lock:
            late, self._late = self._late, []
        for plugin, exc in late:
            if plugin not in self.disabled:
                self._report(plugin, "trainguard_on_event", exc)

    # -- the facade -------------------------------------------------------------------------

    def adapters(self) -> AdapterRegistry:
        """The adapters every plugin registered (collected once)."""
        if self._adapters is None:
            registry = AdapterRegistry()
            # Registration errors are the plugin author's bug and must be loud, not skipped.
            self.pm.hook.trainguard_register_adapters(registry=registry)
            self._adapters = registry
        return self._adapters

    def patterns(self) -> tuple[LogPattern, ...]:
        """Every plugin's log patterns, validated once: ids unique, regular expressions valid.

        A plugin returning something else than patterns is disabled; a duplicate id or a
        malformed expression is one clear error, before any rank starts.
        """
        if self._patterns is None:
            seen: dict[str, LogPattern] = {}
            for batch in self._call("trainguard_log_patterns", each(pattern_batch, "a list of LogPattern")) or ():
                for pattern in batch:
                    if pattern.id in seen:
                        raise PluginError(f"log pattern id {pattern.id!r} is contributed twice")
                    try:
                        re.compile(pattern.regex, re.MULTILINE)
                    except re.error as exc:
                        raise PluginError(f"log pattern {pattern.id!r} ({pattern.source}): {exc}") from None
                    seen[pattern.id] = pattern
            self._patterns = tuple(seen.values())
            self._call("trainguard_catalog_ready", anything, patterns=self._patterns)
        return self._patterns

    def classify(self, fault: Fault, log_tail: str, policy: Policy) -> Verdict:
        """Merge every classifier's verdict: the most confident wins, ties to the earlier one."""
        patterns = self.patterns()
        self._report_late()
        verdicts = self._call("trainguard_classify_fault", each(lambda v: isinstance(v, Verdict), "a Verdict"),
                              fault=fault, log_tail=log_tail, policy=policy, patterns=patterns)
        best: Verdict | None = None
        for verdict in verdicts or ():
            if best is None or verdict.confidence > best.confidence:
                best = verdict
        return best or unknown_verdict(fault)

    def decide(self, incident: Incident, verdict: Verdict, history: History, policy: Policy,
               capacity: Capacity) -> Decision:
        """Ask the strategies in order; if none decides (or all fail) the job fails."""
        self._report_late()
        decision = self._call("trainguard_decide_recovery", optional(Decision, "a Decision"), incident=incident,
                              verdict=verdict, history=history, policy=policy, capacity=capacity)
        return decision or Decision(Action.FAIL, "no recovery strategy decided", consumes_budget=False,
                                    strategy="default")

    def instance_env(self, job: JobSpec, instance: Instance, restart_round: int) -> dict[str, str]:
        """Every plugin's variables for ``instance``, merged in call order."""
        self._report_late()
        env: dict[str, str] = {}
        for extra in self._call("trainguard_instance_env", each(env_items, "a mapping of str to str"), job=job,
                                instance=instance, restart_round=restart_round) or ():
            env.update(extra)
        return env

    def notify(self, event: Event) -> None:
        """Tell every notifier of ``event``: inline ones now, the others through their queues.

        Never blocks on a queued notifier, except that a job's final event closes the queues
        (waiting at most ``drain_timeout`` s), so the last word reaches them before the
        supervisor exits and no worker outlives the job.
        """
        self._report_late()
        inline, queued = split_notifiers(self.pm)
        if inline:
            self._call("trainguard_on_event", anything, remove=[plugin for _, plugin in queued], pure=False,
                       event=event)
        for name, plugin in queued:
            lane = self._lanes.get(name)
            if lane is None or lane.closed:
                # A notifier may say how long one call of its own may take (a webhook's retries).
                timeout = getattr(plugin, "notify_timeout", None) or self.notify_timeout
                lane = self._lanes[name] = Lane(name, deliverer(self.pm, name, self._late_failure),
                                                size=self.notify_queue_size, timeout=timeout,
                                                failed=self._late_failure)
            lane.offer(event)
        if str(event.type) in _FINAL:
            self.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait at most ``timeout`` s (default ``drain_timeout``) for the queues; True if empty."""
        deadline = time.monotonic() + (self.drain_timeout if timeout is None else timeout)
        done = all([lane.drain(deadline) for lane in list(self._lanes.values())])
        self._report_late()
        return done

    def close(self) -> None:
        """Deliver what is queued (for at most ``drain_timeout`` s), then stop the workers and
        log what each notifier missed. A later ``notify`` starts new workers."""
        self.flush()
        for name, lane in self._lanes.items():
            lost = lane.close() + lane.dropped
            self._missed[name] = self._missed.get(name, 0) + lost
            if lost:
                log.warning("notifier %s missed %d event(s) (dropped, or undelivered at close)", name, lost)
        self._lanes.clear()

    def __enter__(self) -> PluginHost:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_FINAL = frozenset(member.value for member in EventType if member.final)


def _trace_plugins(hook: str, impls: Sequence[pluggy.HookImpl], _kwargs: Mapping[str, object]) -> None:
    log.debug("hook %s calls %s", hook, ", ".join(impl.plugin_name for impl in reversed(impls)) or "no plugin")


def _disabled_from_env() -> set[str]:
    return {name.strip() for name in os.environ.get(DISABLE_VAR, "").split(",") if name.strip()}
