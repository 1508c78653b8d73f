"""The append-only parts of a job's history: its faults, its per-job node ledger and its events."""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

from trainguard.model import Event, Fault, NodeFaultEntry, Verdict
from trainguard.store.access import StoreAccess
from trainguard.store.backends import Query
from trainguard.timefmt import iso_ms


class Journal(StoreAccess):
    """Faults, ledger entries and events, written and read back (part of
    :class:`~trainguard.store.RunStore`)."""

    def add_fault(self, job_id: str, fault: Fault, verdict: Verdict | None, round_no: int | None,
                  counted: bool) -> None:
        """Record a fault; ``counted`` faults feed ``--max-num-of-same-error``."""
        self.add_faults(job_id, [(fault, verdict, round_no, counted)])

    def add_faults(self, job_id: str, faults: Sequence[tuple[Fault, Verdict | None, int | None, bool]]) -> None:
        """Record ``(fault, verdict, round, counted)`` tuples in one transaction: a thousand ranks
        failing together are one write, not a thousand."""
        rows = [(job_id, round_no, fault.rank, fault.node, fault.source.value,
                 verdict.fault_code if verdict else None, verdict.category.value if verdict else None,
                 int(counted), fault.detected_at, fault.message, json.dumps(verdict.to_json()) if verdict else None)
                for fault, verdict, round_no, counted in faults]

        def insert(q: Query) -> None:
            for params in rows:
                q("INSERT INTO faults (job_id, round, rank, node, source, fault_code, category, counted, "
                  "detected_at, message, verdict) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", params)

        if rows:
            self._write("a fault" if len(rows) == 1 else f"{len(rows)} faults", insert)

    def add_ledger(self, job_id: str, entry: NodeFaultEntry) -> None:
        params = (job_id, entry.node, entry.fault_code, entry.at, int(entry.user_error), entry.device)
        self._write("a ledger entry", lambda q: q(
            "INSERT INTO ledger (job_id, node, fault_code, at, user_error, device) VALUES (?, ?, ?, ?, ?, ?)",
            params))

    def add_event(self, event: Event) -> None:
        params = (event.job_id, str(event.type), event.at, event.round, event.rank, event.node,
                  event.message, json.dumps(dict(event.data)))
        self._write("an event", lambda q: q(
            "INSERT INTO events (job_id, type, at, round, rank, node, message, data) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", params))

    def faults(self, job_id: str) -> list[dict[str, Any]]:
        """The job's recorded faults in order (``trainguard replay`` re-decides them): ``round``,
        ``rank``, ``node``, ``source``, ``fault_code``, ``category``, ``counted``, ``detected_at``
        (epoch seconds), ``message`` and ``verdict`` (the root fault's, else None)."""
        rows = self._read(lambda q: q("SELECT round, rank, node, source, fault_code, category, counted, detected_at, "
                                      "message, verdict FROM faults WHERE job_id = ? ORDER BY id", (job_id,)))
        return [{"round": round_no, "rank": rank, "node": node, "source": source, "fault_code": code,
                 "category": category, "counted": bool(counted), "detected_at": at, "message": message,
                 "verdict": json.loads(verdict) if verdict else None}
                for round_no, rank, node, source, code, category, counted, at, message, verdict in rows]

    def events(self, job_id: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """The job's events in order; ``after`` skips those up to that ``id`` (a reader's cursor)."""
        rows = self._read(lambda q: q("SELECT id, type, at, round, rank, node, message, data FROM events "
                                      "WHERE job_id = ? AND id > ? ORDER BY id", (job_id, after)))
        for event_id, kind, at, round_no, rank, node, message, data in rows:
            yield {"id": event_id, "type": kind, "at": iso_ms(at), "round": round_no, "rank": rank, "node": node,
                   "message": message, "data": json.loads(data or "{}")}

    def last_event_id(self, job_id: str) -> int:
        """The id of the job's latest event (0 if none): a cursor for :meth:`events`."""
        return self._read(lambda q: q("SELECT COALESCE(MAX(id), 0) FROM events WHERE job_id = ?", (job_id,)))[0][0]
