"""One recovery round: fault → diagnose → decide → stop → isolate → restart → running.

Each stage is timed. The round is opened in the history (``in_progress``) once its action is
decided and closed with its result; the supervisor checks for a stop signal between stages, and
a round interrupted before its action was carried out is closed ``interrupted`` and not charged.
Failures that arrive together are one incident and one round; the first in time is the root.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import replace
from typing import Any, Callable

from trainguard import elastic
from trainguard.adapters import Adapter
from trainguard.detectors import advise_hang_interval
from trainguard.engine.inbox import SdkInbox
from trainguard.engine.inprocess import IN_PROCESS, InProcess
from trainguard.engine.launcher import Launcher, StartFailed
from trainguard.engine.recorder import Recorder, describe_message
from trainguard.engine.state import Clock, JobState
from trainguard.engine.watch import Watch
from trainguard.errors import AdapterError
from trainguard.hooks import PluginHost
from trainguard.model import (
    EventType,
    Action,
    Capacity,
    Decision,
    ErrorSource,
    Fault,
    History,
    Incident,
    JobStatus,
    NodeFaultEntry,
    RoundRecord,
    RoundResult,
    Verdict,
)
from trainguard.policy import Policy
from trainguard.stacks import group_stacks
from trainguard.store import RunStore

log = logging.getLogger(__name__)

class Stages:
    """Times the stages of a round in order (seconds, monotonic)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.times: dict[str, float] = {}
        self._stage: str | None = None
        self._t = 0.0

    def begin(self, name: str) -> None:
        self.end()
        self._stage, self._t = name, self.clock.mono()

    def end(self) -> dict[str, float]:
        if self._stage is not None:
            self.times[self._stage] = self.times.get(self._stage, 0.0) + self.clock.mono() - self._t
            self._stage = None
        return dict(self.times)


class RoundRunner:
    """Diagnoses an incident, asks the strategies, and carries out the decision."""

    def __init__(self, *, policy: Policy, adapter: Adapter, store: RunStore, host: PluginHost, state: JobState,
                 launcher: Launcher, inbox: SdkInbox, watch: Watch, recorder: Recorder, clock: Clock,
                 check_signal: Callable[[], None], inprocess: InProcess | None = None) -> None:
        self.policy = policy
        self.adapter = adapter
        self.store = store
        self.host = host
        self.state = state
        self.launcher = launcher
        self.inbox = inbox
        self.watch = watch
        self.recorder = recorder
        self.clock = clock
        self.check_signal = check_signal
        self.inprocess = inprocess
        self.job_id = recorder.job_id
        self._advised = False
        # A fault a strategy chose only to report: its rank stays down.
        self.notified: tuple[Fault, Decision, Verdict] | None = None
        # The no-progress guard: progress marks at the previous round, and rounds in a row since
        # which no new step or checkpoint was reported.
        self._marks_then: tuple[int | None, int | None] | None = None
        self._stalled = 0

    def recover(self, incident: Incident) -> JobStatus | None:
        """Returns None when the job runs on, ``failed`` when it failed for good, and ``running``
        when the scheduler will start it again elsewhere (a requeue)."""
        root = incident.root
        stages = Stages(self.clock)
        self.recorder.emit(EventType.FAULT_DETECTED, f"{root.instance or 'job'}: {root.message}", rank=root.rank,
                           node=root.node, data={"source": root.source.value, "exit_code": root.exit_code,
                                                 "progress": self.inbox.marks()})
        stages.begin("diagnose")
        # The history as it was before this incident: its faults must not count against it twice.
        history = self.store.history(self.job_id)
        verdict, stacks, notes = self._diagnose(incident)
        stages.begin("decide")
        decision = self._no_progress_guard(self._decide(incident, verdict, history))
        if self.inprocess is not None:  # wrapped ranks restart in their processes (engine/inprocess.py)
            decision = self.inprocess.adapt(decision, incident, verdict, history)
        if self.policy.decide_only and decision.action is not Action.NOTIFY:
            decision = Decision(Action.NOTIFY, f"dry run: would {decision.action.value} ({decision.reason})",
                                consumes_budget=False, strategy="dry-run")
        stages.end()
        self.check_signal()

        if decision.action is Action.NOTIFY:
            return self._notify_only(root, decision, verdict)
        if decision.action is Action.FAIL:
            stages.begin("stop")
            self._stop(list(self.adapter.running()))
            failure = self.recorder.failure(self.state.restart_round + 1, root, decision, verdict=verdict,
                                            stages=stages.end())
            self.recorder.finish_failed(replace(failure, stacks=stacks, notes=notes,
                                                transient=decision.transient))
            return JobStatus.FAILED

        record = RoundRecord(
            job_id=self.job_id, round=self.store.next_round(self.job_id), reason=decision.reason,
            error_code=verdict.fault_code, error_message=describe_message(root, verdict),
            error_source=root.source, action=decision.action, started_at=root.detected_at,
            node=verdict.node or root.node, instance=root.instance, ranks=incident.failed_ranks,
            stages=stages.end(), consumes_budget=decision.consumes_budget, unconditional=decision.unconditional,
            user_error=verdict.user_error, node_fault=verdict.node_fault, isolated=decision.isolate,
            stacks=stacks, notes=notes)
        self.store.open_round(record)
        self.recorder.emit(EventType.ROUND_STARTED,
                           f"round {record.round}: {decision.action.value} ({decision.reason})", round_no=record.round,
                           rank=root.rank, node=record.node,
                           data={"error_code": verdict.fault_code, "evidence": verdict.evidence})
        try:
            if self.inprocess is not None and decision.action in IN_PROCESS:
                outcome = self.inprocess.act(record, decision, incident, stages, self.check_signal)
                self.watch.reset()
                return outcome
            return self._act(record, decision, incident, stages)
        except BaseException:
            # Interrupted (a signal, a lost lease) while being carried out: closed so that no
            # round stays in progress; charged only if its restart had begun (mark_acted).
            self.store.close_round(replace(record, stages=stages.end(), result=RoundResult.INTERRUPTED,
                                           consumes_budget=record.consumes_budget and "restart" in stages.times))
            raise

    def _diagnose(self, incident: Incident) -> tuple[Verdict, tuple[dict[str, Any], ...], tuple[str, ...]]:
        root = incident.root
        tail = self.adapter.log_tail(root.rank, self.policy.log_tail_bytes) if root.rank is not None else ""
        policy = self.policy
        if self.inbox.runtime_retryable:
            policy = policy.replace(retryable_errors=(*policy.retryable_errors, *self.inbox.runtime_retryable))
        verdict = self.host.classify(root, tail, policy)
        self._advise(tail)
        stacks: tuple[dict[str, Any], ...] = ()
        notes: tuple[str, ...] = ()
        if root.source in (ErrorSource.HANG, ErrorSource.EXIT_HANG) and self.policy.enable_stack_snapshots:
            stacks, notes = self._capture_stacks()
        round_no = self.state.restart_round + 1
        # Async faults are independent and each counts; Sync peers die of the root. One write.
        self.store.add_faults(self.job_id, [(fault, verdict if fault is root else None, round_no,
                                             not self.watch.sync or fault is root) for fault in incident.faults])
        return verdict, stacks, notes

    def _decide(self, incident: Incident, verdict: Verdict, history: History) -> Decision:
        root = incident.root
        decision = self.host.decide(incident, verdict, history, self.policy, self._capacity(self.state.isolated))
        if decision.action is Action.SCALE_IN:
            decision = self._check_scale_in(decision, incident)
        node = verdict.node or root.node
        if node is not None and root.source not in (ErrorSource.HANG, ErrorSource.EXIT_HANG):
            self.store.add_ledger(self.job_id, NodeFaultEntry(node, verdict.fault_code, root.detected_at,
                                                              verdict.user_error, verdict.gpu or root.instance))
        return decision

    def _capacity(self, isolated: frozenset[str]) -> Capacity:
        """The adapter's capacity, at the job's current world size (an elastic job's changes)."""
        return replace(self.adapter.capacity(isolated), world_size=self.state.nproc)

    def _check_scale_in(self, decision: Decision, incident: Incident) -> Decision:
        """A ``scale_in`` isolates the named nodes (by default the failed ranks'), and only an
        elastic job with at least ``min_nodes`` healthy nodes left may carry it out."""
        isolate = decision.isolate or tuple(sorted({node for rank in incident.failed_ranks
                                                    if (node := self.state.node_of(rank)) is not None}))
        why = elastic.refusal(self.launcher.spec, self.policy, self._capacity(self.state.isolated | frozenset(isolate)))
        if why is None:
            return replace(decision, isolate=isolate)
        self.recorder.emit(EventType.PLUGIN_ERROR, f"{decision.strategy or 'a strategy'} decided scale_in: {why}",
                           data={"plugin": decision.strategy, "hook": "trainguard_decide_recovery"})
        return Decision(Action.FAIL, f"{decision.reason}; but scale_in is refused: {why}", consumes_budget=False,
                        strategy="engine", transient=True)

    def _resize(self, record: RoundRecord, decision: Decision) -> tuple[RoundRecord, int]:
        """An elastic job's size for a whole-job restart: smaller after a ``scale_in``, back up
        when nodes it kept out are no longer isolated (window ended, released). Returns the
        record with the change noted and how many ranks ran before."""
        state, spec = self.state, self.launcher.spec
        before = state.nproc
        if not elastic.enabled(self.policy) or (decision.action is not Action.SCALE_IN
                                                 and before >= elastic.full_size(spec, self.policy)):
            return record, before
        still = frozenset(e["node"] for e in self.store.isolations() if e["active"]) | frozenset(decision.isolate)
        state.isolated = state.isolated - elastic.returned(state.isolated, still)
        capacity = self._capacity(state.isolated | frozenset(decision.isolate))
        after = elastic.size_for(spec, self.policy, capacity)
        if after == before or elastic.refusal(spec, self.policy, capacity) is not None:
            return record, before
        state.nproc = self.watch.nproc = after
        for rank in range(after, before):
            state.instances.pop(rank, None)
            state.succeeded.discard(rank)
        note = elastic.note(before, after, elastic.healthy_nodes(capacity))
        log.info("[%s] round %s: %s", self.job_id, record.round, note)
        return replace(record, notes=(*record.notes, note), world_size_before=before, world_size_after=after), before

    def _no_progress_guard(self, decision: Decision) -> Decision:
        """Stop retrying a job that made no progress (no new step, no new checkpoint reported
        through the SDK) across ``max_rounds_without_progress`` rounds in a row. Jobs that never
        reported progress are not judged: nothing says whether they advance."""
        marks = (self.inbox.step, self.inbox.checkpoint)
        if marks == (None, None):
            return decision
        self._stalled = self._stalled + 1 if marks == self._marks_then else 0
        self._marks_then = marks
        limit = self.policy.max_rounds_without_progress
        if not limit or self._stalled < limit or decision.action in (Action.FAIL, Action.NOTIFY):
            return decision
        return Decision(Action.FAIL, f"no progress: {self._stalled} recovery round(s) in a row ended without a new "
                        f"step or checkpoint (last step {marks[0]}, last checkpoint {marks[1]}; "
                        f"--max-rounds-without-progress={limit}): stopped retrying instead of {decision.action.value}",
                        consumes_budget=False, strategy="no-progress-guard")

    def _notify_only(self, root: Fault, decision: Decision, verdict: Verdict) -> JobStatus | None:
        """A strategy chose to tell people and change nothing: the job goes on as it is."""
        self.recorder.emit(EventType.FAULT_NOTIFIED, f"{verdict.fault_code}: {decision.reason}", rank=root.rank,
                           node=root.node, data={"error_code": verdict.fault_code, "evidence": verdict.evidence})
        self.notified = (root, decision, verdict)
        return self.after_notified()

    def after_notified(self) -> JobStatus | None:
        """Once nothing runs any more, a job with a rank left down after a notification failed."""
        if self.notified is None or self.adapter.running() or self.state.finished:
            return None
        root, decision, verdict = self.notified
        self.recorder.finish_failed(self.recorder.failure(
            self.state.restart_round + 1, root,
            Decision(Action.FAIL, f"{decision.reason}; no rank is left running", consumes_budget=False),
            verdict=verdict))
        return JobStatus.FAILED

    def _act(self, record: RoundRecord, decision: Decision, incident: Incident, stages: Stages) -> JobStatus | None:
        state = self.state
        whole = self.watch.sync or decision.action.whole_job
        isolated_after = state.isolated | frozenset(decision.isolate)
        after = self._capacity(isolated_after)
        if (decision.isolate and after.can_requeue and after.healthy_slots() < after.world_size
                and decision.action is not Action.SCALE_IN):
            return self._requeue(record, decision, stages)
        stopping = None
        if whole:
            record, before = self._resize(record, decision)
            restart = list(range(state.nproc))
            stopping = list(range(max(before, state.nproc)))  # a job that shrank stops its last ranks too
        else:
            # Instance-level actions restart the failed ranks and whatever ran on a node now isolated.
            on_bad_nodes = {rank for rank, inst in state.instances.items() if inst.node in isolated_after}
            restart = sorted(set(decision.ranks or incident.failed_ranks) | on_bad_nodes)
        stages.begin("stop")
        running = self.adapter.running()  # once: a set built per rank would make this O(N^2)
        self._stop([r for r in (stopping or restart) if r in running])
        self.check_signal()
        stages.begin("isolate")
        self._isolate(record, decision)
        self.check_signal()
        stages.begin("restart")
        self.store.mark_acted(self.job_id, record.round)
        try:
            self.launcher.start(restart, self.launcher.counts(),
                                replace_all=decision.action.replaces and decision.action.whole_job,
                                round_no=record.round, fresh_rendezvous=whole)
        except StartFailed as exc:
            self.store.close_round(self._restarted(record, stages, RoundResult.FAILED))
            self.recorder.give_up(record.round + 1, exc.code, exc.reason, str(exc), transient=not exc.permanent)
            return JobStatus.FAILED
        self.watch.reset()
        self.notified = None
        record = self._restarted(record, stages, RoundResult.RECOVERED)
        self.store.close_round(record)
        self.recorder.emit(EventType.ROUND_FINISHED,
                           f"round {record.round} recovered in {sum(record.stages.values()):.2f} s",
                           round_no=record.round, data={"stages": dict(record.stages)})
        return None

    def _restarted(self, record: RoundRecord, stages: Stages, result: RoundResult) -> RoundRecord:
        """The round as its restart left it: what the adapter's start waited for its scheduler
        (a controller that did not answer) is split out of ``restart`` as ``scheduler_wait`` and
        said in a note, so ``restart`` stays the time it takes when the scheduler answers."""
        times = stages.end()
        notes = (*record.notes, *self.adapter.start_notes())
        wait = self.adapter.last_wait
        if wait is not None:
            reason, seconds = wait
            times["restart"] = max(0.0, times.get("restart", 0.0) - seconds)
            times["scheduler_wait"] = seconds
            notes = (*notes, f"waited {seconds:.1f} s for the scheduler: {reason}")
        return replace(record, stages=times, result=result, notes=notes)

    def _isolate(self, record: RoundRecord, decision: Decision) -> None:
        if not decision.isolate:
            return
        self.state.isolated = self.state.isolated | frozenset(decision.isolate)
        self.adapter.isolate(decision.isolate, f"{record.error_code}: {decision.reason}")
        for node in decision.isolate:
            self.recorder.emit(EventType.NODE_ISOLATED, f"{node} isolated: {decision.reason}", round_no=record.round,
                               node=node)

    def _requeue(self, record: RoundRecord, decision: Decision, stages: Stages) -> JobStatus:
        """No healthy capacity is left here: stop, isolate, and have the scheduler start the job
        again in a new allocation. The history (rounds, budgets, isolated nodes) carries over."""
        stages.begin("stop")
        self._stop(list(self.adapter.running()))
        stages.begin("isolate")
        self._isolate(record, decision)
        stages.begin("restart")
        self.store.mark_acted(self.job_id, record.round)
        requeued = self.adapter.requeue(decision.reason)
        self.store.close_round(replace(record, stages=stages.end(),
                                       result=RoundResult.REQUEUED if requeued else RoundResult.FAILED))
        if not requeued:
            self.recorder.give_up(record.round + 1, "TG-REQUEUE-REFUSED",
                                  f"{decision.reason}; the scheduler refused the requeue", "requeue refused",
                                  transient=True)
            return JobStatus.FAILED
        self.recorder.emit(EventType.JOB_REQUEUED, f"round {record.round}: {decision.reason}", round_no=record.round,
                           data={"isolated": sorted(self.state.isolated)})
        return JobStatus.RUNNING

    def _capture_stacks(self) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
        """Every running rank's Python stacks, grouped (taken before the hung job is stopped)."""
        ranks = sorted(self.adapter.running())
        try:
            threads = self.adapter.stacks(ranks, self.policy.stack_snapshot_timeout)
        except AdapterError as exc:
            self.recorder.emit(EventType.STACKS_CAPTURED, f"no stacks: {exc}", data={"groups": 0, "error": str(exc)})
            return (), (f"stacks not taken: {exc}",)
        groups = tuple(group_stacks(threads))
        suspects = sorted({rank for group in groups if group["suspect"] for rank in group["ranks"]})
        self.recorder.emit(EventType.STACKS_CAPTURED, f"{len(groups)} distinct stack(s); likely culprits: rank(s) "
                           f"{suspects or 'none singled out'}", data={"groups": len(groups), "suspects": suspects})
        if not groups and ranks:
            return groups, (f"stacks not taken: no stack could be read from rank(s) {ranks}",)
        return groups, ()

    def _stop(self, ranks: list[int]) -> None:
        """Stop ranks; any that exit non-zero before being stopped join the incident's evidence."""
        faults = [Fault(ErrorSource.EXIT_CODE, exit_.at, rank=exit_.rank, node=self.state.node_of(exit_.rank),
                        exit_code=exit_.exit_code, message=describe_exit(exit_.exit_code))
                  for exit_ in self.launcher.stop(ranks)]
        self.store.add_faults(self.job_id, [(fault, None, self.state.restart_round, False) for fault in faults])

    def _advise(self, tail: str) -> None:
        """Once per job: the hang interval a collective timeout in the log calls for (seed 000)."""
        advice = advise_hang_interval(tail) if not self._advised else None
        if advice is None:
            return
        self._advised = True
        timeout, interval = advice
        current = f"{self.policy.job_hang_interval:g} s" if self.policy.enable_job_hang_detection else "off"
        self.recorder.emit(EventType.HANG_INTERVAL_ADVICE,
            f"the collective timeout is {timeout:g} s: set --job-hang-interval to about {interval:g} s "
            f"(150-200 s below it; now {current}) so hangs are caught, with stacks, before the watchdog "
            "kills the job", data={"collective_timeout": timeout, "advised_interval": interval})


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"
