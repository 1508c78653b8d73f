"""Taking, renewing and giving up a job's :class:`~trainguard.store.lease.Lease` in the store.

:mod:`.lease` says what a lease is and when an owner counts as alive; this is the store's side:
the lock through the backend and the ``leases`` row that names the owner.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from typing import Any

from trainguard.errors import JobOwnedError, StoreUnavailableError
from trainguard.ids import validate_job_id
from trainguard.store.access import StoreAccess
from trainguard.store.lease import LEASE_TTL, Lease, Owner

log = logging.getLogger(__name__)


class Ownership(StoreAccess):
    """Which supervisor owns which job (part of :class:`~trainguard.store.RunStore`)."""

    def acquire(self, job_id: str, *, takeover: bool = False) -> Lease:
        """Become the job's only owner before any rank starts; see :mod:`trainguard.store.lease`.

        Returns the :class:`Lease` (``took_over`` names a dead or forced-out previous owner).
        Raises :class:`JobOwnedError` (exit code 3) when a live supervisor owns the job and
        ``takeover`` is False. A lease this store already holds is returned as it is.
        """
        validate_job_id(job_id)
        held = self._leases.get(job_id)
        if held is not None and not held.lost():
            return held
        lock = self._backend.try_lock(job_id)
        previous = self._owner_of(job_id)
        forced = False
        if lock is not None and previous is not None and self._backend.locks_unreliable and not takeover:
            # The lock proves nothing here: a fresh heartbeat means the owner is alive.
            if time.time() - previous.heartbeat_at < LEASE_TTL and previous.token:
                lock.release()
                lock = None
        if lock is None:
            if previous is None:
                previous = Owner("unknown host", 0, time.time())
            if not takeover:
                raise JobOwnedError(job_id, previous.host, previous.pid, previous.since)
            log.warning("[%s] taking the job over from a live supervisor (%s): --takeover", job_id,
                        previous.describe())
            self._backend.break_lock(job_id)
            lock = self._lock_within(job_id, 5.0)
            if lock is None:
                raise JobOwnedError(job_id, previous.host, previous.pid, previous.since)
            forced = True
        now = time.time()
        owner = Owner(socket.gethostname(), os.getpid(), now, uuid.uuid4().hex, now)
        try:
            if hasattr(lock, "write"):
                lock.write(owner.to_json())
            self._tx(lambda q: q(
                "INSERT INTO leases (job_id, owner, host, pid, since, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (job_id) DO UPDATE SET owner = excluded.owner, host = excluded.host, "
                "pid = excluded.pid, since = excluded.since, heartbeat_at = excluded.heartbeat_at",
                (job_id, owner.token, owner.host, owner.pid, owner.since, owner.heartbeat_at)))
        except BaseException:
            lock.release()
            raise
        if previous is not None and not forced:
            log.warning("[%s] took the job over from a supervisor that died (%s)", job_id, previous.describe())
        lease = Lease(self, job_id, owner, lock, previous, forced)
        self._leases[job_id] = lease
        return lease

    def _lock_within(self, job_id: str, seconds: float) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            lock = self._backend.try_lock(job_id)
            if lock is not None or time.monotonic() > deadline:
                return lock
            time.sleep(0.05)

    def _owner_of(self, job_id: str) -> Owner | None:
        rows = self._read(lambda q: q("SELECT owner, host, pid, since, heartbeat_at FROM leases WHERE job_id = ?",
                                      (job_id,)))
        if rows:
            token, host, pid, since, heartbeat = rows[0]
            return Owner(host, int(pid), float(since), token, float(heartbeat))
        data = self._backend.lock_holder(job_id) if self._backend.dialect == "sqlite" else {}
        if data.get("pid"):
            return Owner(str(data.get("host")), int(data["pid"]), float(data.get("since") or 0), str(data.get("token")))
        return None

    def owner(self, job_id: str) -> Owner | None:
        """The job's recorded owner (live or not), as its lease row says."""
        return self._owner_of(job_id)

    def _renew_lease(self, lease: Lease) -> None:
        now = time.time()
        self._write("a lease heartbeat", lambda q: q(
            "UPDATE leases SET heartbeat_at = ? WHERE job_id = ? AND owner = ?", (now, lease.job_id, lease.owner.token)))

    def _release_lease(self, lease: Lease) -> None:
        self._leases.pop(lease.job_id, None)
        if lease.lost():
            return
        try:
            self._tx(lambda q: q("DELETE FROM leases WHERE job_id = ? AND owner = ?",
                                 (lease.job_id, lease.owner.token)))
        except StoreUnavailableError as exc:
            log.warning("[%s] %s", lease.job_id, exc)
