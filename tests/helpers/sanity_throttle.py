"""Run a command really slowed down, as on a node with a weak CPU: ``sanity_throttle.py NAME PERCENT -- CMD``.

It moves itself into a fresh cgroup named NAME with a CPU quota of PERCENT of one core
(cgroup v2 ``cpu.max`` where the cpu controller is there, else v1 ``cpu.cfs_quota_us``), then
execs CMD, so CMD and its children run under the quota. Without a writable cgroup it pins
itself to CPU 0 at the idle scheduling policy and starts two busy loops there, which leaves it
a sliver of that core. Nothing tells the check it is slow: it has to measure it.
"""

import os
import sys
from pathlib import Path

V2 = Path("/sys/fs/cgroup")
V1 = Path("/sys/fs/cgroup/cpu")


def cgroup_dir(name):
    """Where the cgroup NAME lives and how to set its quota, or None without a writable one."""
    if "cpu" in (V2 / "cgroup.controllers").read_text().split() if (V2 / "cgroup.controllers").exists() else False:
        return V2 / name, lambda d, pct: (d / "cpu.max").write_text(f"{pct * 1000} 100000")
    if (V1 / "cpu.cfs_quota_us").exists() and os.access(V1, os.W_OK):
        return V1 / name, lambda d, pct: (d / "cpu.cfs_quota_us").write_text(str(pct * 1000))
    return None


def main():
    name, percent = sys.argv[1], int(sys.argv[2])
    command = sys.argv[sys.argv.index("--") + 1:]
    found = cgroup_dir(name)
    try:
        if found is None:
            raise OSError("no writable cgroup")
        path, set_quota = found
        path.mkdir(exist_ok=True)
        set_quota(path, percent)
        (path / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        os.sched_setaffinity(0, {0})
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        for _ in range(2):
            if os.fork() == 0:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
                while True:
                    pass
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
