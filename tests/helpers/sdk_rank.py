"""A rank that talks to the supervisor through the SDK, as ``TG_SCENARIO`` says (first round
only; later rounds exit 0 so jobs finish):

- ``staged``: a silent 3 s ``hang_detect(1)`` stage: a hang.
- ``staged-off``: a silent 3 s ``hang_detect(-1)`` stage inside a 1 s job interval: no hang.
- ``heartbeats``: silent for 3 s but sending heartbeats: no hang.
- ``message``: a custom message from rank 0, then exit 0.
- ``keyword``: set a retryable keyword, then fail with it in the log.
- ``stacks``: rank 3 sticks in ``stuck_in_io``, the others in ``wait_for_peers``, silently.
- ``slow``: report 12 steps; rank 2's step_time is 5x the others'.
- ``gasp``: register an on_terminate hook, then hang; the hook writes ``$TG_GASP_DIR/rank-N``.
"""

import os
import sys
import time

from trainguard import job_monitor as jm


def wait_for_peers():
    while True:
        time.sleep(0.5)


def stuck_in_io():
    while True:
        time.sleep(0.5)


def main():
    rank = int(os.environ["RANK"])
    scenario = os.environ["TG_SCENARIO"]
    if os.environ["TRAINGUARD_RESTART_ROUND"] != "0":
        print("later round: done", flush=True)
        return 0
    monitor = jm.Monitor(config=jm.PyTorchConfig(job_hang_interval=60))
    print(f"rank {rank} scenario {scenario}", flush=True)
    if scenario == "staged":
        with monitor.hang_detect(1, stage="allreduce"):
            time.sleep(30)
    elif scenario == "staged-off":
        @monitor.hang_detect(-1)
        def evaluate():
            time.sleep(3)
        evaluate()
    elif scenario == "heartbeats":
        monitor.reset_config(job_hang_interval=1)
        for _ in range(10):
            time.sleep(0.3)
            monitor.heartbeat()
    elif scenario == "message":
        if rank == 0:
            status = monitor.send_custom_message(content="The training loss of the job is NaN.")
            assert status.ok(), status.to_string()
    elif scenario == "keyword":
        monitor.set_retryable_errors(["flaky storage gateway"])
        time.sleep(0.3)
        print("ValueError: flaky storage gateway answered 502", file=sys.stderr, flush=True)
        return 1
    elif scenario == "stacks":
        monitor.reset_config(job_hang_interval=1.5)
        stuck_in_io() if rank == 3 else wait_for_peers()
    elif scenario == "slow":
        for step in range(12):
            time.sleep(0.05)
            monitor.report_step(step, step_time=0.5 if rank == 2 else 0.1, loss=1.0 / (step + 1))
    elif scenario == "gasp":
        @monitor.on_terminate
        def save():
            with open(os.path.join(os.environ["TG_GASP_DIR"], f"rank-{rank}"), "w") as out:
                out.write("checkpoint saved\n")

        monitor.reset_config(job_hang_interval=1)
        time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
