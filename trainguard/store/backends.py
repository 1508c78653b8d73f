"""The two places SQL meets a database: SQLite files under the state directory, and PostgreSQL.

Each backend offers the same small surface to :class:`~trainguard.store.RunStore`: run one
statement, run a function in one transaction, read and write the schema version, take a job's
lock, and say whether an error means the storage is unavailable (disk full, read-only,
connection lost) rather than a bug. Queries are written once with ``?`` placeholders.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from trainguard.errors import StoreUnavailableError, TrainguardError


NETWORK_FILESYSTEMS = {"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "fuse.glusterfs", "ceph", "beegfs"}

# Messages of sqlite3.OperationalError that mean the storage cannot take a write now.
_SQLITE_UNAVAILABLE = ("disk is full", "readonly", "read-only", "disk i/o", "unable to open", "locked", "busy")

Query = Callable[[str, Sequence[Any]], list]


def filesystem_type(path: Path, mounts: str | None = None) -> str:
    """The type of the filesystem holding ``path`` (longest mount-point prefix), or ''.

    ``mounts`` is the text of ``/proc/mounts``, read when not given.
    """
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return ""
    target = str(path.resolve())
    best, kind = "", ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, kind = mount, parts[2]
    return kind


class FileLock:
    """An exclusive ``flock`` on ``path`` that dies with its holder.

    ``flock`` (not ``fcntl``/POSIX record locks) because it belongs to the open file, so two
    stores in one process exclude each other and closing one never drops the other's lock. On
    NFS Linux maps it onto NLM byte-range locks, which work across hosts. A takeover replaces
    the file, so the old holder can tell it lost the lock (:meth:`held`).
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def try_acquire(cls, path: Path) -> "FileLock | None":
        """The lock, or None when a live process holds it."""
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except BaseException:
                os.close(fd)
                raise
            lock = cls(path, fd)
            if lock.held():
                return lock
            os.close(fd)  # replaced by a takeover between open and flock: lock the new file

    def held(self) -> bool:
        """Whether the file at ``path`` is still the one this lock holds (not taken over)."""
        try:
            return os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
        except OSError:
            return False

    def read(self) -> dict[str, Any]:
        try:
            return json.loads(os.pread(self.fd, 4096, 0) or b"{}")
        except (OSError, ValueError):
            return {}

    def write(self, data: dict[str, Any]) -> None:
        payload = json.dumps(data).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, payload, 0)

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            if self.held():
                os.ftruncate(self.fd, 0)  # a clean end leaves no owner behind
        os.close(self.fd)
        self.fd = -1

    @staticmethod
    def read_path(path: Path) -> dict[str, Any]:
        try:
            return json.loads(path.read_bytes()[:4096] or b"{}")
        except (OSError, ValueError):
            return {}


class SqliteBackend:
    """``trainguard.sqlite`` in the state directory; WAL on local disks, rollback journal on
    network filesystems (WAL needs shared memory on one host)."""

    dialect = "sqlite"
    types = {"serial": "INTEGER PRIMARY KEY", "double": "REAL"}
    FILENAME = "trainguard.sqlite"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot create state directory {state_dir}: {exc.strerror}") from None
        self.path = state_dir / self.FILENAME
        self.location = str(self.path)
        self.network = filesystem_type(state_dir) in NETWORK_FILESYSTEMS
        # Locks on shared filesystems may not be enforced (Lustre without -o flock, old NFS).
        self.locks_unreliable = self.network
        self._mutex = threading.RLock()
        try:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=" + ("DELETE" if self.network else "WAL"))
            # NORMAL is durable against a crash of this process in WAL mode; FULL otherwise.
            self._db.execute("PRAGMA synchronous=" + ("FULL" if self.network else "NORMAL"))
            self.journal_mode = self._db.execute("PRAGMA journal_mode").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailableError(f"cannot open run history {self.path}: {exc}") from None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list:
        with self._mutex:
            return self._db.execute(sql, tuple(params)).fetchall()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Query]:
        """One ``BEGIN IMMEDIATE`` transaction: writers queue for it rather than fail mid-way."""
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield lambda sql, params=(): self._db.execute(sql, tuple(params)).fetchall()
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def lock_schema(self, q: Query) -> None:
        """BEGIN IMMEDIATE already holds the write lock."""

    def version(self, q: Query) -> int | None:
        """The schema version, or None for an empty database."""
        version = q("PRAGMA user_version", ())[0][0]
        if version == 0 and not q("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'", ()):
            return None
        return version

    def set_version(self, q: Query, version: int) -> None:
        q(f"PRAGMA user_version = {int(version)}", ())

    def is_unavailable(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and any(
            word in str(exc).lower() for word in _SQLITE_UNAVAILABLE)

    def is_error(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.Error)

    def reconnect(self) -> None:
        """Nothing to do: a file is reopened by the next statement."""

    # -- ownership ----------------------------------------------------------------------------

    def lock_path(self, job_id: str) -> Path:
        return self.state_dir / "locks" / f"{job_id}.lock"

    def try_lock(self, job_id: str) -> FileLock | None:
        path = self.lock_path(job_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return FileLock.try_acquire(path)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot lock job {job_id} in {path.parent}: {exc.strerror}") from None

    def lock_holder(self, job_id: str) -> dict[str, Any]:
        return FileLock.read_path(self.lock_path(job_id))

    def break_lock(self, job_id: str) -> None:
        """Replace the lock file, leaving a live holder's lock on a file nobody will open again."""
        path = self.lock_path(job_id)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def close(self) -> None:
        with self._mutex:
            self._db.close()


def advisory_key(job_id: str) -> int:
    """A job's 64-bit advisory-lock key (signed, as PostgreSQL's bigint)."""
    digest = hashlib.sha256(b"trainguard-job:" + job_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


_SCHEMA_LOCK_KEY = advisory_key("\0schema")


class AdvisoryLock:
    """A session-level ``pg_try_advisory_lock`` held on its own connection: the server drops it
    the moment that connection ends, which a killed supervisor's does at once (TCP reset) and a
    vanished host's after the keepalive probes (about 25 s)."""

    def __init__(self, conn: Any, key: int) -> None:
        self.conn = conn
        self.key = key
        self._mutex = threading.Lock()

    def held(self) -> bool:
        with self._mutex:
            if self.conn.closed:
                return False
            try:
                row = self.conn.execute(
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                    "AND classid = %s AND objid = %s AND objsubid = 1 AND granted",
                    _split_key(self.key)).fetchone()
            except Exception:  # the connection was terminated (a takeover) or lost
                return False
            return row is not None

    def release(self) -> None:
        with self._mutex:
            if not self.conn.closed:
                with contextlib.suppress(Exception):
                    self.conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))
                self.conn.close()


def _split_key(key: int) -> tuple[int, int]:
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    return unsigned >> 32, unsigned & 0xFFFFFFFF


class PostgresBackend:
    """A PostgreSQL database named by a ``postgresql://`` URL (psycopg 3), shared by many
    supervisors; logs still live under the local state directory."""

    dialect = "postgresql"
    types = {"serial": "BIGSERIAL PRIMARY KEY", "double": "DOUBLE PRECISION"}

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise TrainguardError("--state-url: postgresql:// needs psycopg: pip install 'trainguard[postgres]'") \
                from None
        self._psycopg = psycopg
        self.url = url
        self.location = _redact(url)
        self.locks_unreliable = False
        self.journal_mode = "postgresql"
        self._mutex = threading.RLock()
        self._db = self._connect()

    def _connect(self) -> Any:
        try:
            conn = self._psycopg.connect(self.url, autocommit=True, connect_timeout=5, keepalives=1,
                                         keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
        except self._psycopg.Error as exc:
            raise StoreUnavailableError(f"cannot reach run history {self.location}: "
                                        f"{str(exc).strip().splitlines()[0] if str(exc).strip() else exc}") from None
        return conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list:
        with self._mutex:
            return _rows(self._db.execute(_pg(sql), tuple(params)))

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Query]:
        with self._mutex, self._db.transaction():
            yield lambda sql, params=(): _rows(self._db.execute(_pg(sql), tuple(params)))

    def lock_schema(self, q: Query) -> None:
        q("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK_KEY,))

    def version(self, q: Query) -> int | None:
        q("CREATE TABLE IF NOT EXISTS trainguard_schema (version INTEGER NOT NULL)", ())
        rows = q("SELECT version FROM trainguard_schema", ())
        return rows[0][0] if rows else None

    def set_version(self, q: Query, version: int) -> None:
        q("DELETE FROM trainguard_schema", ())
        q("INSERT INTO trainguard_schema (version) VALUES (?)", (version,))

    def is_unavailable(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.OperationalError)

    def is_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.Error)

    def reconnect(self) -> None:
        with self._mutex:
            if self._db.closed or self._db.broken:
                self._db = self._connect()

    # -- ownership ----------------------------------------------------------------------------

    def try_lock(self, job_id: str) -> AdvisoryLock | None:
        conn = self._connect()
        try:
            # The server, too, must notice a vanished supervisor host: probe its end of the socket.
            conn.execute("SET tcp_keepalives_idle = 10")
            conn.execute("SET tcp_keepalives_interval = 5")
            conn.execute("SET tcp_keepalives_count = 3")
            key = advisory_key(job_id)
            if conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                return AdvisoryLock(conn, key)
        except BaseException:
            conn.close()
            raise
        conn.close()
        return None

    def lock_holder(self, job_id: str) -> dict[str, Any]:
        return {}

    def break_lock(self, job_id: str) -> None:
        """End the holder's session, which drops its lock (needs pg_signal_backend or superuser)."""
        classid, objid = _split_key(advisory_key(job_id))
        with self._mutex:
            self._db.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                             "AND classid = %s AND objid = %s AND objsubid = 1 AND granted", (classid, objid))

    def close(self) -> None:
        with self._mutex:
            self._db.close()


def _pg(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


def _rows(cursor: Any) -> list:
    return cursor.fetchall() if cursor.description is not None else []


def _redact(url: str) -> str:
    """The URL without its password, for messages."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        if parts.password:
            netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
            return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "postgresql://..."
    return url
