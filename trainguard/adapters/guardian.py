"""Kills a supervisor's process groups when the supervisor dies, however it dies.

Run as a script (no package import, so it starts in milliseconds) with the supervisor holding
the write end of its stdin. The supervisor writes ``+PGID`` when it starts a process group and
``-PGID`` when the group is gone. End of input means the supervisor exited or was killed
(even by SIGKILL): every group still listed gets SIGTERM, then SIGKILL after the grace period.
"""

import os
import signal
import sys
import time


def _kill_all(groups, grace):
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    alive = set(groups)
    while alive and time.monotonic() < deadline:
        for pgid in list(alive):
            try:
                os.killpg(pgid, 0)
            except OSError:
                alive.discard(pgid)
        time.sleep(0.05)
    for pgid in alive:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def main():
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    # The terminal's Ctrl-C must reach the supervisor, not cut the guardian's watch short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups = set()
    for line in sys.stdin:
        line = line.strip()
        if line.startswith("+"):
            groups.add(int(line[1:]))
        elif line.startswith("-"):
            groups.discard(int(line[1:]))
    _kill_all(groups, grace)


if __name__ == "__main__":
    main()
