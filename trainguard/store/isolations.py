"""The store's bad-node ledger: nodes isolated by any job, for as long as the policy's window.

A round's isolated nodes enter it once the round is acted (:meth:`RoundLog.mark_acted
<trainguard.store.rounds.RoundLog.mark_acted>`); every job of the store avoids them until the
window ends or ``trainguard nodes release`` ends them early.
"""

from __future__ import annotations

import time
from typing import Any

from trainguard.model import RoundRecord
from trainguard.store import schema
from trainguard.store.access import StoreAccess
from trainguard.store.backends import Query
from trainguard.timefmt import iso_ms


class NodeIsolations(StoreAccess):
    """Isolated nodes across the store's jobs (part of :class:`~trainguard.store.RunStore`)."""

    def _record_isolations(self, q: Query, record: RoundRecord, at: float) -> None:
        if not record.isolated:
            return
        rows = q("SELECT policy FROM jobs WHERE job_id = ?", (record.job_id,))
        window = schema.window_of(rows[0][0] if rows else None)
        for node in record.isolated:
            q("INSERT INTO isolations (node, job_id, round, reason, at, expires_at) VALUES (?, ?, ?, ?, ?, ?) "
              "ON CONFLICT DO NOTHING", (node, record.job_id, record.round, record.reason, at, at + window))

    def isolations(self, *, include_inactive: bool = False, now: float | None = None) -> list[dict[str, Any]]:
        """Nodes isolated by any job of this store, newest first: ``node``, ``job_id``, ``round``,
        ``reason``, ``at``, ``expires_at``, ``released_at`` (ISO 8601) and ``active``."""
        now = time.time() if now is None else now
        rows = self._read(lambda q: q("SELECT node, job_id, round, reason, at, expires_at, released_at FROM isolations "
                                      "ORDER BY at DESC, id DESC", ()))
        out = []
        for node, job_id, round_no, reason, at, expires, released in rows:
            active = released is None and expires > now
            if active or include_inactive:
                out.append({"node": node, "job_id": job_id, "round": round_no, "reason": reason, "at": iso_ms(at),
                            "expires_at": iso_ms(expires), "released_at": iso_ms(released) if released else None,
                            "active": active})
        return out

    def release_node(self, node: str) -> int:
        """End every isolation of ``node`` now (``trainguard nodes release``); returns how many."""
        now = time.time()
        return self._tx(lambda q: len(q("UPDATE isolations SET released_at = ? WHERE node = ? AND released_at IS NULL "
                                         "RETURNING id", (now, node))))

    def avoided_nodes(self, job_id: str, now: float | None = None) -> frozenset[str]:
        """Nodes the job must not use: its own isolations and, until their window ends, other
        jobs' in this store; released ones excepted."""
        now = time.time() if now is None else now
        rows = self._read(lambda q: q("SELECT DISTINCT node FROM isolations WHERE released_at IS NULL "
                                      "AND (job_id = ? OR expires_at > ?)", (job_id, now)))
        return frozenset(row[0] for row in rows)
