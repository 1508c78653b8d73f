"""The run history: jobs, rounds, faults, events and the bad-node ledger, in SQLite.

This is the product's memory. Every change is its own committed transaction, so a supervisor
killed at any point loses nothing already recorded, and a supervisor started again with the
same ``--job-id`` rebuilds its budgets and ladder counters from here (:meth:`RunStore.history`).

The database uses WAL on local disks. WAL needs shared memory on one host, so on a network
filesystem (NFS, Lustre, GPFS, CIFS) the rollback journal is used instead; that is detected
from ``/proc/mounts``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, Mapping

from trainguard.errors import JobStateError, TrainguardError
from trainguard.model import (
    Action,
    ErrorSource,
    Event,
    Fault,
    History,
    JobStatus,
    NodeFaultEntry,
    RoundRecord,
    RoundResult,
    Verdict,
)
from trainguard.timefmt import iso_ms

# A job that failed only because its supervisor stopped (a signal) or its scheduler would not
# requeue it is resumed, not refused, by a supervisor started with the same job id; so is any
# failure recorded as transient. (The codes cover histories written before ``transient``.)
RESUMABLE_CODES = frozenset({"TG-INTERRUPTED", "TG-REQUEUE-REFUSED"})

NETWORK_FILESYSTEMS = {"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "fuse.glusterfs", "ceph", "beegfs"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    policy TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    failure TEXT
);
CREATE TABLE IF NOT EXISTS rounds (
    job_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (job_id, round)
);
CREATE TABLE IF NOT EXISTS faults (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    round INTEGER,
    rank INTEGER,
    node TEXT,
    source TEXT NOT NULL,
    fault_code TEXT,
    category TEXT,
    counted INTEGER NOT NULL,
    detected_at REAL NOT NULL,
    message TEXT,
    verdict TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    type TEXT NOT NULL,
    at REAL NOT NULL,
    round INTEGER,
    rank INTEGER,
    node TEXT,
    message TEXT,
    data TEXT
);
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    node TEXT NOT NULL,
    fault_code TEXT NOT NULL,
    at REAL NOT NULL,
    user_error INTEGER NOT NULL,
    device TEXT
);
CREATE INDEX IF NOT EXISTS faults_job ON faults (job_id);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id);
CREATE INDEX IF NOT EXISTS ledger_job ON ledger (job_id);
"""


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


def _record_to_json(record: RoundRecord) -> str:
    data = asdict(record)
    data["error_source"] = record.error_source.value
    data["action"] = record.action.value
    data["result"] = record.result.value
    return json.dumps(data)


def _record_from_json(text: str) -> RoundRecord:
    return _record_from_dict(json.loads(text))


def _record_from_dict(data: dict[str, Any]) -> RoundRecord:
    data = dict(data)
    data["error_source"] = ErrorSource(data["error_source"])
    data["action"] = Action(data["action"])
    data["result"] = RoundResult(data["result"])
    for key in ("ranks", "isolated", "stacks"):
        data[key] = tuple(data.get(key) or ())
    return RoundRecord(**data)


class RunStore:
    """One SQLite database under ``state_dir`` holding every job's history."""

    FILENAME = "trainguard.sqlite"

    def __init__(self, state_dir: str | Path) -> None:
        self.state_dir = Path(state_dir)
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrainguardError(f"cannot create state directory {state_dir}: {exc.strerror}") from None
        self.path = self.state_dir / self.FILENAME
        network = filesystem_type(self.state_dir) in NETWORK_FILESYSTEMS
        try:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=" + ("DELETE" if network else "WAL"))
            # NORMAL is durable against a crash of this process in WAL mode; FULL otherwise.
            self._db.execute("PRAGMA synchronous=" + ("FULL" if network else "NORMAL"))
            self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise TrainguardError(f"cannot open run history {self.path}: {exc}") from None
        self.journal_mode = self._db.execute("PRAGMA journal_mode").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _tx(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        return self._db.execute(sql, params)

    # -- jobs -------------------------------------------------------------------------------

    def job(self, job_id: str) -> dict[str, Any] | None:
        row = self._tx("SELECT job_id, status, spec, policy, created_at, updated_at, failure FROM jobs "
                       "WHERE job_id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        return {"job_id": row[0], "status": JobStatus(row[1]), "spec": json.loads(row[2]),
                "policy": json.loads(row[3]), "created_at": row[4], "updated_at": row[5],
                "failure": json.loads(row[6]) if row[6] else None}

    def begin_job(self, job_id: str, spec: Mapping[str, Any], policy: Mapping[str, Any]) -> bool:
        """Record a new job, or resume one whose supervisor died; True when resuming.

        A job that finished (succeeded, or failed for a reason other than an interrupted
        supervisor) is not run again under the same id.
        """
        now = time.time()
        existing = self.job(job_id)
        if existing is None:
            self._tx("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, NULL)",
                     (job_id, JobStatus.RUNNING.value, json.dumps(spec), json.dumps(policy), now, now))
            return False
        if not is_resumable(existing):
            raise JobStateError(job_id, f"already {existing['status'].value}; choose another --job-id")
        self._tx("UPDATE jobs SET status = ?, policy = ?, updated_at = ?, failure = NULL WHERE job_id = ?",
                 (JobStatus.RUNNING.value, json.dumps(policy), now, job_id))
        return True

    def finish_job(self, job_id: str, status: JobStatus, failure: RoundRecord | None = None) -> None:
        self._tx("UPDATE jobs SET status = ?, updated_at = ?, failure = ? WHERE job_id = ?",
                 (status.value, time.time(), _record_to_json(failure) if failure else None, job_id))

    def job_ids(self) -> list[str]:
        return [row[0] for row in self._tx("SELECT job_id FROM jobs ORDER BY created_at")]

    # -- rounds -----------------------------------------------------------------------------

    def next_round(self, job_id: str) -> int:
        row = self._tx("SELECT MAX(round) FROM rounds WHERE job_id = ?", (job_id,)).fetchone()
        return 1 if row[0] is None else row[0] + 1

    def save_round(self, record: RoundRecord) -> None:
        self._tx("INSERT OR REPLACE INTO rounds VALUES (?, ?, ?)",
                 (record.job_id, record.round, _record_to_json(record)))

    def rounds(self, job_id: str) -> list[RoundRecord]:
        rows = self._tx("SELECT record FROM rounds WHERE job_id = ? ORDER BY round", (job_id,))
        return [_record_from_json(row[0]) for row in rows]

    # -- faults, ledger, events -------------------------------------------------------------

    def add_fault(self, job_id: str, fault: Fault, verdict: Verdict | None, round_no: int | None,
                  counted: bool) -> None:
        """Record a fault; ``counted`` faults feed ``--max-num-of-same-error``."""
        self._tx("INSERT INTO faults (job_id, round, rank, node, source, fault_code, category, counted, "
                 "detected_at, message, verdict) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (job_id, round_no, fault.rank, fault.node, fault.source.value,
                  verdict.fault_code if verdict else None, verdict.category.value if verdict else None,
                  int(counted), fault.detected_at, fault.message,
                  json.dumps(verdict.to_json()) if verdict else None))

    def add_ledger(self, job_id: str, entry: NodeFaultEntry) -> None:
        self._tx("INSERT INTO ledger (job_id, node, fault_code, at, user_error, device) VALUES (?, ?, ?, ?, ?, ?)",
                 (job_id, entry.node, entry.fault_code, entry.at, int(entry.user_error), entry.device))

    def add_event(self, event: Event) -> None:
        self._tx("INSERT INTO events (job_id, type, at, round, rank, node, message, data) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (event.job_id, event.type, event.at, event.round, event.rank, event.node,
                  event.message, json.dumps(dict(event.data))))

    def events(self, job_id: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """The job's events in order; ``after`` skips those up to that ``id`` (a reader's cursor)."""
        rows = self._tx("SELECT id, type, at, round, rank, node, message, data FROM events "
                        "WHERE job_id = ? AND id > ? ORDER BY id", (job_id, after))
        for event_id, kind, at, round_no, rank, node, message, data in rows:
            yield {"id": event_id, "type": kind, "at": iso_ms(at), "round": round_no, "rank": rank, "node": node,
                   "message": message, "data": json.loads(data or "{}")}

    def last_event_id(self, job_id: str) -> int:
        """The id of the job's latest event (0 if none): a cursor for :meth:`events`."""
        return self._tx("SELECT COALESCE(MAX(id), 0) FROM events WHERE job_id = ?", (job_id,)).fetchone()[0]

    def history(self, job_id: str) -> History:
        """Everything a strategy may know, rebuilt from the database."""
        ledger = tuple(
            NodeFaultEntry(node, code, at, bool(user), device)
            for node, code, at, user, device in self._tx(
                "SELECT node, fault_code, at, user_error, device FROM ledger WHERE job_id = ? ORDER BY id",
                (job_id,)))
        counts = {
            (rank, code): n
            for rank, code, n in self._tx(
                "SELECT rank, fault_code, COUNT(*) FROM faults WHERE job_id = ? AND counted = 1 "
                "AND rank IS NOT NULL GROUP BY rank, fault_code", (job_id,))}
        return History(rounds=tuple(self.rounds(job_id)), ledger=ledger, same_error_counts=counts)

    def report(self, job_id: str) -> dict[str, Any]:
        """The ``trainguard history --json`` object (DESIGN.md contract)."""
        job = self.job(job_id)
        if job is None:
            raise JobStateError(job_id, f"no such job in {self.path}")
        rounds = self.rounds(job_id)
        out: dict[str, Any] = {
            "job_id": job_id,
            "status": job["status"].value,
            "created_at": iso_ms(job["created_at"]),
            "updated_at": iso_ms(job["updated_at"]),
            "command": job["spec"].get("command"),
            "nproc": job["spec"].get("nproc"),
            "nodes": job["spec"].get("nodes"),
            "restarts": sum(1 for r in rounds if r.consumes_budget),
            "rounds": [r.to_json() for r in rounds],
        }
        if job["failure"]:
            out["failure"] = _record_from_dict(job["failure"]).to_json()
        return out


def cut_off(job: Mapping[str, Any]) -> bool:
    """Whether the job's supervisor was cut off (still recorded as running, interrupted, or
    refused a requeue) rather than deciding the job's end itself. Whoever ran it (an outer
    submitter, the Airflow operator) decides what a cut-off job's end means."""
    failure = job["failure"] or {}
    return job["status"] is JobStatus.RUNNING or failure.get("error_code") in RESUMABLE_CODES


def resumable_failure(failure: Mapping[str, Any] | None) -> bool:
    """Whether a failure (stored, or as ``history --json`` prints it) lets a new supervisor take
    the job up again under its id: a transient one, or one of :data:`RESUMABLE_CODES`."""
    return bool(failure) and (bool(failure.get("transient")) or failure.get("error_code") in RESUMABLE_CODES)


def is_resumable(job: Mapping[str, Any]) -> bool:
    """Whether a job record (``RunStore.job``) may be taken up again by a new supervisor."""
    return job["status"] is JobStatus.RUNNING or resumable_failure(job["failure"])


def default_state_dir() -> Path:
    """``$TRAINGUARD_STATE_DIR``, else ``.trainguard`` in the working directory (shared on clusters)."""
    return Path(os.environ.get("TRAINGUARD_STATE_DIR") or ".trainguard")


