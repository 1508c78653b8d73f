"""A warm standby: an interpreter that has already imported the heavy modules, waiting to
become a rank.

Most of a restart round is interpreter start-up and ``import torch``. The local adapter starts
standbys ahead of time (``--warm-standby``, ``--preload torch``); on a restart it writes one
JSON line to a standby's stdin, ``{"argv": [...], "module": bool, "env": {...}, "cwd": "...",
"log": "..."}``, and the standby redirects its output to the rank's log, takes the rank's
environment and runs the script as ``__main__``. Run as a script: it imports nothing of
trainguard, so it works with any Python the user's command names.

Caveat: modules imported ahead read their environment at import time, before the rank's
variables are set; preload only modules that do not depend on per-rank variables.
"""

import json
import os
import runpy
import sys


def main():
    for module in sys.argv[1:]:
        __import__(module)
    line = sys.stdin.buffer.readline()
    if not line:
        return 0
    launch = json.loads(line)
    log_fd = os.open(launch["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(null_fd)
    if launch.get("cwd"):
        os.chdir(launch["cwd"])
    os.environ.clear()
    os.environ.update(launch["env"])
    argv = launch["argv"]
    sys.argv = list(argv)
    if launch.get("module"):
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
