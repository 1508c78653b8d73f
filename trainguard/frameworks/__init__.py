"""How a job's ranks are launched and what each one is told, by framework (``--framework``).

The engine places ranks the same way for every framework; a :class:`Framework` decides which
placed ranks trainguard starts itself, the command and environment each gets, which ranks'
success ends the job, and which plugins (role policies, log patterns) the job adds.

==============  ===============================  =============================  =================
framework       trainguard starts                each started instance gets     the job succeeds
==============  ===============================  =============================  =================
``pytorch``     every rank                       torchrun's variables           every rank exits 0
``tensorflow``  every task of ``--roles``        ``TF_CONFIG`` too              the chief exits 0
                                                                                (no chief: every
                                                                                worker)
``mpi``         one launcher: the user's         a hostfile of the placement    the launcher
                ``mpirun`` over the healthy      (``TRAINGUARD_HOSTFILE``)      exits 0
                nodes
``horovod``     one launcher: the user's         a host discovery script        the launcher
                ``horovodrun``                   (``trainguard hosts``)         exits 0
==============  ===============================  =============================  =================

Hosts: on the local adapter (rendezvous on ``localhost``) every virtual node is this machine,
so addresses are ``localhost`` and an MPI hostfile merges the virtual nodes' slots into one
``localhost`` line (naming them in a comment); elsewhere a node's name is its host name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from trainguard.errors import PolicyError
from trainguard.model import Instance, JobSpec
from trainguard.policy import Policy

FRAMEWORKS = ("pytorch", "tensorflow", "mpi", "horovod")
LOCAL_HOSTS = ("localhost", "127.0.0.1")


def parse_roles(text: str) -> tuple[tuple[str, int], ...]:
    """``chief=1,worker=4,ps=2`` → ``(("chief", 1), ("worker", 4), ("ps", 2))``, in that order."""
    roles: list[tuple[str, int]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, count = (part.strip() for part in item.partition("="))
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise PolicyError("--roles", f"{item!r} is not ROLE=COUNT (COUNT at least 1)")
        if any(name == seen for seen, _ in roles):
            raise PolicyError("--roles", f"role {name!r} is given twice")
        roles.append((name, int(count)))
    if not roles:
        raise PolicyError("--roles", "no role given, e.g. --roles chief=1,worker=2,ps=1")
    return tuple(roles)


def role_of(spec: JobSpec, rank: int) -> tuple[str, int]:
    """A rank's role and its index within the role: roles take ranks in the order given."""
    first = 0
    for name, count in spec.roles:
        if rank < first + count:
            return name, rank - first
        first += count
    return spec.role, rank


def role_ranks(spec: JobSpec, role: str) -> frozenset[int]:
    first = 0
    for name, count in spec.roles:
        if name == role:
            return frozenset(range(first, first + count))
        first += count
    return frozenset()


def is_local(master: tuple[str, int]) -> bool:
    """Whether every node is this machine (the local adapter's virtual nodes)."""
    return master[0] in LOCAL_HOSTS


class Framework:
    """PyTorch (and the base of the others): every rank started as it is, torchrun's variables."""

    name = "pytorch"

    def __init__(self, spec: JobSpec, policy: Policy, state_dir: Path | None = None) -> None:
        self.spec = spec
        self.policy = policy
        self.state_dir = state_dir
        self.current = spec  # the spec at the current world size (an elastic job's changes)

    def required(self) -> frozenset[int] | None:
        """The ranks whose success ends the job (None: every rank)."""
        return None

    def plugins(self) -> Mapping[str, object]:
        """Plugins this job adds to the host (role policies, log patterns), by name."""
        return {}

    def begin(self, spec: JobSpec, placement: Mapping[int, str], master: tuple[str, int], round_no: int) -> None:
        """A start of ranks with this ``placement`` (every rank of the job) is about to be built;
        ``spec.nproc`` is the job's current world size."""
        self.current = spec

    def launched(self, rank: int) -> bool:
        """Whether trainguard starts ``rank`` itself (a launcher starts the others)."""
        return True

    def env(self, instance: Instance, env: dict[str, str]) -> dict[str, str]:
        """The environment ``instance`` starts with, from the engine's."""
        return env

    def command(self, rank: int) -> tuple[str, ...]:
        return self.spec.command


def for_job(spec: JobSpec, policy: Policy, state_dir: Path | None = None) -> Framework:
    """The :class:`Framework` that runs ``spec``; raises :class:`PolicyError` for a bad one."""
    if spec.framework == "tensorflow":
        from trainguard.frameworks.tensorflow import TensorFlow

        return TensorFlow(spec, policy, state_dir)
    if spec.framework == "mpi":
        from trainguard.frameworks.mpi import Mpi

        return Mpi(spec, policy, state_dir)
    if spec.framework == "horovod":
        from trainguard.frameworks.horovod import Horovod

        return Horovod(spec, policy, state_dir)
    if spec.framework != "pytorch":
        raise PolicyError("--framework", f"{spec.framework!r} is not one of {', '.join(FRAMEWORKS)}")
    return Framework(spec, policy, state_dir)
