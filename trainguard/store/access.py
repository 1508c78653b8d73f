"""Opening a run history and the three ways every query reaches it: read, transaction, write.

:class:`StoreAccess` finds the store (SQLite in the state directory, or a PostgreSQL URL),
brings its schema up to date, and gives the rest of the store :meth:`~StoreAccess._read`,
:meth:`~StoreAccess._tx` (now, or :class:`StoreUnavailableError`) and
:meth:`~StoreAccess._write` (now, or later through the :mod:`.writebehind` buffer).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable

from trainguard.errors import PolicyError, StoreUnavailableError, TrainguardError
from trainguard.store import schema
from trainguard.store.backends import PostgresBackend, Query, SqliteBackend
from trainguard.store.lease import Lease
from trainguard.store.writebehind import WriteBehind, one_line, reconnect_quietly

log = logging.getLogger(__name__)


def parse_state_url(url: str | None) -> str | None:
    """``--state-url``: None/'' (SQLite in the state directory) or a PostgreSQL URL."""
    if not url:
        return None
    if url.startswith(("postgresql://", "postgres://")):
        return url
    shown = url if "@" not in url else url.split("://", 1)[0] + "://..."
    raise PolicyError("--state-url", f"{shown!r} is not a postgresql:// URL (leave it out for SQLite in --state-dir)")


def default_state_dir() -> Path:
    """``$TRAINGUARD_STATE_DIR``, else ``.trainguard`` in the working directory (shared on clusters)."""
    return Path(os.environ.get("TRAINGUARD_STATE_DIR") or ".trainguard")


def default_state_url() -> str | None:
    """``$TRAINGUARD_STATE_URL`` (a ``postgresql://`` URL), else None (SQLite in the state directory)."""
    return os.environ.get("TRAINGUARD_STATE_URL") or None


class StoreAccess:
    """An open run history: the base of :class:`~trainguard.store.RunStore`, which documents the
    parameters."""

    FILENAME = SqliteBackend.FILENAME

    def __init__(self, state_dir: str | Path, *, url: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.url = parse_state_url(url)
        self._backend: SqliteBackend | PostgresBackend = (
            PostgresBackend(self.url) if self.url else SqliteBackend(self.state_dir))
        self.path = self.state_dir / self.FILENAME if not self.url else None
        self.location = self._backend.location
        self.journal_mode = self._backend.journal_mode
        self._leases: dict[str, Lease] = {}
        self._buffer = WriteBehind(self._backend, self.location)
        try:
            self._prepare_schema()
        except TrainguardError:
            self._backend.close()
            raise
        except Exception as exc:
            self._backend.close()
            if self._backend.is_error(exc):
                raise StoreUnavailableError(f"cannot open run history {self.location}: {one_line(exc)}") from None
            raise

    def _prepare_schema(self) -> None:
        current = schema.SCHEMA_VERSION
        if self._backend.dialect == "sqlite":
            # Readers of an up-to-date database need no write lock (a read-only state dir works).
            if self._backend.query("PRAGMA user_version")[0][0] == current:
                return
        with self._backend.transaction() as q:
            self._backend.lock_schema(q)
            version = self._backend.version(q)
            if version is None:
                schema.create(q, self._backend.types)
            elif version > current:
                raise StoreUnavailableError(f"run history {self.location} has schema version {version}, newer than "
                                            f"this trainguard's {current}: upgrade trainguard")
            elif version < current:
                for step in range(version + 1, current + 1):
                    schema.MIGRATIONS[step](q, self._backend.types)
                log.info("run history %s upgraded from schema version %s to %s", self.location, version, current)
            else:
                return
            self._backend.set_version(q, current)

    @property
    def schema_version(self) -> int:
        return self._read(lambda q: self._backend.version(q)) or 0

    def close(self) -> None:
        """Write what is pending if possible, give up this store's leases, close."""
        if self.pending and self.flush():
            log.error("run history %s: %d record(s) could not be written and are lost", self.location,
                      self.pending)
        for lease in list(self._leases.values()):
            try:
                lease.release()
            except TrainguardError as exc:
                log.warning("releasing the lease on job %s: %s", lease.job_id, exc)
        self._backend.close()

    def _read(self, fn: Callable[[Query], Any]) -> Any:
        try:
            return fn(self._backend.query)
        except Exception as exc:
            if self._backend.is_error(exc):
                raise StoreUnavailableError(f"cannot read run history {self.location}: {one_line(exc)}") from None
            raise

    def _tx(self, fn: Callable[[Query], Any]) -> Any:
        """Run ``fn`` in one transaction, now; storage errors become :class:`StoreUnavailableError`."""
        try:
            with self._backend.transaction() as q:
                return fn(q)
        except Exception as exc:
            if self._backend.is_error(exc):
                reconnect_quietly(self._backend)
                raise StoreUnavailableError(f"cannot write run history {self.location}: {one_line(exc)}") from None
            raise

    def _write(self, what: str, fn: Callable[[Query], None]) -> None:
        """One transaction, or kept in memory (in order) while the storage cannot take it."""
        self._buffer.write(what, fn)

    def flush(self) -> int:
        """Write the records kept in memory, oldest first; returns how many are still pending.

        The engine calls this every loop tick while :attr:`pending` is non-zero, and before exit.
        """
        return self._buffer.flush()

    @property
    def pending(self) -> int:
        """Records kept in memory because the storage could not take them."""
        return len(self._buffer)
