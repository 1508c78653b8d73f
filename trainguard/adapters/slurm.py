"""Slurm, in-allocation: ranks as ``srun`` steps inside the job's own allocation.

``trainguard run --adapter slurm [policy] -- python train.py`` inside an sbatch script places
each rank as a one-task step on a node of the allocation (``--nodes`` of them; more nodes in
the allocation are hot spares), with the same variables as under the local adapter and
``MASTER_ADDR`` on rank 0's node. Each ``srun`` is a local child of the supervisor, so exits
are seen through its pidfd as promptly as local ones, the step's output goes to the rank's
log, and recovery (restart in place, restart failed tasks, move ranks off an isolated node)
never leaves the allocation.

``start`` returns only once every step's task runs (see :mod:`trainguard.adapters.slurm_outage`):
a step that never launched is a launcher fault, not a rank's failure; while the controller does
not answer, or refuses steps for now, the launch is retried for ``--scheduler-outage-tolerance``
seconds and what was waited for is left in :attr:`SlurmAdapter.last_wait`.

Slurm's own commands run as subprocesses with argument lists, never shell strings built from
user data; ``scontrol``, ``squeue`` and ``scancel`` are retried (tenacity, bounded by the same
tolerance) so a slurmctld restart is not mistaken for a job failure. A rank is stopped with
``scancel --signal=TERM`` on its step (SIGTERM to ``srun`` would kill the step at once, leaving
no grace for a dying-gasp checkpoint), then ``srun`` is killed after the grace period; a step
that could not be signalled because the controller was away is cancelled before the next start.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from tenacity import Retrying, retry_if_exception_type, wait_exponential

from trainguard.adapters import Exit, Launch
from trainguard.adapters.local import LocalAdapter, error_file_summary, free_port
from trainguard.adapters.processes import signal_group
from trainguard.adapters.slurm_outage import (  # noqa: F401 (slurm_command, CONTROLLER_PATIENCE: public here)
    CONTROLLER_PATIENCE,
    STARTED,
    STARTED_SH,
    LaunchRefused,
    SchedulerWait,
    is_outage,
    launcher_message,
    slurm_command,
    without_outage_lines,
)
from trainguard.errors import AdapterError
from trainguard.model import Capacity, Instance, JobSpec
from trainguard.policy import Policy

log = logging.getLogger(__name__)

# How long a launch may take beyond the outage tolerance once the controller answers.
LAUNCH_GRACE = 30.0
_POLL = 0.02


class SlurmAdapter(LocalAdapter):
    """See the module docstring; options: ``slurm_job_id`` and ``nodelist`` (default: from the
    environment Slurm gives the batch script).

    ``last_wait`` is what the latest :meth:`start` waited for the scheduler (Slurm's message and
    the seconds), or None when the steps started at the first try.
    """

    name = "slurm"
    # Ranks on other nodes append to their channel files over the shared filesystem: read them
    # every loop tick (a size check when nothing is new) instead of waiting for inotify.
    writes_are_local = False

    def __init__(self, *, spec: JobSpec, log_dir: str | Path, policy: Policy | None = None,
                 base_env: Mapping[str, str] | None = None, slurm_job_id: str | None = None,
                 nodelist: str | None = None, guardian_grace: float | None = None) -> None:
        env = dict(base_env if base_env is not None else os.environ)
        policy = policy or Policy()
        self.slurm_job_id = slurm_job_id or env.get("SLURM_JOB_ID")
        self.nodelist = nodelist or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not self.slurm_job_id or not self.nodelist:
            raise AdapterError(self.name, "not inside a Slurm allocation (SLURM_JOB_ID is unset): run "
                                          "trainguard from an sbatch script, or use trainguard sbatch")
        self.slurm_env = env
        self.tolerance = policy.scheduler_outage_tolerance
        self.last_wait: SchedulerWait | None = None
        self._addresses: dict[str, str] = {}
        self._rank_nodes: dict[int, str] = {}
        # Per started rank: its step ("JOB.STEP") and where its own output begins in its log.
        self._rank_steps: dict[int, str] = {}
        self._output_from: dict[int, int] = {}
        # Steps left running because the controller could not be asked to signal them.
        self._orphans: set[str] = set()
        self.drain = policy.drain_bad_nodes
        self._srun = shutil.which("srun", path=env.get("PATH")) or "srun"
        # A step is its own process tree on another node: a spare interpreter here cannot become it.
        super().__init__(spec=spec, log_dir=log_dir, policy=policy.replace(warm_standby=False),
                         base_env=env, guardian_grace=guardian_grace)

    def _slurm(self, *argv: str, patience: float | None = None, outages: list[str] | None = None) -> str:
        return slurm_command(*argv, env=self.slurm_env, patience=self.tolerance if patience is None else patience,
                             outages=outages, sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.pause(seconds)  # looked up at each call: the engine replaces pause after construction

    def capacity(self, isolated: frozenset[str]) -> Capacity:
        return replace(super().capacity(isolated), can_requeue=True)

    def isolate(self, nodes: Sequence[str], reason: str) -> None:
        """With ``--drain-bad-nodes``, drain the nodes so no job (this one requeued included) gets them."""
        if not self.drain:
            return
        for node in nodes:
            try:
                self._slurm("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                            f"Reason=trainguard {self.job_id}: {reason}"[:200])
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
            self._slurm("scontrol", "requeue", str(self.slurm_job_id))
        except AdapterError as exc:
            log.error("[%s] requeue refused: %s", self.job_id, exc)
            return False
        return True

    def _node_names(self, spec: JobSpec) -> tuple[str, ...]:
        nodes = tuple(self._slurm("scontrol", "show", "hostnames", self.nodelist or "").split())
        if len(nodes) < spec.nodes:
            raise AdapterError(self.name, f"the allocation has {len(nodes)} node(s) ({self.nodelist}); "
                                          f"--nodes {spec.nodes} needs more")
        return nodes

    def _address(self, node: str) -> str:
        if node not in self._addresses:
            text = self._slurm("scontrol", "show", "node", node, "--oneliner")
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
                f"--nodelist={node}", f"--job-name=tg-{self.job_id}-rank{rank}-r{launch.restart_round}",
                "--export=ALL", "--kill-on-bad-exit=0", "/bin/sh", "-c", STARTED_SH, "trainguard-rank",
                *launch.command]

    # -- start: every step's task running, or a clear transient failure ---------------------

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        """Start the steps and return once every task runs (see the module docstring).

        Raises a transient :class:`AdapterError` when the scheduler stays away longer than the
        outage tolerance, or when a step fails to launch for another reason (srun's message).
        """
        self.last_wait = None
        began = time.monotonic()
        outages: list[str] = []
        pending = {launch.instance.rank: launch for launch in launches}
        started: dict[int, Instance] = {}
        accepted_at = began
        exponential = wait_exponential(multiplier=0.5, max=10)

        def launch_pending() -> None:
            nonlocal accepted_at
            accepted_at = time.monotonic()
            ok, failed = self._launch(list(pending.values()), deadline=began + self.tolerance + LAUNCH_GRACE)
            started.update(ok)
            for rank in ok:
                del pending[rank]
            lasting = {rank: message for rank, (message, outage) in failed.items() if not outage}
            if lasting:
                raise AdapterError(self.name, "; ".join(f"the step of rank {rank} did not launch: {message}"
                                                        for rank, message in sorted(lasting.items())),
                                   permanent=False)
            if failed:
                outages.extend(message for message, _ in failed.values())
                by_message: dict[str, list[str]] = {}
                for rank, (message, _) in sorted(failed.items()):
                    by_message.setdefault(message, []).append(str(rank))
                raise LaunchRefused("; ".join(f"rank(s) {','.join(ranks)}: {message}"
                                              for message, ranks in by_message.items()))

        def backoff(state) -> float:  # type: ignore[no-untyped-def]
            # Never past the tolerance: the last try comes when it runs out.
            return min(exponential(state), max(0.0, began + self.tolerance - time.monotonic()))

        def log_retry(state) -> None:  # type: ignore[no-untyped-def]
            log.warning("[%s] the scheduler did not start the step(s) of rank(s) %s (%s); retrying for up to "
                        "%.0f s more", self.job_id, ",".join(map(str, sorted(pending))), state.outcome.exception(),
                        max(0.0, began + self.tolerance - time.monotonic()))

        try:
            for attempt in Retrying(retry=retry_if_exception_type(LaunchRefused),
                                    stop=lambda _: time.monotonic() - began >= self.tolerance,
                                    wait=backoff, before_sleep=log_retry, sleep=self._sleep, reraise=True):
                with attempt:
                    self._cancel_orphans(outages)
                    launch_pending()
        except LaunchRefused as exc:
            waited = time.monotonic() - began
            self.last_wait = SchedulerWait(outages[0], waited)
            raise AdapterError(self.name, f"the scheduler did not start the step(s) of rank(s) "
                                          f"{','.join(map(str, sorted(pending)))} for {waited:.0f} s "
                                          f"(--scheduler-outage-tolerance {self.tolerance:g} s): {exc}",
                               permanent=False) from None
        except AdapterError:
            if outages:
                self.last_wait = SchedulerWait(outages[0], time.monotonic() - began)
            raise
        if outages:
            self.last_wait = SchedulerWait(outages[0], accepted_at - began)
            log.warning("[%s] waited %.1f s for the scheduler (%s); every step runs now", self.job_id,
                        self.last_wait.seconds, outages[0])
        return started

    def _cancel_orphans(self, outages: list[str]) -> None:
        """Cancel steps a stop could not signal; waits out the controller like a launch does."""
        if not self._orphans:
            return
        steps = sorted(self._orphans)
        try:
            # Short calls, so that a controller that does not answer shows as such in last_wait.
            slurm_command("scancel", *steps, env=self.slurm_env, timeout=5, patience=self.tolerance, outages=outages,
                          sleep=self._sleep)
        except AdapterError as exc:
            if not exc.permanent:
                raise
            log.debug("[%s] stale steps %s: %s", self.job_id, steps, exc)  # already gone
        self._orphans.clear()

    def _launch(self, launches: Sequence[Launch],
                deadline: float) -> tuple[dict[int, Instance], dict[int, tuple[str, bool]]]:
        """One launch attempt: the ranks whose task started, and for the others srun's message
        and whether it means an outage."""
        offsets = {}
        for launch in launches:
            rank = launch.instance.rank
            self._rank_nodes[rank] = launch.instance.node
            path = self.log_path(rank, launch.restart_round)
            offsets[rank] = path.stat().st_size if path.exists() else 0
        instances = super().start(launches)
        started: dict[int, Instance] = {}
        failed: dict[int, tuple[str, bool]] = {}
        waiting = set(instances)
        while waiting:
            for rank in sorted(waiting):
                path, offset = Path(self._logs[rank]), offsets[rank]
                ended = self._procs[rank].popen.poll() is not None
                output = _read_from(path, offset)  # after the poll: all of an ended srun's output
                found = STARTED.search(output)
                if found:
                    self._rank_steps[rank] = found.group(1).decode()
                    self._output_from[rank] = offset + found.end()
                    started[rank] = instances[rank]
                elif ended or time.monotonic() > deadline:
                    failed[rank] = self._abandon(rank, path, offset, ended)
                else:
                    continue
                waiting.discard(rank)
            if waiting:
                self.pause(_POLL)  # srun may itself be waiting out the controller here
        return started, failed

    def _abandon(self, rank: int, path: Path, offset: int, ended: bool) -> tuple[str, bool]:
        """Forget a launch whose task never started; its srun output moves to a launch log."""
        proc = self._procs[rank]
        if not ended:
            signal_group(proc.pid, signal.SIGKILL)
        code = proc.popen.wait()
        self._reap(rank)
        text = _read_from(path, offset).decode("utf-8", errors="replace")
        with open(path.with_name(f"{path.stem}.launch.log"), "a") as out:
            out.write(text)
        os.truncate(path, offset)
        message = launcher_message(text) or (
            f"srun exited with code {code} before the task started" if ended else
            f"srun did not start the task within {self.tolerance + LAUNCH_GRACE:g} s")
        return message, is_outage(text)

    # -- stop and inspect -------------------------------------------------------------------

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        targets = [rank for rank in ranks if rank in self._procs]
        if not targets:
            return []
        steps = [self._rank_steps[rank] for rank in targets if rank in self._rank_steps]
        try:
            if steps:
                # No longer than the grace: a controller that does not answer must not hold the round.
                self._slurm("scancel", "--signal=TERM", *steps, patience=min(grace, self.tolerance))
        except AdapterError as exc:
            if not exc.permanent:
                # srun is all that can be reached; the steps are cancelled once the controller is back.
                log.warning("[%s] could not signal the steps (%s); stopping srun instead", self.job_id, exc)
                self._orphans.update(steps)
                return super().stop(targets, grace)
            # Slurm 22.05 reports "Invalid job id" when a step ends on the signal it was sent;
            # one that truly could not be signalled is killed after the grace below.
            log.debug("[%s] scancel: %s", self.job_id, exc)
        exits = self._collect(targets, grace)
        left = [rank for rank in targets if rank in self._procs]
        return exits + (super().stop(left, 0.5) if left else [])

    def log_tail(self, rank: int, nbytes: int) -> str:
        """The rank's own output only (srun's launch messages before its start line are not its),
        then the exception from torchrun's error file when the rank wrote one."""
        path = self._logs.get(rank)
        if not path:
            return ""
        floor = self._output_from.get(rank, 0)
        try:
            with open(path, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                begin = max(floor, size - nbytes)
                handle.seek(begin)
                data = handle.read(nbytes)
        except OSError:
            return ""
        if begin > floor:
            cut = data.find(b"\n")
            data = data[cut + 1:] if cut >= 0 else data
        tail = without_outage_lines(data.decode("utf-8", errors="replace"))
        error = error_file_summary(Path(path).with_suffix(".error.json"))
        return f"{tail}\n{error}" if error else tail

    def _dump_argv(self, tool: str, rank: int) -> list[tuple[int, list[str]]]:
        if rank not in self._rank_steps or rank not in self._procs:
            return []
        node = self._rank_nodes[rank]
        # Job, step and node come from Slurm, not from the user; the node is named because
        # several slurmd may share a host (and it is harmless when one does not).
        script = (f"for pid in $(scontrol listpids {self._rank_steps[rank]} {node} | awk 'NR>1 {{print $1}}'); do "
                  f"{tool} dump --nonblocking --pid $pid; done")
        return [(self._procs[rank].pid, [self._srun, f"--jobid={self.slurm_job_id}", "--overlap", "--nodes=1",
                                         "--ntasks=1", f"--nodelist={node}", "sh", "-c", script])]


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read()
    except OSError:
        return b""
