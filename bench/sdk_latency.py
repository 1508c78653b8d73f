"""Latency from an SDK record written by a rank to the supervisor acting on it.

Two ranks send custom messages 20 ms apart; each message carries its write time, and the
supervisor stores the resulting event with the time it handled it (inotify wakes the loop,
as a pidfd does for exits). Prints median, p99 and max.

    python bench/sdk_latency.py [--messages 100]
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latency import summary  # noqa: E402  (bench/latency.py, beside this script)
from trainguard.engine import supervise  # noqa: E402
from trainguard.model import JobSpec  # noqa: E402
from trainguard.policy import build_policy  # noqa: E402

RANK = """
import sys, time
from trainguard import sdk
monitor = sdk.Monitor()
for i in range(int(sys.argv[1])):
    time.sleep(0.02)
    monitor.send_custom_message(content=repr(time.time()))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the figures, not the supervisor's event log
    work = Path(tempfile.mkdtemp(prefix="tg-bench-sdk-"))
    repo = str(Path(__file__).resolve().parents[1])
    spec = JobSpec(job_id="sdk", command=(sys.executable, "-c", RANK, str(args.messages)), nproc=2,
                   env={"PYTHONPATH": repo}, cwd=str(work))
    supervise(spec, build_policy({}), state_dir=work / "state")
    db = sqlite3.connect(work / "state" / "trainguard.sqlite")
    latencies = [(at - float(message)) * 1000 for at, message in
                 db.execute("SELECT at, message FROM events WHERE type = 'sdk_message'")]
    print(f"SDK record -> supervisor over {len(latencies)} messages (2 ranks, inotify wake-up): {summary(latencies)}")


if __name__ == "__main__":
    main()
