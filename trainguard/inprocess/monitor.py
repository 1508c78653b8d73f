"""The thread in every wrapped rank that notices an iteration ended elsewhere.

It polls the iteration's abort key in the base store (its own connection: the main thread's may
be busy) and interrupts the main thread when a peer or the supervisor set it. A main thread
blocked where no interrupt reaches (C code: DDP's backward waiting on a gloo allreduce whose
peers are gone) cannot leave the function; the monitor then says so (``stuck``), and the
supervisor replaces the rank. Imports nothing heavy: it runs before torch is loaded.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

# How long ending an iteration waits for its monitor thread; a store call returns in
# milliseconds, or fails when the store is gone.
STOP_GRACE = 10.0


class Watched(Protocol):
    """What the monitor needs of the wrapper's runner (:class:`trainguard.inprocess._Runner`)."""

    poll: float
    stuck_after: float
    in_fn: bool
    iteration: int

    def client(self) -> Any: ...

    def interrupt(self, main: int, iteration: int) -> None: ...

    def send(self, event: str, **fields: Any) -> None: ...


class Monitor(threading.Thread):
    """Polls the iteration's abort key and interrupts the main thread when someone set it."""

    def __init__(self, runner: Watched, key: str, iteration: int) -> None:
        super().__init__(name="trainguard-inprocess-monitor", daemon=True)
        self.runner = runner
        self.key = key
        self.iteration = iteration
        self.main = threading.get_ident()
        self.stopped = threading.Event()
        self.client: Any = None

    def run(self) -> None:
        try:
            self.client = self.runner.client()
            while not self.stopped.wait(self.runner.poll):
                if self.client.check([self.key]):
                    if not self.stopped.is_set():
                        self.runner.interrupt(self.main, self.iteration)
                        if not self.stopped.wait(self.runner.stuck_after) and self.runner.in_fn \
                                and self.runner.iteration == self.iteration:
                            # The interrupt cannot reach a thread blocked in C code: say so.
                            self.runner.send("stuck", iteration=self.iteration, after=self.runner.stuck_after)
                    return
        except Exception:  # noqa: BLE001 - a lost store ends the job through the ranks' own errors
            return

    def stop(self) -> None:
        """Stop polling and wait for the thread to leave the store call it may be in: a daemon
        thread still inside a C++ call (``Store.check`` releases the GIL) when the interpreter
        finalizes is unwound by ``pthread_exit`` through a ``noexcept`` frame — SIGABRT,
        "terminate called without an active exception" — after the job's work is done."""
        self.stopped.set()
        if self.is_alive() and self is not threading.current_thread():
            self.join(timeout=STOP_GRACE)
