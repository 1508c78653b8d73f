"""The supervisor's own death: nothing is left running, nothing recorded is lost, a job resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import RANK_SCRIPT, pid_alive

NCCL = "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error"


def start_supervisor(tmp_path: Path, job_id: str, plan: list, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "TG_PLAN": json.dumps(plan), "TG_RECORD": str(tmp_path / "starts.jsonl")}
    return subprocess.Popen(
        [sys.executable, "-m", "trainguard", "--log-level", "WARNING", "run", "--nproc", "2",
         "--state-dir", str(tmp_path / "state"), "--job-id", job_id, "--enable-job-restart", *extra,
         "--", sys.executable, str(RANK_SCRIPT)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_starts(tmp_path: Path, count: int, timeout: float = 20) -> list[dict]:
    deadline = time.time() + timeout
    path = tmp_path / "starts.jsonl"
    while time.time() < deadline:
        starts = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        if len(starts) >= count:
            return starts
        time.sleep(0.05)
    raise AssertionError(f"only {len(starts)} of {count} rank starts seen")


def history(tmp_path: Path, job_id: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "trainguard", "history", job_id, "--state-dir",
                          str(tmp_path / "state"), "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def wait_dead(pids, timeout=10.0) -> list[int]:
    deadline = time.time() + timeout
    while time.time() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_supervisor_stops_everything_and_the_job_resumes(tmp_path, sig):
    plan = [{"round": 0, "rank": 0, "do": "fail", "say": NCCL}, {"do": "sleep", "seconds": 60}]
    proc = start_supervisor(tmp_path, "resumable", plan)
    starts = wait_for_starts(tmp_path, 4)  # round 0 and round 1 of both ranks
    time.sleep(0.3)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 128 + sig
    assert wait_dead([s["pid"] for s in starts]) == []
    report = history(tmp_path, "resumable")
    assert report["status"] == "failed" and report["failure"]["error_code"] == "TG-INTERRUPTED"
    assert [r["action"] for r in report["rounds"]] == ["restart_in_place"]

    # The same job id picks up where it stopped: rounds and budgets carry over, and the resumed
    # run is a round of its own (new logs, new SDK channel), not charged to the budget.
    proc = start_supervisor(tmp_path, "resumable", [{"do": "ok"}])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = history(tmp_path, "resumable")
    assert report["status"] == "succeeded" and "failure" not in report
    assert [(r["round"], r["action"], r["error_code"], r["consumes_budget"], r["result"]) for r in report["rounds"]] == [
        (1, "restart_in_place", "TG-NCCL-ERROR", False, "recovered"),
        (2, "restart_job", "TG-SUPERVISOR-RESTART", False, "recovered")]
    resumed = [s for s in wait_for_starts(tmp_path, 6)[4:]]
    assert {(s["TRAINGUARD_RESTART_ROUND"], s["TRAINGUARD_SCHEDULE_COUNT"], s["TRAINGUARD_PROC_START_COUNT"])
            for s in resumed} == {("2", "2", "1")}
    logs = tmp_path / "state" / "jobs" / "resumable" / "logs"
    assert sorted(p.name for p in logs.iterdir() if p.name.startswith("round-")) == ["round-0", "round-1", "round-2"]


def test_killed_supervisor_leaves_no_rank_behind(tmp_path):
    proc = start_supervisor(tmp_path, "killed", [{"do": "sleep", "seconds": 120}])
    starts = wait_for_starts(tmp_path, 2)
    proc.kill()
    proc.wait(timeout=10)
    assert wait_dead([s["pid"] for s in starts]) == [], "the guardian must kill orphaned ranks"
    assert history(tmp_path, "killed")["status"] == "running", "a killed supervisor cannot say more"


def test_finished_job_id_cannot_be_reused(tmp_path):
    proc = start_supervisor(tmp_path, "once", [])
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    again = start_supervisor(tmp_path, "once", [])
    out, err = again.communicate(timeout=60)
    assert again.returncode == 2
    assert err.strip().splitlines() == ["trainguard: error: job once: already succeeded; choose another --job-id"]
