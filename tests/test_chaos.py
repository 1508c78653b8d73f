"""Fault injection from outside, through the CLI (the scenarios live in bench/chaos.py, which a
user can run too): kill -9 while spawning and mid-round, SIGTERM mid-round, two owners.

Ranks leave a ``setsid`` child and a double-forked grandchild behind on purpose; a survivor is
any process still carrying the job's id in its environment after the stop grace period.
``TRAINGUARD_CHAOS_TRIALS`` sets the repetitions (default 20).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("chaos", REPO / "bench" / "chaos.py")
assert _spec and _spec.loader
chaos = importlib.util.module_from_spec(_spec)
sys.modules["chaos"] = chaos  # dataclasses look their module up there
_spec.loader.exec_module(chaos)

TRIALS = int(os.environ.get("TRAINGUARD_CHAOS_TRIALS", "20"))


def test_kill_9_while_spawning_32_ranks_leaves_no_orphan(tmp_path: Path):
    trials = [chaos.kill_during_spawn(tmp_path, i) for i in range(TRIALS)]
    assert [t.orphans for t in trials] == [0] * TRIALS


def test_kill_9_mid_round_then_resume_leaves_no_half_round_and_no_orphan(tmp_path: Path):
    trials = [chaos.kill_mid_round(tmp_path, i) for i in range(TRIALS)]
    assert [(t.orphans, t.detail) for t in trials] == [(0, "")] * TRIALS
    results = {r["result"] for i in range(TRIALS) for r in chaos.history(tmp_path, f"round-{i}")["rounds"]}
    assert results <= {"recovered", "interrupted"}, results


@pytest.mark.parametrize("trial", range(3))
def test_sigterm_mid_round_exits_143_within_a_second_plus_grace_and_checkpoints_finish(tmp_path: Path, trial):
    result, seconds, code = chaos.sigterm_mid_round(tmp_path, trial)
    assert code == 143
    assert seconds < 1.0 + chaos.GRACE + 0.5  # 0.5 s: interpreter exit on a loaded 2-core machine
    assert (result.orphans, result.detail) == (0, "")
    report = chaos.history(tmp_path, f"term-{trial}")
    assert report["failure"]["error_code"] == "TG-INTERRUPTED" and report["failure"]["transient"] is True
    assert all(not r["consumes_budget"] for r in report["rounds"] if r["result"] == "interrupted")


def test_two_supervisors_on_one_job_id_exactly_one_runs_and_takeover_moves_it(tmp_path: Path):
    result = chaos.two_owners(tmp_path, 0)
    assert (result.orphans, result.detail) == (0, "")
