"""``trainguard run`` as a drop-in for ``torchrun``: the same environment for every rank, and
torchrun's per-rank error file read back as evidence. Needs torch (a real torchrun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parent.parent
DUMP = REPO / "tests" / "helpers" / "env_dump.py"
# Values that name one launch (ports, ids, files) or that trainguard documents as different.
PER_LAUNCH = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE"}


def dumps(folder: Path) -> dict[int, dict[str, str]]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in folder.glob("rank-*.json")}


def test_every_variable_torchrun_sets_is_set_the_same_way(tmp_path: Path):
    base = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    (tmp_path / "torchrun").mkdir()
    (tmp_path / "trainguard").mkdir()
    torchrun = Path(sys.executable).with_name("torchrun")
    subprocess.run([str(torchrun), "--nproc-per-node", "2", str(DUMP)], check=True, capture_output=True,
                   env={**base, "ENV_DUMP_DIR": str(tmp_path / "torchrun")}, timeout=120)
    subprocess.run([sys.executable, "-m", "trainguard", "--log-level", "ERROR", "run", "--nproc", "2",
                    "--max-num-of-job-restart", "0", "--state-dir", "state", "--tee", "0",
                    "--", sys.executable, str(DUMP)],
                   check=True, capture_output=True, cwd=tmp_path, timeout=120,
                   env={**base, "ENV_DUMP_DIR": str(tmp_path / "trainguard")})
    theirs, ours = dumps(tmp_path / "torchrun"), dumps(tmp_path / "trainguard")
    assert sorted(theirs) == sorted(ours) == [0, 1]
    for rank in (0, 1):
        added = {k for k in theirs[rank] if k not in base and k not in ("ENV_DUMP_DIR", "LC_CTYPE")}
        assert added >= {"RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_WORLD_SIZE", "OMP_NUM_THREADS",
                         "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}, "torchrun changed"
        missing = sorted(added - set(ours[rank]))
        assert missing == [], f"rank {rank} lacks {missing}"
        different = {k: (theirs[rank][k], ours[rank][k]) for k in added - PER_LAUNCH
                     if theirs[rank][k] != ours[rank][k]}
        assert different == {}
        assert {k for k in ours[rank] if k.startswith("TRAINGUARD_")} >= {
            "TRAINGUARD_JOB_ID", "TRAINGUARD_RESTART_ROUND", "TRAINGUARD_SCHEDULE_COUNT",
            "TRAINGUARD_PROC_START_COUNT", "TRAINGUARD_NODE", "TRAINGUARD_SDK_CHANNEL"}
        assert os.path.isabs(ours[rank]["TRAINGUARD_SDK_CHANNEL"]), "a relative --state-dir stays usable after cd"


def test_torchrun_error_file_is_the_evidence(tmp_path: Path):
    out = subprocess.run([sys.executable, "-m", "trainguard", "--log-level", "ERROR", "run", "--nproc", "1",
                          "--state-dir", "state", "--job-id", "err", "--tee", "0",
                          "--", sys.executable, str(DUMP)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "ENV_DUMP_DIR": str(tmp_path), "ENV_DUMP_RAISE": "1"})
    assert out.returncode == 1
    report = json.loads(subprocess.run([sys.executable, "-m", "trainguard", "history", "err", "--state-dir",
                                        "state", "--json"], capture_output=True, text=True, cwd=tmp_path,
                                       check=True).stdout)
    error_file = Path(json.loads((tmp_path / "rank-0.json").read_text())["TORCHELASTIC_ERROR_FILE"])
    assert error_file.exists() and "shape mismatch" in error_file.read_text()
    log = (tmp_path / "state" / "jobs" / "err" / "logs" / "round-0" / "rank-0.log").read_text()
    assert "shape mismatch" not in log, "the rank printed nothing of its error"
    failure = report["failure"]
    assert failure["error_source"] == "exit_code" and "shape mismatch" in failure["error_message"]
    assert failure["error_code"] != "TG-UNKNOWN" and failure["transient"] is False
