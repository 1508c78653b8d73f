"""MPI jobs: trainguard places the ranks, writes the hostfile, and runs the user's ``mpirun``.

The engine places all ``--nproc`` ranks as for any job (never on an isolated node) and starts
one process, rank 0's: the user's command with ``--hostfile`` (the placement, node by node) and
``-np`` (the current world size) put in after ``mpirun``; a command that is not an ``mpirun`` is
run under one. An MPI job dies as a whole, so every fault restarts the launcher, and with it
the job, on the nodes healthy at that start. As root, OpenMPI needs ``OMPI_ALLOW_RUN_AS_ROOT=1``
and ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``; they are set when trainguard runs as root and the user
set neither.

On the local adapter the virtual nodes are all this machine: OpenMPI refuses a hostfile that
names ``localhost`` twice, so their slots make one ``localhost slots=N`` line and a comment
names the virtual nodes and their ranks. ``TRAINGUARD_HOSTS`` gives the placement as
``node:ranks,...`` either way. The ``TRAINGUARD_*`` counters are exported to every rank (``-x``).

The launcher's log holds every rank's output, so faults are classified from it; the patterns
below read mpirun's own summaries (a rank killed by a signal, a lost ORTE/PMIx daemon). Output is
tagged with its rank (``--tag-output``: ``[1,3]<stderr>:...``), so a node fault that a rank
printed is traced through the placement to that rank's node, and that node is isolated rather
than the launcher's.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Generator, Mapping, Sequence

from trainguard.errors import PolicyError
from trainguard.frameworks import Framework, is_local
from trainguard.hooks import hookimpl
from trainguard.model import Category, ExecutionMode, Instance, JobSpec, LogPattern, Verdict
from trainguard.policy import Policy

LAUNCHERS = ("mpirun", "mpiexec", "orterun")
# Options that name hosts: trainguard's placement does that.
HOST_OPTIONS = ("--hostfile", "-hostfile", "--machinefile", "-machinefile", "-H", "--host", "-host",
                "--default-hostfile")
NP_OPTIONS = ("-np", "--np", "-n", "-c")
EXPORTED = ("TRAINGUARD_JOB_ID", "TRAINGUARD_RESTART_ROUND", "TRAINGUARD_SCHEDULE_COUNT",
            "TRAINGUARD_PROC_START_COUNT")
# What a launcher's per-rank variables would wrongly tell the ranks mpirun starts.
PER_RANK = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE")

PATTERNS = (
    LogPattern(
        id="mpi-rank-signal",
        regex=r"mpirun noticed that process rank \d+ with PID \d+ on node \S+ exited on signal \d+",
        category=Category.SEGFAULT_OR_SIGNAL, fault_code="TG-MPI-RANK-SIGNAL", retryable=True, priority=74,
        confidence=0.75, source="trainguard.frameworks.mpi"),
    LogPattern(
        id="mpi-daemon-lost",
        regex=(r"ORTE has lost communication with a remote daemon|An ORTE daemon has unexpectedly failed"
               r"|ORTE was unable to reliably start one or more daemons|ORTE does not know how to route"
               r"|PMIX? ERROR: (?:UNREACHABLE|LOST-CONNECTION)|PMIx_Init failed|orte_ess_init failed"),
        category=Category.NODE_OR_INFRA, fault_code="TG-MPI-DAEMON", retryable=True, priority=80,
        confidence=0.8, source="trainguard.frameworks.mpi"),
    LogPattern(
        id="mpi-abort",
        regex=r"MPI_ABORT was invoked on rank \d+ in communicator \S+\s+with errorcode \d+",
        category=Category.USER_CODE, fault_code="TG-MPI-ABORT", retryable=False, user_error=True, priority=30,
        confidence=0.6, source="trainguard.frameworks.mpi"),
)


# What ``mpirun --tag-output`` puts before each line: ``[JOB,RANK]<stdout>:``.
TAG = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err|diag)>:", re.MULTILINE)


def rank_of_line(log_tail: str, evidence: str) -> int | None:
    """The MPI rank that printed the tagged line holding ``evidence``."""
    if not evidence:
        return None
    for line in log_tail.splitlines():
        if evidence in line and (match := TAG.match(line)):
            return int(match.group(1))
    return None


class MpiPatterns:
    """mpirun's own summaries, and node faults traced to the rank's node (MPI and Horovod jobs)."""

    def __init__(self, framework: "Mpi") -> None:
        self.framework = framework

    @hookimpl
    def trainguard_log_patterns(self) -> Sequence[LogPattern]:
        return PATTERNS

    @hookimpl(wrapper=True)
    def trainguard_classify_fault(self, log_tail: str) -> Generator[None, list[Verdict], list[Verdict]]:
        verdicts = yield
        return [self._locate(verdict, log_tail) for verdict in verdicts or []]

    def _locate(self, verdict: Verdict, log_tail: str) -> Verdict:
        if not verdict.node_fault or verdict.node is not None:
            return verdict
        rank = rank_of_line(log_tail, verdict.evidence.strip())
        node = self.framework.placement.get(rank) if rank is not None else None
        return replace(verdict, node=node) if node is not None else verdict


def node_slots(placement: Mapping[int, str]) -> list[tuple[str, int]]:
    """``[(node, ranks)]`` in the order of each node's lowest rank."""
    counts: dict[str, int] = {}
    for rank in sorted(placement):
        counts[placement[rank]] = counts.get(placement[rank], 0) + 1
    return list(counts.items())


def hostfile(placement: Mapping[int, str], *, local: bool, job_id: str = "", round_no: int = 0) -> str:
    """The hostfile of ``placement``: ``host slots=N`` per node (one ``localhost`` line when
    the nodes are virtual)."""
    slots = node_slots(placement)
    head = f"# trainguard job {job_id} round {round_no}: " + ", ".join(f"{n}={c}" for n, c in slots)
    if local:
        return f"{head} (virtual nodes of this host)\nlocalhost slots={sum(c for _, c in slots)}\n"
    return head + "\n" + "".join(f"{node} slots={count}\n" for node, count in slots)


def wrap(command: Sequence[str], hostfile_path: str, np: int) -> tuple[str, ...]:
    """The user's mpirun command over ``hostfile_path`` with ``np`` ranks (see the module)."""
    argv = list(command)
    if not argv or os.path.basename(argv[0]) not in LAUNCHERS:
        argv = ["mpirun", *argv]
    for option in HOST_OPTIONS:
        if option in argv or any(arg.startswith(option + "=") for arg in argv):
            raise PolicyError("--framework mpi", f"leave {option} out of the mpirun command: trainguard writes "
                              "the hostfile from its placement")
    out = [argv[0], "--hostfile", hostfile_path, "-np", str(np)]
    for name in EXPORTED:
        out += ["-x", name]
    if "--tag-output" not in argv and "-tag-output" not in argv:
        out.append("--tag-output")
    rest = argv[1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in NP_OPTIONS:
            i += 2  # trainguard's -np says the current world size
            continue
        if any(arg.startswith(option + "=") for option in NP_OPTIONS if option.startswith("--")):
            i += 1
            continue
        out.append(arg)
        i += 1
    return tuple(out)


class Mpi(Framework):
    name = "mpi"

    def __init__(self, spec: JobSpec, policy: Policy, state_dir: Path | None = None) -> None:
        super().__init__(spec, policy, state_dir)
        if policy.job_execution_mode is ExecutionMode.ASYNC:
            raise PolicyError("--job-execution-mode", f"an {self.name} job dies as a whole: it runs Sync")
        self.placement: dict[int, str] = {}
        # Beside the job's logs; the launcher's node is the only one that reads them.
        self.dir = (state_dir / "jobs" / spec.job_id / self.name if state_dir is not None
                    else Path(tempfile.gettempdir()) / f"trainguard-{spec.job_id}")

    def required(self) -> frozenset[int] | None:
        return frozenset({0})

    def plugins(self) -> Mapping[str, object]:
        return {f"mpi-patterns:{self.spec.job_id}": MpiPatterns(self)}

    def begin(self, spec: JobSpec, placement: Mapping[int, str], master: tuple[str, int], round_no: int) -> None:
        super().begin(spec, placement, master, round_no)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hostfile = self.dir / f"round-{round_no}.hostfile"
        self.hostfile.write_text(hostfile(placement, local=is_local(master), job_id=spec.job_id, round_no=round_no))
        self.hosts = ",".join(f"{node}:{count}" for node, count in node_slots(placement))
        self.placement = dict(placement)

    def launched(self, rank: int) -> bool:
        return rank == 0

    def env(self, instance: Instance, env: dict[str, str]) -> dict[str, str]:
        for name in PER_RANK:
            env.pop(name, None)
        env.update({"TRAINGUARD_HOSTFILE": str(self.hostfile), "TRAINGUARD_HOSTS": self.hosts})
        if os.geteuid() == 0 and "OMPI_ALLOW_RUN_AS_ROOT" not in env:
            env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
        return env

    def command(self, rank: int) -> tuple[str, ...]:
        return wrap(self.spec.command, str(self.hostfile), self.current.nproc)
