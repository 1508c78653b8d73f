"""A rank for the Kubernetes tests: does what ``TG_PLAN`` says for its rank and round, else works.

``TG_PLAN`` is a JSON list of ``{"rank": R, "round": N, "do": ACTION}`` (``round`` optional:
every round); ACTION is ``ecc`` (an uncorrectable ECC error, exit 1), ``keyerror`` (a user-code
traceback), ``hang`` (silence), ``wait`` (keep printing until killed) or ``exit:N``. Without a
matching entry the rank prints progress and an SDK step record for ``TG_WORK`` seconds and
exits 0. Every start is appended to ``TG_RECORD`` as JSON (the stand-in's pods run on this
host, so the file is shared).
"""

from __future__ import annotations

import json
import os
import sys
import time

from trainguard import job_monitor as jm

rank = int(os.environ["RANK"])
round_no = int(os.environ.get("TRAINGUARD_RESTART_ROUND", "0"))
with open(os.environ["TG_RECORD"], "a") as record:
    record.write(json.dumps({key: os.environ.get(key) for key in (
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TRAINGUARD_NODE", "TRAINGUARD_POD_NAME",
        "TRAINGUARD_RESTART_ROUND", "TRAINGUARD_SCHEDULE_COUNT", "TRAINGUARD_JOB_ID", "TRAINGUARD_SDK_CHANNEL")})
                 + "\n")
action = next((step["do"] for step in json.loads(os.environ.get("TG_PLAN", "[]"))
               if step["rank"] == rank and step.get("round", round_no) == round_no), None)
print(f"rank {rank} round {round_no} on {os.environ.get('TRAINGUARD_NODE')} starting", flush=True)
if action == "ecc":
    print("RuntimeError: CUDA error: uncorrectable ECC error encountered", flush=True)
    sys.exit(1)
if action == "keyerror":
    config = {}
    print(config["learning_rate"])
if action == "hang":
    time.sleep(3600)
if action and action.startswith("exit:"):
    sys.exit(int(action.split(":")[1]))
monitor = jm.Monitor()
deadline = time.time() + (3600 if action == "wait" else float(os.environ.get("TG_WORK", "1")))
step = 0
while time.time() < deadline:
    step += 1
    print(f"rank {rank} step {step}", flush=True)
    monitor.report_step(step, loss=1.0 / step)
    time.sleep(0.2)
print(f"rank {rank} done", flush=True)
