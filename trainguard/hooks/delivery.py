"""Notification delivery off the supervisor's critical path: one bounded queue and worker per notifier.

A webhook whose host never answers must not hold up detection and recovery, so
:class:`~trainguard.hooks.PluginHost` hands events for every notifier that is not *inline* to
a :class:`Lane`: a bounded FIFO queue drained by its own daemon thread, so one slow notifier
delays neither the supervisor nor the other notifiers, and each notifier still sees the
events in order. ``offer`` never blocks; it drops the event (counted and logged) when the
queue is full, or when the notifier has been busy with one call for longer than its timeout
(it is stuck: queueing more would only deliver stale news later). Python cannot interrupt a
thread, so the timeout bounds how long the supervisor keeps feeding a stuck notifier, not the
call itself; the notifier's own I/O timeouts bound that.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

import pluggy

from trainguard.model import Event

log = logging.getLogger(__name__)

# How often an idle worker looks whether its lane was closed.
_POLL = 0.5


class Lane:
    """One notifier's bounded queue and the worker thread that drains it.

    :param name: the notifier's plugin name (in logs and the worker thread's name).
    :param deliver: calls the notifier with one event; it runs on the worker thread.
    :param size: how many events may wait; more are dropped.
    :param timeout: seconds one call may take before the notifier counts as stuck.
    :param failed: told ``(name, exception)`` on the worker thread when ``deliver`` raises;
        the lane then delivers nothing more.
    """

    def __init__(self, name: str, deliver: Callable[[Event], None], *, size: int, timeout: float,
                 failed: Callable[[str, BaseException], None]) -> None:
        self.name = name
        self.dropped = 0
        self.closed = False
        self._deliver = deliver
        self._failed = failed
        self._timeout = timeout
        self._queue: queue.Queue[Event] = queue.Queue(size)
        self._pending = 0
        self._idle = threading.Condition()
        self._busy_since: float | None = None
        self._thread = threading.Thread(target=self._work, name=f"trainguard-notify-{name}", daemon=True)
        self._thread.start()

    def offer(self, event: Event) -> bool:
        """Queue ``event`` without blocking; False (counted and logged) if it had to be dropped."""
        busy = self._busy_since
        if self.closed:
            return self._drop(event, "its notifier is disabled or closed")
        if busy is not None and time.monotonic() - busy > self._timeout:
            return self._drop(event, f"its notifier has been stuck in one call for over {self._timeout:g} s")
        with self._idle:
            try:
                self._queue.put_nowait(event)
            except queue.Full:
                return self._drop(event, f"its queue is full ({self._queue.maxsize} waiting)")
            self._pending += 1
        return True

    def drain(self, deadline: float) -> bool:
        """Wait until every queued event was handled or ``deadline`` (monotonic) passed."""
        with self._idle:
            while self._pending and (left := deadline - time.monotonic()) > 0:
                self._idle.wait(left)
            return not self._pending

    def close(self) -> int:
        """Stop taking events: what is still queued is dropped (counted) and the worker ends.
        Returns how many events were still waiting."""
        self.closed = True
        return self._pending

    def _drop(self, event: Event, why: str) -> bool:
        self.dropped += 1
        # The first drop says why; later ones only now and then, so a dead webhook cannot flood the log.
        if self.dropped == 1 or self.dropped % 100 == 0:
            log.warning("[%s] notifier %s: %s event dropped because %s (%d dropped so far)",
                        event.job_id, self.name, event.type, why, self.dropped)
        return False

    def _work(self) -> None:
        while not (self.closed and self._queue.empty()):
            try:
                event = self._queue.get(timeout=_POLL)
            except queue.Empty:
                continue
            try:
                if self.closed:
                    self._drop(event, "its notifier is disabled or closed")
                    continue
                self._busy_since = time.monotonic()
                try:
                    self._deliver(event)
                except Exception as exc:  # reported to the host; never the worker's end
                    self.closed = True
                    self._failed(self.name, exc)
            finally:
                self._busy_since = None
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()


def split_notifiers(pm: pluggy.PluginManager) -> tuple[list[object], list[tuple[str, object]]]:
    """The notifier plugins called inline (a true ``inline_notifier``), and those, by name,
    that get a lane. Wrappers are neither: they run around the inline call and every lane's."""
    inline: list[object] = []
    queued: dict[str, object] = {}
    for impl in pm.hook.trainguard_on_event.get_hookimpls():
        if impl.hookwrapper or impl.wrapper:
            continue
        if getattr(impl.plugin, "inline_notifier", False):
            inline.append(impl.plugin)
        else:
            queued[impl.plugin_name] = impl.plugin
    return inline, list(queued.items())


def deliverer(pm: pluggy.PluginManager, name: str,
              failed: Callable[[str, BaseException], None]) -> Callable[[Event], None]:
    """Call notifier ``name`` (and the wrappers around it) through pluggy, on its lane's worker.

    Its own exception propagates (the lane reports it and stops); a wrapper's is passed to
    ``failed`` under the wrapper's name, and the lane goes on.
    """
    def deliver(event: Event) -> None:
        plugin = pm.get_plugin(name)
        if plugin is None:
            return  # disabled meanwhile
        others = [impl.plugin for impl in pm.hook.trainguard_on_event.get_hookimpls()
                  if impl.plugin is not plugin and not (impl.hookwrapper or impl.wrapper)]
        try:
            pm.subset_hook_caller("trainguard_on_event", others)(event=event)
        except Exception as exc:
            culprit = raised_in(pm, "trainguard_on_event", exc) or name
            if culprit == name:
                raise
            failed(culprit, exc)
    return deliver


def raised_in(pm: pluggy.PluginManager, hook: str, exc: BaseException) -> str | None:
    """The plugin whose implementation of ``hook`` is innermost in ``exc``'s traceback: the one
    that raised it, even through hook wrappers (a wrapper that raises anew is the innermost)."""
    owners = {}
    for impl in getattr(pm.hook, hook).get_hookimpls():
        code = getattr(impl.function, "__code__", None)
        if code is not None:
            owners[code] = impl.plugin_name
    found = None
    tb = exc.__traceback__
    while tb is not None:
        found = owners.get(tb.tb_frame.f_code, found)
        tb = tb.tb_next
    return found
