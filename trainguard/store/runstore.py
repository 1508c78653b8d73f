"""The run history: jobs, rounds, faults, events, the bad-node ledger and job ownership.

This is the product's memory. Every state change is one transaction, so a supervisor killed at
any point leaves the history as it was before or after that change, never between; a
supervisor started again with the same ``--job-id`` rebuilds its budgets and ladder counters
from here (:meth:`RunStore.history`).

:class:`RunStore` is put together from one part per concept, each in its own module:

- :mod:`.access`: opening the store, its schema, reads, transactions, writes;
- :mod:`.writebehind`: writes kept in memory, in order, while the storage cannot take them
  (disk full, read-only, database unreachable), so the ranks go on running meanwhile;
- :mod:`.ownership`: the job's lease (:mod:`.lease`);
- :mod:`.rounds`: rounds opened, acted and closed, and those a dead supervisor left open;
- :mod:`.isolations`: the bad-node ledger every job of the store avoids;
- :mod:`.journal`: faults, the per-job node ledger, events.

This module adds the jobs themselves and what is built from all of it: a strategy's
:class:`~trainguard.model.History` and the ``history --json`` report.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping

from trainguard.errors import JobStateError
from trainguard.goodput import goodput
from trainguard.model import History, JobStatus, NodeFaultEntry, RoundRecord
from trainguard.store.backends import Query
from trainguard.store.journal import Journal
from trainguard.store.ownership import Ownership
from trainguard.store.records import record_from_dict, record_to_json
from trainguard.store.rounds import RoundLog
from trainguard.timefmt import iso_ms

# A job that failed only because its supervisor stopped (a signal) or its scheduler would not
# requeue it is resumed, not refused, by a supervisor started with the same job id; so is any
# failure recorded as transient. (The codes cover histories written before ``transient``.)
RESUMABLE_CODES = frozenset({"TG-INTERRUPTED", "TG-REQUEUE-REFUSED"})


class RunStore(Ownership, RoundLog, Journal):
    """Every job's history, in SQLite under ``state_dir`` or in PostgreSQL at ``url``.

    :param state_dir: the state directory (the SQLite file and job lock files live here; logs
        live under it whatever the backend).
    :param url: a ``postgresql://`` URL for a store shared by many supervisors.
    """

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs -----------------------------------------------------------------------------------

    def job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._read(lambda q: q("SELECT job_id, status, spec, policy, created_at, updated_at, failure FROM jobs "
                                      "WHERE job_id = ?", (job_id,)))
        if not rows:
            return None
        row = rows[0]
        return {"job_id": row[0], "status": JobStatus(row[1]), "spec": json.loads(row[2]),
                "policy": json.loads(row[3]), "created_at": row[4], "updated_at": row[5],
                "failure": json.loads(row[6]) if row[6] else None}

    def begin_job(self, job_id: str, spec: Mapping[str, Any], policy: Mapping[str, Any]) -> bool:
        """Record a new job, or resume one whose supervisor died; True when resuming.

        Takes the job's lease first if this store does not hold it (raising
        :class:`JobOwnedError` when a live supervisor does). On resume, rounds the dead
        supervisor left ``in_progress`` are closed ``interrupted`` (:meth:`close_interrupted`).
        A job that finished (succeeded, or failed for a reason other than an interrupted
        supervisor) is not run again under the same id.
        """
        self.acquire(job_id)

        def begin(q: Query) -> bool:
            now = time.time()
            rows = q("SELECT status, failure FROM jobs WHERE job_id = ?", (job_id,))
            if not rows:
                q("INSERT INTO jobs (job_id, status, spec, policy, created_at, updated_at, failure) "
                  "VALUES (?, ?, ?, ?, ?, ?, NULL)",
                  (job_id, JobStatus.RUNNING.value, json.dumps(spec), json.dumps(policy), now, now))
                return False
            existing = {"status": JobStatus(rows[0][0]), "failure": json.loads(rows[0][1]) if rows[0][1] else None}
            if not is_resumable(existing):
                raise JobStateError(job_id, f"already {existing['status'].value}; choose another --job-id")
            q("UPDATE jobs SET status = ?, policy = ?, updated_at = ?, failure = NULL WHERE job_id = ?",
              (JobStatus.RUNNING.value, json.dumps(policy), now, job_id))
            self._close_interrupted(q, job_id)
            return True

        return self._tx(begin)

    def finish_job(self, job_id: str, status: JobStatus, failure: RoundRecord | None = None) -> None:
        now = time.time()
        self._write("the job's end", lambda q: q(
            "UPDATE jobs SET status = ?, updated_at = ?, failure = ? WHERE job_id = ?",
            (status.value, now, record_to_json(failure) if failure else None, job_id)))

    def job_ids(self) -> list[str]:
        return [row[0] for row in self._read(lambda q: q("SELECT job_id FROM jobs ORDER BY created_at", ()))]

    # -- what is built from the whole history -------------------------------------------------

    def history(self, job_id: str) -> History:
        """Everything a strategy may know, rebuilt from the database."""
        ledger = tuple(
            NodeFaultEntry(node, code, at, bool(user), device)
            for node, code, at, user, device in self._read(lambda q: q(
                "SELECT node, fault_code, at, user_error, device FROM ledger WHERE job_id = ? ORDER BY id",
                (job_id,))))
        counts = {
            (rank, code): n
            for rank, code, n in self._read(lambda q: q(
                "SELECT rank, fault_code, COUNT(*) FROM faults WHERE job_id = ? AND counted = 1 "
                "AND rank IS NOT NULL GROUP BY rank, fault_code", (job_id,)))}
        rounds = tuple(self.rounds(job_id))
        pending = {node for r in rounds if (job_id, r.round) in self._buffer.rounds for node in r.isolated}
        return History(rounds=rounds, ledger=ledger, same_error_counts=counts,
                       isolated=self.avoided_nodes(job_id) | pending)

    def report(self, job_id: str) -> dict[str, Any]:
        """The ``trainguard history --json`` object (DESIGN.md contract)."""
        job = self.job(job_id)
        if job is None:
            raise JobStateError(job_id, f"no such job in {self.location}")
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
            out["failure"] = record_from_dict(job["failure"]).to_json()
        events = list(self.events(job_id))
        checks = [e["data"].get("report") for e in events
                  if e["type"] in ("sanity_check_succeeded", "sanity_check_failed")]
        if checks:
            out["sanity_check"] = checks[-1]  # the latest pre-start check's per-node report
        out["goodput"] = goodput(out, events)
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
