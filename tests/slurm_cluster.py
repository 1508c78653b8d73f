"""A real Slurm cluster on localhost for tests and benchmarks: munged, slurmctld and one
slurmd per emulated node, every file under one temporary directory, non-default ports.

Debian's slurm-wlm and munge packages (``apt-get install slurm-wlm munge``) provide the
daemons; they run as root here. Everything started is tracked by pid and torn down by
:meth:`LocalSlurmCluster.stop`, which the test fixture calls even when tests fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def available() -> str | None:
    """Why no cluster can start here, or None when one can."""
    missing = [tool for tool in ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sbatch")
               if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]
    if missing:
        return f"Slurm or munge is not installed (missing {', '.join(missing)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "the local Slurm cluster runs its daemons as root"
    return None


def require_slurm() -> None:
    """Skip the calling test where no cluster can start; under CI that is a failure instead."""
    reason = available()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Slurm tests: {reason}")
        pytest.skip(reason)


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class LocalSlurmCluster:
    """``nodes`` emulated nodes ``tg1..tgN`` of ``cpus`` CPUs in partition ``debug``."""

    def __init__(self, nodes: int = 3, cpus: int = 2) -> None:
        self.nodes = [f"tg{i + 1}" for i in range(nodes)]
        self.cpus = cpus
        self.dir = Path(tempfile.mkdtemp(prefix="tg-slurm-"))
        self.conf = self.dir / "slurm.conf"
        self.host = socket.gethostname()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.ctld_port = _free_port()
        self.node_ports = {node: _free_port() for node in self.nodes}
        self._paused = False

    def _write_config(self) -> None:
        d = self.dir
        memory = 1000
        lines = [
            "ClusterName=tg",
            f"SlurmctldHost={self.host}",
            f"SlurmctldPort={self.ctld_port}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={d}/munge/munge.socket.2,cred_expire=10",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool-%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/slurmctld.log",
            f"SlurmdLogFile={d}/slurmd-%n.log",
            "ReturnToService=2",
            "SchedulerParameters=bf_interval=1,sched_interval=2",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "JobCompType=jobcomp/none",
            "MinJobAge=300",
            "KillWait=3",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
        ]
        for node in self.nodes:
            lines.append(f"NodeName={node} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={self.node_ports[node]} "
                         f"CPUs={self.cpus} RealMemory={memory} State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP "
                     "OverSubscribe=YES")
        self.conf.write_text("\n".join(lines) + "\n")
        (d / "state").mkdir(exist_ok=True)
        for node in self.nodes:
            (d / f"spool-{node}").mkdir(exist_ok=True)

    def _start_munge(self) -> None:
        munge = self.dir / "munge"
        munge.mkdir(mode=0o711, exist_ok=True)
        os.chmod(munge, 0o711)  # the socket directory must be reachable by clients
        key = munge / "munge.key"
        subprocess.run([_tool("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
        os.chmod(key, 0o600)
        self.procs["munged"] = subprocess.Popen(
            [_tool("munged"), "--foreground", "--force", f"--socket={munge}/munge.socket.2", f"--key-file={key}",
             f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={munge}/seed"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait_for(lambda: (munge / "munge.socket.2").exists(), "munged")

    def start_slurmctld(self) -> None:
        self.procs["slurmctld"] = subprocess.Popen(
            [_tool("slurmctld"), "-D", "-i", "-f", str(self.conf)], env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait_for(lambda: self.run("scontrol", "ping").stdout.count("UP") > 0, "slurmctld")

    def stop_slurmctld(self) -> None:
        self._stop("slurmctld")

    def pause_slurmctld(self, seconds: float) -> threading.Thread:
        """Stop slurmctld (SIGSTOP: it holds its port but answers nothing, as a controller in a
        long scheduling pass or a failover does) and let it go on after ``seconds``, from a
        thread that is returned already started."""
        pid = self.procs["slurmctld"].pid
        os.kill(pid, signal.SIGSTOP)
        self._paused = True
        resume = threading.Timer(seconds, self.resume_slurmctld)
        resume.daemon = True
        resume.start()
        return resume

    def resume_slurmctld(self) -> None:
        proc = self.procs.get("slurmctld")
        if proc is not None and self._paused:
            os.kill(proc.pid, signal.SIGCONT)
        self._paused = False

    def start_slurmd(self, node: str) -> None:
        self.procs[f"slurmd-{node}"] = subprocess.Popen(
            [_tool("slurmd"), "-D", "-N", node, "-f", str(self.conf)], env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def stop_slurmd(self, node: str) -> None:
        self._stop(f"slurmd-{node}")

    def start(self) -> "LocalSlurmCluster":
        self._write_config()
        self._start_munge()
        self.start_slurmctld()
        for node in self.nodes:
            self.start_slurmd(node)
        self._wait_for(self._all_idle, "slurmd nodes idle", timeout=30)
        return self

    def _all_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        states = dict(line.split() for line in out if line.strip())
        return all(states.get(node, "").startswith(("idle", "mix", "alloc")) for node in self.nodes)

    def run(self, *cmd: str, check: bool = False, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def _wait_for(self, ready, what: str, timeout: float = 20) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{what} did not come up within {timeout} s (logs in {self.dir})")

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def stop(self) -> None:
        """Cancel every job and stop every daemon this cluster started, by pid."""
        self.resume_slurmctld()
        if "slurmctld" in self.procs:
            try:
                self.run("scancel", "--full", "-u", "root", timeout=10)
            except subprocess.SubprocessError:
                pass
        # Steps that lost their controller for a while can linger for a minute (or, once the
        # controller is gone, for ever) and hold their slurmd: they are this cluster's, end them.
        self._kill_step_daemons()
        for name in [*[n for n in self.procs if n.startswith("slurmd-")], "slurmctld", "munged"]:
            self._stop(name)
        self._kill_step_daemons()

    def _kill_step_daemons(self) -> None:
        """SIGKILL the slurmstepd processes of this cluster (found by the SLURM_CONF they run with)."""
        mine = f"SLURM_CONF={self.conf}".encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if not handle.read().startswith(b"slurmstepd"):
                        continue
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if mine not in handle.read().split(b"\0"):
                        continue
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                continue
