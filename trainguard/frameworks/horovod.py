"""Horovod elastic jobs: trainguard's healthy hosts feed ``horovodrun --host-discovery-script``.

``trainguard hosts JOB_ID`` prints the hosts the job may use now, one ``host:slots`` line each,
the format Horovod's discovery script contract asks for: the job's nodes less those isolated
(by this job or, until their window ends, by any job of the store; ``trainguard nodes release``
brings one back). Horovod runs the script every few seconds and adds or removes workers as
the list changes, so isolation and recovery reach Horovod's own elastic mode without a restart.

With ``--framework horovod`` trainguard starts one launcher, the user's ``horovodrun`` command,
and writes the discovery script for it (``TRAINGUARD_HOST_DISCOVERY``): when the command names
no hosts, ``--host-discovery-script`` is put in (and ``-np`` with the current world size when
absent). On the local adapter every virtual node is this machine, so ``trainguard hosts`` merges
them into one ``localhost:N`` line (``--virtual`` shows them one by one).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from trainguard.frameworks.mpi import Mpi
from trainguard.model import Instance, JobSpec

HOST_OPTIONS = ("-H", "--hosts", "--hostfile", "--host-discovery-script")
NP_OPTIONS = ("-np", "--num-proc")


def hosts_lines(nodes: Sequence[str], slots: int, isolated: Iterable[str], *, merge_local: bool) -> list[str]:
    """``host:slots`` for every node not isolated (one ``localhost`` line when ``merge_local``)."""
    out = frozenset(isolated)
    healthy = [node for node in nodes if node not in out]
    if merge_local:
        return [f"localhost:{slots * len(healthy)}"] if healthy else []
    return [f"{node}:{slots}" for node in healthy]


def discovery_script(job_id: str, state_dir: Path | None) -> str:
    """A shell script that prints the job's healthy hosts (a PostgreSQL history is found
    through ``$TRAINGUARD_STATE_URL``)."""
    argv = [sys.executable, "-m", "trainguard", "hosts", job_id]
    if state_dir is not None:
        argv += ["--state-dir", str(state_dir)]
    return "#!/bin/sh\nexec " + " ".join(shlex.quote(arg) for arg in argv) + "\n"


def wrap(command: Sequence[str], script: str, np: int) -> tuple[str, ...]:
    argv = list(command)
    if not argv or Path(argv[0]).name != "horovodrun":
        return tuple(argv)
    if any(arg in HOST_OPTIONS or arg.split("=", 1)[0] in HOST_OPTIONS for arg in argv):
        return tuple(argv)
    extra = ["--host-discovery-script", script]
    if not any(arg in NP_OPTIONS or arg.split("=", 1)[0] in NP_OPTIONS for arg in argv):
        extra += ["-np", str(np)]
    return (argv[0], *extra, *argv[1:])


class Horovod(Mpi):
    name = "horovod"

    def begin(self, spec: JobSpec, placement: Mapping[int, str], master: tuple[str, int], round_no: int) -> None:
        super().begin(spec, placement, master, round_no)
        self.script = self.dir / "discover_hosts.sh"
        self.script.write_text(discovery_script(self.spec.job_id, self.state_dir))
        self.script.chmod(0o755)

    def env(self, instance: Instance, env: dict[str, str]) -> dict[str, str]:
        env = super().env(instance, env)
        env["TRAINGUARD_HOST_DISCOVERY"] = str(self.script)
        return env

    def command(self, rank: int) -> tuple[str, ...]:
        return wrap(self.spec.command, str(self.script), self.current.nproc)
