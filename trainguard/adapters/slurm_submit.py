"""Slurm from outside an allocation: submit, watch, resubmit away from bad nodes.

``trainguard run --adapter slurm --submit ... -- COMMAND`` on a login node (or an Airflow
worker) submits a batch script that runs COMMAND under ``trainguard run --adapter slurm`` (the
in-allocation supervisor, which recovers tasks and nodes inside the allocation in a fraction
of a second), then watches the Slurm job. Every submission runs as the same trainguard job id,
so rounds, budgets and isolated nodes live in one history (``--state-dir`` must be on a
filesystem the compute nodes share).

When the allocation itself ends without the inner supervisor finishing (node failure, time
limit, preemption, a cancel), that is a fault of the job as a whole: it is classified like any
other (its Slurm state and reason, and the tail of the job's output), and a retryable one is
answered by resubmitting with ``--exclude`` of the nodes the history isolated plus the failed
node, within ``--max-num-of-job-restart``. Giving up (or Ctrl-C) cancels the job.

Job state comes from ``squeue --json`` (both the 22.05 schema, where ``job_state`` is a string
and ``exit_code`` a raw wait status, and newer ones, where they are lists and objects), then
``scontrol show job`` text once the job has left the queue.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

from trainguard.adapters.slurm_outage import CONTROLLER_PATIENCE, slurm_command
from trainguard.errors import AdapterError
from trainguard.hooks import PluginHost
from trainguard.logtail import read_tail
from trainguard.model import Action, ErrorSource, Event, Fault, JobStatus, RoundRecord, RoundResult
from trainguard.policy import Policy
from trainguard.store import RunStore, cut_off

log = logging.getLogger(__name__)

# How long a controller that answers again is given to carry out the requests it held.
_SETTLE = 2.0
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE"}


def batch_script(run_options: Sequence[str], state_dir: Path, command: Sequence[str], cwd: str | None = None) -> str:
    """A batch script that runs ``command`` under ``trainguard run --adapter slurm RUN_OPTIONS``."""
    given = any(o == "--state-dir" or o.startswith("--state-dir=") for o in run_options)
    # The script starts in ``cwd``, so a relative --state-dir means the same there.
    where = [] if given else ["--state-dir", str(state_dir)]
    argv = [sys.executable, "-m", "trainguard", "run", "--adapter", "slurm", *where, *run_options, "--", *command]
    return ("#!/bin/bash\n"
            "# Written by trainguard: the command runs under trainguard's supervision, as srun steps\n"
            "# of this allocation; a requeue resumes the same trainguard job.\n"
            f"cd {shlex.quote(cwd or os.getcwd())}\n"
            f"exec {shlex.join(argv)}\n")


@dataclass(frozen=True)
class SlurmJobState:
    """What Slurm says of a job: its state, why, where it ran, and how it exited."""

    state: str
    reason: str = ""
    nodes: str = ""
    exit_code: int | None = None


def parse_squeue_json(text: str, job_id: str) -> SlurmJobState | None:
    """The job's state from ``squeue --json``: the 22.05 schema and newer ones alike."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    for job in data.get("jobs", []):
        if str(job.get("job_id")) != str(job_id):
            continue
        state = job.get("job_state")
        if isinstance(state, list):  # 23.02 and later: a list of flags, the first is the base state
            state = state[0] if state else ""
        exit_code = job.get("exit_code")
        code: int | None
        if isinstance(exit_code, dict):  # newer: {"status": [...], "return_code": {"number": N}}
            number = exit_code.get("return_code")
            code = number.get("number") if isinstance(number, dict) else number
        elif isinstance(exit_code, int):  # 22.05: a raw wait status (exit 3 reads 768)
            code = exit_code >> 8 if exit_code > 255 else exit_code
        else:
            code = None
        return SlurmJobState(str(state or ""), str(job.get("state_reason") or ""), str(job.get("nodes") or ""), code)
    return None


def parse_scontrol_job(text: str) -> SlurmJobState | None:
    """The job's state from ``scontrol show job --oneliner`` text."""
    fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
    if "JobState" not in fields:
        return None
    exit_code = fields.get("ExitCode", "")
    code = int(exit_code.split(":")[0]) if exit_code.split(":")[0].isdigit() else None
    return SlurmJobState(fields["JobState"], fields.get("Reason", ""), fields.get("NodeList", ""), code)


@dataclass(frozen=True)
class Resubmit:
    """Submit (again) leaving out ``exclude``; if Slurm cannot, leave out ``required`` only."""

    exclude: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()


def slurm_job_state(slurm_job: str, env: Mapping[str, str] | None = None, *,
                    patience: float = CONTROLLER_PATIENCE) -> SlurmJobState:
    """What Slurm says of ``slurm_job`` now, queued, running or finished; an unreachable
    controller is waited for ``patience`` seconds (then a transient :class:`AdapterError`)."""
    found = parse_squeue_json(slurm_command("squeue", "--json", f"--jobs={slurm_job}", env=env, patience=patience),
                              slurm_job)
    if found is not None and found.state and (found.nodes or found.state not in FINISHED):
        return found
    found = parse_scontrol_job(slurm_command("scontrol", "show", "job", slurm_job, "--oneliner", env=env,
                                             patience=patience))
    if found is None:
        raise AdapterError("slurm", f"cannot read the state of job {slurm_job}")
    return found


def cancel_slurm_job(slurm_job: str, env: Mapping[str, str] | None = None) -> None:
    """``scancel`` the job; a failure is logged, not raised (it is called while giving up)."""
    try:
        slurm_command("scancel", slurm_job, env=env)
    except AdapterError as exc:
        log.warning("could not cancel Slurm job %s: %s", slurm_job, exc)


class SlurmSubmitter:
    """Submit the wrapper, watch it, resubmit on allocation failures; see the module docstring."""

    def __init__(self, *, job_id: str, script: Callable[[], str], state_dir: Path, policy: Policy,
                 sbatch_options: Sequence[str] = (), host: PluginHost | None = None,
                 env: Mapping[str, str] | None = None, poll: float = 2.0) -> None:
        self.job_id = job_id
        self.script = script
        self.state_dir = state_dir
        self.policy = policy
        self.sbatch_options = list(sbatch_options)
        self.host = host or PluginHost()
        self.env = dict(env) if env is not None else None
        self.poll = poll
        self.slurm_job: str | None = None

    def _slurm(self, *argv: str) -> str:
        return slurm_command(*argv, env=self.env, patience=self.policy.scheduler_outage_tolerance)

    def _emit(self, store: RunStore, kind: str, message: str, data: Mapping[str, Any] | None = None) -> None:
        event = Event(self.job_id, kind, time.time(), message, data=dict(data or {}))
        store.add_event(event)
        self.host.notify(event)

    def submit(self, exclude: Collection[str]) -> str:
        folder = self.state_dir / "sbatch"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.job_id}.sh"
        path.write_text(self.script())
        path.chmod(0o755)
        options = [*self.sbatch_options, f"--output={folder / (self.job_id + '.%j.out')}"]
        if exclude:
            options.append(f"--exclude={','.join(sorted(exclude))}")
        # sbatch gives up on a controller that does not answer, but the controller may still hold
        # the request and carry it out when it goes on: each submission carries a mark of its
        # own, and one that got no answer is looked for before it is made again.
        mark = None if any(o.startswith("--comment") for o in options) else (
            f"trainguard:{self.job_id}:{secrets.token_hex(4)}")
        if mark:
            options.append(f"--comment={mark}")
        deadline = time.monotonic() + self.policy.scheduler_outage_tolerance
        while True:
            try:
                left = deadline - time.monotonic()
                out = slurm_command("sbatch", "--parsable", *options, str(path), env=self.env,
                                    timeout=min(30.0, max(left, 2.0)), patience=0)
                self.slurm_job = out.strip().split(";")[0]
                return self.slurm_job
            except AdapterError as exc:
                left = deadline - time.monotonic()
                if exc.permanent or left <= 0:
                    raise
                log.warning("[%s] sbatch got no answer (%s); looking for the submission before making it again",
                            self.job_id, exc)
                found = self._submitted(mark, patience=left) if mark else None
                if found:
                    self.slurm_job = found
                    return found

    def _submitted(self, mark: str, patience: float) -> str | None:
        """The Slurm job submitted with ``mark`` as its comment, if the controller took it.

        A controller that goes on serves the requests it held in any order: the submission may
        land just after the first look, so a second look follows a moment later.
        """
        for look in range(2):
            if look:
                time.sleep(_SETTLE)
            text = slurm_command("squeue", "--noheader", "--states=all", "--format=%i %k", env=self.env,
                                 patience=patience)
            for line in text.splitlines():
                job, _, comment = line.strip().partition(" ")
                if comment.strip() == mark:
                    return job
        return None

    def state(self, slurm_job: str) -> SlurmJobState:
        return slurm_job_state(slurm_job, self.env, patience=self.policy.scheduler_outage_tolerance)

    def cancel(self) -> None:
        if self.slurm_job:
            cancel_slurm_job(self.slurm_job, self.env)

    def run(self) -> JobStatus:
        """Submit, watch and resubmit until the job ends; Ctrl-C cancels it.

        Slurm's commands wait out a controller that does not answer for
        ``--scheduler-outage-tolerance`` seconds; past that the job fails transiently (the
        history says so), so an outer retry (Airflow's, a person's) may run it again.
        """
        with RunStore(self.state_dir) as store:
            try:
                resubmits = 0
                next_submit = self.first_submission(store)
                while True:
                    slurm_job = self.submit_excluding(store, next_submit)
                    outcome = self.after_allocation(store, slurm_job, self._watch(slurm_job), resubmits)
                    if isinstance(outcome, JobStatus):
                        return outcome
                    resubmits += 1
                    next_submit = outcome
            except KeyboardInterrupt:
                self.cancel()
                raise
            except AdapterError as exc:
                if exc.permanent:
                    raise
                return self._scheduler_gone(store, exc)

    def _scheduler_gone(self, store: RunStore, exc: AdapterError) -> JobStatus:
        """The controller stayed away past the tolerance: a transient failure of the job, unless
        the supervisor inside the allocation already decided its end."""
        job = store.job(self.job_id)
        if job is not None and not cut_off(job):
            return job["status"]
        if job is None:
            store.begin_job(self.job_id, {}, self.policy.to_json())
        history = store.history(self.job_id)
        reason = f"the Slurm controller did not answer: {exc}"
        store.finish_job(self.job_id, JobStatus.FAILED, RoundRecord(
            job_id=self.job_id, round=len(history.rounds) + 1, reason=reason, error_code="TG-SLURM-CONTROLLER",
            error_message=str(exc), error_source=ErrorSource.EVENT, action=Action.FAIL, started_at=time.time(),
            result=RoundResult.FAILED, consumes_budget=False, transient=True))
        self._emit(store, "job_failed", f"TG-SLURM-CONTROLLER: {reason}",
                   {"slurm_job": self.slurm_job, "error_code": "TG-SLURM-CONTROLLER", "transient": True})
        return JobStatus.FAILED

    def first_submission(self, store: RunStore) -> Resubmit:
        """Leave out the nodes this job's history has isolated (a resumed job keeps its judgement)."""
        return Resubmit(frozenset(store.history(self.job_id).isolated_nodes))

    def submit_excluding(self, store: RunStore, plan: Resubmit) -> str:
        """Submit leaving out ``plan.exclude``, or only ``plan.required`` if Slurm cannot do that."""
        try:
            slurm_job = self.submit(plan.exclude)
            exclude = plan.exclude
        except AdapterError:
            if plan.exclude == plan.required:
                raise
            # The isolated nodes are trainguard's judgement; the down ones are Slurm's.
            # When both cannot be left out, leave out what Slurm says is broken.
            log.warning("[%s] cannot submit without %s; submitting without %s only", self.job_id,
                        ",".join(sorted(plan.exclude)), ",".join(sorted(plan.required)) or "any node")
            exclude = plan.required
            slurm_job = self.submit(exclude)
        self._emit(store, "slurm_submitted", f"Slurm job {slurm_job}"
                   f"{' excluding ' + ','.join(sorted(exclude)) if exclude else ''}",
                   {"slurm_job": slurm_job, "exclude": sorted(exclude)})
        return slurm_job

    def after_allocation(self, store: RunStore, slurm_job: str, final: SlurmJobState,
                         resubmits: int) -> JobStatus | Resubmit:
        """Once an allocation has ended: the job's final status, or how to submit it again.

        ``resubmits`` is how many times this submitter already resubmitted; they count against
        ``--max-num-of-job-restart`` together with the rounds of the history.
        """
        job = store.job(self.job_id)
        if job is not None and not cut_off(job):
            # The inner supervisor decided the job's end; no resubmission may overrule it.
            return job["status"]
        out = self.state_dir / "sbatch" / f"{self.job_id}.{slurm_job}.out"
        message = f"Slurm job {slurm_job} ended {final.state}" + (
            f" ({final.reason})" if final.reason and final.reason != "None" else "")
        fault = Fault(ErrorSource.EVENT, time.time(), node=final.nodes or None, message=message)
        verdict = self.host.classify(fault, read_tail(out, self.policy.log_tail_bytes), self.policy)
        history = store.history(self.job_id)
        required = frozenset(self._unhealthy(final.nodes)) if verdict.node_fault and final.nodes else frozenset()
        budget = self.policy.max_num_of_job_restart - history.budget_used - resubmits
        if not verdict.retryable or budget <= 0:
            why = "not retryable" if not verdict.retryable else "restart budget exhausted"
            # The history must say why, as the inner supervisor's own failures do.
            if job is None:
                store.begin_job(self.job_id, {}, self.policy.to_json())
            store.finish_job(self.job_id, JobStatus.FAILED, RoundRecord(
                job_id=self.job_id, round=len(history.rounds) + 1, reason=f"{message}: {why}",
                error_code=verdict.fault_code, error_message=verdict.evidence or message,
                error_source=ErrorSource.EVENT, action=Action.FAIL, started_at=fault.detected_at,
                result=RoundResult.FAILED, node=verdict.node or fault.node, consumes_budget=False,
                user_error=verdict.user_error, node_fault=verdict.node_fault))
            self._emit(store, "job_failed", f"{message}: {verdict.fault_code}, {why}",
                       {"slurm_job": slurm_job, "error_code": verdict.fault_code})
            return JobStatus.FAILED
        plan = Resubmit(frozenset(history.isolated_nodes) | required, required)
        self._emit(store, "slurm_resubmitting", f"{message}: {verdict.fault_code}; resubmitting",
                   {"slurm_job": slurm_job, "error_code": verdict.fault_code, "exclude": sorted(plan.exclude)})
        return plan

    def _unhealthy(self, nodes: str) -> set[str]:
        """Which of ``nodes`` Slurm now has down, drained, failing or not responding."""
        text = self._slurm("sinfo", "--noheader", "--nodes", nodes, "--Node", "--format=%N %t")
        bad = ("down", "drain", "drng", "fail", "maint", "unk", "npc", "boot")
        return {line.split()[0] for line in text.splitlines()
                if len(line.split()) == 2 and (line.split()[1].rstrip("*~#!%$@^-").startswith(bad)
                                                or line.split()[1].endswith("*"))}

    def _watch(self, slurm_job: str) -> SlurmJobState:
        while True:
            state = self.state(slurm_job)
            if state.state in FINISHED:
                return state
            time.sleep(self.poll)
