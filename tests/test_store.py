"""The run history store, on SQLite and on a real PostgreSQL server: rounds as transactions,
budgets rebuilt from history, schema versions and migration, the store-wide bad-node ledger."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from pg_server import backend, pg_server  # noqa: F401  (fixtures)
from trainguard.errors import JobStateError, StoreUnavailableError
from trainguard.model import Action, ErrorSource, JobStatus, NodeFaultEntry, RoundRecord, RoundResult
from trainguard.store import SCHEMA_VERSION, RunStore, filesystem_type


def _round(job: str, n: int, *, action: Action = Action.RESTART_JOB, isolated: tuple[str, ...] = (),
           source: ErrorSource = ErrorSource.EXIT_CODE, consumes_budget: bool = True) -> RoundRecord:
    return RoundRecord(job, n, "r", "TG-A", "m", source, action, time.time(), isolated=isolated,
                       consumes_budget=consumes_budget)


def _open(backend_) -> RunStore:
    state_dir, url = backend_
    return RunStore(state_dir, url=url)


def test_history_survives_reopen_and_rebuilds_counters(backend):
    store = _open(backend)
    store.begin_job("j", {"command": ["x"], "nproc": 2}, {})
    now = time.time()
    record = _round("j", 1, isolated=("node-1",))
    store.open_round(record)
    store.mark_acted("j", 1)
    store.close_round(RoundRecord(**{**record.__dict__, "result": RoundResult.RECOVERED}))
    store.add_ledger("j", NodeFaultEntry("node-1", "TG-A", now))
    store.close()
    again = _open(backend)
    history = again.history("j")
    assert history.budget_used == 1 and history.isolated_nodes == {"node-1"}
    assert history.same_fault_on_node("node-1", "TG-A", now - 10) == 1
    assert again.begin_job("j", {"command": ["x"], "nproc": 2}, {}) is True
    again.finish_job("j", JobStatus.SUCCEEDED)
    with pytest.raises(JobStateError, match="already succeeded"):
        again.begin_job("j", {}, {})
    with pytest.raises(JobStateError, match="no such job"):
        again.report("nope")
    again.close()


def test_a_round_left_open_is_closed_interrupted_and_charged_only_if_acted(backend):
    store = _open(backend)
    store.begin_job("j", {"command": ["x"], "nproc": 1}, {})
    store.open_round(_round("j", 1))                      # decided, then the supervisor died
    store.open_round(_round("j", 2, isolated=("node-3",)))
    store.mark_acted("j", 2)                               # died while carrying it out
    assert store.history("j").budget_used == 2, "an open round counts until it is closed"
    store.close()  # the lease goes with the process; the rounds stay open

    again = _open(backend)
    assert again.begin_job("j", {"command": ["x"], "nproc": 1}, {}) is True
    report = again.report("j")
    assert [r["result"] for r in report["rounds"]] == ["interrupted", "interrupted"]
    assert [r["consumes_budget"] for r in report["rounds"]] == [False, True]
    assert "not charged" in report["rounds"][0]["notes"][-1]
    history = again.history("j")
    assert history.budget_used == 1
    assert history.isolated_nodes == {"node-3"}, "an acted round's isolation stands"
    assert again.next_round("j") == 3, "interrupted rounds keep their numbers"
    with pytest.raises(JobStateError, match="already recorded"):
        again.open_round(_round("j", 2))
    again.close()


def test_interrupted_rounds_neither_count_nor_break_a_ladder(backend):
    store = _open(backend)
    store.begin_job("j", {}, {})
    for n in (1, 2, 3):
        store.open_round(_round("j", n, source=ErrorSource.HANG, consumes_budget=False))
        if n != 2:
            store.close_round(RoundRecord(**{**_round("j", n, source=ErrorSource.HANG).__dict__,
                                             "result": RoundResult.RECOVERED, "consumes_budget": False}))
    store.close_round(RoundRecord(**{**_round("j", 2, source=ErrorSource.HANG).__dict__,
                                     "result": RoundResult.INTERRUPTED}))
    history = store.history("j")
    assert history.budget_used == 0, "interrupted before acting: not charged"
    assert history.trailing(lambda r: r.error_source is ErrorSource.HANG) == 2
    store.close()


def test_a_node_isolated_by_one_job_is_avoided_by_the_next_until_its_window_ends(backend):
    store = _open(backend)
    store.begin_job("a", {}, {"isolate_window": 100})
    store.save_round(RoundRecord(**{**_round("a", 1, isolated=("node-7",)).__dict__,
                                    "result": RoundResult.RECOVERED}))
    store.finish_job("a", JobStatus.SUCCEEDED)
    store.begin_job("b", {}, {})
    assert store.history("b").isolated_nodes == {"node-7"}
    assert store.avoided_nodes("b", now=time.time() + 101) == frozenset(), "the window ended"
    assert store.avoided_nodes("a", now=time.time() + 101) == {"node-7"}, "its own job keeps avoiding it"
    (entry,) = store.isolations()
    assert entry["node"] == "node-7" and entry["job_id"] == "a" and entry["round"] == 1 and entry["active"]
    assert store.release_node("node-7") == 1
    assert store.history("b").isolated_nodes == frozenset() and store.history("a").isolated_nodes == frozenset()
    assert store.isolations() == [] and store.isolations(include_inactive=True)[0]["released_at"]
    assert store.release_node("node-7") == 0
    store.close()


def test_a_fresh_store_has_the_current_schema_version(backend):
    store = _open(backend)
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    assert _open(backend).schema_version == SCHEMA_VERSION


# The schema of trainguard 0.1.0 (git show 94aa628:trainguard/store.py), as it wrote databases.
OLD_DDL = """
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, status TEXT NOT NULL, spec TEXT NOT NULL,
    policy TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, failure TEXT);
CREATE TABLE IF NOT EXISTS rounds (job_id TEXT NOT NULL, round INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (job_id, round));
CREATE TABLE IF NOT EXISTS faults (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, round INTEGER, rank INTEGER,
    node TEXT, source TEXT NOT NULL, fault_code TEXT, category TEXT, counted INTEGER NOT NULL,
    detected_at REAL NOT NULL, message TEXT, verdict TEXT);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, type TEXT NOT NULL, at REAL NOT NULL,
    round INTEGER, rank INTEGER, node TEXT, message TEXT, data TEXT);
CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, node TEXT NOT NULL,
    fault_code TEXT NOT NULL, at REAL NOT NULL, user_error INTEGER NOT NULL, device TEXT);
CREATE INDEX IF NOT EXISTS faults_job ON faults (job_id);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id);
CREATE INDEX IF NOT EXISTS ledger_job ON ledger (job_id);
"""


def _old_record(n: int, result: str, isolated: list[str]) -> str:
    # Exactly the keys 0.1.0 wrote (no notes).
    return json.dumps({"job_id": "old", "round": n, "reason": "r", "error_code": "TG-A", "error_message": "m",
                       "error_source": "exit_code", "action": "reschedule_isolated", "started_at": time.time() - 60,
                       "result": result, "node": "node-2", "instance": "rank-0", "ranks": [0], "stages": {},
                       "consumes_budget": True, "unconditional": False, "user_error": False, "node_fault": True,
                       "isolated": isolated, "stacks": [], "transient": False})


def test_a_database_written_by_the_previous_release_is_upgraded(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    db = sqlite3.connect(state / RunStore.FILENAME)
    db.executescript(OLD_DDL)
    now = time.time()
    db.execute("INSERT INTO jobs VALUES ('old', 'running', '{\"command\": [\"x\"]}', '{\"isolate_window\": 3600}', "
               "?, ?, NULL)", (now, now))
    db.execute("INSERT INTO rounds VALUES ('old', 1, ?)", (_old_record(1, "recovered", ["node-2"]),))
    db.execute("INSERT INTO rounds VALUES ('old', 2, ?)", (_old_record(2, "in_progress", ["node-5"]),))
    db.execute("INSERT INTO events (job_id, type, at) VALUES ('old', 'job_started', ?)", (now,))
    db.commit()
    assert db.execute("PRAGMA user_version").fetchone()[0] == 0
    db.close()

    store = RunStore(state)
    assert store.schema_version == SCHEMA_VERSION
    assert store.last_event_id("old") == 1
    assert store.begin_job("old", {}, {}) is True
    report = store.report("old")
    assert [(r["round"], r["result"], r["consumes_budget"]) for r in report["rounds"]] == [
        (1, "recovered", True), (2, "interrupted", False)]
    assert store.history("old").isolated_nodes == {"node-2"}, "only the acted round isolated its node"
    (entry,) = store.isolations()
    assert entry["node"] == "node-2"
    store.close()
    assert sqlite3.connect(state / RunStore.FILENAME).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_database_from_a_newer_release_is_refused(tmp_path):
    RunStore(tmp_path).close()
    db = sqlite3.connect(tmp_path / RunStore.FILENAME)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreUnavailableError, match="newer than this trainguard"):
        RunStore(tmp_path)


def test_a_corrupted_database_is_one_clear_error(tmp_path):
    (tmp_path / RunStore.FILENAME).write_bytes(b"this is not SQLite\n" * 100)
    with pytest.raises(StoreUnavailableError) as caught:
        RunStore(tmp_path)
    assert "file is not a database" in str(caught.value) and "\n" not in str(caught.value)


def test_local_disk_uses_wal_and_network_filesystems_do_not(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "a")
    assert store.journal_mode == "wal"
    store.close()
    monkeypatch.setattr("trainguard.store.backends.filesystem_type", lambda path: "nfs4")
    store = RunStore(tmp_path / "b")
    assert store.journal_mode == "delete"
    store.close()


def test_filesystem_type_takes_the_longest_mount_prefix(tmp_path):
    mounts = ("/dev/vda / ext4 rw 0 0\n"
              "server:/export /shared nfs4 rw 0 0\n"
              "/dev/vdb /shared/local xfs rw 0 0\n"
              "lustre@tcp:/fs /shared2 lustre rw 0 0\n")
    assert filesystem_type(Path("/shared/ckpt"), mounts) == "nfs4"
    assert filesystem_type(Path("/shared/local/x"), mounts) == "xfs"
    assert filesystem_type(Path("/shared2"), mounts) == "lustre"
    assert filesystem_type(Path("/shared22/x"), mounts) == "ext4", "a prefix must end at a path separator"
    assert filesystem_type(tmp_path) != "", "the real /proc/mounts is read when none is given"


class _FullDisk:
    """A sqlite3 connection whose writes fail as on a full disk while ``full`` is set."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.full = True

    def execute(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        if self.full and sql.split()[0].upper() in ("INSERT", "UPDATE", "DELETE"):
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, params)

    def close(self) -> None:
        self.db.close()


def test_a_full_disk_keeps_records_in_memory_until_they_can_be_written(tmp_path, caplog):
    store = RunStore(tmp_path)
    store.begin_job("j", {}, {})
    disk = _FullDisk(store._backend._db)
    store._backend._db = disk
    record = _round("j", 1)
    store.open_round(record)
    store.mark_acted("j", 1)
    store.add_ledger("j", NodeFaultEntry("node-0", "TG-A", time.time()))
    assert store.pending == 3
    assert "disk is full" in caplog.text and "keeping a round in memory" in caplog.text
    assert [r.round for r in store.history("j").rounds] == [1], "pending rounds still count"
    assert store.flush() == 3
    disk.full = False
    store.close_round(RoundRecord(**{**record.__dict__, "result": RoundResult.RECOVERED}))
    assert store.pending == 4, "writes wait behind the earlier ones (retried with a backoff)"
    assert store.history("j").rounds[0].result is RoundResult.RECOVERED
    assert store.flush() == 0, "the engine's tick flushes"
    store.close()
    again = RunStore(tmp_path)
    history = again.history("j")
    assert [r.result for r in history.rounds] == [RoundResult.RECOVERED] and len(history.ledger) == 1
    again.close()
