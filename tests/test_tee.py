"""``--tee``: ranks' output on the terminal with torchrun's prefixes, logs kept either way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SAY = "import os; print('hello from', os.environ['RANK'], flush=True)"


def run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainguard", "--log-level", "ERROR", "run", "--nproc", "2",
                           "--state-dir", str(tmp_path / "state"), "--job-id", "tee", *options,
                           "--", sys.executable, "-c", SAY],
                          capture_output=True, text=True, timeout=60, env=os.environ)


def test_tee_shows_every_rank_with_torchruns_prefix(tmp_path: Path):
    out = run(tmp_path, "--tee", "3")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("[default")]
    assert sorted(lines) == ["[default0]:hello from 0", "[default1]:hello from 1"]
    log = tmp_path / "state" / "jobs" / "tee" / "logs" / "round-0" / "rank-1.log"
    assert log.read_text() == "hello from 1\n", "the log stays the record"


def test_tee_filters_ranks_and_is_off_when_not_a_terminal(tmp_path: Path):
    only = run(tmp_path, "--tee", "3", "--local-ranks-filter", "1")
    assert [line for line in only.stdout.splitlines() if line.startswith("[default")] == ["[default1]:hello from 1"]
    quiet = run(tmp_path / "second")
    assert quiet.returncode == 0 and "[default" not in quiet.stdout


@pytest.mark.parametrize("spec", ["7", "0:9", "x"])
def test_a_bad_tee_spec_is_one_line_and_exit_2(tmp_path: Path, spec: str):
    out = run(tmp_path, "--tee", spec)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"trainguard: error: --tee: expected 0-3 or RANK:LEVEL,... (as torchrun), got {spec!r}"]
