"""A real 4-rank PyTorch (CPU, gloo) DDP job supervised through injected faults.

Uses the demo's training script (trainguard/demo/train.py): every restart resumes from the
checkpoint rank 0 writes, so the job finishes with fewer steps than it ran in all.
"""

from __future__ import annotations

import sys

import pytest

from trainguard.demo.run import TRAIN
from trainguard.engine import supervise
from trainguard.model import JobSpec, JobStatus
from trainguard.policy import build_policy
from trainguard.store import RunStore

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def test_gloo_job_survives_timeout_hang_and_a_bad_node(tmp_path):
    spec = JobSpec(
        job_id="gloo", nproc=4, nodes=3, slots_per_node=2, cwd=str(tmp_path),
        command=(sys.executable, str(TRAIN), "--steps", "16", "--checkpoint", str(tmp_path / "ck.pt")),
        env={"TRAINGUARD_DEMO_FAULTS": "0:1:3:nccl,1:2:7:hang,2:3:12:ecc", "OMP_NUM_THREADS": "1"})
    policy = build_policy({"enable_job_restart": True, "enable_job_hang_detection": True, "job_hang_interval": 12,
                           "stop_grace_period": 3})
    status = supervise(spec, policy, state_dir=tmp_path / "state")
    store = RunStore(tmp_path / "state")
    report = store.report("gloo")
    store.close()
    assert status is JobStatus.SUCCEEDED, report
    assert [(r["action"], r["error_code"], r["error_source"]) for r in report["rounds"]] == [
        ("restart_in_place", "TG-NCCL-TIMEOUT", "exit_code"),
        ("restart_in_place", "TG-HANG", "hang"),
        ("reschedule_isolated", "TG-GPU-ECC", "exit_code"),
    ]
    assert report["rounds"][2]["isolated_nodes"] == ["node-1"]
    logs = tmp_path / "state" / "jobs" / "gloo" / "logs"
    last = (logs / "round-3" / "rank-0.log").read_text()
    assert "resuming at step 10" in last and "step 16/16" in last and "rank 0 finished" in last
    moved = (logs / "round-3" / "rank-3.log").read_text()
    assert "node node-2" in moved and "rank 3 finished" in moved
