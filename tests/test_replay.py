"""``trainguard replay``: a recorded job's faults re-decided under another policy."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainguard.adapters.sim import simulate
from trainguard.policy import Policy, build_policy
from trainguard.replay import recorded_policy, replay
from trainguard.store import RunStore

ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
SWITCH = "NCCL WARN NET/IB : Got completion from peer 10.0.3.17<52311> with error 12, opcode 0, len 0, vendor err 129"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A simulated job with three rounds: a bad node, a network error, the same error again."""
    state = tmp_path_factory.mktemp("state")
    mix = {"classes": {"hbm": {"log": ECC, "broken": True}, "net": {"log": SWITCH}},
           "scripted": [{"at": 3600, "fault": "hbm", "nodes": ["node-2"]},
                        {"at": 7200, "fault": "net", "nodes": ["node-0"]},
                        {"at": 9000, "fault": "net", "nodes": ["node-0"]}]}
    result = simulate(32, state_dir=state, policy=Policy(enable_job_restart=True, max_num_of_job_restart=5),
                      mix=mix, spare_nodes=1, workload={"work": 4 * 3600}, job_id="recorded")
    assert str(result.status) == "succeeded"
    return state


def test_the_same_policy_decides_the_same(recorded):
    with RunStore(recorded) as store:
        policy = recorded_policy(store.job("recorded"))
        result = replay(store, "recorded", policy)
    assert [r.recorded for r in result.rounds] == ["reschedule_isolated", "restart_in_place", "restart_job"]
    assert result.changed == 0
    assert result.replayed["ettr_simulated"] == result.recorded["ettr_simulated"]
    assert result.recorded["measured_ettr"] == pytest.approx(result.recorded["ettr_simulated"], abs=0.01)


def test_a_stricter_policy_changes_the_decisions(recorded):
    with RunStore(recorded) as store:
        strict = build_policy({"max_num_of_job_restart": 1, "enable_in_place_restart": False},
                              base=recorded_policy(store.job("recorded")))
        result = replay(store, "recorded", strict)
    assert [(r.recorded, r.replayed) for r in result.rounds] == [
        ("reschedule_isolated", "reschedule_isolated"),
        ("restart_in_place", "fail"),
        ("restart_job", None),
    ]
    assert "restart budget exhausted" in result.rounds[1].replayed_reason
    assert result.changed == 2
    assert not result.replayed["finished"] and result.replayed["failed_at"] == 2
    assert result.recorded["finished"]


def test_pod_level_rescheduling_is_cheaper_than_rescheduling_the_job(recorded):
    with RunStore(recorded) as store:
        pods = build_policy({"max_num_of_pod_restart": 5}, base=recorded_policy(store.job("recorded")))
        result = replay(store, "recorded", pods)
    assert result.rounds[0].replayed == "replace_instances"
    assert result.replayed["ettr_simulated"] > result.recorded["ettr_simulated"]


def test_cli_shows_the_changed_decisions(recorded, tmp_path):
    strict = tmp_path / "strict.yaml"
    strict.write_text("max-num-of-job-restart: 1\nenable-in-place-restart: false\n")
    base = [sys.executable, "-m", "trainguard", "replay", "recorded", "--state-dir", str(recorded),
            "--policy", str(strict)]
    out = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["changed"] == 2 and [r["replayed"] for r in data["rounds"]] == ["reschedule_isolated", "fail", None]
    table = subprocess.run(base, capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""})
    assert "2 of 3 decision(s) change" in table.stdout
    assert "restart_in_place → fail" in table.stdout


def test_an_unknown_job_is_one_clear_error(recorded, tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("max-num-of-job-restart: 1\n")
    out = subprocess.run([sys.executable, "-m", "trainguard", "replay", "nope", "--state-dir", str(recorded),
                          "--policy", str(policy)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "no such job" in out.stderr
