"""A job's restart rounds, each written three times: opened, acted, closed.

A round is opened ``in_progress`` once its action is decided (:meth:`RoundLog.open_round`),
marked acted the moment the action starts to be carried out (:meth:`RoundLog.mark_acted`), and
closed with its result (:meth:`RoundLog.close_round`). A round left open by a supervisor that
died is closed ``interrupted`` by the next one, and charged to the budget only if it had been
acted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from trainguard.errors import JobStateError
from trainguard.model import RoundRecord, RoundResult
from trainguard.store.backends import Query
from trainguard.store.isolations import NodeIsolations
from trainguard.store.records import record_from_json, record_to_json

log = logging.getLogger(__name__)

# Results that mean the round's action was carried out.
_ACTED = frozenset({RoundResult.RECOVERED, RoundResult.REQUEUED, RoundResult.FAILED})


class RoundLog(NodeIsolations):
    """The rounds table (part of :class:`~trainguard.store.RunStore`); acted rounds' isolated
    nodes go to the bad-node ledger it inherits."""

    def next_round(self, job_id: str) -> int:
        """The number the job's next round takes (interrupted rounds keep theirs)."""
        rows = self._read(lambda q: q("SELECT MAX(round) FROM rounds WHERE job_id = ?", (job_id,)))
        stored = rows[0][0] or 0
        pending = max((n for j, n in self._buffer.rounds if j == job_id), default=0)
        return max(stored, pending) + 1

    def open_round(self, record: RoundRecord) -> None:
        """Open a round: its action is decided, not yet carried out (``in_progress``).

        One transaction. Raises :class:`JobStateError` if the round number is taken.
        """
        if record.result is not RoundResult.IN_PROGRESS:
            raise ValueError(f"open_round: round {record.round} is {record.result.value}, not in_progress")
        lease = self._leases.get(record.job_id)
        token = lease.owner.token if lease else None

        def open_(q: Query) -> None:
            if q("SELECT 1 FROM rounds WHERE job_id = ? AND round = ?", (record.job_id, record.round)):
                raise JobStateError(record.job_id, f"round {record.round} is already recorded")
            q("INSERT INTO rounds (job_id, round, record, state, acted_at, owner) VALUES (?, ?, ?, ?, NULL, ?)",
              (record.job_id, record.round, record_to_json(record), record.result.value, token))

        self._write("a round", open_)
        self._buffer.remember(record)

    def mark_acted(self, job_id: str, round_no: int) -> None:
        """The round's action starts to be carried out (call it just before the first stop,
        isolation or requeue): from now on the round is charged even if its supervisor dies.
        Its isolated nodes enter the store's bad-node ledger. One transaction."""
        now = time.time()

        def mark(q: Query) -> None:
            q("UPDATE rounds SET acted_at = COALESCE(acted_at, ?) WHERE job_id = ? AND round = ?",
              (now, job_id, round_no))
            rows = q("SELECT record FROM rounds WHERE job_id = ? AND round = ?", (job_id, round_no))
            if rows:
                self._record_isolations(q, record_from_json(rows[0][0]), now)

        self._write("a round", mark)

    def close_round(self, record: RoundRecord) -> None:
        """Close a round with its result (``recovered``, ``requeued``, ``failed`` or
        ``interrupted``); one transaction. A round closed ``interrupted`` before it was acted is
        not charged to the budget."""
        if record.result is RoundResult.IN_PROGRESS:
            raise ValueError(f"close_round: round {record.round} has no result")
        self.save_round(record)

    def save_round(self, record: RoundRecord) -> None:
        """Write a round as it stands (open, acted or closed), in one transaction.

        ``recovered``, ``requeued`` and ``failed`` imply the action was carried out;
        ``interrupted`` is charged only if :meth:`mark_acted` was called for it.
        """
        now = time.time()
        lease = self._leases.get(record.job_id)
        token = lease.owner.token if lease else None

        def save(q: Query) -> None:
            rows = q("SELECT acted_at FROM rounds WHERE job_id = ? AND round = ?", (record.job_id, record.round))
            acted = rows[0][0] if rows else None
            if record.result in _ACTED and acted is None:
                acted = now
            final = record
            if record.result is RoundResult.INTERRUPTED and acted is None:
                final = replace(record, consumes_budget=False)
            q("INSERT INTO rounds (job_id, round, record, state, acted_at, owner) VALUES (?, ?, ?, ?, ?, ?) "
              "ON CONFLICT (job_id, round) DO UPDATE SET record = excluded.record, state = excluded.state, "
              "acted_at = excluded.acted_at",
              (record.job_id, record.round, record_to_json(final), final.result.value, acted, token))
            if acted is not None:
                self._record_isolations(q, final, acted)

        self._write("a round", save)
        self._buffer.remember(record)

    def close_interrupted(self, job_id: str) -> list[RoundRecord]:
        """Close every round of the job left ``in_progress`` as ``interrupted``; returns them.

        Only the job's owner may call it (:meth:`begin_job` does, on resume). A round whose
        action was not carried out (:meth:`mark_acted` never called) is not charged.
        """
        return self._tx(lambda q: self._close_interrupted(q, job_id))

    def _close_interrupted(self, q: Query, job_id: str) -> list[RoundRecord]:
        closed = []
        for round_no, text, acted in q("SELECT round, record, acted_at FROM rounds WHERE job_id = ? AND state = ?",
                                       (job_id, RoundResult.IN_PROGRESS.value)):
            record = record_from_json(text)
            note = ("supervisor died after carrying the action out; charged" if acted is not None
                    else "supervisor died before carrying the action out; not charged")
            record = replace(record, result=RoundResult.INTERRUPTED,
                             consumes_budget=record.consumes_budget and acted is not None,
                             notes=(*record.notes, note))
            q("UPDATE rounds SET record = ?, state = ? WHERE job_id = ? AND round = ?",
              (record_to_json(record), record.result.value, job_id, round_no))
            log.warning("[%s] round %s was left in progress by a supervisor that died: closed as interrupted (%s)",
                        job_id, round_no, note)
            closed.append(record)
        return closed

    def rounds(self, job_id: str) -> list[RoundRecord]:
        rows = self._read(lambda q: q("SELECT round, record FROM rounds WHERE job_id = ? ORDER BY round", (job_id,)))
        records = {round_no: record_from_json(text) for round_no, text in rows}
        for (job, round_no), record in self._buffer.rounds.items():
            if job == job_id:
                records[round_no] = record
        return [records[n] for n in sorted(records)]
