"""``TrainingJobOperator``: a training job as one Airflow task, supervised by trainguard.

The operator owns the parameters and the orchestration; running the job is a runner's business
(:mod:`trainguard.airflow.runners`) and waiting for it a trigger's
(:class:`~trainguard.airflow.triggers.TrainingJobTrigger`). How the task's end follows the job's,
and how trainguard's budgets compose with Airflow's retries, is in :mod:`trainguard.airflow.jobs`.
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from airflow.sdk import BaseNotifier, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from trainguard.airflow.jobs import job_id_for, raise_for_report, read_report, resolve_state_dir, resumable
from trainguard.airflow.runners import JobRunner, Watch, make_runner
from trainguard.airflow.triggers import TrainingJobTrigger
from trainguard.engine import SupervisorInterrupted
from trainguard.errors import TrainguardError
from trainguard.frameworks import parse_roles
from trainguard.hooks import PluginHost, hookimpl
from trainguard.logtail import read_tail
from trainguard.model import Event, JobSpec, JobStatus
from trainguard.policy import Policy, build_policy, parse_aimaster_args
from trainguard.store import RunStore

# The events passed to ``event_notifiers`` unless ``notify_events`` says otherwise.
DEFAULT_NOTIFY_EVENTS = ("round_started", "node_isolated", "job_failed", "sdk_message")


def make_policy(policy: Policy | Mapping[str, Any] | str | None) -> Policy:
    """A :class:`Policy` from a Policy, a mapping of parameters, or an AIMaster argument string."""
    if policy is None:
        return Policy()
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str):
        return build_policy(parse_aimaster_args(policy))
    if isinstance(policy, Mapping):
        return build_policy(policy)
    raise TrainguardError(f"policy must be a Policy, a mapping or an AIMaster argument string, "
                          f"not {type(policy).__name__}")


def round_line(record: Mapping[str, Any]) -> str:
    """One task-log line for a round of the ``history --json`` object."""
    stages = record.get("stages") or {}
    timing = (f" in {sum(stages.values()):.2f} s ("
              + ", ".join(f"{name} {seconds:.2f}" for name, seconds in stages.items()) + ")") if stages else ""
    where = " ".join(part for part in (record.get("node"), record.get("instance")) if part)
    return (f"round {record['round']}: {record['action']} [{record['error_code']}]"
            f"{' on ' + where if where else ''}: {record['reason']} -> {record['result']}{timing}")


class TrainingJobOperator(BaseOperator):
    """Run a distributed training job as one task, with trainguard's fault tolerance.

    Restart rounds, node isolation and hang handling happen inside one task try, decided by
    the same engine as ``trainguard run``. The return value (XCom ``return_value``) is the job's
    restart records, the ``trainguard history --json`` object; the job id is also pushed as
    XCom ``trainguard_job_id``.

    :param command: the program and its arguments (a list, or one string split like a shell).
    :param nproc: ranks (``RANK`` 0..N-1, with the variables torchrun sets).
    :param nodes: (virtual, for ``local``) nodes the ranks spread over.
    :param slots_per_node: ranks per node (default: ``nproc`` / ``nodes`` rounded up).
    :param framework: ``pytorch``, ``tensorflow``, ``mpi`` or ``horovod`` (see
        :mod:`trainguard.frameworks`).
    :param roles: for ``tensorflow``: the tasks in rank order, ``"chief=1,worker=2,ps=1"``
        (sets ``nproc``).
    :param adapter: ``local`` (this machine) or ``slurm`` (submitted with ``sbatch``).
    :param adapter_options: for ``slurm``: ``sbatch_options`` (a list such as
        ``["--partition=gpu", "--nodes=4"]``) and ``poll_interval``; ``local`` takes none.
    :param env: extra environment variables for every rank.
    :param policy: a :class:`~trainguard.policy.Policy`, a mapping of parameters (AIMaster names,
        any spelling: ``{"enable_job_restart": True, "job_hang_interval": 600}``), or an AIMaster
        argument string (``"--job-execution-mode=Sync --enable-job-restart=True"``).
    :param job_id: the trainguard job id (default ``dag.task.run[.map_index]``, one per task
        instance across its tries, so a retry resumes the history).
    :param state_dir: the run history (see :func:`~trainguard.airflow.jobs.resolve_state_dir`).
    :param cwd: the ranks' working directory (default: the worker's).
    :param deferrable: give the worker slot back while the job runs (default True; see
        :mod:`trainguard.airflow.runners` for what each adapter needs).
    :param poll_interval: seconds between the trigger's polls when deferred.
    :param event_notifiers: Airflow notifiers called for each trainguard event in
        ``notify_events``, with the event as ``trainguard_event`` in the context.
    :param notify_events: event types passed to ``event_notifiers``.
    """

    template_fields: Sequence[str] = ("command", "env", "job_id", "state_dir", "adapter_options", "policy", "cwd")
    template_fields_renderers = {"env": "json", "adapter_options": "json"}
    ui_color = "#fde68a"

    def __init__(
        self,
        *,
        command: Sequence[str] | str,
        nproc: int = 1,
        nodes: int = 1,
        slots_per_node: int = 0,
        framework: str = "pytorch",
        roles: str | None = None,
        adapter: str = "local",
        adapter_options: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        policy: Policy | Mapping[str, Any] | str | None = None,
        job_id: str | None = None,
        state_dir: str | None = None,
        cwd: str | None = None,
        deferrable: bool = True,
        poll_interval: float = 2.0,
        event_notifiers: Sequence[BaseNotifier] = (),
        notify_events: Collection[str] = DEFAULT_NOTIFY_EVENTS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.command = command
        self.nproc = nproc
        self.nodes = nodes
        self.slots_per_node = slots_per_node
        self.framework = framework
        self.roles = roles
        self.adapter = adapter
        self.adapter_options = dict(adapter_options or {})
        self.env = dict(env or {})
        self.policy = policy
        self.job_id = job_id
        self.state_dir = state_dir
        self.cwd = cwd
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.event_notifiers = list(event_notifiers)
        self.notify_events = frozenset(notify_events)
        self._runner: JobRunner | None = None
        self._watch: Watch | None = None

    # -- building the job -------------------------------------------------------------------

    def _prepare(self, context: Context) -> tuple[JobSpec, Policy, Path, JobRunner]:
        """The job as the rendered parameters describe it; bad input fails the task for good."""
        try:
            command = shlex.split(self.command) if isinstance(self.command, str) else [str(c) for c in self.command]
            if not command:
                raise TrainguardError("command is empty")
            if self.nproc < 1 or self.nodes < 1 or self.slots_per_node < 0:
                raise TrainguardError("nproc and nodes must be at least 1, slots_per_node at least 0")
            roles = parse_roles(self.roles) if self.roles else ()
            spec = JobSpec(job_id=job_id_for(context), command=tuple(command),
                           nproc=sum(n for _, n in roles) if roles else self.nproc, nodes=self.nodes,
                           slots_per_node=self.slots_per_node, env={k: str(v) for k, v in self.env.items()},
                           cwd=self.cwd or str(Path.cwd()), framework=self.framework, roles=roles)
            if spec.slots * spec.nodes < spec.nproc:
                raise TrainguardError(f"{spec.nodes} node(s) x {spec.slots} slot(s) cannot hold {spec.nproc} rank(s)")
            policy = make_policy(self.policy)
            state_dir = resolve_state_dir(self.state_dir)
            runner = make_runner(self.adapter, spec, policy, state_dir, options=self.adapter_options)
        except TrainguardError as exc:
            raise AirflowFailException(f"trainguard: {exc}") from None
        return spec, policy, state_dir, runner

    # -- execute ----------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        spec, policy, state_dir, runner = self._prepare(context)
        self._runner = runner
        context["ti"].xcom_push(key="trainguard_job_id", value=spec.job_id)
        earlier = read_report(state_dir, spec.job_id)
        if earlier is not None:
            if earlier["status"] == "succeeded" or not resumable(earlier):
                self.log.info("trainguard job %s already ended (%s) in an earlier try: not run again",
                              spec.job_id, earlier["status"])
                return self._finish(context, state_dir, spec.job_id)
            self.log.info("trainguard job %s: resuming with %d round(s) and %d restart(s) recorded",
                          spec.job_id, len(earlier["rounds"]), earlier["restarts"])
        self.log.info("trainguard job %s: %s as %d rank(s) on %d node(s) (%s adapter%s); history in %s", spec.job_id,
                      shlex.join(spec.command), spec.nproc, spec.nodes, self.adapter,
                      ", deferred" if self.deferrable else "", state_dir)
        if not self.deferrable:
            try:
                runner.run(self._host(context))
            except SupervisorInterrupted as exc:
                raise AirflowException(f"trainguard job {spec.job_id}: supervisor {exc}; a retry resumes it") from None
            except TrainguardError as exc:
                raise AirflowFailException(f"trainguard job {spec.job_id}: {exc}") from None
            return self._finish(context, state_dir, spec.job_id)
        with RunStore(state_dir) as store:
            seen = store.last_event_id(spec.job_id)
        rounds = len(earlier["rounds"]) if earlier else 0
        self._defer(state_dir, spec.job_id, self._launch(runner, spec.job_id), rounds, seen, policy)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: log and relay what happened, then defer again or end.

        Everything needed comes in the event (see :mod:`trainguard.airflow.triggers`)."""
        spec, policy, state_dir, runner = self._prepare(context)
        watch, rounds_seen, events_seen = event["watch"], event["rounds_seen"], event["events_seen"]
        self._runner, self._watch = runner, watch
        report = read_report(state_dir, spec.job_id)
        rounds = report["rounds"] if report else []
        for record in rounds[rounds_seen:]:
            self.log.info("trainguard job %s %s", spec.job_id, round_line(record))
        events_seen = self._catch_up(context, state_dir, spec.job_id, events_seen)
        kind = event["kind"]
        if kind == "finished":
            return self._finish(context, state_dir, spec.job_id)
        if kind == "error":
            raise AirflowException(f"trainguard job {spec.job_id}: {event['message']}")
        if kind == "runner_ended":
            try:
                outcome = runner.runner_lost(watch, event["state"])
            except TrainguardError as exc:
                raise AirflowException(f"trainguard job {spec.job_id}: {exc}") from None
            if isinstance(outcome, JobStatus):
                return self._finish(context, state_dir, spec.job_id)
            if outcome is None:
                self._lost(state_dir, spec.job_id, watch)
            watch = outcome
        self._defer(state_dir, spec.job_id, watch, len(rounds), events_seen, policy)

    def on_kill(self) -> None:
        """Stop the job and everything it started (the detached supervisor or the Slurm job; an
        in-process supervisor stops its ranks itself on the signal that kills the task)."""
        if self._runner is not None:
            self._runner.stop(self._watch)

    # -- helpers ----------------------------------------------------------------------------

    def _launch(self, runner: JobRunner, job_id: str) -> Watch:
        try:
            self._watch = runner.launch()
        except TrainguardError as exc:
            raise AirflowException(f"trainguard job {job_id}: cannot start: {exc}") from None
        return self._watch

    def _defer(self, state_dir: Path, job_id: str, watch: Watch, rounds_seen: int, events_seen: int,
               policy: Policy) -> None:
        self._watch = watch
        trigger = TrainingJobTrigger(job_id=job_id, state_dir=str(state_dir), watch=watch, rounds_seen=rounds_seen,
                                     events_seen=events_seen, poll_interval=self.poll_interval,
                                     stop_grace_period=policy.stop_grace_period)
        self.defer(trigger=trigger, method_name="execute_complete")

    def _lost(self, state_dir: Path, job_id: str, watch: Watch) -> None:
        """The detached supervisor ended without finishing the job."""
        report = read_report(state_dir, job_id)
        if report is None:
            # It never began the job: bad input it refused; its last line says why.
            lines = read_tail(Path(watch.get("output", "")), 4096).strip().splitlines()
            raise AirflowFailException(f"trainguard job {job_id}: the supervisor refused the job: "
                                       f"{lines[-1] if lines else 'no output'}")
        raise AirflowException(f"trainguard job {job_id}: its supervisor (pid {watch.get('pid')}) ended without "
                               "finishing the job; a retry resumes it with its history")

    def _finish(self, context: Context, state_dir: Path, job_id: str) -> dict[str, Any]:
        report = read_report(state_dir, job_id)
        if report is None:
            raise AirflowException(f"trainguard job {job_id}: no record in {state_dir}")
        for record in report["rounds"]:
            self.log.info("trainguard job %s %s", job_id, round_line(record))
        self.log.info("trainguard job %s %s after %d round(s), %d restart(s) of the budget", job_id,
                      report["status"], len(report["rounds"]), report["restarts"])
        context["ti"].xcom_push(key="trainguard_report", value=report)
        raise_for_report(report)
        return report

    def _host(self, context: Context) -> PluginHost:
        """The plugins, plus one that relays the job's events to ``event_notifiers``."""
        operator = self

        class _Relay:
            @hookimpl
            def trainguard_on_event(self, event: Event) -> None:
                operator._relay(context, event.to_json())

        return PluginHost(plugins={"airflow-task": _Relay()})

    def _catch_up(self, context: Context, state_dir: Path, job_id: str, after: int) -> int:
        """Relay the events stored since ``after`` to ``event_notifiers``; the new cursor."""
        with RunStore(state_dir) as store:
            events = list(store.events(job_id, after=after)) if self.event_notifiers else []
            last = store.last_event_id(job_id)
        for event in events:
            self._relay(context, {**event, "job_id": job_id})
        return last

    def _relay(self, context: Context, event: Mapping[str, Any]) -> None:
        """Call each Airflow notifier for ``event``; a copy per call, since notifiers render their
        templates in place and an event's fields may appear in them."""
        if event["type"] not in self.notify_events:
            return
        for notifier in self.event_notifiers:
            try:
                copy.deepcopy(notifier)({**context, "trainguard_event": dict(event)})
            except Exception as exc:  # a notifier never stops the job
                self.log.warning("notifier %s failed on %s: %s", type(notifier).__name__, event["type"], exc)
