"""Stops a supervisor's ranks when the supervisor dies, however it dies.

Run as a script (no package import, so it starts in milliseconds) with the supervisor holding
the write end of its stdin: ``guardian.py GRACE TOKEN``. The supervisor writes ``+PGID`` when it
starts a process group and ``-PGID`` when the group is gone. End of input means the supervisor
exited or was killed (even by SIGKILL): every group still listed, and every process whose
environment carries ``TRAINGUARD_PROCESS_TAG=TOKEN:...`` (ranks started but not yet registered,
descendants that left their group with setsid or a double fork), gets SIGTERM, then SIGKILL
after the grace period.
"""

import os
import signal
import sys
import time


def _tagged(token):
    needle = ("TRAINGUARD_PROCESS_TAG=" + token + ":").encode()
    me = os.getpid()
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if any(item.startswith(needle) for item in environ.split(b"\0")):
            pids.add(int(entry))
    return pids


def _send(groups, pids, sig):
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _alive_groups(groups):
    alive = set()
    for pgid in groups:
        try:
            os.killpg(pgid, 0)
            alive.add(pgid)
        except OSError:
            pass
    return alive


def _kill_all(groups, token, grace):
    pids = _tagged(token) if token else set()
    _send(groups, pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        groups = _alive_groups(groups)
        pids = _tagged(token) if token else set()
        if not groups and not pids:
            return
        time.sleep(0.05)
    # A rank forking while it was being stopped: take the tagged set once more before the kill.
    _send(_alive_groups(groups), _tagged(token) if token else set(), signal.SIGKILL)


def main():
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    token = sys.argv[2] if len(sys.argv) > 2 else ""
    # The terminal's Ctrl-C and a stop of the supervisor's session must reach the supervisor,
    # not cut the guardian's watch short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    groups = set()
    for line in sys.stdin:
        line = line.strip()
        if line.startswith("+"):
            groups.add(int(line[1:]))
        elif line.startswith("-"):
            groups.discard(int(line[1:]))
    _kill_all(groups, token, grace)


if __name__ == "__main__":
    main()
