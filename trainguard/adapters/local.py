"""The embedded default: ranks as local child process groups, spread over virtual nodes.

Each rank runs in its own session (process group) with its output going straight to its log
file, so a supervisor crash neither loses output nor blocks the rank. Exits are detected
through pidfds in a selector: the supervisor sleeps in the kernel and wakes the moment a rank
dies, with no polling interval. A guardian process kills every group the supervisor started
if the supervisor itself dies, even by SIGKILL.

``nodes`` virtual nodes named ``node-0`` ... hold ``slots_per_node`` ranks each; with more
slots than ranks the rest is spare capacity, so isolating a node and rescheduling away from it
is real: the ranks move, and ``TRAINGUARD_NODE`` tells them where they are.
"""

from __future__ import annotations

import json
import logging
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from dataclasses import replace
from typing import Mapping, Sequence

from trainguard.adapters import Exit, Launch
from trainguard.adapters.inotify import DirectoryWatch
from trainguard.errors import AdapterError
from trainguard.logtail import read_tail
from trainguard.model import Capacity, Instance, JobSpec
from trainguard.policy import Policy
from trainguard.sdk import CHANNEL_VAR
from trainguard.stacks import ThreadStack, parse_py_spy

log = logging.getLogger(__name__)

_PYTHON = re.compile(r"^python[0-9.]*$")
_HERE = Path(__file__).parent
_SDK = "sdk-channel"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def python_entry(command: Sequence[str]) -> tuple[str, list[str], bool] | None:
    """``(interpreter, argv, is_module)`` if ``command`` runs a Python script or module plainly."""
    if not command or not _PYTHON.match(os.path.basename(command[0])):
        return None
    rest = list(command[1:])
    while rest and rest[0] in ("-u", "-B"):
        rest.pop(0)
    if not rest:
        return None
    interpreter = shutil.which(command[0]) or command[0]
    if rest[0] == "-m" and len(rest) > 1:
        return interpreter, rest[1:], True
    if rest[0].startswith("-"):
        return None
    return interpreter, rest, False


class _Channel:
    """One rank's SDK channel file and how far it has been read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict]:
        try:
            if os.stat(self.path).st_size <= self.offset:
                return []
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                log.warning("ignoring a malformed SDK record in %s: %r", self.path, line[:200])
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


def _group_pids(pgid: int) -> list[int]:
    """Every process in a process group (the rank and what it started)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return sorted(pids)


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class _Process:
    """One rank's process group and the pidfd that announces its end."""

    def __init__(self, rank: int, popen: subprocess.Popen[bytes], log_path: str) -> None:
        self.rank = rank
        self.popen = popen
        self.log_path = log_path
        self.pidfd = os.pidfd_open(popen.pid)

    @property
    def pid(self) -> int:
        return self.popen.pid


class LocalAdapter:
    """Run ranks on this machine; see the module docstring."""

    name = "local"

    def __init__(
        self,
        *,
        spec: JobSpec,
        log_dir: str | Path,
        policy: Policy | None = None,
        base_env: Mapping[str, str] | None = None,
        guardian_grace: float = 5.0,
    ) -> None:
        policy = policy or Policy()
        job_id, nodes, slots_per_node = spec.job_id, spec.nodes, spec.slots
        warm_standby, preload = policy.warm_standby, policy.preload
        if nodes < 1 or slots_per_node < 1:
            raise AdapterError(self.name, "nodes and slots per node must be at least 1")
        self.job_id = job_id
        self.nodes = self._node_names(spec)
        self.slots_per_node = slots_per_node
        self.log_dir = Path(log_dir)
        # Standbys import modules before they know their rank: give them the job's own
        # settings (OMP_NUM_THREADS, PYTHONPATH) at least.
        self.base_env = {**(base_env if base_env is not None else os.environ), **spec.env}
        self.warm_standby = warm_standby
        self.preload = tuple(preload)
        self._procs: dict[int, _Process] = {}
        self._logs: dict[int, str] = {}
        self._selector = selectors.DefaultSelector()
        self._standbys: list[subprocess.Popen[bytes]] = []
        self._standby_key: tuple[str, ...] | None = None
        self._closed = False
        self.sdk_dir = self.log_dir.parent / "sdk"
        self.sdk_dir.mkdir(parents=True, exist_ok=True)
        self._channels: dict[int, _Channel] = {}
        self._sdk_pending = True
        try:
            self._watch: DirectoryWatch | None = DirectoryWatch(str(self.sdk_dir))
            self._selector.register(self._watch.fd, selectors.EVENT_READ, _SDK)
        except OSError as exc:
            log.warning("[%s] no inotify (%s): SDK records are read every loop tick", job_id, exc)
            self._watch = None
        self._guardian = subprocess.Popen(
            [sys.executable, "-S", str(_HERE / "guardian.py"), str(guardian_grace)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)
        self._world_size = spec.nproc

    # -- what a scheduler adapter built on this one overrides ------------------------------

    def _node_names(self, spec: JobSpec) -> tuple[str, ...]:
        """The nodes ranks may run on: here ``spec.nodes`` virtual ones."""
        return tuple(f"node-{i}" for i in range(spec.nodes))

    def _argv(self, launch: Launch, log_path: Path) -> list[str]:
        """The local command that runs one rank where its placement says."""
        return list(launch.command)

    def _dump_argv(self, tool: str, rank: int) -> list[tuple[int, list[str]]]:
        """``(pid, command)`` pairs that print py-spy dumps of a rank's processes."""
        return [(pid, [tool, "dump", "--nonblocking", "--pid", str(pid)])
                for pid in _group_pids(self._procs[rank].pid)]

    # -- placement --------------------------------------------------------------------------

    def capacity(self, isolated: frozenset[str]) -> Capacity:
        return Capacity(self.nodes, self.slots_per_node, self._world_size, frozenset(isolated))

    def place(self, ranks: Sequence[int], current: Mapping[int, str], isolated: frozenset[str]) -> dict[int, str]:
        moving = set(ranks)
        used = {node: 0 for node in self.nodes}
        placement: dict[int, str] = {}
        for rank, node in current.items():
            if rank not in moving:
                placement[rank] = node
                used[node] = used.get(node, 0) + 1
        for rank in sorted(moving):
            node = next((n for n in self.nodes if n not in isolated and used[n] < self.slots_per_node), None)
            if node is None:
                healthy = [n for n in self.nodes if n not in isolated]
                raise AdapterError(self.name, f"no free slot for rank {rank}: {len(healthy)} healthy node(s) "
                                   f"of {self.slots_per_node} slot(s), isolated: {sorted(isolated) or 'none'}")
            placement[rank] = node
            used[node] += 1
        return placement

    def rendezvous(self, placement: Mapping[int, str]) -> tuple[str, int]:
        return "127.0.0.1", free_port()

    def isolate(self, nodes: Sequence[str], reason: str) -> None:
        """Virtual nodes need no more than leaving them out of placement."""

    def requeue(self, reason: str) -> bool:
        return False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        started: dict[int, Instance] = {}
        for launch in launches:
            rank = launch.instance.rank
            if rank in self._procs:
                raise AdapterError(self.name, f"rank {rank} is still running")
            log_path = self.log_path(rank, launch.restart_round)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            channel = self.sdk_dir / f"rank-{rank}.round-{launch.restart_round}.jsonl"
            self._channels[rank] = _Channel(channel)
            launch = replace(launch, env={**launch.env, CHANNEL_VAR: str(channel)})
            popen = self._take_standby(launch, log_path) or self._spawn(launch, log_path)
            proc = _Process(rank, popen, str(log_path))
            self._procs[rank] = proc
            self._logs[rank] = str(log_path)
            self._selector.register(proc.pidfd, selectors.EVENT_READ, rank)
            self._guard(f"+{popen.pid}")
            started[rank] = replace(launch.instance, pid=popen.pid, log_path=str(log_path))
        if self.warm_standby and launches:
            self._refill_standbys(launches[0], len(self._procs))
        return started

    def _spawn(self, launch: Launch, log_path: Path) -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as out:
            try:
                return subprocess.Popen(self._argv(launch, log_path), env=dict(launch.env), cwd=launch.cwd,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
            except OSError as exc:
                raise AdapterError(self.name, f"cannot start {launch.command[0]!r}: {exc.strerror}") from None

    def _take_standby(self, launch: Launch, log_path: Path) -> subprocess.Popen[bytes] | None:
        entry = python_entry(launch.command) if self.warm_standby else None
        if entry is None or self._standby_key != (entry[0], *self.preload):
            return None
        while self._standbys:
            standby = self._standbys.pop(0)
            if standby.poll() is not None:
                continue
            message = {"argv": entry[1], "module": entry[2], "env": dict(launch.env),
                       "cwd": launch.cwd or os.getcwd(), "log": str(log_path)}
            try:
                assert standby.stdin is not None
                standby.stdin.write(json.dumps(message).encode() + b"\n")
                standby.stdin.close()
            except OSError:
                continue
            return standby
        return None

    def _refill_standbys(self, template: Launch, count: int) -> None:
        entry = python_entry(template.command)
        if entry is None:
            return
        self._standby_key = (entry[0], *self.preload)
        standby_log = self.log_dir / "standby.log"
        standby_log.parent.mkdir(parents=True, exist_ok=True)
        with open(standby_log, "ab") as out:
            while len([s for s in self._standbys if s.poll() is None]) < count:
                standby = subprocess.Popen(
                    [entry[0], str(_HERE / "standby.py"), *self.preload], env=self.base_env,
                    cwd=template.cwd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True)
                self._guard(f"+{standby.pid}")
                self._standbys.append(standby)

    # Whether every SDK write happens on this host, so that inotify sees it. Ranks on other
    # hosts write over a network filesystem, which inotify does not report.
    writes_are_local = True

    def sdk_records(self) -> list[tuple[int, dict]]:
        if self._watch is not None and self.writes_are_local and not self._sdk_pending:
            return []
        self._sdk_pending = False
        return [(rank, record) for rank, channel in self._channels.items() for record in channel.read()]

    def stacks(self, ranks: Sequence[int], timeout: float) -> list[ThreadStack]:
        tool = _py_spy()
        if tool is None:
            log.warning("[%s] py-spy is not installed: no stack snapshots", self.job_id)
            return []
        targets = [(rank, pid, argv) for rank in ranks if rank in self._procs for pid, argv in self._dump_argv(tool, rank)]
        # All at once: a snapshot of 8 ranks costs about what one does.
        running = [(rank, pid, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
                   for rank, pid, argv in targets]
        deadline = time.monotonic() + timeout
        threads: list[ThreadStack] = []
        for rank, pid, proc in running:
            try:
                out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                log.warning("[%s] py-spy timed out on rank %s (pid %s)", self.job_id, rank, pid)
                continue
            threads.extend(parse_py_spy(rank, pid, out))
        return threads

    def wait(self, timeout: float) -> list[Exit]:
        if not self._procs:
            time.sleep(max(0.0, timeout))
            return []
        ready = self._selector.select(timeout=max(0.0, timeout))
        exits = []
        for key, _ in ready:
            if key.data == _SDK:
                assert self._watch is not None
                self._watch.drain()
                self._sdk_pending = True
                continue
            exit_ = self._reap(key.data)
            if exit_ is not None:
                exits.append(exit_)
        return exits

    def _reap(self, rank: int) -> Exit | None:
        proc = self._procs.get(rank)
        if proc is None:
            return None
        code = proc.popen.poll()
        if code is None:
            return None
        at = time.time()
        self._selector.unregister(proc.pidfd)
        os.close(proc.pidfd)
        del self._procs[rank]
        # Descendants left in the group (data-loader workers, shells) must not outlive the rank.
        self._signal_group(proc.pid, signal.SIGKILL)
        self._guard(f"-{proc.pid}")
        return Exit(rank, proc.pid, code, at)

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        targets = [rank for rank in ranks if rank in self._procs]
        for rank in targets:
            self._signal_group(self._procs[rank].pid, signal.SIGTERM)
        exits = self._collect(targets, grace)
        for rank in targets:
            if rank in self._procs:
                self._signal_group(self._procs[rank].pid, signal.SIGKILL)
        exits += self._collect(targets, 10.0)
        return exits

    def _collect(self, ranks: Sequence[int], timeout: float) -> list[Exit]:
        deadline = time.monotonic() + timeout
        exits: list[Exit] = []
        pending = {rank for rank in ranks if rank in self._procs}
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for exit_ in self.wait(left):
                exits.append(exit_)
                pending.discard(exit_.rank)
            pending &= set(self._procs)
        return exits

    def _signal_group(self, pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _guard(self, line: str) -> None:
        try:
            assert self._guardian.stdin is not None
            self._guardian.stdin.write(line.encode() + b"\n")
            self._guardian.stdin.flush()
        except (OSError, ValueError):
            log.warning("[%s] the guardian process is gone; a supervisor crash could leave ranks behind",
                        self.job_id)

    def running(self) -> frozenset[int]:
        return frozenset(self._procs)

    def last_output(self, rank: int) -> float | None:
        path = self._logs.get(rank)
        try:
            return os.stat(path).st_mtime if path else None
        except OSError:
            return None

    def log_path(self, rank: int, restart_round: int) -> Path:
        return self.log_dir / f"round-{restart_round}" / f"rank-{rank}.log"

    def log_tail(self, rank: int, nbytes: int) -> str:
        path = self._logs.get(rank)
        return read_tail(path, nbytes) if path else ""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop(list(self._procs), grace=2.0)
        for standby in self._standbys:
            self._signal_group(standby.pid, signal.SIGKILL)
            standby.wait()
        self._standbys.clear()
        self._selector.close()
        if self._watch is not None:
            self._watch.close()
        if self._guardian.stdin is not None:
            self._guardian.stdin.close()
        self._guardian.wait()

