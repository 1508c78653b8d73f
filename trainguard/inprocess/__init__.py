"""In-process recovery: the training function is ended and called again in the same process.

A process that survives a fault keeps what a cold restart pays for again (imports, CUDA
contexts, data loaders, the state in memory); only the function's iteration starts anew::

    from trainguard import inprocess

    @inprocess.restartable()
    def train(attempt: inprocess.Attempt) -> None:
        dist.init_process_group("gloo", store=attempt.store, rank=attempt.rank,
                                world_size=attempt.world_size)
        ...            # load the latest state and train
    train()

How an iteration ends and the next begins (every key lives in the *base store*, a
``TCPStore`` that no rank hosts under trainguard: the supervisor's store keeper,
:mod:`trainguard.inprocess.keeper`):

1. The function raises in one rank. The wrapper claims ``tg/<gen>/abort/<i>`` (compare-and-set:
   the first claimant is the *origin*; the others' errors are follow-ons), prints the traceback,
   reports it through the SDK channel, and — once out of the ``except`` block, so that the
   exception and its traceback no longer hold the process group — destroys the process group.
   Peers blocked in a gloo collective get their error when its connections close; a monitor
   thread in every rank polls the abort key and interrupts the main thread with a signal
   (:data:`INTERRUPT_SIGNAL`, raising :class:`Interrupted`) when the iteration was ended
   elsewhere (by a peer, or by the supervisor on a hang or a dead rank).
2. Every rank waits for ``tg/<gen>/decision/<i>``: ``{"do": "reenter", "iteration": i+1,
   "barrier_timeout": s}`` or ``{"do": "exit"}``. Under trainguard the supervisor writes it after
   its classifiers judged the origin's fault; without it (plain ``python`` or ``torchrun``) the
   first rank that caught an error decides locally (``max_iterations``, ``retry_on``).
3. The ranks meet at the barrier of iteration i+1 (``tg/<gen>/arrive/<i+1>`` counts arrivals, the
   last sets ``tg/<gen>/go/<i+1>``) — a replacement started for a dead rank joins it with
   ``TRAINGUARD_INPROCESS_ITERATION=i+1`` — and the function is called again with a fresh
   :class:`Attempt` whose ``store`` is prefixed ``tg/<gen>/it/<i+1>/``.

SDK records (``{"type": "inprocess", "event": ...}``, one JSON line each, see
:mod:`trainguard.sdk`): ``hello`` (``gen``, ``iteration``, ``pid``, ``address_file``), ``fault``
(``iteration``, ``origin``, ``exc_type``, ``message``, ``traceback``: the last lines),
``python`` in ``hello`` is the rank's interpreter (the keeper runs with it: it has torch),
``aborted`` (torn down, waiting for the decision), ``reentered`` (passed the barrier), ``stuck``
(``iteration``, ``after``: the iteration was ended ``after`` seconds ago and the main thread is
still in the function, blocked where no interrupt reaches it; the supervisor replaces the rank).

Under trainguard the wrapper finds the base store in ``TRAINGUARD_INPROCESS_STORE``
(``host:port``, set for replacements) or in the address file the supervisor's keeper writes
next to the SDK channel after the first ``hello``; ``{"disabled": true}`` there (the policy's
``--recover-strategy`` allows no in-process rung) runs the function once, as without the wrapper.
Without trainguard the base store is ``MASTER_ADDR:MASTER_PORT`` (torchrun's agent store, or
one rank 0 hosts), so there rank 0's death ends the job.

Importing this module is light: torch is imported when the wrapped function is first called.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from trainguard.inprocess.monitor import Monitor

__all__ = ["ADDRESS_FILE", "Attempt", "Fault", "GaveUp", "INTERRUPT_SIGNAL", "ITERATION_VAR", "Interrupted",
           "restartable"]

ITERATION_VAR = "TRAINGUARD_INPROCESS_ITERATION"
GENERATION_VAR = "TRAINGUARD_INPROCESS_GENERATION"
STORE_VAR = "TRAINGUARD_INPROCESS_STORE"
ADDRESS_FILE = "inprocess-store.json"
INTERRUPT_SIGNAL = signal.SIGUSR2
# Errors a rank gets because a peer went away: never the origin of a round.
FOLLOW_ON = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Interrupted",
             "ProcessGroup", "Socket Timeout", "Connection refused")
_TRACEBACK_LINES = 40


@dataclass(frozen=True)
class Fault:
    """What ended an iteration in this rank: strings only, so no frame outlives the ``except``."""

    exc_type: str
    message: str
    traceback: str
    iteration: int
    origin: bool

    def __str__(self) -> str:
        return f"{self.exc_type}: {self.message}"


@dataclass(frozen=True)
class Attempt:
    """One call of the wrapped function: ``iteration`` is 0 first and grows by one per in-process
    restart; ``store`` is a ``torch.distributed.Store`` fresh for this iteration; ``fault`` is what
    ended the previous iteration in this rank (None at first, and in a replacement rank)."""

    iteration: int
    rank: int
    world_size: int
    store: Any
    fault: Fault | None = None


class Interrupted(BaseException):
    """The iteration was ended elsewhere (a peer's fault, the supervisor); a ``BaseException`` so
    that training code catching ``Exception`` does not swallow it."""


class GaveUp(RuntimeError):
    """No further iteration: the fault is not retried (the supervisor's verdict, or the limits)."""


def restartable(*, max_iterations: int = 3, retry_on: tuple[type[BaseException], ...] = (Exception,),
                poll_interval: float = 0.02, barrier_timeout: float = 60.0, freeze_gc: bool = True,
                stuck_after: float = 2.0) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make ``fn(attempt, *args, **kwargs)`` restartable in process; call it as ``fn(*args, **kwargs)``.

    :param max_iterations: without trainguard, how many in-process restarts a rank makes
        (trainguard's policy decides instead when it supervises the job).
    :param retry_on: without trainguard, which exceptions are restarted (others end the job).
    :param poll_interval: how often the monitor thread looks for an abort of the iteration.
    :param barrier_timeout: without trainguard, how long ranks wait for each other to re-enter.
    :param freeze_gc: ``gc.freeze()`` what exists when the wrapper starts (objects that are garbage
        by then are collected first), so that the full collection that ending an iteration needs
        (a cycle an iteration made may hold the process group) scans only what iterations made.
        Frozen objects are never collected; pass False if the process later drops large cyclic
        structures it built before calling the wrapped function.
    :param stuck_after: under trainguard, how long after its iteration was ended a rank that has
        not left the function (blocked in a call that does not return, such as DDP's backward
        waiting on a gloo allreduce whose peers are gone) tells the supervisor so, which then
        replaces it at once instead of after ``--inprocess-barrier-timeout``.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return _Runner(fn, max_iterations, retry_on, poll_interval, barrier_timeout, freeze_gc,
                           stuck_after).run(args, kwargs)

        return wrapper

    return decorate


class _Runner:
    def __init__(self, fn: Callable[..., Any], max_iterations: int, retry_on: tuple[type[BaseException], ...],
                 poll_interval: float, barrier_timeout: float, freeze_gc: bool = True,
                 stuck_after: float = 2.0) -> None:
        self.fn = fn
        self.freeze_gc = freeze_gc
        self.stuck_after = stuck_after
        self.max_iterations = max_iterations
        self.retry_on = retry_on
        self.poll = poll_interval
        self.barrier_timeout = barrier_timeout
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        channel = os.environ.get("TRAINGUARD_SDK_CHANNEL") or ""
        self.channel = channel if channel and channel != "stderr" else ""
        self.gen = os.environ.get(GENERATION_VAR) or os.environ.get("TRAINGUARD_RESTART_ROUND") or "0"
        self.in_fn = False
        self.pending = False
        self.enabled = True
        self.iteration = -1

    # -- the loop ---------------------------------------------------------------------------

    def run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        iteration = int(os.environ.get(ITERATION_VAR) or 0)
        os.environ[ITERATION_VAR] = str(iteration)
        self.base = self._connect(iteration)
        if not self.enabled:
            return self.fn(Attempt(iteration, self.rank, self.world_size, self._prefixed(iteration)), *args, **kwargs)
        if self.freeze_gc:
            # What exists before the first iteration (the imports, the process's own state) is
            # moved out of the collector's sight: a full collection at each teardown then scans
            # only what iterations made — well under 1 ms instead of ~30 ms with torch imported.
            gc.collect()
            gc.freeze()
        previous = self._install_handler()
        fault: Fault | None = None
        timeout = self.barrier_timeout
        try:
            while True:
                if iteration > 0:
                    self._barrier(iteration, timeout)
                self.send("reentered", iteration=iteration)
                attempt = Attempt(iteration, self.rank, self.world_size, self._prefixed(iteration), fault)
                monitor = Monitor(self, self._key("abort", iteration), iteration)
                retry = True
                try:
                    self.iteration, self.pending, self.in_fn = iteration, False, True
                    monitor.start()
                    return self.fn(attempt, *args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - every exception ends the iteration
                    self.in_fn = False
                    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                        raise
                    fault = self._caught(exc, iteration)
                    retry = isinstance(exc, (*self.retry_on, Interrupted))
                finally:
                    self.in_fn = False
                    monitor.stop()
                # Out of the ``except``: the exception and its traceback are released, so
                # destroying the process group closes its connections and frees the peers.
                del attempt
                self._teardown()
                self.send("aborted", iteration=iteration)
                decision = self._decision(iteration, fault, retry)
                if decision.get("do") != "reenter":
                    raise GaveUp(f"rank {self.rank}: not restarted in process after {fault} "
                                 f"(iteration {iteration}): {decision.get('why', 'decided to exit')}")
                iteration = int(decision["iteration"])
                timeout = float(decision.get("barrier_timeout") or self.barrier_timeout)
                os.environ[ITERATION_VAR] = str(iteration)
        finally:
            if previous is not None:
                signal.signal(INTERRUPT_SIGNAL, previous)

    def _caught(self, exc: BaseException, iteration: int) -> Fault:
        """Claim the iteration's end (the first claimant is the origin), say why, and report it."""
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        message = str(exc)
        follow_on = isinstance(exc, Interrupted) or any(k in message for k in FOLLOW_ON)
        claim = json.dumps({"rank": self.rank, "error": f"{type(exc).__name__}: {message}"[:500]})
        try:
            won = self.base.compare_set(self._key("abort", iteration), "", claim).decode() == claim
        except Exception:  # noqa: BLE001 - the base store is gone: the job is ending anyway
            won = False
        fault = Fault(type(exc).__name__, message[:2000], "".join(text.splitlines(True)[-_TRACEBACK_LINES:]),
                      iteration, origin=won and not follow_on)
        if not isinstance(exc, Interrupted):
            print(f"[trainguard.inprocess] rank {self.rank} iteration {iteration}:\n{text}", file=sys.stderr,
                  end="", flush=True)
        self.send("fault", iteration=iteration, origin=fault.origin, exc_type=fault.exc_type,
                   message=fault.message, traceback=fault.traceback)
        return fault

    def _decision(self, iteration: int, fault: Fault, retry: bool) -> dict[str, Any]:
        key = self._key("decision", iteration)
        if not self.channel:
            again = retry and iteration < self.max_iterations
            mine = json.dumps({"do": "reenter", "iteration": iteration + 1} if again else
                              {"do": "exit", "why": f"{fault.exc_type} is not retried" if not retry
                               else f"max_iterations={self.max_iterations} reached"})
            self.base.compare_set(key, "", mine)
        self.base.wait([key], timedelta(days=1))
        return dict(json.loads(self.base.get(key)))

    def _barrier(self, iteration: int, timeout: float) -> None:
        if self.base.add(self._key("arrive", iteration), 1) >= self.world_size:
            self.base.set(self._key("go", iteration), "1")
        self.base.wait([self._key("go", iteration)], timedelta(seconds=timeout))

    # -- the base store ---------------------------------------------------------------------

    def _key(self, what: str, iteration: int) -> str:
        return f"tg/{self.gen}/{what}/{iteration}"

    def _prefixed(self, iteration: int) -> Any:
        import torch.distributed as dist

        return dist.PrefixStore(f"tg/{self.gen}/it/{iteration}/", self.base)

    def _connect(self, iteration: int) -> Any:
        from torch.distributed import TCPStore

        if self.channel:
            address_file = os.path.join(os.path.dirname(self.channel), ADDRESS_FILE)
            self.send("hello", iteration=iteration, gen=self.gen, pid=os.getpid(), address_file=address_file,
                       python=sys.executable)
            self.address = os.environ.get(STORE_VAR) or ""
            deadline = time.monotonic() + 300
            beat = time.monotonic()
            while self.address != "disabled":
                self.address = self.address or _read_address(address_file)
                if self.address and self.address != "disabled":
                    try:
                        return self.client()
                    except RuntimeError:
                        self.address = ""  # a keeper of an earlier supervisor: wait for this one's
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no in-process store address in {address_file} after 300 s")
                if time.monotonic() - beat > 1.0:  # the keeper is starting: alive, not hung
                    beat = time.monotonic()
                    self._send_raw({"type": "heartbeat"})
                time.sleep(0.02)
            self.enabled = False
        # Without trainguard's keeper: torchrun's agent store, or one that rank 0 hosts.
        self.address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ.get('MASTER_PORT', '29500')}"
        host, _, port = self.address.rpartition(":")
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            return TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=300))
        return TCPStore(host, int(port), is_master=self.rank == 0, timeout=timedelta(seconds=300),
                        wait_for_workers=False)

    def client(self) -> Any:
        """A connection to the base store (the monitor thread has its own)."""
        from torch.distributed import TCPStore

        host, _, port = self.address.rpartition(":")
        return TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=30))

    def send(self, event: str, **fields: Any) -> None:
        self._send_raw({"type": "inprocess", "event": event, **fields})

    def _send_raw(self, record: dict[str, Any]) -> None:
        if not self.channel:
            return
        from trainguard.sdk import _channel

        _channel().send(record)

    # -- ending an iteration ----------------------------------------------------------------

    def _install_handler(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return None
        return signal.signal(INTERRUPT_SIGNAL, self._on_signal)

    def _on_signal(self, _signum: int, _frame: Any) -> None:
        if self.pending and self.in_fn:
            self.pending = False
            raise Interrupted("the iteration was ended by another rank or the supervisor")

    def interrupt(self, main: int, iteration: int) -> None:
        """From the monitor thread: end the function running in the main thread, if it still
        runs ``iteration`` (a late monitor must not end the next one)."""
        if not self.in_fn or self.iteration != iteration:
            return
        self.pending = True
        if main == threading.main_thread().ident and signal.getsignal(INTERRUPT_SIGNAL) == self._on_signal:
            signal.pthread_kill(main, INTERRUPT_SIGNAL)  # wakes a sleep, which an async exception does not
        else:
            import ctypes

            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main), ctypes.py_object(Interrupted))

    def _teardown(self) -> None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        # A full collection: what holds the group may be any cycle an iteration made (a DDP
        # module and its hooks), old enough to sit in the oldest generation.
        gc.collect()


def _read_address(path: str) -> str:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return ""
    if data.get("disabled"):
        return "disabled"
    return f"{data['host']}:{data['port']}" if data.get("port") else ""
