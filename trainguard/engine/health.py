"""Node health around the job (seed 001): the pre-start sanity check and the runtime probe.

The checks themselves live in :mod:`trainguard.sanity` (items are plugins); this module acts on
their reports: a failed pre-start check fails the job or, with ``rebuild``, isolates the bad
nodes in a ``health_check`` round before any rank starts; a runtime probe that finds a node
unhealthy with ``isolate`` makes it a fault of its own.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from trainguard.adapters import Adapter
from trainguard.engine.recorder import Recorder
from trainguard.engine.state import Clock, JobState
from trainguard.model import ErrorSource, EventType, Fault, JobSpec, RoundResult
from trainguard.sanity import SanityConfig, preflight, runtime_check
from trainguard.store import RunStore


class Health:
    """Runs the job's sanity checks through its adapter and records what they found."""

    def __init__(self, config: SanityConfig, *, spec: JobSpec, adapter: Adapter, store: RunStore, host: Any,
                 state: JobState, recorder: Recorder, clock: Clock, base_env: Mapping[str, str]) -> None:
        self.config = config
        self.spec = spec
        self.adapter = adapter
        self.store = store
        self.host = host
        self.state = state
        self.recorder = recorder
        self.clock = clock
        self.base_env = base_env
        self._probed = clock.mono()

    def before_start(self, round_no: int) -> int | None:
        """Check the nodes before ranks start on them; returns the round the job starts in, or
        None when the check failed the job (``--sanity-check-fail-action fail``)."""
        if not self.config.enabled:
            return round_no
        job_id = self.spec.job_id
        report = preflight(self.adapter, self.spec, self.config, self.state.isolated, host=self.host,
                           base_env=self.base_env)
        outcome = report.outcome
        self.recorder.emit(EventType(outcome.event), outcome.message, data={"report": report.to_json()})
        if not outcome.start:
            self.recorder.finish_failed(report.round_record(job_id, self.store.next_round(job_id)))
            return None
        if not outcome.isolate:
            return round_no
        record = report.round_record(job_id, self.store.next_round(job_id))
        self.store.open_round(replace(record, result=RoundResult.IN_PROGRESS))
        self.store.mark_acted(job_id, record.round)
        self.store.close_round(record)
        self.state.isolated |= frozenset(outcome.isolate)
        self.adapter.isolate(outcome.isolate, outcome.message)
        for node in outcome.isolate:
            self.recorder.emit(EventType.NODE_ISOLATED, f"{node} isolated: {outcome.message}", round_no=record.round,
                               node=node)
        return record.round

    def probe(self) -> Fault | None:
        """The runtime health check, every ``interval`` seconds: a node found unhealthy is
        recorded, and with ``isolate`` becomes a fault of its own."""
        runtime = self.config.runtime
        if runtime is None or self.clock.mono() - self._probed < runtime.interval:
            return None
        self._probed = self.clock.mono()
        report = runtime_check(self.adapter, runtime, self.state.isolated)
        if report.event is not None:
            self.recorder.emit(EventType(report.event), report.reason, data={"report": report.to_json()})
        if not report.isolate:
            return None
        node = report.isolate[0]
        rank = next((r for r, inst in self.state.instances.items() if inst.node == node), None)
        return Fault(ErrorSource.HEALTH_CHECK, self.clock.wall(), rank=rank, node=node, message=report.reason)
