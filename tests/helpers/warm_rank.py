"""A rank for the warm-standby tests: records what it sees from its first line, so a cold and a
warm start of the same rank can be compared.

Before anything else it notes which of ``$TG_WATCH`` (module names) are already imported, then
imports them and writes one JSON line to ``$TG_RECORD``: environment, argv, cwd, ``sys.path``,
``__main__``'s names, stdio set-up, signal dispositions, thread count. It prints to stdout and
stderr without flushing (the log shows the buffering), and in round 0 rank 1 fails with a
retryable error after ``$TG_FAIL_AFTER`` seconds while rank 0 waits for the restarted rank.
"""

import os
import sys

PRELOADED = [name for name in os.environ.get("TG_WATCH", "").split(",") if name and name in sys.modules]
MAIN_NAMES = sorted(globals())

import importlib  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402


def stdio(stream):
    return {"class": type(stream).__name__, "buffer": type(getattr(stream, "buffer", None)).__name__,
            "line_buffering": stream.line_buffering, "write_through": stream.write_through,
            "encoding": stream.encoding, "errors": stream.errors, "fileno": stream.fileno(),
            "isatty": stream.isatty()}


def main():
    watched = {name: importlib.import_module(name) for name in os.environ.get("TG_WATCH", "").split(",") if name}
    rank = int(os.environ["RANK"])
    rnd = int(os.environ["TRAINGUARD_RESTART_ROUND"])
    record = {
        "rank": rank, "round": rnd, "preloaded": PRELOADED, "main_names": MAIN_NAMES,
        "env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path,
        "file": __file__, "executable": sys.executable, "flags": repr(sys.flags),
        "stdout": stdio(sys.stdout), "stderr": stdio(sys.stderr),
        "stdin": [os.path.realpath("/proc/self/fd/0"), sys.stdin.isatty()],
        "signals": {name: repr(signal.getsignal(getattr(signal, name)))
                    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGPIPE", "SIGXFSZ", "SIGUSR1", "SIGCHLD")},
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "threads": threading.active_count(),
        "seen_at_import": {name: getattr(module, "SEEN", None) for name, module in watched.items()},
        "cmdline": open("/proc/self/cmdline").read().rstrip("\0").split("\0"),
    }
    with open(os.environ["TG_RECORD"], "a") as out:
        out.write(json.dumps(record) + "\n")
    print(f"out 1 rank {rank} round {rnd}")
    print(f"err 1 rank {rank} round {rnd}", file=sys.stderr)
    print(f"out 2 rank {rank} round {rnd}")
    if rnd == 0 and rank == 1:
        time.sleep(float(os.environ.get("TG_FAIL_AFTER", "1")))
        print("torch.distributed.DistBackendError: NCCL error in: test.cpp:1, unhandled system error",
              file=sys.stderr)
        sys.exit(1)
    if rnd == 0:
        # Wait for the restarted rank 1, as a rank blocked in a collective would.
        deadline = time.time() + 60
        while time.time() < deadline and not os.path.exists(os.environ["TG_RECORD"] + ".done"):
            time.sleep(0.05)
    elif rank == 1:
        open(os.environ["TG_RECORD"] + ".done", "w").close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
