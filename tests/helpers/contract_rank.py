"""A rank for the adapter contract suite; ``CONTRACT_DO`` says what it does.

``exit:N`` exit with N after printing a line; ``sleep`` print a line and sleep; ``quiet`` sleep
without printing; ``term-write:PATH`` on SIGTERM take 0.5 s to write PATH, then exit 0;
``ignore-term`` ignore SIGTERM; ``sdk`` report three SDK steps, then sleep; ``env`` print the
environment as JSON and exit 0.
"""

import json
import os
import signal
import sys
import time

do = os.environ.get("CONTRACT_DO", "sleep")
rank = os.environ.get("RANK")
if do != "quiet":
    print(f"rank {rank} up on {os.environ.get('TRAINGUARD_NODE')}", flush=True)
if do.startswith("exit:"):
    sys.exit(int(do.split(":", 1)[1]))
if do == "env":
    print(json.dumps(dict(os.environ)), flush=True)
    sys.exit(0)
if do.startswith("term-write:"):
    path = do.split(":", 1)[1]

    def _checkpoint(signum, frame):
        time.sleep(0.5)  # a checkpoint being written
        with open(path + f".{rank}", "w") as out:
            out.write("complete\n")
        sys.exit(0)

    signal.signal(signal.SIGTERM, _checkpoint)
if do == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if do == "sdk":
    from trainguard import job_monitor as jm

    monitor = jm.Monitor()
    for step in range(3):
        monitor.report_step(step, step_time=0.01)
while True:
    time.sleep(0.1)
