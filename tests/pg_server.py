"""A throwaway PostgreSQL server from Debian's packages, for the store's tests.

``initdb`` in a fresh directory, ``postgres`` on a free port on 127.0.0.1 with trust auth, one
new database per test. PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` user (Debian's package creates it). Where the binaries are missing or the server
cannot start, the tests that need it skip with the reason, except under ``CI=true``, where
they fail: CI installs ``postgresql`` (``./dev.sh test``).
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return candidates[0] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """One server; :meth:`new_database` gives each test its own database."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tg-pg-"))
        self.port = _free_port()
        self.user: str | None = None
        self.url = ""

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = list(args)
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
        if not (initdb and pg_ctl):
            raise RuntimeError("PostgreSQL is not installed (no initdb/pg_ctl; Debian package postgresql)")
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no postgres user to run the server as") from None
            self.user = "postgres"
            shutil.chown(self.dir, "postgres")
            self.dir.chmod(0o700)
        data = self.dir / "data"
        done = self._run(initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        if done.returncode:
            raise RuntimeError(f"initdb failed: {(done.stderr or done.stdout).strip()[-500:]}")
        options = (f"-p {self.port} -h 127.0.0.1 -k {self.dir} -c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off -c max_connections=200")
        done = self._run(pg_ctl, "-D", str(data), "-o", options, "-l", str(self.dir / "server.log"), "-w",
                         "-t", "60", "start")
        if done.returncode:
            log = (self.dir / "server.log").read_text(errors="replace")[-800:] if (self.dir / "server.log").exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {(done.stderr or done.stdout).strip()[-300:]} {log}")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        import psycopg

        name = "tg_" + secrets.token_hex(6)
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        pg_ctl = _binary("pg_ctl")
        if pg_ctl and (self.dir / "data" / "postmaster.pid").exists():
            self._run(pg_ctl, "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


def unavailable(reason: str) -> None:
    """Skip, or fail under CI=true (where PostgreSQL must be there)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def pg_server():
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed (pip install 'trainguard[postgres]')")
    server = LocalPostgres()
    try:
        server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        server.stop()
        unavailable(str(exc))
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request, tmp_path):
    """``(state_dir, url)`` for a fresh store: SQLite in a temp dir, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "state", None
    server = request.getfixturevalue("pg_server")
    return tmp_path / "state", server.new_database()
