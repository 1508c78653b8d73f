"""The supervisor loop: adapter → detectors → hooks → decision → adapter, with budgets and rounds.

One class owns the loop, signal handling and a guaranteed shutdown, as torch elastic's agent
does; the scheduler is reached only through an :class:`~trainguard.adapters.Adapter` and
behaviour only through the :class:`~trainguard.hooks.PluginHost`. The loop sleeps in the
adapter's ``wait`` until an instance exits or a detector's deadline comes, so exits are handled
the moment they happen.

A round is: fault → diagnose → decide → stop → isolate → restart → running, each stage timed
and the record saved after every change, so ``trainguard history`` is right even if the
supervisor is killed mid-round. Failures that arrive together are one incident and one round;
the first in time is the root cause.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from trainguard.adapters import Adapter, Exit, Launch
from trainguard.detectors import ExitHangDetector, HangDetector, SlowRankDetector, advise_hang_interval
from trainguard.errors import AdapterError, TrainguardError
from trainguard.hooks import PluginHost
from trainguard.model import (
    Action,
    Decision,
    ErrorSource,
    Event,
    ExecutionMode,
    Fault,
    Incident,
    Instance,
    JobSpec,
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

# The longest the loop sleeps without a deadline; it bounds how late a signal is acted on.
_IDLE_TICK = 0.5


class SupervisorInterrupted(TrainguardError):
    """The supervisor received SIGINT or SIGTERM; the job is stopped and may be resumed."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


@dataclass
class _Clock:
    """Wall time for records, monotonic time for stage durations."""

    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic


class Supervisor:
    """Supervise one job until it succeeds or fails for good.

    :param spec: what to run and where.
    :param policy: when and how to recover.
    :param adapter: the scheduler.
    :param store: the run history (budgets and ladder counters are rebuilt from it).
    :param host: the plugins.
    :param base_env: the environment every instance starts from (default: this process's).
    """

    def __init__(self, spec: JobSpec, policy: Policy, adapter: Adapter, store: RunStore, host: PluginHost,
                 *, base_env: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.policy = policy
        self.adapter = adapter
        self.store = store
        self.host = host
        self.host.on_plugin_error = self._plugin_error
        self.base_env = dict(base_env if base_env is not None else os.environ)
        self.clock = _Clock()
        self.instances: dict[int, Instance] = {}
        self.succeeded: set[int] = set()
        self.isolated: frozenset[str] = frozenset()
        self.restart_round = 0
        self.master: tuple[str, int] = ("127.0.0.1", 0)
        self.hang = HangDetector(policy.job_hang_interval if policy.enable_job_hang_detection else None)
        self.exit_hang = ExitHangDetector(policy.job_exit_hang_interval)
        self.slow = SlowRankDetector(policy.slow_rank_factor, policy.slow_rank_window)
        # What the ranks' SDKs said: last record time, hang interval and stage per rank.
        self.sdk_progress: dict[int, float] = {}
        self.hang_overrides: dict[int, float | None] = {}
        self.stages: dict[int, str | None] = {}
        self.runtime_retryable: tuple[str, ...] = ()
        self._advised = False
        self._pending_signal: int | None = None
        self._in_wait = False
        self._sync = policy.job_execution_mode is ExecutionMode.SYNC
        if policy.enable_c4d_hang_detection:
            log.warning("[%s] --enable-c4d-hang-detection: C4D needs Alibaba's ACCL library and is not available; "
                        "trainguard takes stack snapshots of hung ranks and finds slow ranks from SDK step reports "
                        "instead", spec.job_id)
        if not self._sync and (policy.enable_job_hang_detection or policy.enable_job_exit_hang_detection):
            log.warning("[%s] hang and exit-hang detection support only Sync jobs (AIMaster); ignored",
                        spec.job_id)

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> JobStatus:
        """Start the job and supervise it; returns ``succeeded``, ``failed``, or ``running``
        when the scheduler requeued it (it resumes from the history when started again)."""
        resumed = self.store.begin_job(self.job_id, _spec_json(self.spec), self.policy.to_json())
        history = self.store.history(self.job_id)
        self.isolated = history.isolated_nodes
        self.restart_round = len(history.rounds)
        previous = self._install_signal_handlers()
        # Load and validate the pattern catalog now, not during the first fault's round.
        self.host.patterns()
        try:
            self._emit("job_resumed" if resumed else "job_started",
                       f"{' '.join(self.spec.command)} as {self.spec.nproc} rank(s) on {self.spec.nodes} node(s)")
            counts = _replay_counters(history.rounds, self.spec.nproc, resumed)
            if not self._start(list(range(self.spec.nproc)), counts, replace_all=True):
                return JobStatus.FAILED
            return self._loop()
        except SupervisorInterrupted as exc:
            self._give_up("TG-INTERRUPTED", f"supervisor {exc}; resume with the same --job-id", str(exc),
                          transient=True)
            raise
        finally:
            self._restore_signal_handlers(previous)
            self.adapter.close()

    def _loop(self) -> JobStatus:
        while True:
            self._check_signal()
            exits = self._wait(self._timeout())
            failures = [fault for fault in map(self._on_exit, exits) if fault is not None]
            failures += [fault for fault in self._read_sdk() if fault is not None]
            if failures:
                outcome = self._recover(self._gather(failures))
                if outcome is not None:
                    return outcome
                continue
            if len(self.succeeded) == self.spec.nproc:
                self.store.finish_job(self.job_id, JobStatus.SUCCEEDED)
                self._emit("job_succeeded", f"all {self.spec.nproc} rank(s) exited 0")
                return JobStatus.SUCCEEDED
            fault = self._detect()
            outcome = self._recover(Incident((fault,))) if fault is not None else None
            if outcome is not None:
                return outcome

    def _timeout(self) -> float:
        deadlines = [d for d in (self._hang_deadline(), self._exit_hang_deadline()) if d is not None]
        now = self.clock.wall()
        return max(0.0, min([_IDLE_TICK, *(d - now for d in deadlines)]))

    def _hang_deadline(self) -> float | None:
        running = self.adapter.running() if self._sync else frozenset()
        return self.hang.deadline(self._progress(), self.hang_overrides, running) if running else None

    def _exit_hang_deadline(self) -> float | None:
        if not (self._sync and self.policy.enable_job_exit_hang_detection):
            return None
        return self.exit_hang.deadline()

    def _progress(self) -> dict[int, float | None]:
        """Last sign of life (log output or SDK record) of every rank, finished ones included."""
        out: dict[int, float | None] = {}
        for rank in range(self.spec.nproc):
            marks = [t for t in (self.adapter.last_output(rank), self.sdk_progress.get(rank)) if t is not None]
            out[rank] = max(marks) if marks else None
        return out

    def _read_sdk(self) -> list[Fault | None]:
        return [self._on_sdk(rank, record) for rank, record in self.adapter.sdk_records()]

    def _on_sdk(self, rank: int, record: Mapping[str, Any]) -> Fault | None:
        """Apply one SDK record (format in :mod:`trainguard.sdk`); a slow node may become a fault."""
        at = float(record.get("t") or self.clock.wall())
        self.sdk_progress[rank] = max(at, self.sdk_progress.get(rank, 0.0))
        kind = record.get("type")
        node = self.instances[rank].node if rank in self.instances else None
        if kind == "config":
            interval = record.get("job_hang_interval")
            self.hang_overrides[rank] = float(interval) if isinstance(interval, (int, float)) else None
            self.stages[rank] = record.get("stage")
        elif kind == "message":
            self._emit("sdk_message", str(record.get("content", "")), round_no=self.restart_round, rank=rank,
                       node=node, data={"content": record.get("content")})
        elif kind == "retryable_errors":
            errors = [str(e) for e in record.get("errors") or [] if str(e).strip()]
            self.runtime_retryable = tuple(dict.fromkeys((*self.runtime_retryable, *errors)))
            self._emit("sdk_retryable_errors", ", ".join(errors), rank=rank, data={"errors": errors})
        elif kind == "step":
            metrics = record.get("metrics") or {}
            step_time = metrics.get("step_time") if isinstance(metrics, dict) else None
            slow = self.slow.step(rank, at, float(step_time) if isinstance(step_time, (int, float)) else None)
            if slow is not None:
                message = (f"rank {rank} on {node} is persistently slow: step {slow[0]:.3f} s vs peers' median "
                           f"{slow[1]:.3f} s (x{self.policy.slow_rank_factor:g} for {self.policy.slow_rank_window} steps)")
                self._emit("rank_slow", message, round_no=self.restart_round, rank=rank, node=node,
                           data={"step_time": slow[0], "median": slow[1]})
                if self.policy.isolate_slow_nodes:
                    return Fault(ErrorSource.SDK, at, rank=rank, node=node, message=message)
        return None

    def _detect(self) -> Fault | None:
        now = self.clock.wall()
        if self._sync and self.policy.enable_job_exit_hang_detection:
            fault = self.exit_hang.check(now, self.adapter.running())
            if fault is not None:
                return fault
        running = self.adapter.running() if self._sync else frozenset()
        return self.hang.check(now, self._progress(), self.hang_overrides, self.stages, running) if running else None

    def _wait(self, timeout: float) -> list[Exit]:
        self._in_wait = True
        try:
            self._check_signal()
            return self.adapter.wait(timeout)
        finally:
            self._in_wait = False

    def _on_exit(self, exit_: Exit) -> Fault | None:
        instance = self.instances.get(exit_.rank)
        if exit_.exit_code == 0:
            self.succeeded.add(exit_.rank)
            self.exit_hang.on_success(exit_.at)
            self._emit("instance_succeeded", f"rank {exit_.rank} exited 0", rank=exit_.rank,
                       node=instance.node if instance else None)
            return None
        return self._exit_fault(exit_)

    def _exit_fault(self, exit_: Exit) -> Fault:
        instance = self.instances.get(exit_.rank)
        return Fault(ErrorSource.EXIT_CODE, exit_.at, rank=exit_.rank,
                     node=instance.node if instance else None, exit_code=exit_.exit_code,
                     message=_describe_exit(exit_.exit_code),
                     log_path=instance.log_path if instance else None)

    def _gather(self, failures: list[Fault]) -> Incident:
        """Wait ``failure_window`` for failures correlated with the first (a node going down).

        Sync jobs need no wait: the stop stage collects whatever else dies.
        """
        if self._sync:
            return Incident(tuple(failures))
        deadline = self.clock.mono() + self.policy.failure_window
        while (left := deadline - self.clock.mono()) > 0:
            failures += [f for f in map(self._on_exit, self._wait(left)) if f is not None]
        return Incident(tuple(failures))

    # -- one round --------------------------------------------------------------------------

    def _recover(self, incident: Incident) -> JobStatus | None:
        """Diagnose, decide and carry out one round.

        Returns None when the job runs on here, ``failed`` when it failed for good, and
        ``running`` when the scheduler will start it again elsewhere (a requeue).
        """
        root = incident.root
        t = self.clock.mono()
        stages: dict[str, float] = {}
        self._emit("fault_detected", f"{root.instance or 'job'}: {root.message}", rank=root.rank, node=root.node,
                   data={"source": root.source.value, "exit_code": root.exit_code})

        tail = self.adapter.log_tail(root.rank, self.policy.log_tail_bytes) if root.rank is not None else ""
        policy = self.policy
        if self.runtime_retryable:
            policy = policy.replace(retryable_errors=(*policy.retryable_errors, *self.runtime_retryable))
        verdict = self.host.classify(root, tail, policy)
        self._advise(tail)
        hung = root.source in (ErrorSource.HANG, ErrorSource.EXIT_HANG)
        stacks = self._capture_stacks() if hung and self.policy.enable_stack_snapshots else ()
        counted = incident.faults if not self._sync else (root,)
        history = self.store.history(self.job_id)
        for fault in incident.faults:
            self.store.add_fault(self.job_id, fault, verdict if fault is root else None,
                                 self.restart_round + 1, counted=fault in counted)
        stages["diagnose"] = self.clock.mono() - t

        t = self.clock.mono()
        decision = self.host.decide(incident, verdict, history, self.policy,
                                    self.adapter.capacity(self.isolated))
        node = verdict.node or root.node
        if node is not None and root.source not in (ErrorSource.HANG, ErrorSource.EXIT_HANG):
            self.store.add_ledger(self.job_id, NodeFaultEntry(node, verdict.fault_code, root.detected_at,
                                                              verdict.user_error, verdict.gpu or root.instance))
        stages["decide"] = self.clock.mono() - t

        if decision.action is Action.FAIL:
            t = self.clock.mono()
            self._stop(list(self.adapter.running()), incident)
            stages["stop"] = self.clock.mono() - t
            self._finish_failed(replace(self._failure_record(root, decision, verdict=verdict, stages=stages),
                                        stacks=stacks, transient=decision.transient))
            return JobStatus.FAILED

        self.restart_round += 1
        record = RoundRecord(
            job_id=self.job_id, round=self.restart_round, reason=decision.reason,
            error_code=verdict.fault_code, error_message=_message(root, verdict),
            error_source=root.source, action=decision.action, started_at=root.detected_at,
            node=node, instance=root.instance, ranks=incident.failed_ranks, stages=dict(stages),
            consumes_budget=decision.consumes_budget, unconditional=decision.unconditional,
            user_error=verdict.user_error, node_fault=verdict.node_fault, isolated=decision.isolate,
            stacks=stacks)
        self.store.save_round(record)
        self._emit("round_started", f"round {record.round}: {decision.action.value} ({decision.reason})",
                   round_no=record.round, rank=root.rank, node=node,
                   data={"error_code": verdict.fault_code, "evidence": verdict.evidence})

        whole = self._sync or decision.action.whole_job
        isolated_after = self.isolated | frozenset(decision.isolate)
        after = self.adapter.capacity(isolated_after)
        if decision.isolate and after.can_requeue and after.healthy_slots() < after.world_size:
            return self._requeue(record, decision, incident, stages)
        if whole:
            restart = list(range(self.spec.nproc))
        else:
            # Instance-level actions restart the failed ranks and whatever ran on a node now isolated.
            on_bad_nodes = {rank for rank, inst in self.instances.items() if inst.node in isolated_after}
            restart = sorted(set(decision.ranks or incident.failed_ranks) | on_bad_nodes)
        t = self.clock.mono()
        self._stop([r for r in restart if r in self.adapter.running()], incident)
        stages["stop"] = self.clock.mono() - t

        t = self.clock.mono()
        if decision.isolate:
            self.isolated = isolated_after
            self.adapter.isolate(decision.isolate, f"{record.error_code}: {decision.reason}")
            for isolated in decision.isolate:
                self._emit("node_isolated", f"{isolated} isolated: {decision.reason}", round_no=record.round,
                           node=isolated)
        stages["isolate"] = self.clock.mono() - t

        t = self.clock.mono()
        counts = {rank: (inst.schedule_count, inst.proc_start_count) for rank, inst in self.instances.items()}
        started = self._start(restart, counts,
                              replace_all=decision.action.replaces and decision.action.whole_job,
                              round_no=record.round, fresh_rendezvous=whole)
        stages["restart"] = self.clock.mono() - t
        record = replace(record, stages=stages, result=RoundResult.RECOVERED if started else RoundResult.FAILED)
        self.store.save_round(record)
        if not started:
            return JobStatus.FAILED
        self._emit("round_finished", f"round {record.round} recovered in {sum(stages.values()):.2f} s",
                   round_no=record.round, data={"stages": stages})
        return None

    def _requeue(self, record: RoundRecord, decision: Decision, incident: Incident,
                 stages: dict[str, float]) -> JobStatus:
        """No healthy capacity is left here: stop, isolate, and have the scheduler start the job
        again in a new allocation. The history (rounds, budgets, isolated nodes) carries over."""
        t = self.clock.mono()
        self._stop(list(self.adapter.running()), incident)
        stages["stop"] = self.clock.mono() - t
        t = self.clock.mono()
        self.isolated = self.isolated | frozenset(decision.isolate)
        self.adapter.isolate(decision.isolate, f"{record.error_code}: {decision.reason}")
        stages["isolate"] = self.clock.mono() - t
        t = self.clock.mono()
        requeued = self.adapter.requeue(decision.reason)
        stages["restart"] = self.clock.mono() - t
        self.store.save_round(replace(record, stages=stages,
                                      result=RoundResult.REQUEUED if requeued else RoundResult.FAILED))
        if not requeued:
            self._give_up("TG-REQUEUE-REFUSED", f"{decision.reason}; the scheduler refused the requeue",
                          "requeue refused", transient=True)
            return JobStatus.FAILED
        self._emit("job_requeued", f"round {record.round}: {decision.reason}", round_no=record.round,
                   data={"isolated": sorted(self.isolated)})
        return JobStatus.RUNNING

    def _capture_stacks(self) -> tuple[dict[str, Any], ...]:
        """Every running rank's Python stacks, grouped (taken before the hung job is stopped)."""
        groups = tuple(group_stacks(self.adapter.stacks(sorted(self.adapter.running()),
                                                        self.policy.stack_snapshot_timeout)))
        suspects = sorted({rank for group in groups if group["suspect"] for rank in group["ranks"]})
        self._emit("stacks_captured", f"{len(groups)} distinct stack(s); likely culprits: rank(s) "
                   f"{suspects or 'none singled out'}", data={"groups": len(groups), "suspects": suspects})
        return groups

    def _stop(self, ranks: Sequence[int], incident: Incident) -> None:
        """Stop ranks; any that exit non-zero before being stopped join the incident's evidence."""
        for exit_ in self.adapter.stop(ranks, self.policy.stop_grace_period):
            if exit_.exit_code not in (0, -signal.SIGTERM, -signal.SIGKILL):
                self.store.add_fault(self.job_id, self._exit_fault(exit_), None, self.restart_round, counted=False)

    def _start(self, ranks: list[int], counts: Mapping[int, tuple[int, int]], *, replace_all: bool,
               round_no: int = 0, fresh_rendezvous: bool = True) -> bool:
        """Place and start ``ranks``; counters follow seed 002 (schedule vs process-start counts)."""
        current = {rank: inst.node for rank, inst in self.instances.items() if rank not in ranks or not replace_all}
        moving = [r for r in ranks if replace_all or r not in current or current[r] in self.isolated]
        try:
            placement = self.adapter.place(moving, current, self.isolated)
        except AdapterError as exc:
            self._give_up("TG-NO-CAPACITY", f"cannot place the job: {exc}", str(exc), transient=True)
            return False
        if fresh_rendezvous:
            self.master = self.adapter.rendezvous(placement)
        local_ranks = _local_ranks(placement)
        node_order = sorted(set(placement.values()), key=lambda n: min(r for r, m in placement.items() if m == n))
        launches = []
        for rank in ranks:
            schedule, proc_start = counts.get(rank, (0, 0))
            moved = rank in moving
            instance = Instance(rank=rank, node=placement[rank], local_rank=local_ranks[rank],
                                schedule_count=schedule + 1 if moved else max(schedule, 1),
                                proc_start_count=1 if moved else proc_start + 1)
            env = self._env(instance, round_no, placement, node_order)
            launches.append(Launch(instance, self.spec.command, env, self.spec.cwd, round_no))
            self.succeeded.discard(rank)
            # A new process states its own stage and interval.
            for state in (self.sdk_progress, self.hang_overrides, self.stages):
                state.pop(rank, None)
        if len(ranks) == self.spec.nproc:
            self.slow.reset()
        try:
            started = self.adapter.start(launches)
        except AdapterError as exc:
            self._give_up("TG-START-FAILED", f"cannot start the job: {exc}", str(exc), transient=not exc.permanent)
            return False
        self.instances.update(started)
        now = self.clock.wall()
        self.hang.reset(now)
        self.exit_hang.reset()
        return True

    def _env(self, instance: Instance, round_no: int, placement: Mapping[int, str],
             node_order: Sequence[str]) -> dict[str, str]:
        env = dict(self.base_env)
        env.update(self.spec.env)
        env.setdefault("PYTHONUNBUFFERED", "1")  # log progress is how hangs are seen
        env.update(self.host.instance_env(self.spec, instance, round_no))
        on_node = sum(1 for node in placement.values() if node == instance.node)
        env.update({
            "RANK": str(instance.rank),
            "WORLD_SIZE": str(self.spec.nproc),
            "LOCAL_RANK": str(instance.local_rank),
            "LOCAL_WORLD_SIZE": str(on_node),
            "GROUP_RANK": str(node_order.index(instance.node)),
            "ROLE_RANK": str(instance.rank),
            "ROLE_WORLD_SIZE": str(self.spec.nproc),
            "ROLE_NAME": self.spec.role,
            "MASTER_ADDR": self.master[0],
            "MASTER_PORT": str(self.master[1]),
            "TORCHELASTIC_RUN_ID": self.job_id,
            "TORCHELASTIC_RESTART_COUNT": str(round_no),
            "TORCHELASTIC_MAX_RESTARTS": str(self.policy.max_num_of_job_restart),
            "TRAINGUARD_JOB_ID": self.job_id,
            "TRAINGUARD_RESTART_ROUND": str(round_no),
            "TRAINGUARD_SCHEDULE_COUNT": str(instance.schedule_count),
            "TRAINGUARD_PROC_START_COUNT": str(instance.proc_start_count),
            "TRAINGUARD_NODE": instance.node,
        })
        return env

    # -- records and events -----------------------------------------------------------------

    def _failure_record(self, root: Fault, decision: Decision, *, verdict: Verdict | None = None,
                        stages: Mapping[str, float] | None = None, error_code: str | None = None) -> RoundRecord:
        return RoundRecord(
            job_id=self.job_id, round=self.restart_round + 1, reason=decision.reason,
            error_code=error_code or (verdict.fault_code if verdict else "TG-UNKNOWN"),
            error_message=_message(root, verdict), error_source=root.source, action=Action.FAIL,
            started_at=root.detected_at, result=RoundResult.FAILED, node=(verdict.node if verdict else None) or root.node,
            instance=root.instance, stages=dict(stages or {}), consumes_budget=False,
            user_error=bool(verdict and verdict.user_error), node_fault=bool(verdict and verdict.node_fault),
            transient=decision.transient)

    def _advise(self, tail: str) -> None:
        """Once per job: the hang interval a collective timeout in the log calls for (seed 000)."""
        advice = advise_hang_interval(tail) if not self._advised else None
        if advice is None:
            return
        self._advised = True
        timeout, interval = advice
        current = f"{self.policy.job_hang_interval:g} s" if self.policy.enable_job_hang_detection else "off"
        self._emit("hang_interval_advice",
                   f"the collective timeout is {timeout:g} s: set --job-hang-interval to about {interval:g} s "
                   f"(150-200 s below it; now {current}) so hangs are caught, with stacks, before the watchdog "
                   "kills the job", data={"collective_timeout": timeout, "advised_interval": interval})

    def _give_up(self, error_code: str, reason: str, message: str, *, transient: bool = False) -> None:
        """Fail the job for a reason that is no instance's fault: capacity, start-up, a signal."""
        self._finish_failed(self._failure_record(
            Fault(ErrorSource.EVENT, self.clock.wall(), message=message),
            Decision(Action.FAIL, reason, consumes_budget=False, transient=transient), error_code=error_code))

    def _finish_failed(self, failure: RoundRecord) -> None:
        self.store.finish_job(self.job_id, JobStatus.FAILED, failure)
        self._emit("job_failed", f"{failure.error_code}: {failure.reason}",
                   data={"error_code": failure.error_code, "error_message": failure.error_message,
                         "transient": failure.transient})

    def _emit(self, kind: str, message: str = "", *, round_no: int | None = None, rank: int | None = None,
              node: str | None = None, data: Mapping[str, Any] | None = None) -> None:
        event = Event(self.job_id, kind, self.clock.wall(), message, round_no, rank, node, dict(data or {}))
        self.store.add_event(event)
        self.host.notify(event)

    def _plugin_error(self, plugin: str, hook: str, exc: BaseException) -> None:
        # Recorded but not re-notified: a notifier that always fails must not recurse.
        log.error("[%s] plugin %s failed in %s: %s: %s", self.job_id, plugin, hook, type(exc).__name__, exc)
        self.store.add_event(Event(self.job_id, "plugin_error", self.clock.wall(),
                                   f"{plugin} failed in {hook}: {type(exc).__name__}: {exc}",
                                   data={"plugin": plugin, "hook": hook}))

    # -- signals ----------------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _restore_signal_handlers(self, previous: Mapping[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Raise only while blocked in wait(); elsewhere finish the step in hand first, so a
        # process is never started without being registered for cleanup.
        self._pending_signal = signum
        if self._in_wait:
            self._check_signal()

    def _check_signal(self) -> None:
        if self._pending_signal is not None:
            signum, self._pending_signal = self._pending_signal, None
            raise SupervisorInterrupted(signum)


def _spec_json(spec: JobSpec) -> dict[str, Any]:
    return {"command": list(spec.command), "nproc": spec.nproc, "nodes": spec.nodes,
            "slots_per_node": spec.slots, "cwd": spec.cwd, "role": spec.role}


def _local_ranks(placement: Mapping[int, str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for node in set(placement.values()):
        for index, rank in enumerate(sorted(r for r, n in placement.items() if n == node)):
            out[rank] = index
    return out


def _replay_counters(rounds: Sequence[RoundRecord], nproc: int, resumed: bool) -> dict[int, tuple[int, int]]:
    """Rebuild each rank's (schedule, process-start) counts before this start.

    A resumed supervisor places every rank anew (its previous processes died with it), so the
    counts it returns make every rank's schedule count grow by one.
    """
    if not resumed:
        return {}
    counts = {rank: (1, 1) for rank in range(nproc)}
    for record in rounds:
        if record.result is RoundResult.REQUEUED:
            continue  # it placed nothing itself: the resumed run that follows is the placement
        affected = range(nproc) if record.action.whole_job or not record.ranks else record.ranks
        for rank in affected:
            schedule, start = counts[rank]
            counts[rank] = (schedule + 1, 1) if record.action.replaces else (schedule, start + 1)
    return counts


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _message(root: Fault, verdict: Verdict | None) -> str:
    if verdict is not None and verdict.evidence and verdict.evidence != root.message:
        return f"{root.message}: {verdict.evidence}"
    return root.message


def supervise(
    spec: JobSpec,
    policy: Policy,
    *,
    state_dir: str | os.PathLike[str],
    adapter: str = "local",
    adapter_options: Mapping[str, Any] | None = None,
    events_file: str | os.PathLike[str] | None = None,
    host: PluginHost | None = None,
    base_env: Mapping[str, str] | None = None,
) -> JobStatus:
    """Supervise ``spec`` under ``policy`` until it succeeds or fails for good.

    The one entry point the CLI, the Airflow operator and tests share: it opens the run
    history under ``state_dir``, loads the plugins, creates the named adapter and runs a
    :class:`Supervisor`. Logs go to ``state_dir/jobs/<job_id>/logs``.
    """
    from pathlib import Path

    from trainguard.plugins.notifiers import JsonLinesNotifier

    host = host or PluginHost()
    if events_file is not None:
        host.pm.register(JsonLinesNotifier(events_file), name=f"events-file:{events_file}")
    with RunStore(state_dir) as store:
        env = dict(base_env if base_env is not None else os.environ)
        created = host.adapters().create(
            adapter, spec=spec, policy=policy, base_env=env,
            log_dir=Path(state_dir) / "jobs" / spec.job_id / "logs", **dict(adapter_options or {}))
        return Supervisor(spec, policy, created, store, host, base_env=env).run()
