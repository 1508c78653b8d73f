"""One schema for every backend, its version, and the migrations from earlier releases.

The DDL is written once with two placeholders: ``{serial}`` (an auto-numbered key) and
``{double}`` (a 64-bit float: PostgreSQL's ``REAL`` is 32-bit). SQLite keeps its version in
``PRAGMA user_version``, PostgreSQL in the one-row table ``trainguard_schema``.

==========  ====================================================================================
version     what changed
==========  ====================================================================================
0           trainguard 0.1.0: jobs, rounds (one JSON record), faults, events, ledger
1           rounds get ``state``, ``acted_at`` and ``owner`` (a round is opened, acted, closed);
            ``isolations`` (the bad-node ledger of the whole store, with a window);
            ``leases`` (who owns a job)
==========  ====================================================================================
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

SCHEMA_VERSION = 1

# How long an isolation lasts when the job's policy does not say (Policy.isolate_window).
DEFAULT_ISOLATE_WINDOW = 86400.0

TABLES = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    policy TEXT NOT NULL,
    created_at {double} NOT NULL,
    updated_at {double} NOT NULL,
    failure TEXT
);
CREATE TABLE IF NOT EXISTS rounds (
    job_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    record TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'in_progress',
    acted_at {double},
    owner TEXT,
    PRIMARY KEY (job_id, round)
);
CREATE TABLE IF NOT EXISTS faults (
    id {serial},
    job_id TEXT NOT NULL,
    round INTEGER,
    rank INTEGER,
    node TEXT,
    source TEXT NOT NULL,
    fault_code TEXT,
    category TEXT,
    counted INTEGER NOT NULL,
    detected_at {double} NOT NULL,
    message TEXT,
    verdict TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id {serial},
    job_id TEXT NOT NULL,
    type TEXT NOT NULL,
    at {double} NOT NULL,
    round INTEGER,
    rank INTEGER,
    node TEXT,
    message TEXT,
    data TEXT
);
CREATE TABLE IF NOT EXISTS ledger (
    id {serial},
    job_id TEXT NOT NULL,
    node TEXT NOT NULL,
    fault_code TEXT NOT NULL,
    at {double} NOT NULL,
    user_error INTEGER NOT NULL,
    device TEXT
);
CREATE INDEX IF NOT EXISTS faults_job ON faults (job_id);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id);
CREATE INDEX IF NOT EXISTS ledger_job ON ledger (job_id);
"""

# Added in version 1 (and created by it for a fresh database).
TABLES_V1 = """
CREATE TABLE IF NOT EXISTS isolations (
    id {serial},
    node TEXT NOT NULL,
    job_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    reason TEXT,
    at {double} NOT NULL,
    expires_at {double} NOT NULL,
    released_at {double},
    UNIQUE (job_id, round, node)
);
CREATE INDEX IF NOT EXISTS isolations_node ON isolations (node);
CREATE TABLE IF NOT EXISTS leases (
    job_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    since {double} NOT NULL,
    heartbeat_at {double} NOT NULL
);
CREATE INDEX IF NOT EXISTS rounds_state ON rounds (state);
"""

Query = Callable[[str, Sequence[Any]], list]


def statements(ddl: str, types: dict[str, str]) -> list[str]:
    """The DDL's statements for one backend (``types`` fills ``{serial}`` and ``{double}``)."""
    return [s.strip() for s in ddl.format(**types).split(";") if s.strip()]


def create(q: Query, types: dict[str, str]) -> None:
    """Create the current schema in an empty database."""
    for sql in statements(TABLES, types) + statements(TABLES_V1, types):
        q(sql, ())


def _migrate_0_to_1(q: Query, types: dict[str, str]) -> None:
    for column in ("state TEXT NOT NULL DEFAULT 'in_progress'", f"acted_at {types['double']}", "owner TEXT"):
        q(f"ALTER TABLE rounds ADD COLUMN {column}", ())
    for sql in statements(TABLES_V1, types):
        q(sql, ())
    windows = {job_id: window_of(policy) for job_id, policy in q("SELECT job_id, policy FROM jobs", ())}
    for job_id, round_no, text in q("SELECT job_id, round, record FROM rounds", ()):
        record = json.loads(text)
        state = record.get("result") or "in_progress"
        # 0.1.0 saved a round in_progress before acting and never said whether it had acted: a
        # round left so is taken as not carried out (it is closed as interrupted, uncharged).
        acted = record.get("started_at") if state != "in_progress" else None
        q("UPDATE rounds SET state = ?, acted_at = ? WHERE job_id = ? AND round = ?",
          (state, acted, job_id, round_no))
        if acted is not None:
            for node in record.get("isolated") or ():
                q("INSERT INTO isolations (node, job_id, round, reason, at, expires_at) VALUES (?, ?, ?, ?, ?, ?) "
                  "ON CONFLICT DO NOTHING",
                  (node, job_id, round_no, record.get("reason"), acted,
                   acted + windows.get(job_id, DEFAULT_ISOLATE_WINDOW)))


def window_of(policy_json: str | None) -> float:
    """The isolation window (seconds) a job's stored policy asks for."""
    try:
        value = float(json.loads(policy_json or "{}").get("isolate_window", DEFAULT_ISOLATE_WINDOW))
    except (TypeError, ValueError, AttributeError):
        return DEFAULT_ISOLATE_WINDOW
    return value if value > 0 and value != float("inf") else DEFAULT_ISOLATE_WINDOW


# MIGRATIONS[n] takes a database from version n - 1 to n, inside the caller's transaction.
MIGRATIONS: dict[int, Callable[[Query, dict[str, str]], None]] = {1: _migrate_0_to_1}
