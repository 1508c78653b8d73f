"""Process groups, tags and the guardian: how the local and Slurm adapters leave no orphan.

Three mechanisms, each covering what the one before misses:

1. every rank starts in its own session (``setsid`` in the child before ``exec``), so the rank
   and the children it forks are one process group, signalled together;
2. every rank carries a **process tag** in its environment (``TRAINGUARD_PROCESS_TAG`` =
   ``<run token>:<rank>``); environments are inherited, so descendants that leave the group
   (``setsid``, double forks, daemons) still carry it and are found by a scan of ``/proc``;
3. a **guardian** process, started before any rank and holding the token, outlives a
   supervisor killed even by SIGKILL: on end of its input it stops every registered group and
   every tagged process, so a rank started between ``Popen`` and its registration is found too.

A process that clears its own environment escapes (2); cgroups would catch it but are not
writable in most containers, so they are not relied on.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

TAG_VAR = "TRAINGUARD_PROCESS_TAG"
_GUARDIAN = Path(__file__).with_name("guardian.py")


def new_token() -> str:
    """A run token: unique to one supervisor's lifetime."""
    return secrets.token_hex(8)


def tag(token: str, rank: int) -> str:
    return f"{token}:{rank}"


def tagged_pids(value: str, prefix: bool = False) -> list[int]:
    """Pids of processes whose ``TRAINGUARD_PROCESS_TAG`` is ``value`` (or starts with it)."""
    needle = f"{TAG_VAR}={value}".encode()
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        items = environ.split(b"\0")
        if any(item.startswith(needle) for item in items) if prefix else needle in items:
            out.append(int(entry))
    return out


def group_pids(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` (from /proc; empty if none)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: fields follow the last ')'.
        fields = stat[stat.rindex(b")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            pids.append(int(entry))
    return sorted(pids)


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(value: str, grace: float, prefix: bool = False) -> int:
    """Stop every process tagged ``value`` (or a tag starting with it): SIGTERM, up to ``grace``
    seconds, SIGKILL. Returns how many there were: what escaped a rank's process group."""
    pids = tagged_pids(value, prefix)
    for pid in pids:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [pid for pid in left if alive(pid)]
    for pid in left:
        _kill(pid, signal.SIGKILL)
    if pids:
        log.info("stopped %d process(es) that left their rank's process group (tag %s)", len(pids), value)
    return len(pids)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:][:1] != b"Z"


class Guardian:
    """The guardian process of one supervisor (see the module docstring)."""

    def __init__(self, token: str, grace: float, job_id: str) -> None:
        self.job_id = job_id
        self._proc = subprocess.Popen(
            [sys.executable, "-S", str(_GUARDIAN), repr(float(grace)), token],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)

    def watch(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def forget(self, pgid: int) -> None:
        self._send(f"-{pgid}")

    def _send(self, line: str) -> None:
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(line.encode() + b"\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):
            log.warning("[%s] the guardian process is gone; a supervisor crash could leave ranks behind",
                        self.job_id)

    def close(self) -> None:
        """Everything was stopped in order: the guardian has nothing left to do."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait()
