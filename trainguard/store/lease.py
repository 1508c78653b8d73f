"""Who owns a job: one supervisor at a time, from before any rank starts until it ends.

A :class:`Lease` pairs a lock that dies with its holder (``flock`` on ``locks/<job_id>.lock``
in the state directory for SQLite; a session advisory lock for PostgreSQL) with a row in the
``leases`` table that names the owner (host, pid, since) for messages and ``trainguard
history``. A lock found free while a row still names an owner means that owner died: the new
supervisor takes over and says so. ``takeover=True`` breaks a live owner's lock (the old
supervisor sees :meth:`Lease.lost` and must stop its ranks).

On a network filesystem whose locks cannot be trusted, the row's heartbeat is the backstop: an
owner whose heartbeat is younger than :data:`LEASE_TTL` is taken as alive even when its lock
was free. The owner renews it with :meth:`Lease.renew`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.store.runstore import RunStore


# How long a heartbeat vouches for its owner on filesystems with unreliable locks (seconds).
LEASE_TTL = 60.0
# :meth:`Lease.renew` writes at most this often.
RENEW_EVERY = 10.0


@dataclass(frozen=True)
class Owner:
    """A supervisor process that owns (or owned) a job."""

    host: str
    pid: int
    since: float
    token: str = ""
    heartbeat_at: float = 0.0

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        return f"host {self.host}, pid {self.pid}, since {when}"

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "since": self.since, "token": self.token}


class Lease:
    """This process's ownership of one job; released by :meth:`release` or the store's close.

    ``took_over`` names the previous owner when there was one (dead, or forced out by
    ``takeover``; ``forced`` says which).
    """

    def __init__(self, store: "RunStore", job_id: str, owner: Owner, lock: Any, took_over: Owner | None,
                 forced: bool) -> None:
        self.store = store
        self.job_id = job_id
        self.owner = owner
        self.took_over = took_over
        self.forced = forced
        self._lock = lock
        self._renewed = time.monotonic()

    def lost(self) -> bool:
        """Whether another supervisor took the job over (the engine must stop its ranks)."""
        return self._lock is None or not self._lock.held()

    def renew(self, *, force: bool = False) -> None:
        """Refresh the heartbeat (at most every :data:`RENEW_EVERY` s unless ``force``)."""
        if self._lock is None or (not force and time.monotonic() - self._renewed < RENEW_EVERY):
            return
        self._renewed = time.monotonic()
        self.store._renew_lease(self)

    def release(self) -> None:
        """Give the job up: the next supervisor finds no owner (not a takeover)."""
        if self._lock is None:
            return
        self.store._release_lease(self)
        self._lock.release()
        self._lock = None
