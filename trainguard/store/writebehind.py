"""What the store does while its storage cannot take writes: keep them in memory, in order.

A write that fails because the storage is unavailable (disk full, read-only, database
unreachable) is queued; the next write, or :meth:`WriteBehind.flush`, tries the queue again,
less often the longer the outage lasts. Rounds queued this way are also kept by number
(:attr:`WriteBehind.rounds`) so that reads of the job's rounds still see them.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

from trainguard.errors import TrainguardError
from trainguard.model import RoundRecord
from trainguard.store.backends import PostgresBackend, Query, SqliteBackend

log = logging.getLogger(__name__)

# Writes kept in memory while the storage is unavailable; past this the oldest events go first.
PENDING_LIMIT = 10000


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (database errors run to many lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def reconnect_quietly(backend: SqliteBackend | PostgresBackend) -> None:
    """Reconnect after a storage error; a failure is the next write's to report."""
    try:
        backend.reconnect()
    except TrainguardError:
        pass


class WriteBehind:
    """The store's writes, each one transaction now or, while the storage cannot take it, later.

    :param backend: the store's backend; :param location: how messages name the store.
    """

    def __init__(self, backend: SqliteBackend | PostgresBackend, location: str) -> None:
        self._backend = backend
        self._location = location
        self._queue: collections.deque[tuple[str, Callable[[Query], None]]] = collections.deque()
        # Rounds written while the queue is not empty, by (job id, round): reads merge them in.
        self.rounds: dict[tuple[str, int], RoundRecord] = {}
        self._dropped = 0
        self._backoff = 1.0
        self._retry_at = 0.0
        # The engine's threads (notifier worker, signal handling) share one store.
        self._mutex = threading.RLock()

    def __len__(self) -> int:
        return len(self._queue)

    def write(self, what: str, fn: Callable[[Query], None]) -> None:
        """One transaction, or kept in memory (in order) while the storage cannot take it."""
        with self._mutex:
            self._write_locked(what, fn)

    def _write_locked(self, what: str, fn: Callable[[Query], None]) -> None:
        if self._queue and time.monotonic() >= self._retry_at:
            self._flush_locked()
        if not self._queue:
            try:
                with self._backend.transaction() as q:
                    fn(q)
                return
            except Exception as exc:
                if not self._backend.is_unavailable(exc):
                    raise
                reconnect_quietly(self._backend)
                self._backoff = 1.0
                self._retry_at = time.monotonic() + self._backoff
                log.error("run history %s cannot be written (%s): keeping %s in memory until it can; the job "
                          "goes on", self._location, one_line(exc), what)
        if len(self._queue) >= PENDING_LIMIT:
            self._drop_one()
        self._queue.append((what, fn))

    def _drop_one(self) -> None:
        for i, (what, _) in enumerate(self._queue):
            if what == "an event":
                del self._queue[i]
                break
        else:
            self._queue.popleft()
        self._dropped += 1
        if self._dropped in (1, 10, 100) or self._dropped % 1000 == 0:
            log.error("run history %s: %d record(s) dropped while it cannot be written", self._location,
                      self._dropped)

    def flush(self) -> int:
        """Write the records kept in memory, oldest first; returns how many are still pending."""
        with self._mutex:
            return self._flush_locked()

    def _flush_locked(self) -> int:
        while self._queue:
            what, fn = self._queue[0]
            try:
                with self._backend.transaction() as q:
                    fn(q)
            except Exception as exc:
                if not self._backend.is_unavailable(exc):
                    log.error("run history %s: dropping %s that cannot be written: %s", self._location, what,
                              one_line(exc))
                    self._queue.popleft()
                    continue
                reconnect_quietly(self._backend)
                # Each try may cost a connect timeout: try less often the longer it lasts.
                self._backoff = min(self._backoff * 2, 30.0)
                self._retry_at = time.monotonic() + self._backoff
                return len(self._queue)
            self._queue.popleft()
            if not self._queue:
                self.rounds.clear()
                log.warning("run history %s is writable again: the records kept in memory are written",
                            self._location)
        return 0

    def remember(self, record: RoundRecord) -> None:
        """Keep a round just written where reads see it, if it may be queued."""
        if self._queue or (record.job_id, record.round) in self.rounds:
            self.rounds[(record.job_id, record.round)] = record
