"""The supervisor loop: adapter → detectors → hooks → decision → adapter, with budgets and rounds.

One class owns the loop, signal handling and a guaranteed shutdown, as torch elastic's agent
does; the scheduler is reached only through an :class:`~trainguard.adapters.Adapter` and
behaviour only through the :class:`~trainguard.hooks.PluginHost`. The loop sleeps in the
adapter's ``wait`` until an instance exits, an SDK record arrives or a detector's deadline
comes, so exits are handled the moment they happen; rounds are run by
:class:`~trainguard.engine.rounds.RoundRunner`.

A resumed job (the same ``--job-id`` after the supervisor died or was stopped) starts as a new
round with new logs and a new SDK channel, unless the adapter finds the job's instances still
running (pods outlive their launcher) and adopts them.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from trainguard import elastic, frameworks
from trainguard.adapters import Adapter, Exit
from trainguard.engine.health import Health
from trainguard.engine.inbox import SdkInbox
from trainguard.engine.inprocess import InProcess
from trainguard.engine.launcher import Launcher, StartFailed, replay_counters
from trainguard.engine.recorder import Recorder
from trainguard.engine.rounds import RoundRunner, describe_exit
from trainguard.engine.state import Clock, JobState, SupervisorInterrupted
from trainguard.engine.watch import Watch
from trainguard.errors import JobOwnedError
from trainguard.hooks import PluginHost
from trainguard.model import (
    EventType,
    Action,
    ErrorSource,
    ExecutionMode,
    Fault,
    History,
    Incident,
    JobSpec,
    JobStatus,
    RoundRecord,
    RoundResult,
)
from trainguard.policy import Policy
from trainguard.sanity import SanityConfig
from trainguard.store import Lease, RunStore
from trainguard.tee import Tee

log = logging.getLogger(__name__)

# How often the lease is renewed and checked (a PostgreSQL lease costs a query).
_LEASE_CHECK = 2.0


class Supervisor:
    """Supervise one job until it succeeds or fails for good.

    :param spec: what to run and where.
    :param policy: when and how to recover.
    :param adapter: the scheduler.
    :param store: the run history (budgets and ladder counters are rebuilt from it).
    :param host: the plugins.
    :param base_env: the environment every instance starts from (default: this process's).
    :param tee: copies the ranks' output to the terminal (``--tee``).
    :param lease: this supervisor's ownership of the job (taken before any rank starts); when
        another supervisor takes the job over, this one stops its ranks and exits 3.
    :param sanity: pre-start checks of the nodes and the runtime probe (seed 001).
    """

    def __init__(self, spec: JobSpec, policy: Policy, adapter: Adapter, store: RunStore, host: PluginHost,
                 *, base_env: Mapping[str, str] | None = None, tee: Tee | None = None,
                 lease: Lease | None = None, sanity: SanityConfig | None = None) -> None:
        self.spec = spec
        self.policy = policy
        self.adapter = adapter
        self.store = store
        self.host = host
        # An adapter that keeps its own time (the simulator) lends its clock (see Clock).
        self.clock: Clock = getattr(adapter, "clock", None) or Clock()
        self.framework = frameworks.for_job(spec, policy, store.state_dir)
        for name, plugin in self.framework.plugins().items():
            if not host.pm.has_plugin(name):
                host.pm.register(plugin, name=name)
        self.state = JobState(nproc=spec.nproc, required=self.framework.required())
        self.recorder = Recorder(spec.job_id, store, host, self.clock)
        host.on_plugin_error = self.recorder.plugin_error
        self.inbox = SdkInbox(policy, self.state, self.recorder, self.clock)
        self.recorder.progress = self.inbox.marks
        self.watch = Watch(policy, adapter, self.inbox, self.clock, spec.nproc)
        env = dict(base_env if base_env is not None else os.environ)
        self.launcher = Launcher(spec, policy, adapter, host, self.state, env, on_start=self.inbox.forget,
                                 on_started=tee.follow if tee is not None else None, framework=self.framework)
        self.inprocess = InProcess(policy=policy, adapter=adapter, state=self.state, launcher=self.launcher,
                                   inbox=self.inbox, recorder=self.recorder, store=store, clock=self.clock)
        self.inbox.on_inprocess = self.inprocess.on_record
        self.rounds = RoundRunner(policy=policy, adapter=adapter, store=store, host=host, state=self.state,
                                  launcher=self.launcher, inbox=self.inbox, watch=self.watch,
                                  recorder=self.recorder, clock=self.clock, check_signal=self._check_signal,
                                  inprocess=self.inprocess)
        self._pending_signal: int | None = None
        self._in_wait = False
        # The adapter's waits on its scheduler become points where a stop signal is acted on.
        adapter.pause = self._pause
        self.lease = lease
        self._lease_checked = 0.0
        self.health = Health(sanity or SanityConfig(), spec=spec, adapter=adapter, store=store, host=host,
                             state=self.state, recorder=self.recorder, clock=self.clock, base_env=env)
        if policy.enable_c4d_hang_detection:
            log.warning("[%s] --enable-c4d-hang-detection: C4D needs Alibaba's ACCL library and is not available; "
                        "trainguard takes stack snapshots of hung ranks and finds slow ranks from SDK step reports "
                        "instead", spec.job_id)
        if not self.watch.sync and (policy.enable_job_hang_detection or policy.enable_job_exit_hang_detection):
            log.warning("[%s] hang and exit-hang detection support only Sync jobs (AIMaster); ignored",
                        spec.job_id)

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> JobStatus:
        """Start the job and supervise it; returns ``succeeded``, ``failed``, or ``running``
        when the scheduler requeued it (it resumes from the history when started again)."""
        resumed = self.store.begin_job(self.job_id, spec_json(self.spec), self.policy.to_json())
        history = self.store.history(self.job_id)
        self.state.isolated = history.isolated_nodes
        previous = self._install_signal_handlers()
        # Load and validate the pattern catalog now, not during the first fault's round.
        self.host.patterns()
        try:
            capacity = self.adapter.capacity(frozenset())
            self.recorder.emit(EventType.JOB_RESUMED if resumed else EventType.JOB_STARTED,
                               f"{' '.join(self.spec.command)} as {self.spec.nproc} rank(s) on "
                               f"{self.spec.nodes} node(s)",
                               data={"hosts": list(capacity.nodes), "slots_per_node": capacity.slots_per_node,
                                     "adapter": getattr(self.adapter, "name", ""), "framework": self.spec.framework})
            if self.lease is not None and self.lease.took_over is not None:
                how = "--takeover" if self.lease.forced else "it had died"
                self.recorder.emit(EventType.JOB_TAKEN_OVER,
                                   f"from the supervisor on {self.lease.took_over.describe()} ({how})",
                                   data={"previous": self.lease.took_over.to_json(), "forced": self.lease.forced})
            if not self._first_start(history, resumed):
                return JobStatus.FAILED
            return self._loop()
        except SupervisorInterrupted as exc:
            self.recorder.give_up(self.state.restart_round + 1, "TG-INTERRUPTED",
                                  f"supervisor {exc}; resume with the same --job-id", str(exc), transient=True)
            raise
        finally:
            self._restore_signal_handlers(previous)
            self.adapter.close()
            self.inprocess.close()

    def _first_start(self, history: History, resumed: bool) -> bool:
        """Start every rank, adopt the job's running instances, or resume as a new round."""
        last = history.rounds[-1] if history.rounds else None
        if resumed and self._adopt(last):
            return True
        round_no, record = 0, None
        if resumed and last is not None and last.result is RoundResult.REQUEUED:
            round_no = last.round  # the requeued round places the job in this new allocation
        elif resumed:
            round_no = (last.round if last else 0) + 1
            round_no = self.store.next_round(self.job_id)
            record = RoundRecord(
                job_id=self.job_id, round=round_no, reason="the supervisor was restarted; the job resumes",
                error_code="TG-SUPERVISOR-RESTART", error_message="the job's previous supervisor ended",
                error_source=ErrorSource.EVENT, action=Action.RESTART_JOB, started_at=self.clock.wall(),
                consumes_budget=False)
            self.store.open_round(record)
            self.store.mark_acted(self.job_id, round_no)
        checked = self.health.before_start(round_no)
        if checked is None:
            return False
        round_no = checked
        counts = replay_counters(history.rounds, self.spec.nproc) if resumed else {}
        capacity = self.adapter.capacity(self.state.isolated)
        if elastic.enabled(self.policy) and elastic.refusal(self.spec, self.policy, capacity) is None:
            # An elastic job starts at the size its healthy nodes allow (a resumed one that shrank).
            self.state.nproc = self.watch.nproc = elastic.size_for(self.spec, self.policy, capacity)
        t = self.clock.mono()
        try:
            self.launcher.start(list(range(self.state.nproc)), counts, replace_all=True, round_no=round_no,
                                fresh_rendezvous=True)
        except StartFailed as exc:
            if record is not None:
                self.store.close_round(_closed(record, RoundResult.FAILED, self.clock.mono() - t))
            self.recorder.give_up(round_no + 1, exc.code, exc.reason, str(exc), transient=not exc.permanent)
            return False
        if record is not None:
            self.store.close_round(_closed(record, RoundResult.RECOVERED, self.clock.mono() - t))
        self.watch.reset()
        return True

    def _adopt(self, last: RoundRecord | None) -> bool:
        """Take over instances a previous supervisor left running (the adapter knows them)."""
        found = self.adapter.adopt()
        if not found:
            return False
        if len(found) < self.spec.nproc:
            log.warning("[%s] found %d of %d instances still running: stopping them and starting anew",
                        self.job_id, len(found), self.spec.nproc)
            self.launcher.stop(sorted(found))
            return False
        self.state.instances.update(found)
        self.state.restart_round = last.round if last is not None else 0
        self.recorder.emit(EventType.JOB_ADOPTED, f"{len(found)} running instance(s) adopted",
                           round_no=self.state.restart_round)
        self.watch.reset()
        return True

    def _loop(self) -> JobStatus:
        while True:
            self._check_signal()
            self._keep_ownership()
            exits = self.inprocess.take_exits() or self._wait(self.watch.timeout())
            failures = [fault for fault in map(self._on_exit, exits) if fault is not None]
            failures += [f for f in (self.inbox.apply(r, rec) for r, rec in self.adapter.sdk_records()) if f]
            if failures:
                outcome = self.rounds.recover(self._gather(failures))
                if outcome is not None:
                    return outcome
                continue
            if exits and (outcome := self.rounds.after_notified()) is not None:
                return outcome
            if self.state.finished:
                self.store.finish_job(self.job_id, JobStatus.SUCCEEDED)
                self.recorder.emit(EventType.JOB_SUCCEEDED, f"all {self.state.nproc} rank(s) exited 0",
                                   data={"progress": self.inbox.marks()})
                return JobStatus.SUCCEEDED
            fault = self.watch.check() or self.health.probe() or self.inprocess.check()
            outcome = self.rounds.recover(Incident((fault,))) if fault is not None else None
            if outcome is not None:
                return outcome

    def _keep_ownership(self) -> None:
        """Write what the store could not take, renew the lease, and give the job up at once if
        another supervisor took it over (``--takeover``): two owners must never run ranks."""
        if self.store.pending:
            self.store.flush()
        if self.lease is None or self.clock.mono() - self._lease_checked < _LEASE_CHECK:
            return
        self._lease_checked = self.clock.mono()
        self.lease.renew()
        if self.lease.lost():
            owner = self.store.owner(self.job_id)
            log.error("[%s] another supervisor took the job over; stopping this one's ranks", self.job_id)
            raise JobOwnedError(self.job_id, owner.host if owner else "?", owner.pid if owner else 0,
                                owner.since if owner else self.clock.wall())

    def _wait(self, timeout: float) -> list[Exit]:
        self._in_wait = True
        try:
            self._check_signal()
            return self.adapter.wait(timeout)
        finally:
            self._in_wait = False

    def _pause(self, seconds: float) -> None:
        """The adapter's sleep while it waits on its scheduler (an outage may last its whole
        tolerance): a stop signal pending or arriving meanwhile raises here, in the main thread."""
        if threading.current_thread() is not threading.main_thread():
            time.sleep(seconds)  # a signal is handled in the main thread only
            return
        was, self._in_wait = self._in_wait, True
        try:
            self._check_signal()
            time.sleep(seconds)
        finally:
            self._in_wait = was

    def _on_exit(self, exit_: Exit) -> Fault | None:
        node = self.state.node_of(exit_.rank)
        if exit_.exit_code == 0:
            self.state.succeeded.add(exit_.rank)
            self.watch.exit_hang.on_success(exit_.at)
            self.recorder.emit(EventType.INSTANCE_SUCCEEDED, f"rank {exit_.rank} exited 0", rank=exit_.rank, node=node)
            return None
        instance = self.state.instances.get(exit_.rank)
        return Fault(ErrorSource.EXIT_CODE, exit_.at, rank=exit_.rank, node=node, exit_code=exit_.exit_code,
                     message=describe_exit(exit_.exit_code), log_path=instance.log_path if instance else None)

    def _gather(self, failures: list[Fault]) -> Incident:
        """Wait ``failure_window`` for failures correlated with the first (a node going down).

        Sync jobs need no wait: the stop stage collects whatever else dies.
        """
        if self.policy.job_execution_mode is ExecutionMode.SYNC:
            return Incident(tuple(failures))
        deadline = self.clock.mono() + self.policy.failure_window
        while (left := deadline - self.clock.mono()) > 0:
            failures += [f for f in map(self._on_exit, self._wait(left)) if f is not None]
        return Incident(tuple(failures))

    # -- signals ----------------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {signum: signal.signal(signum, self._on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}

    def _restore_signal_handlers(self, previous: Mapping[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Raise only while blocked in wait(); elsewhere the step in hand finishes first and the
        # next check (between a round's stages, at most a stop's grace away) acts on it, so a
        # process is never started without being registered for cleanup.
        self._pending_signal = signum
        if self._in_wait:
            self._check_signal()

    def _check_signal(self) -> None:
        if self._pending_signal is not None:
            signum, self._pending_signal = self._pending_signal, None
            raise SupervisorInterrupted(signum)


def _closed(record: RoundRecord, result: RoundResult, seconds: float) -> RoundRecord:
    return replace(record, result=result, stages={"restart": seconds})


def spec_json(spec: JobSpec) -> dict[str, Any]:
    return {"command": list(spec.command), "nproc": spec.nproc, "nodes": spec.nodes,
            "slots_per_node": spec.slots, "cwd": spec.cwd, "role": spec.role, "framework": spec.framework,
            "roles": [list(role) for role in spec.roles]}


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
    tee: Tee | None = None,
    state_url: str | None = None,
    takeover: bool = False,
    sanity: SanityConfig | None = None,
) -> JobStatus:
    """Supervise ``spec`` under ``policy`` until it succeeds or fails for good.

    The one entry point the CLI, the Airflow operator and tests share: it opens the run
    history (under ``state_dir``, or the database at ``state_url``), takes the job's lease
    (``takeover`` forces it from a live owner), loads the plugins, creates the named adapter and
    runs a :class:`Supervisor`. Logs go to ``state_dir/jobs/<job_id>/logs``.
    """
    from trainguard.plugins.notifiers import events_file_plugin

    host = host or PluginHost()
    host.adapters().check(adapter)  # an unknown name is said before the history is opened
    if events_file is not None:
        for name, plugin in events_file_plugin(events_file).items():
            host.pm.register(plugin, name=name)
    state_dir = Path(state_dir).resolve()  # ranks may change directory: every path they get is absolute
    with RunStore(state_dir, url=state_url) as store:
        lease = store.acquire(spec.job_id, takeover=takeover)  # before anything starts
        env = dict(base_env if base_env is not None else os.environ)
        created: Adapter = host.adapters().create(
            adapter, spec=spec, policy=policy, base_env=env,
            log_dir=state_dir / "jobs" / spec.job_id / "logs", **dict(adapter_options or {}))
        try:
            return Supervisor(spec, policy, created, store, host, base_env=env, tee=tee, lease=lease,
                              sanity=sanity).run()
        finally:
            host.close()  # notifications still queued get their bounded drain
            if tee is not None:
                tee.close()
