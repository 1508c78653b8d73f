"""A rank for the fault-injection tests: it leaves descendants that try to escape.

On start it forks a child that calls ``setsid`` (a new session: out of the rank's process
group) and a double-forked grandchild (re-parented away from the rank), both sleeping for
ten minutes. Then it sleeps, with what ``CHAOS_DO`` (comma-separated) adds: ``fail-first``: in round 0
rank 0 prints an NCCL error and exits 1 after ``CHAOS_DELAY`` seconds; ``ckpt-on-term:PATH``:
on SIGTERM take 0.5 s to write ``PATH.<rank>.<round>``, then exit.
"""

import os
import signal
import sys
import time

rank = os.environ["RANK"]
round_no = os.environ.get("TRAINGUARD_RESTART_ROUND", "0")
do = os.environ.get("CHAOS_DO", "").split(",")


def escape(double):
    if os.fork() == 0:
        os.setsid()
        if double and os.fork() != 0:
            os._exit(0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL may stop it
        time.sleep(600)
        os._exit(0)


escape(double=False)
escape(double=True)
print(f"rank {rank} round {round_no} up", flush=True)
for item in do:
    if not item.startswith("ckpt-on-term:"):
        continue
    path = item.split(":", 1)[1]

    def checkpoint(signum, frame):
        time.sleep(0.5)
        with open(f"{path}.{rank}.{round_no}", "w") as out:
            out.write("complete\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, checkpoint)
if "fail-first" in do and rank == "0" and round_no == "0":
    time.sleep(float(os.environ.get("CHAOS_DELAY", "0.5")))
    print("NCCL error: unhandled system error, NCCL version 2.21.5", flush=True)
    sys.exit(1)
while True:
    time.sleep(0.1)
