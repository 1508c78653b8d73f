"""Prometheus metrics (``trainguard run --metrics-port PORT``), read from the run history.

Every scrape reads the store, so the numbers are the history's (the same a person sees in
``trainguard history``) and a supervisor needs no counters of its own:

| metric | type | labels |
| --- | --- | --- |
| ``trainguard_rounds_total`` | counter | ``job_id``, ``action`` |
| ``trainguard_faults_total`` | counter | ``job_id``, ``fault_code`` (the class a classifier gave the fault) |
| ``trainguard_isolated_nodes`` | gauge | ``job_id`` |
| ``trainguard_ettr`` | gauge | ``job_id``: productive / wall time (see :mod:`trainguard.goodput`) |
| ``trainguard_productive_seconds`` / ``trainguard_wall_seconds`` | gauge | ``job_id`` |
| ``trainguard_recovery_seconds_total`` | counter | ``job_id``, ``stage`` |
| ``trainguard_job_running`` | gauge | ``job_id``: 1 while running, 0 once ended |

A fault that ended the job (``failure``) counts in ``trainguard_faults_total`` but starts no round.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from trainguard.goodput import goodput
from trainguard.store import RunStore

log = logging.getLogger(__name__)

__all__ = ["HistoryCollector", "serve_metrics"]


class HistoryCollector:
    """A Prometheus collector over ``job_ids`` (a callable: the jobs to show at each scrape)."""

    def __init__(self, store: RunStore, job_ids: Callable[[], Sequence[str]]) -> None:
        self.store = store
        self.job_ids = job_ids
        self._lock = threading.Lock()

    def describe(self) -> list[Metric]:
        return []  # collected lazily: no store read at registration

    def collect(self) -> Iterator[Metric]:
        rounds = CounterMetricFamily("trainguard_rounds", "Recovery rounds by action", labels=["job_id", "action"])
        faults = CounterMetricFamily("trainguard_faults", "Faults that started a round or ended the job, by fault code",
                                     labels=["job_id", "fault_code"])
        isolated = GaugeMetricFamily("trainguard_isolated_nodes", "Nodes isolated by the job", labels=["job_id"])
        ettr = GaugeMetricFamily("trainguard_ettr", "Effective training time ratio: productive / wall time",
                                 labels=["job_id"])
        productive = GaugeMetricFamily("trainguard_productive_seconds", "Productive training time",
                                       labels=["job_id"])
        wall = GaugeMetricFamily("trainguard_wall_seconds", "Wall time since the job started", labels=["job_id"])
        stages = CounterMetricFamily("trainguard_recovery_seconds", "Time spent in recovery rounds, by stage",
                                     labels=["job_id", "stage"])
        running = GaugeMetricFamily("trainguard_job_running", "1 while the job runs", labels=["job_id"])
        with self._lock:
            for job_id in self.job_ids():
                try:
                    report = self.store.report(job_id)
                    data = goodput(report, self.store.events(job_id))
                except Exception as exc:  # a scrape must not fail for one job's bad record
                    log.warning("[%s] metrics: cannot read the history: %s", job_id, exc)
                    continue
                by_action: dict[str, int] = {}
                by_code: dict[str, int] = {}
                nodes: set[str] = set()
                for record in report["rounds"]:
                    by_action[record["action"]] = by_action.get(record["action"], 0) + 1
                    by_code[record["error_code"]] = by_code.get(record["error_code"], 0) + 1
                    nodes.update(record.get("isolated_nodes") or ())
                failure: dict[str, Any] | None = report.get("failure")
                if failure:
                    by_code[failure["error_code"]] = by_code.get(failure["error_code"], 0) + 1
                for action, n in sorted(by_action.items()):
                    rounds.add_metric([job_id, action], n)
                for code, n in sorted(by_code.items()):
                    faults.add_metric([job_id, code], n)
                isolated.add_metric([job_id], len(nodes))
                if data["ettr"] is not None:
                    ettr.add_metric([job_id], data["ettr"])
                productive.add_metric([job_id], data["productive_seconds"])
                wall.add_metric([job_id], data["wall_seconds"])
                for stage, seconds in data["stages"].items():
                    stages.add_metric([job_id, stage], seconds)
                running.add_metric([job_id], 1 if report["status"] == "running" else 0)
        yield from (rounds, faults, isolated, ettr, productive, wall, stages, running)


def serve_metrics(state_dir: str | Path, port: int, job_ids: Sequence[str] | None = None, *,
                  addr: str = "0.0.0.0", state_url: str | None = None) -> tuple[Any, RunStore]:
    """Serve ``/metrics`` on ``port`` for ``job_ids`` (default: every job in the store).

    Returns ``(server, store)``; ``server.shutdown()`` and ``store.close()`` stop it. The
    store is a connection of its own: scrapes run on the server's thread.
    """
    store = RunStore(state_dir, url=state_url)
    registry = CollectorRegistry(auto_describe=False)
    wanted = list(job_ids) if job_ids is not None else None
    registry.register(HistoryCollector(  # type: ignore[arg-type]
        store, lambda: [j for j in (wanted if wanted is not None else store.job_ids()) if store.job(j) is not None]))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    log.info("metrics on http://%s:%s/metrics", addr, server.server_port)
    return server, store
