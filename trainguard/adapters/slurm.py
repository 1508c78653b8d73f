"""Slurm, in-allocation: ranks as ``srun`` steps inside the job's own allocation.

``trainguard run --adapter slurm [policy] -- python train.py`` inside an sbatch script places
each rank as a one-task step on a node of the allocation (``--nodes`` of them; more nodes in
the allocation are hot spares), with the same variables as under the local adapter and
``MASTER_ADDR`` on rank 0's node. Each ``srun`` is a local child of the supervisor, so exits
are seen through its pidfd as promptly as local ones, the step's output goes to the rank's
log, and recovery (restart in place, restart failed tasks, move ranks off an isolated node)
never leaves the allocation.

Slurm's own commands run as subprocesses with argument lists, never shell strings built from
user data; ``scontrol`` and ``squeue`` are retried (tenacity, bounded) so a slurmctld restart
is not mistaken for a job failure. A rank is stopped with ``scancel --signal=TERM`` on its
step (SIGTERM to ``srun`` would kill the step at once, leaving no grace for a dying-gasp
checkpoint), then ``srun`` is killed after the grace period.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from trainguard.adapters import Exit, Launch
from trainguard.adapters.local import LocalAdapter, free_port
from trainguard.errors import AdapterError
from trainguard.model import Capacity, Instance, JobSpec
from trainguard.policy import Policy

log = logging.getLogger(__name__)

# How long Slurm commands are retried while slurmctld does not answer (a restart, a failover).
CONTROLLER_PATIENCE = 60.0
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused",
                "Zero Bytes were transmitted", "slurm_load_jobs error: Unable to contact")


class _ControllerUnavailable(Exception):
    pass


def slurm_command(*argv: str, env: Mapping[str, str] | None = None, timeout: float = 30) -> str:
    """Run a Slurm client command; retried while the controller is unreachable.

    A refusal (unknown partition, bad job id) raises :class:`AdapterError` at once with Slurm's
    own message; an unreachable controller is retried for ``CONTROLLER_PATIENCE`` seconds.
    """

    @retry(retry=retry_if_exception_type(_ControllerUnavailable), stop=stop_after_delay(CONTROLLER_PATIENCE),
           wait=wait_exponential(multiplier=0.2, max=5), reraise=True)
    def attempt() -> str:
        try:
            done = subprocess.run(list(argv), env=dict(env) if env is not None else None, capture_output=True,
                                  text=True, timeout=timeout)
        except FileNotFoundError:
            raise AdapterError("slurm", f"{argv[0]} not found: is Slurm installed on this host?") from None
        except subprocess.TimeoutExpired:
            raise _ControllerUnavailable(f"{argv[0]} timed out after {timeout:g} s") from None
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            text = message[-1] if message else f"exit code {done.returncode}"
            if any(marker in (done.stderr or "") for marker in _UNREACHABLE):
                log.warning("slurm controller unreachable (%s); retrying", text)
                raise _ControllerUnavailable(text)
            raise AdapterError("slurm", f"{' '.join(argv[:2])}: {text}")
        return done.stdout

    try:
        return attempt()
    except _ControllerUnavailable as exc:
        raise AdapterError("slurm", f"slurmctld did not answer for {CONTROLLER_PATIENCE:g} s: {exc}",
                           permanent=False) from None


class SlurmAdapter(LocalAdapter):
    """See the module docstring; options: ``slurm_job_id`` and ``nodelist`` (default: from the
    environment Slurm gives the batch script)."""

    name = "slurm"
    # Ranks on other nodes append to their channel files over the shared filesystem: read them
    # every loop tick (a size check when nothing is new) instead of waiting for inotify.
    writes_are_local = False

    def __init__(self, *, spec: JobSpec, log_dir: str | Path, policy: Policy | None = None,
                 base_env: Mapping[str, str] | None = None, slurm_job_id: str | None = None,
                 nodelist: str | None = None, guardian_grace: float = 5.0) -> None:
        env = dict(base_env if base_env is not None else os.environ)
        self.slurm_job_id = slurm_job_id or env.get("SLURM_JOB_ID")
        self.nodelist = nodelist or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not self.slurm_job_id or not self.nodelist:
            raise AdapterError(self.name, "not inside a Slurm allocation (SLURM_JOB_ID is unset): run "
                                          "trainguard from an sbatch script, or use trainguard sbatch")
        self.slurm_env = env
        self._addresses: dict[str, str] = {}
        self._rank_nodes: dict[int, str] = {}
        self._step_names: dict[int, str] = {}
        self.drain = bool(policy and policy.drain_bad_nodes)
        self._srun = shutil.which("srun", path=env.get("PATH")) or "srun"
        # A step is its own process tree on another node: a spare interpreter here cannot become it.
        super().__init__(spec=spec, log_dir=log_dir, policy=(policy or Policy()).replace(warm_standby=False),
                         base_env=env, guardian_grace=guardian_grace)

    def capacity(self, isolated: frozenset[str]) -> Capacity:
        return replace(super().capacity(isolated), can_requeue=True)

    def isolate(self, nodes: Sequence[str], reason: str) -> None:
        """With ``--drain-bad-nodes``, drain the nodes so no job (this one requeued included) gets them."""
        if not self.drain:
            return
        for node in nodes:
            try:
                slurm_command("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                              f"Reason=trainguard {self.job_id}: {reason}"[:200], env=self.slurm_env)
                log.warning("[%s] drained %s: %s", self.job_id, node, reason)
            except AdapterError as exc:
                log.error("[%s] could not drain %s (%s): draining needs Slurm admin rights (SlurmUser, root or "
                          "AdminLevel=Operator); the node stays out of this job only", self.job_id, node, exc)

    def requeue(self, reason: str) -> bool:
        """``scontrol requeue`` this job: its ranks stop and Slurm starts the batch script again.

        Slurm does not let a running job change its ``ExcNodeList``; isolated nodes stay out
        through the run history (placement never uses them) and, with ``--drain-bad-nodes``,
        through the drain.
        """
        try:
            slurm_command("scontrol", "requeue", str(self.slurm_job_id), env=self.slurm_env)
        except AdapterError as exc:
            log.error("[%s] requeue refused: %s", self.job_id, exc)
            return False
        return True

    def _node_names(self, spec: JobSpec) -> tuple[str, ...]:
        nodes = tuple(slurm_command("scontrol", "show", "hostnames", self.nodelist or "", env=self.slurm_env).split())
        if len(nodes) < spec.nodes:
            raise AdapterError(self.name, f"the allocation has {len(nodes)} node(s) ({self.nodelist}); "
                                          f"--nodes {spec.nodes} needs more")
        return nodes

    def _address(self, node: str) -> str:
        if node not in self._addresses:
            text = slurm_command("scontrol", "show", "node", node, "--oneliner", env=self.slurm_env)
            fields = dict(item.split("=", 1) for item in text.split() if "=" in item)
            self._addresses[node] = fields.get("NodeAddr") or node
        return self._addresses[node]

    def rendezvous(self, placement: Mapping[int, str]) -> tuple[str, int]:
        address = self._address(placement[min(placement)])
        # A free port can only be checked here; elsewhere pick one at random above the usual ones.
        local = address in ("127.0.0.1", "localhost") or address == os.uname().nodename
        return address, free_port() if local else random.randrange(20000, 60000)

    def _argv(self, launch: Launch, log_path: Path) -> list[str]:
        rank, node = launch.instance.rank, launch.instance.node
        return [self._srun, f"--jobid={self.slurm_job_id}", "--overlap", "--nodes=1", "--ntasks=1",
                f"--nodelist={node}", f"--job-name={self._step_name(rank, launch.restart_round)}",
                "--export=ALL", "--kill-on-bad-exit=0", *launch.command]

    def _step_name(self, rank: int, restart_round: int) -> str:
        return f"tg-{self.job_id}-rank{rank}-r{restart_round}"

    def _steps(self) -> dict[str, str]:
        """Step name -> step id of this job's running steps."""
        text = slurm_command("squeue", "--steps", f"--jobs={self.slurm_job_id}", "--noheader",
                             "--format=%i %j", env=self.slurm_env)
        return {name: step for step, name in (line.split(None, 1) for line in text.splitlines() if " " in line)}

    def _rank_steps(self, ranks: Sequence[int]) -> dict[int, str]:
        """Step ids of the running ranks, found by the step names given at launch."""
        by_name = self._steps()
        steps = {rank: by_name.get(self._step_names[rank]) for rank in ranks if rank in self._procs}
        return {rank: step for rank, step in steps.items() if step}

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        targets = [rank for rank in ranks if rank in self._procs]
        if not targets:
            return []
        try:
            steps = self._rank_steps(targets)
            if steps:
                slurm_command("scancel", "--signal=TERM", *steps.values(), env=self.slurm_env)
        except AdapterError as exc:
            log.warning("[%s] could not signal the steps (%s); stopping srun instead", self.job_id, exc)
            return super().stop(targets, grace)
        exits = self._collect(targets, grace)
        left = [rank for rank in targets if rank in self._procs]
        return exits + (super().stop(left, 0.5) if left else [])

    def _dump_argv(self, tool: str, rank: int) -> list[tuple[int, list[str]]]:
        steps = self._rank_steps([rank])
        if rank not in steps:
            return []
        node = self._rank_nodes[rank]
        # Job, step and node come from Slurm, not from the user; the node is named because
        # several slurmd may share a host (and it is harmless when one does not).
        script = (f"for pid in $(scontrol listpids {steps[rank]} {node} | awk 'NR>1 {{print $1}}'); do "
                  f"{tool} dump --nonblocking --pid $pid; done")
        return [(self._procs[rank].pid, [self._srun, f"--jobid={self.slurm_job_id}", "--overlap", "--nodes=1",
                                         "--ntasks=1", f"--nodelist={node}", "sh", "-c", script])]

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        for launch in launches:
            self._rank_nodes[launch.instance.rank] = launch.instance.node
            self._step_names[launch.instance.rank] = self._step_name(launch.instance.rank, launch.restart_round)
        return super().start(launches)
