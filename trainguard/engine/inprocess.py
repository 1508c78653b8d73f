"""The supervisor's side of in-process recovery (the ranks' side is :mod:`trainguard.inprocess`).

A job whose ranks run their training function under ``@inprocess.restartable()`` says so with
an SDK ``hello`` record. The first hello starts the *store keeper*
(:mod:`trainguard.inprocess.keeper`, through :mod:`trainguard.engine.store_keeper`), a small process that hosts the base ``TCPStore`` of the
in-process protocol where no rank's death can take it; the supervisor itself never imports
torch and reaches the store through the keeper's stdin. Jobs that never say hello recover
exactly as before: nothing here runs for them.

Rounds. The built-in ladder (or a strategy plugin) decides as for any fault; when every running
rank is wrapped, :meth:`InProcess.adapt` carries a restart out in process instead:

=====================================  ===================================================
the ladder decides                     in process (``--recover-strategy``)
=====================================  ===================================================
``restart_in_place``, ``restart_job``  every failed rank is alive (a raised error, a hang):
``restart_instances``                  ``restart_in_process`` (``retry``); a rank died:
                                       ``recover_in_process`` (``recover-in-place``)
``replace_instances``                  ``recover_in_process`` (``recover``): the dead ranks
                                       and those on the isolated node start anew elsewhere
``reschedule_isolated``, ``scale_in``  as before (a new allocation, a smaller job)
``fail``, ``notify``                   as before
=====================================  ===================================================

The decision keeps its budget and ladder counters; an instance's ``N``-th occurrence of the same
error (``--max-num-of-same-error=N``) is no longer carried out in process but by the ladder's own
rung (a cold restart), and the ladder fails the job beyond ``N``: re-entry never loops.

Carrying a round out (stages ``reenter``, ``abort``, ``barrier``): ``reenter`` ends the iteration
in every rank (the keeper sets its abort key, unless the origin rank already did), writes the
decision (re-enter at the next iteration) and starts the dead ranks anew (a warm spare where there
is one, with ``TRAINGUARD_INPROCESS_ITERATION`` set to the iteration they join); ``abort`` lasts
until every live rank has torn down — a rank that says it is stuck (its main thread blocked where
no interrupt reaches, ``stuck`` record), or that does not within ``--inprocess-barrier-timeout``,
is killed and started anew; ``barrier`` until every rank passed the next iteration's barrier.
The loop waits for nothing else meanwhile, so hang detection pauses and restarts its clocks when
the round ends.

Follow-on errors: a rank's error that a peer caused (its connection closed) is reported with
``origin: false``; it is recorded as evidence of the round that is running or of the next one,
never counted and never the verdict. When no origin and no dead rank explains such reports within
:data:`SETTLE` seconds, the earliest becomes the round's fault.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from trainguard.adapters import Adapter, Exit
from trainguard.engine.inbox import SdkInbox
from trainguard.engine.launcher import Launcher, StartFailed
from trainguard.engine.recorder import Recorder
from trainguard.engine.state import Clock, JobState
from trainguard.engine.store_keeper import StoreKeeper
from trainguard.model import (
    Action,
    Decision,
    ErrorSource,
    EventType,
    ExecutionMode,
    Fault,
    History,
    Incident,
    JobStatus,
    RoundRecord,
    RoundResult,
    Verdict,
)
from trainguard.policy import Policy
from trainguard.store import RunStore

log = logging.getLogger(__name__)

ITERATION_VAR = "TRAINGUARD_INPROCESS_ITERATION"
GENERATION_VAR = "TRAINGUARD_INPROCESS_GENERATION"
STORE_VAR = "TRAINGUARD_INPROCESS_STORE"
# How long follow-on reports wait for the fault that explains them before one becomes the fault.
SETTLE = 1.0
# What a replacement process may take to start (Python, ``import torch``) on top of the barrier.
REPLACEMENT_ALLOWANCE = 60.0
IN_PROCESS = (Action.RESTART_IN_PROCESS, Action.RECOVER_IN_PROCESS)


class InProcess:
    """Tracks the wrapped ranks, hosts their base store, and carries in-process rounds out."""

    def __init__(self, *, policy: Policy, adapter: Adapter, state: JobState, launcher: Launcher, inbox: SdkInbox,
                 recorder: Recorder, store: RunStore, clock: Clock) -> None:
        self.policy = policy
        self.adapter = adapter
        self.state = state
        self.launcher = launcher
        self.inbox = inbox
        self.recorder = recorder
        self.store = store
        self.clock = clock
        self.job_id = recorder.job_id
        strategies = set(policy.recover_strategy)
        self.retry = "retry" in strategies
        self.recover = "recover" in strategies
        self.recover_in_place = "recover-in-place" in strategies or self.recover
        self.enabled = (self.retry or self.recover_in_place) and policy.job_execution_mode is ExecutionMode.SYNC
        self.keeper: StoreKeeper | None = None  # from the first hello on
        # Per rank: (pid, generation) of its last hello; the generation's current iteration.
        self.hello: dict[int, tuple[int, str]] = {}
        self.gen = ""
        self.iteration = 0
        self.ended: set[int] = set()
        self.aborted: dict[int, set[int]] = {}
        self.stuck: dict[int, set[int]] = {}  # ranks that said their main thread is blocked
        self.reentered: dict[int, set[int]] = {}
        # Reports of follow-on errors not yet explained: (received at, rank, record).
        self.pending: list[tuple[float, int, Mapping[str, Any]]] = []
        # Exits seen while a round ran that the loop must still handle.
        self.exits: list[Exit] = []

    # -- what the ranks say -----------------------------------------------------------------

    def on_record(self, rank: int, record: Mapping[str, Any]) -> Fault | None:
        """Apply one ``inprocess`` SDK record; returns the fault an origin rank reported."""
        event = record.get("event")
        iteration = _int(record.get("iteration"))
        if event == "hello":
            self._hello(rank, record)
        elif event == "aborted":
            self.aborted.setdefault(iteration, set()).add(rank)
        elif event == "stuck":
            self.stuck.setdefault(iteration, set()).add(rank)
        elif event == "reentered":
            self.reentered.setdefault(iteration, set()).add(rank)
            self.iteration = max(self.iteration, iteration)
        elif event == "fault":
            if iteration in self.ended or iteration < self.iteration or not record.get("origin"):
                if iteration not in self.ended and iteration >= self.iteration:
                    self.pending.append((self.clock.mono(), rank, record))
                else:
                    self._follow_on(rank, record)
                return None
            self.ended.add(iteration)
            return self._fault(rank, record)
        return None

    def check(self) -> Fault | None:
        """Follow-on reports that no fault explained within :data:`SETTLE`: the earliest is one."""
        if self.keeper is not None:
            self.keeper.check_started()
        if not self.pending or self.clock.mono() - self.pending[0][0] < SETTLE:
            return None
        pending, self.pending = self.pending, []
        _, rank, record = min(pending, key=lambda p: float(p[2].get("t") or 0))
        self.ended.add(_int(record.get("iteration")))
        for other in pending:
            if other[2] is not record:
                self._follow_on(other[1], other[2])
        return self._fault(rank, record)

    def take_exits(self) -> list[Exit]:
        exits, self.exits = self.exits, []
        return exits

    def _hello(self, rank: int, record: Mapping[str, Any]) -> None:
        gen = str(record.get("gen", ""))
        if gen != self.gen:
            # A new whole-job start: its iterations count from 0 again.
            self.gen, self.iteration = gen, 0
            self.ended.clear()
            self.aborted.clear()
            self.stuck.clear()
            self.reentered.clear()
            self.pending.clear()
        self.hello[rank] = (_int(record.get("pid")), gen)
        path, python = record.get("address_file"), record.get("python")
        if self.keeper is None and isinstance(path, str) and path:
            host = "127.0.0.1" if getattr(self.adapter, "name", "") == "local" else os.uname().nodename
            # The rank's interpreter: it has torch, which the supervisor's need not have.
            self.keeper = StoreKeeper(self.job_id, Path(path), host=host, enabled=self.enabled,
                                      python=python if isinstance(python, str) and python else sys.executable)

    def _fault(self, rank: int, record: Mapping[str, Any]) -> Fault:
        at = record.get("t")
        instance = self.state.instances.get(rank)
        return Fault(ErrorSource.SDK, float(at) if isinstance(at, (int, float)) else self.clock.wall(), rank=rank,
                     node=self.state.node_of(rank), log_path=instance.log_path if instance else None,
                     message=f"{record.get('exc_type', 'Exception')}: {record.get('message', '')}"[:2000])

    def _follow_on(self, rank: int, record: Mapping[str, Any]) -> None:
        """A peer's error caused by the round's fault: evidence, never counted, never a verdict."""
        fault = self._fault(rank, record)
        self.store.add_faults(self.job_id, [(replace(fault, message=f"follow-on: {fault.message}"), None,
                                             self.state.restart_round + 1, False)])

    # -- deciding ---------------------------------------------------------------------------

    def active(self) -> bool:
        """Whether every running rank of the current start is wrapped and the keeper is up."""
        if self.keeper is None or not self.keeper.up():
            return False
        for rank in range(self.state.nproc):
            instance = self.state.instances.get(rank)
            if rank in self.state.succeeded or instance is None:
                return False
            if self.hello.get(rank) != (instance.pid, self.gen):
                return False
        return True

    def adapt(self, decision: Decision, incident: Incident, verdict: Verdict, history: History) -> Decision:
        """The ladder's ``decision``, carried out in process where the job and the policy allow."""
        if decision.action in IN_PROCESS and not self.active():
            # A strategy plugin asked for it, but no wrapped rank can re-enter: restart in place.
            return replace(decision, action=Action.RESTART_IN_PLACE,
                           reason=f"{decision.reason}; restarted in place (the ranks run no in-process wrapper)")
        if decision.action not in (Action.RESTART_IN_PLACE, Action.RESTART_JOB, Action.RESTART_INSTANCES,
                                   Action.REPLACE_INSTANCES) or not self.active():
            return decision
        root = incident.root
        if root.rank is not None and root.source is not ErrorSource.HANG:
            seen = history.same_error_counts.get((root.rank, verdict.fault_code), 0)
            if seen + 1 >= self.policy.max_num_of_same_error and self.policy.max_num_of_same_error > 1:
                return decision
        running = self.adapter.running()
        dead = [rank for rank in incident.failed_ranks if rank not in running]
        if decision.action is Action.REPLACE_INSTANCES:
            if not self.recover:
                return decision
            action = Action.RECOVER_IN_PROCESS
        elif dead:
            if not self.recover_in_place:
                return decision
            action = Action.RECOVER_IN_PROCESS
        else:
            if not self.retry:
                return decision
            action = Action.RESTART_IN_PROCESS
        return replace(decision, action=action, ranks=tuple(dead),
                       reason=f"{decision.reason}; in process ({decision.action.value} by the ladder)")

    # -- acting -----------------------------------------------------------------------------

    def act(self, record: RoundRecord, decision: Decision, incident: Incident, stages: Any,
            check_signal: Callable[[], None]) -> JobStatus | None:
        """Carry an in-process round out; closes ``record``. Returns ``failed`` when a replacement
        could not start, None when every rank trains again."""
        it = self.iteration
        self.ended.add(it)
        for _, rank, report in self.pending:
            self._follow_on(rank, report)
        self.pending.clear()
        on_bad_nodes = {rank for rank, inst in self.state.instances.items() if inst.node in decision.isolate}
        running = self.adapter.running()
        gone = {rank for rank in range(self.state.nproc) if rank not in running and rank not in self.state.succeeded}
        replace_ranks = set(decision.ranks) | on_bad_nodes | gone
        # The decision goes out at once: the ranks meet at the barrier as soon as each has torn
        # down, and a rank that does not is found (and replaced) meanwhile.
        stages.begin("reenter")
        self._set(f"tg/{self.gen}/abort/{it}", json.dumps({"supervisor": record.round}))
        if on_bad_nodes:
            self.launcher.stop(sorted(on_bad_nodes & self.adapter.running()))
        if decision.isolate:
            self.state.isolated = self.state.isolated | frozenset(decision.isolate)
            self.adapter.isolate(decision.isolate, f"{record.error_code}: {decision.reason}")
        self.store.mark_acted(self.job_id, record.round)
        nxt = it + 1
        timeout = self.policy.inprocess_barrier_timeout
        barrier = timeout + REPLACEMENT_ALLOWANCE
        self._set(f"tg/{self.gen}/decision/{it}", json.dumps({"do": "reenter", "iteration": nxt,
                                                               "barrier_timeout": barrier}))
        started: set[int] = set()
        notes = list(record.notes)
        failed = self._start(sorted(replace_ranks), nxt, record, stages)
        if failed is not None:
            return failed
        started |= replace_ranks
        stages.begin("abort")
        # Every live rank tears down, or says it is stuck (blocked where no interrupt reaches).
        self._pump(lambda: self._live() - replace_ranks - started <= self.aborted.get(it, set()) | self.stuck.get(
            it, set()), timeout, replace_ranks)
        stuck = sorted(self._live() - replace_ranks - started - self.aborted.get(it, set()))
        if stuck:
            said = sorted(set(stuck) & self.stuck.get(it, set()))
            silent = sorted(set(stuck) - set(said))
            if said:
                notes.append(f"rank(s) {said} were blocked in iteration {it} where no interrupt reaches (they said "
                             "so): killed and started anew")
            if silent:
                notes.append(f"rank(s) {silent} did not end iteration {it} within {timeout:g} s: killed and started "
                             "anew")
            self.launcher.stop(stuck)
            replace_ranks |= set(stuck)
        check_signal()
        failed = self._start(sorted(replace_ranks - started), nxt, record, stages)
        if failed is not None:
            return failed
        dead = sorted(replace_ranks)
        self.state.restart_round = record.round
        stages.begin("barrier")
        self._pump(lambda: set(range(self.state.nproc)) - self.state.succeeded <= self.reentered.get(nxt, set()),
                   barrier, None)
        missing = sorted(set(range(self.state.nproc)) - self.state.succeeded - self.reentered.get(nxt, set()))
        if missing:
            notes.append(f"rank(s) {missing} had not re-entered iteration {nxt} after {barrier:g} s")
        # Ranks started anew after all (stuck, or died meanwhile): a recovery, not a pure re-entry.
        action = Action.RECOVER_IN_PROCESS if dead else record.action
        record = replace(record, action=action, ranks=tuple(dead) if dead else record.ranks, stages=stages.end(),
                         result=RoundResult.RECOVERED, notes=tuple(notes))
        self.store.close_round(record)
        self.recorder.emit(EventType.ROUND_FINISHED,
                           f"round {record.round} recovered in process in {sum(record.stages.values()):.2f} s"
                           f" (iteration {nxt}{f', rank(s) {dead} started anew' if dead else ''})",
                           round_no=record.round, data={"stages": dict(record.stages), "iteration": nxt})
        return None

    def _live(self) -> set[int]:
        return set(self.adapter.running())

    def _start(self, ranks: list[int], iteration: int, record: RoundRecord, stages: Any) -> JobStatus | None:
        """Start ``ranks`` anew to join ``iteration`` (a warm spare where there is one)."""
        if not ranks:
            return None
        extra = {ITERATION_VAR: str(iteration), GENERATION_VAR: self.gen, STORE_VAR: self._address()}
        self.launcher.base_env.update(extra)
        try:
            self.launcher.start(ranks, self.launcher.counts(), replace_all=False, round_no=record.round,
                                fresh_rendezvous=False)
        except StartFailed as exc:
            self.store.close_round(replace(record, stages=stages.end(), result=RoundResult.FAILED))
            self.recorder.give_up(record.round + 1, exc.code, exc.reason, str(exc), transient=not exc.permanent)
            return JobStatus.FAILED
        finally:
            for key in extra:
                self.launcher.base_env.pop(key, None)
        return None

    def _pump(self, done: Callable[[], bool], timeout: float, replacing: set[int] | None) -> None:
        """Read the ranks' records and exits until ``done()`` or ``timeout``; ranks that die join
        ``replacing`` (None: their exits are kept for the loop, as successes are)."""
        deadline = self.clock.mono() + timeout
        while not done() and (left := deadline - self.clock.mono()) > 0:
            for exit_ in self.adapter.wait(min(0.05, left)):
                if exit_.exit_code != 0 and replacing is not None:
                    replacing.add(exit_.rank)
                    self.store.add_faults(self.job_id, [(Fault(
                        ErrorSource.EXIT_CODE, exit_.at, rank=exit_.rank, node=self.state.node_of(exit_.rank),
                        exit_code=exit_.exit_code, message=f"follow-on: exited with {exit_.exit_code}"),
                        None, self.state.restart_round + 1, False)])
                else:
                    self.exits.append(exit_)
            for rank, rec in self.adapter.sdk_records():
                if rec.get("type") == "inprocess":
                    self.on_record(rank, rec)
                else:
                    self.inbox.apply(rank, rec)

    def _address(self) -> str:
        return self.keeper.address() if self.keeper is not None else ""

    def _set(self, key: str, value: str) -> None:
        if self.keeper is not None:
            self.keeper.set(key, value)

    def close(self) -> None:
        """Stop the keeper (after the ranks: they may still read the store while stopping)."""
        if self.keeper is not None:
            self.keeper.close()


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

