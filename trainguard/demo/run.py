"""``trainguard demo``: supervise a real 4-rank PyTorch job through injected faults.

Job 1 runs on three virtual nodes of two slots (one node spare) and meets, in turn, a
collective timeout (in-place recovery), a hang (restart upon suspension) and an uncorrectable
ECC error (the node is isolated and the job moves to the spare); it resumes from its
checkpoint each time and finishes. Job 2 hits a KeyError in user code and fails at once,
without a pointless restart. The demo exits 0 when everything happened as described.
"""

from __future__ import annotations

import importlib.util
import secrets
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from trainguard.engine import supervise
from trainguard.model import JobSpec, JobStatus
from trainguard.policy import build_policy
from trainguard.render import print_report
from trainguard.store import RunStore

TRAIN = Path(__file__).with_name("train.py")


def _job(job_id: str, workdir: Path, steps: int, faults: str) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        command=(sys.executable, str(TRAIN), "--steps", str(steps), "--checkpoint", str(workdir / f"{job_id}.pt")),
        nproc=4, nodes=3, slots_per_node=2, cwd=str(workdir),
        env={"TRAINGUARD_DEMO_FAULTS": faults, "OMP_NUM_THREADS": "1"})


def run_demo(*, state_dir: str | None, steps: int, console: Console) -> int:
    if importlib.util.find_spec("torch") is None:
        console.print("[red]the demo needs PyTorch: pip install 'trainguard[torch]'[/]")
        return 2
    steps = max(steps, 25)
    workdir = Path(state_dir or tempfile.mkdtemp(prefix="trainguard-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tag = time.strftime("%H%M%S-") + secrets.token_hex(2)
    policy = build_policy({
        "job_execution_mode": "Sync", "enable_job_restart": True, "max_num_of_job_restart": 3,
        "enable_job_hang_detection": True, "job_hang_interval": 15, "stop_grace_period": 3,
    })
    expectations = []

    resilient = f"demo-resilient-{tag}"
    console.rule(f"[bold]job {resilient}[/]: collective timeout, hang, ECC error")
    status = supervise(_job(resilient, workdir, steps, "0:1:5:nccl,1:2:12:hang,2:3:20:ecc"), policy,
                       state_dir=workdir, events_file=workdir / "events.jsonl")
    expectations.append((resilient, status, JobStatus.SUCCEEDED,
                         ["restart_in_place", "restart_in_place", "reschedule_isolated"]))

    doomed = f"demo-user-error-{tag}"
    console.rule(f"[bold]job {doomed}[/]: a KeyError in user code")
    status = supervise(_job(doomed, workdir, steps, "0:0:3:user"), policy,
                       state_dir=workdir, events_file=workdir / "events.jsonl")
    expectations.append((doomed, status, JobStatus.FAILED, []))

    ok = True
    with RunStore(workdir) as store:
        for job_id, status, wanted, actions in expectations:
            report = store.report(job_id)
            print_report(report, console)
            got = [r["action"] for r in report["rounds"]]
            if status is not wanted or got != actions:
                ok = False
                console.print(f"[red]unexpected: {job_id} {status.value} with rounds {got}; "
                              f"wanted {wanted.value} with {actions}[/]")
    console.print(f"history: trainguard history JOB_ID --state-dir {workdir} --json; "
                  f"events: {workdir / 'events.jsonl'}")
    console.print("[green]demo finished as expected[/]" if ok else "[red]demo did not go as expected[/]")
    return 0 if ok else 1
