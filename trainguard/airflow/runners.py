"""How a training job runs for the operator: in this process, or detached and watched by a trigger.

Two runners serve :class:`~trainguard.airflow.operators.TrainingJobOperator`:

``local``
    In the task (``deferrable=False``) the engine runs in the worker process through
    :func:`trainguard.engine.supervise`, exactly as ``trainguard run`` does. Deferred, the same
    supervisor runs as a detached ``trainguard run`` process in its own session, so the task
    can give its worker slot back; its guardian still stops every rank if it dies. The trigger
    must run on the same host (the local adapter's ranks are this machine's processes).
``slurm``
    The job is submitted from outside an allocation (:class:`SlurmSubmitter`): the supervisor
    runs inside the allocation and recovers tasks and nodes there, while a lost allocation is
    classified and resubmitted by the operator, in the task or on each resume after deferral.

A runner's ``watch`` is the plain-JSON description of what runs (a process, a Slurm job) that
travels in the trigger's kwargs, with ``launched_at`` (epoch seconds) so the trigger ignores
what the history said before this launch; :func:`runner_ended` reads it in a thread.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Protocol

from trainguard.adapters.slurm_submit import (
    FINISHED,
    Resubmit,
    SlurmJobState,
    SlurmSubmitter,
    batch_script,
    cancel_slurm_job,
    slurm_job_state,
)
from trainguard.engine import supervise
from trainguard.errors import AdapterError, PolicyError
from trainguard.hooks import PluginHost
from trainguard.model import JobSpec, JobStatus
from trainguard.policy import Policy
from trainguard.store import RunStore

log = logging.getLogger(__name__)

Watch = dict[str, Any]


class JobRunner(Protocol):
    """Exactly what the operator relies on to run, watch and stop a job."""

    def run(self, host: PluginHost) -> JobStatus:
        """Run the job in this process until it ends (``deferrable=False``)."""

    def launch(self) -> Watch:
        """Start the job detached; returns the watch the trigger follows."""

    def runner_lost(self, watch: Watch, state: Mapping[str, Any]) -> Watch | JobStatus | None:
        """What ran the job ended while the history still says running: a new watch after
        resubmitting, the job's final status, or None when only a retry can take it up again."""

    def stop(self, watch: Watch | None) -> None:
        """Stop the job and everything it started (``on_kill``)."""


def run_options(spec: JobSpec, policy_file: Path) -> list[str]:
    """The ``trainguard run`` options that reproduce ``spec`` under the policy in ``policy_file``."""
    options = ["--job-id", spec.job_id, "--policy", str(policy_file), "--nproc", str(spec.nproc),
               "--nodes", str(spec.nodes)]
    if spec.slots_per_node:
        options += ["--slots-per-node", str(spec.slots_per_node)]
    if spec.framework != "pytorch":
        options += ["--framework", spec.framework]
    if spec.roles:
        options += ["--roles", ",".join(f"{role}={count}" for role, count in spec.roles)]
    for key, value in sorted(spec.env.items()):
        options += ["--env", f"{key}={value}"]
    return options


def write_policy(state_dir: Path, job_id: str, policy: Policy) -> Path:
    """The policy as a file ``--policy`` reads (JSON is YAML), kept beside the job's logs."""
    folder = state_dir / "jobs" / job_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "policy.json"
    path.write_text(json.dumps(policy.to_json(), indent=1))
    return path


def _proc_start(pid: int) -> int | None:
    """The process's start time in clock ticks (``/proc/PID/stat`` field 22); None if it is gone
    or a zombie. Pairing it with the pid keeps a recycled pid from passing for the supervisor."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _alive(watch: Watch) -> bool:
    """Whether the watched supervisor process still runs (the same process, not a reused pid)."""
    return watch["started"] is not None and _proc_start(watch["pid"]) == watch["started"]


class LocalRunner:
    """Ranks on this machine under the local adapter; see the module docstring."""

    def __init__(self, spec: JobSpec, policy: Policy, state_dir: Path, *,
                 options: Mapping[str, Any] | None = None) -> None:
        if options:
            raise PolicyError("adapter_options", f"the local adapter takes none, got {sorted(options)}")
        self.spec = spec
        self.policy = policy
        self.state_dir = state_dir

    def run(self, host: PluginHost) -> JobStatus:
        return supervise(self.spec, self.policy, state_dir=self.state_dir, adapter="local", host=host)

    def launch(self) -> Watch:
        policy_file = write_policy(self.state_dir, self.spec.job_id, self.policy)
        argv = [sys.executable, "-m", "trainguard", "--log-level", "INFO", "run", "--state-dir", str(self.state_dir),
                *run_options(self.spec, policy_file), "--", *self.spec.command]
        output = self.state_dir / "jobs" / self.spec.job_id / "supervisor.log"
        launched_at = time.time()
        with open(output, "ab") as out:
            process = subprocess.Popen(argv, cwd=self.spec.cwd, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started = _proc_start(process.pid)
        log.info("[%s] supervisor started detached as pid %d; its output: %s", self.spec.job_id, process.pid, output)
        return {"kind": "process", "pid": process.pid, "started": started, "host": socket.gethostname(),
                "output": str(output), "launched_at": launched_at}

    def runner_lost(self, watch: Watch, state: Mapping[str, Any]) -> Watch | JobStatus | None:
        return None

    def stop(self, watch: Watch | None) -> None:
        # In the task (no watch) the supervisor stops its ranks itself on the task's signal.
        if watch is not None:
            stop_watched(watch, self.policy.stop_grace_period)


class SlurmRunner:
    """A Slurm batch job submitted from outside an allocation; see the module docstring."""

    OPTIONS = frozenset({"sbatch_options", "poll_interval"})

    def __init__(self, spec: JobSpec, policy: Policy, state_dir: Path, *,
                 options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - self.OPTIONS
        if unknown:
            raise PolicyError("adapter_options", f"unknown for slurm: {sorted(unknown)} "
                                                 f"(known: {sorted(self.OPTIONS)})")
        sbatch_options = options.get("sbatch_options", ())
        if isinstance(sbatch_options, str) or not all(isinstance(o, str) for o in sbatch_options):
            raise PolicyError("adapter_options", "sbatch_options must be a list of strings such as "
                                                 "['--partition=debug', '--nodes=2']")
        self.spec = spec
        self.policy = policy
        self.state_dir = state_dir
        self.submitter = SlurmSubmitter(
            job_id=spec.job_id, script=self._script, state_dir=state_dir, policy=policy,
            sbatch_options=list(sbatch_options), poll=float(options.get("poll_interval", 2.0)))

    def _script(self) -> str:
        """The batch script, written with its policy file at each submission."""
        policy_file = write_policy(self.state_dir, self.spec.job_id, self.policy)
        return batch_script(run_options(self.spec, policy_file), self.state_dir, self.spec.command, self.spec.cwd)

    def run(self, host: PluginHost) -> JobStatus:
        self.submitter.host = host
        return self.submitter.run()

    def _submit(self, store: RunStore, plan: Resubmit, resubmits: int) -> Watch:
        launched_at = time.time()
        slurm_job = self.submitter.submit_excluding(store, plan)
        return {"kind": "slurm", "slurm_job": slurm_job, "resubmits": resubmits, "launched_at": launched_at}

    def launch(self) -> Watch:
        with RunStore(self.state_dir) as store:
            return self._submit(store, self.submitter.first_submission(store), 0)

    def runner_lost(self, watch: Watch, state: Mapping[str, Any]) -> Watch | JobStatus | None:
        with RunStore(self.state_dir) as store:
            outcome = self.submitter.after_allocation(store, watch["slurm_job"], SlurmJobState(**state),
                                                      watch["resubmits"])
            if isinstance(outcome, JobStatus):
                return outcome
            return self._submit(store, outcome, watch["resubmits"] + 1)

    def stop(self, watch: Watch | None) -> None:
        if watch is not None:
            stop_watched(watch, self.policy.stop_grace_period)
        else:  # submitted from the task itself (deferrable=False)
            self.submitter.cancel()


RUNNERS: dict[str, type[LocalRunner] | type[SlurmRunner]] = {"local": LocalRunner, "slurm": SlurmRunner}


def make_runner(adapter: str, spec: JobSpec, policy: Policy, state_dir: Path, *,
                options: Mapping[str, Any] | None = None) -> JobRunner:
    """The runner for ``adapter``; an unknown one is a :class:`PolicyError` naming the known ones."""
    factory = RUNNERS.get(adapter)
    if factory is None:
        raise PolicyError("adapter", f"{adapter!r} is not supported by the operator (known: {', '.join(RUNNERS)})")
    return factory(spec, policy, state_dir, options=options)


def runner_ended(watch: Watch) -> dict[str, Any] | None:
    """None while what the watch names still runs; else how it ended (a :class:`SlurmJobState`'s
    fields for Slurm). Blocking (a ``squeue`` call): the trigger runs it in a thread."""
    if watch["kind"] == "process":
        if watch["host"] != socket.gethostname():
            raise AdapterError("local", f"the job's supervisor runs on {watch['host']}, this triggerer on "
                                        f"{socket.gethostname()}: deferred local jobs need the triggerer on the "
                                        "worker's host (or deferrable=False)")
        return None if _alive(watch) else {"state": "EXITED"}
    state = slurm_job_state(watch["slurm_job"])
    if state.state not in FINISHED:
        return None
    return {"state": state.state, "reason": state.reason, "nodes": state.nodes, "exit_code": state.exit_code}


def stop_watched(watch: Watch, grace: float) -> None:
    """Stop what the watch names: SIGTERM a detached supervisor (it stops its ranks within
    ``grace``) and SIGKILL it if it lingers (its guardian then kills them); scancel a Slurm job."""
    if watch["kind"] == "slurm":
        cancel_slurm_job(watch["slurm_job"])
        return
    pid = watch["pid"]
    try:
        if not _alive(watch):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace + 5.0
        while time.monotonic() < deadline:
            if not _alive(watch):
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended between the check and the signal
        pass
