"""The embedded default: ranks as local child process groups, spread over virtual nodes.

Each rank runs in its own session (process group) with its output going straight to its log
file, so a supervisor crash neither loses output nor blocks the rank. Exits are detected
through pidfds in a selector: the supervisor sleeps in the kernel and wakes the moment a rank
dies, with no polling interval. No rank outlives the supervisor, whatever ends it: see
:mod:`trainguard.adapters.processes` (process groups, process tags, the guardian).

``nodes`` virtual nodes named ``node-0`` ... hold ``slots_per_node`` ranks each; with more
slots than ranks the rest is spare capacity, so isolating a node and rescheduling away from it
is real: the ranks move, and ``TRAINGUARD_NODE`` tells them where they are.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from trainguard.adapters import Exit, Launch
from trainguard.adapters.inotify import DirectoryWatch
from trainguard.adapters.processes import TAG_VAR, Guardian, group_pids, new_token, signal_group, sweep, tag
from trainguard.adapters.sdk_channel import Channel
from trainguard.adapters.standby_pool import StandbyPool
from trainguard.errors import AdapterError
from trainguard.logtail import read_tail
from trainguard.model import Capacity, Instance, JobSpec
from trainguard.policy import Policy
from trainguard.sdk import CHANNEL_VAR
from trainguard.stacks import ThreadStack, parse_py_spy

log = logging.getLogger(__name__)

_SDK = "sdk-channel"
ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"
# How much of torchrun's per-rank error file joins the log tail the classifiers read.
_ERROR_FILE_BYTES = 16384


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def error_file_summary(path: str | Path) -> str:
    """The exception a rank's ``@record``-decorated entry point wrote (torchrun's error file)."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(_ERROR_FILE_BYTES))
        message = data["message"]
        if isinstance(message, dict):
            extra = message.get("extraInfo") or {}
            return f"{message.get('message', '')}\n{extra.get('py_callstack', '')}".strip()
        return str(message)
    except (OSError, ValueError, KeyError, TypeError):
        return ""


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
    last_wait: tuple[str, float] | None = None  # local processes never wait for a scheduler

    def __init__(self, *, spec: JobSpec, log_dir: str | Path, policy: Policy | None = None,
                 base_env: Mapping[str, str] | None = None, guardian_grace: float | None = None) -> None:
        policy = policy or Policy()
        if spec.nodes < 1 or spec.slots < 1:
            raise AdapterError(self.name, "nodes and slots per node must be at least 1")
        self.job_id = spec.job_id
        self.pause: Callable[[float], None] = time.sleep
        self.nodes = self._node_names(spec)
        self.slots_per_node = spec.slots
        self.log_dir = Path(log_dir).resolve()
        self.grace = policy.stop_grace_period
        self.token = new_token()
        self._procs: dict[int, _Process] = {}
        self._logs: dict[int, str] = {}
        self._selector = selectors.DefaultSelector()
        self._closed = False
        self.sdk_dir = self.log_dir.parent / "sdk"
        self.sdk_dir.mkdir(parents=True, exist_ok=True)
        self._channels: dict[int, Channel] = {}
        self._sdk_pending = True
        try:
            self._watch: DirectoryWatch | None = DirectoryWatch(str(self.sdk_dir))
            self._selector.register(self._watch.fd, selectors.EVENT_READ, _SDK)
        except OSError as exc:
            log.warning("[%s] no inotify (%s): SDK records are read every loop tick", spec.job_id, exc)
            self._watch = None
        self._guardian = Guardian(self.token, self.grace if guardian_grace is None else guardian_grace, spec.job_id)
        mode = str(policy.warm_standby).lower()  # a subclass may pass False
        self._standbys = None if mode == "false" else StandbyPool(
            job_id=spec.job_id, mode=mode, preload=policy.preload, log_dir=self.log_dir,
            register=self._guardian.watch, unregister=self._guardian.forget,
            kill=lambda pid: signal_group(pid, signal.SIGKILL), per_start_env=self._per_start_env,
            spare_tag=(TAG_VAR, tag(self.token, -1)))
        self._world_size = spec.nproc
        self._last_started: frozenset[int] = frozenset()

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
                for pid in group_pids(self._procs[rank].pid)]

    # Whether every SDK write happens on this host, so that inotify sees it. Ranks on other
    # hosts write over a network filesystem, which inotify does not report.
    writes_are_local = True

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
        # The spares were prepared with the port reserved for this start.
        return "localhost", self._standbys.rendezvous_port() if self._standbys is not None else free_port()

    def isolate(self, nodes: Sequence[str], reason: str) -> None:
        """Virtual nodes need no more than leaving them out of placement."""

    def requeue(self, reason: str) -> bool:
        return False

    def adopt(self) -> dict[int, Instance]:
        """Nothing to adopt: a supervisor's ranks never outlive it here."""
        return {}

    # -- lifecycle --------------------------------------------------------------------------

    def _per_start_env(self, rank: int, restart_round: int) -> dict[str, str]:
        """The variables this adapter sets for one start of a rank: its SDK channel, error file, tag."""
        log_path = self.log_path(rank, restart_round)
        return {CHANNEL_VAR: str(self.sdk_dir / f"rank-{rank}.round-{restart_round}.jsonl"),
                ERROR_FILE_VAR: str(log_path.with_suffix(".error.json")), TAG_VAR: tag(self.token, rank)}

    def start_notes(self) -> tuple[str, ...]:
        """Which ranks the last :meth:`start` ran in warm spares and which started cold, then what
        the spares have to say since (each thing once): modules no longer preloaded, a rank
        that started cold and why, the fall-back to cold starts."""
        if self._standbys is None:
            return ()
        warm = sorted(self._standbys.warm)
        cold = sorted(self._last_started - self._standbys.warm)
        said = f"warm start: rank(s) {warm} ran in spares" + (f"; cold: {cold}" if cold else "") if warm \
            else f"cold start: rank(s) {cold}"
        return (said, *self._standbys.notes())

    def start(self, launches: Sequence[Launch]) -> dict[int, Instance]:
        started: dict[int, Instance] = {}
        warm: set[int] = set()
        launches_run: list[Launch] = []
        for launch in launches:
            rank = launch.instance.rank
            if rank in self._procs:
                raise AdapterError(self.name, f"rank {rank} is still running")
            log_path = self.log_path(rank, launch.restart_round)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            per_start = self._per_start_env(rank, launch.restart_round)
            self._channels[rank] = Channel(Path(per_start[CHANNEL_VAR]))
            Path(per_start[ERROR_FILE_VAR]).unlink(missing_ok=True)
            launch = replace(launch, env={**launch.env, **per_start})
            launches_run.append(launch)
            popen = self._standbys.take(launch, log_path) if self._standbys is not None else None
            if popen is not None:
                warm.add(rank)
            else:
                popen = self._spawn(self._standbys.cold(launch) if self._standbys is not None else launch, log_path)
            proc = _Process(rank, popen, str(log_path))
            self._procs[rank] = proc
            self._logs[rank] = str(log_path)
            self._selector.register(proc.pidfd, selectors.EVENT_READ, rank)
            self._guardian.watch(popen.pid)
            started[rank] = replace(launch.instance, pid=popen.pid, log_path=str(log_path))
        self._last_started = frozenset(started)
        if self._standbys is not None:
            self._standbys.started(launches_run, {rank: inst.pid for rank, inst in started.items()
                                                  if inst.pid is not None}, frozenset(warm))
        return started

    def _spawn(self, launch: Launch, log_path: Path) -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as out:
            try:
                return subprocess.Popen(self._argv(launch, log_path), env=dict(launch.env), cwd=launch.cwd,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, close_fds=True)
            except OSError as exc:
                raise AdapterError(self.name, f"cannot start {launch.command[0]!r}: {exc.strerror}") from None

    def sdk_records(self) -> list[tuple[int, dict]]:
        if self._watch is not None and self.writes_are_local and not self._sdk_pending:
            return []
        self._sdk_pending = False
        records = [(rank, record) for rank, channel in self._channels.items() for record in channel.read()]
        if self._standbys is not None:
            for rank, record in records:
                if record.get("type") == "step" and isinstance(record.get("t"), (int, float)):
                    self._standbys.saw_step(rank, float(record["t"]))
        return records

    def stacks(self, ranks: Sequence[int], timeout: float) -> list[ThreadStack]:
        tool = py_spy()
        if tool is None:
            raise AdapterError(self.name, "py-spy is not installed (pip install py-spy)")
        targets = [(rank, pid, argv) for rank in ranks if rank in self._procs
                   for pid, argv in self._dump_argv(tool, rank)]
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
        if self._standbys is not None:
            self._standbys.tick()
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
        # Descendants must not outlive the rank: those left in its group (data-loader workers,
        # shells), and those that left the group but carry its tag (setsid, double forks).
        signal_group(proc.pid, signal.SIGKILL)
        sweep(tag(self.token, rank), grace=0.0)
        self._guardian.forget(proc.pid)
        if self._standbys is not None:
            self._standbys.ended(rank)
        return Exit(rank, proc.pid, code, at)

    def stop(self, ranks: Sequence[int], grace: float) -> list[Exit]:
        targets = [rank for rank in ranks if rank in self._procs]
        for rank in targets:
            signal_group(self._procs[rank].pid, signal.SIGTERM)
        exits = self._collect(targets, grace)
        for rank in targets:
            if rank in self._procs:
                signal_group(self._procs[rank].pid, signal.SIGKILL)
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
        """The log's tail, then the exception from torchrun's error file when the rank wrote one."""
        path = self._logs.get(rank)
        if not path:
            return ""
        tail = read_tail(path, nbytes)
        error = error_file_summary(Path(path).with_suffix(".error.json"))
        return f"{tail}\n{error}" if error else tail

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stop(list(self._procs), grace=self.grace)
        if self._standbys is not None:
            self._standbys.close()
        sweep(self.token + ":", grace=min(self.grace, 2.0), prefix=True)
        self._selector.close()
        if self._watch is not None:
            self._watch.close()
        self._guardian.close()
