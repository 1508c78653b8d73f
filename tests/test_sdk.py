"""The training-side SDK against a real supervisor: staged hangs, heartbeats, messages,
keywords, stack snapshots, slow ranks, the dying gasp."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard import job_monitor as jm
from trainguard.detectors import SlowRankDetector, advise_hang_interval
from trainguard.engine import supervise
from trainguard.hooks import PluginHost, hookimpl
from trainguard.model import JobSpec, JobStatus
from trainguard.policy import build_policy
from trainguard.sdk import CHANNEL_VAR
from trainguard.store import RunStore

SCRIPT = Path(__file__).parent / "helpers" / "sdk_rank.py"
REPO = Path(__file__).resolve().parents[1]


def run_scenario(tmp_path, scenario, *, nproc=2, nodes=1, slots=0, host=None, env=None, **policy):
    spec = JobSpec(job_id=scenario, command=(sys.executable, str(SCRIPT)), nproc=nproc, nodes=nodes,
                   slots_per_node=slots, cwd=str(tmp_path),
                   env={"TG_SCENARIO": scenario, "PYTHONPATH": str(REPO), **(env or {})})
    settings = {"enable_job_restart": True, "stop_grace_period": 3, **policy}
    status = supervise(spec, build_policy(settings), state_dir=tmp_path / "state", host=host,
                       events_file=tmp_path / "events.jsonl")
    store = RunStore(tmp_path / "state")
    report = store.report(scenario)
    events = list(store.events(scenario))
    store.close()
    return status, report, events


def test_outside_a_job_every_call_is_a_cheap_no_op(monkeypatch):
    monkeypatch.delenv(CHANNEL_VAR, raising=False)
    monitor = jm.Monitor(config=jm.PyTorchConfig(job_hang_interval=30))
    for status in (monitor.send_custom_message(content="x"), monitor.report_step(1, loss=0.5),
                   monitor.set_retryable_errors(["a"]), monitor.heartbeat(), monitor.reset_config(job_hang_interval=5)):
        assert not status.ok() and status.code == "NOT_SUPERVISED" and "not running under trainguard" in status.to_string()
    with monitor.hang_detect(-1):
        pass
    assert monitor.supervised is False
    with pytest.raises(TypeError, match="unknown monitor parameter"):
        jm.PyTorchConfig(job_hang_intervall=3)


def test_records_go_to_the_channel_as_documented(tmp_path, monkeypatch):
    channel = tmp_path / "rank-0.jsonl"
    monkeypatch.setenv(CHANNEL_VAR, str(channel))
    monitor = jm.Monitor(config=jm.TFConfig(job_hang_interval=1800))

    @monitor.hang_detect(180)
    def train():
        with monitor.hang_detect(-1, stage="eval"):
            pass

    train()
    assert monitor.reset_config(job_hang_interval=0).code == "INVALID_ARGUMENT"
    assert monitor.set_retryable_errors([" "]).code == "INVALID_ARGUMENT"
    records = [json.loads(line) for line in channel.read_text().splitlines()]
    assert [(r["type"], r["job_hang_interval"], r["stage"]) for r in records] == [
        ("config", 1800, None), ("config", 180, "train"), ("config", -1, "eval"), ("config", 180, "train"),
        ("config", 1800, None)]
    assert all(r["v"] == 1 and isinstance(r["t"], float) for r in records)


def test_a_short_stage_that_hangs_is_caught_with_its_stage(tmp_path):
    status, report, _ = run_scenario(tmp_path, "staged")
    assert status is JobStatus.SUCCEEDED
    (rnd,) = report["rounds"]
    assert rnd["error_source"] == "hang" and rnd["action"] == "restart_in_place"
    assert "stage 'allreduce'" in rnd["error_message"] and "interval 1" in rnd["error_message"]


def test_a_stage_with_detection_off_is_not_a_hang(tmp_path):
    status, report, _ = run_scenario(tmp_path, "staged-off", enable_job_hang_detection=True, job_hang_interval=1)
    assert status is JobStatus.SUCCEEDED and report["rounds"] == []


def test_heartbeats_keep_a_quiet_job_alive(tmp_path):
    status, report, _ = run_scenario(tmp_path, "heartbeats", enable_job_hang_detection=True, job_hang_interval=1)
    assert status is JobStatus.SUCCEEDED and report["rounds"] == []


class Inbox:
    def __init__(self):
        self.events = []

    @hookimpl
    def trainguard_on_event(self, event):
        self.events.append(event)


def test_custom_messages_become_events_and_reach_notifiers(tmp_path):
    inbox = Inbox()
    status, _, events = run_scenario(tmp_path, "message", host=PluginHost(load_entry_points=False,
                                                                          plugins={"inbox": inbox}))
    assert status is JobStatus.SUCCEEDED
    (stored,) = [e for e in events if e["type"] == "sdk_message"]
    assert stored["message"] == "The training loss of the job is NaN." and stored["rank"] == 0
    assert stored["round"] == 0 and stored["data"]["content"] == stored["message"]
    assert any(e.type == "sdk_message" and e.rank == 0 for e in inbox.events)
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert any(line["type"] == "sdk_message" for line in lines)


def test_retryable_keywords_set_from_code_take_effect(tmp_path):
    status, report, events = run_scenario(tmp_path, "keyword")
    assert status is JobStatus.SUCCEEDED
    (rnd,) = report["rounds"]
    assert rnd["action"] == "restart_in_place" and "flaky storage gateway" in rnd["error_message"]
    assert any(e["type"] == "sdk_retryable_errors" for e in events)


def test_stacks_of_hung_ranks_are_grouped_with_the_outlier_flagged(tmp_path):
    status, report, events = run_scenario(tmp_path, "stacks", nproc=4)
    assert status is JobStatus.SUCCEEDED
    (rnd,) = report["rounds"]
    stacks = rnd["stacks"]
    main_groups = [g for g in stacks if any("main (" in f for f in g["frames"])]
    outlier, majority = main_groups[0], main_groups[-1]
    assert outlier["ranks"] == [3] and outlier["count"] == 1 and outlier["suspect"] is True
    assert any(f.startswith("stuck_in_io (") for f in outlier["frames"])
    assert majority["ranks"] == [0, 1, 2] and majority["count"] == 3 and majority["suspect"] is False
    assert any(f.startswith("wait_for_peers (") for f in majority["frames"])
    assert any(e["type"] == "stacks_captured" and "[3]" in e["message"] for e in events)
    shown = subprocess.run([sys.executable, "-m", "trainguard", "stacks", "stacks", "--state-dir",
                            str(tmp_path / "state")], capture_output=True, text=True, check=True).stdout
    assert "likely culprit" in shown and "stuck_in_io" in shown and "rank(s) 0, 1, 2" in shown


def test_slow_rank_is_reported_and_its_node_isolated_when_asked(tmp_path):
    status, report, events = run_scenario(tmp_path, "slow", nproc=4, nodes=3, slots=2)
    assert status is JobStatus.SUCCEEDED and report["rounds"] == []
    (slow,) = [e for e in events if e["type"] == "rank_slow"]
    assert (slow["rank"], slow["node"]) == (2, "node-1")
    status, report, _ = run_scenario(tmp_path / "isolating", "slow", nproc=4, nodes=3, slots=2,
                                     isolate_slow_nodes=True)
    assert status is JobStatus.SUCCEEDED
    (rnd,) = report["rounds"]
    assert (rnd["error_source"], rnd["error_code"], rnd["action"], rnd["isolated_nodes"]) == (
        "sdk", "TG-SLOW-NODE", "reschedule_isolated", ["node-1"])


def test_slow_rank_detector_on_synthetic_step_times():
    detector = SlowRankDetector(factor=2.0, window=3)
    flagged = []
    for step in range(6):
        for rank in range(4):
            t = 1.0 if rank == 1 and step >= 2 else 0.2
            result = detector.step(rank, step * 1.0, step_time=t)
            if result:
                flagged.append((rank, step, result))
    assert [(r, s) for r, s, _ in flagged] == [(1, 4)], "three slow steps in a row, reported once"
    assert flagged[0][2] == (1.0, 0.2)
    assert detector.step(1, 7.0, step_time=0.2) is None
    for step in range(3):  # recovered, then slow again: reported again
        detector.step(0, 8.0 + step, step_time=0.2)
        last = detector.step(1, 8.0 + step, step_time=1.0)
    assert last == (1.0, 0.2)


def test_dying_gasp_runs_within_the_grace_period(tmp_path):
    gasp = tmp_path / "gasp"
    gasp.mkdir()
    status, report, _ = run_scenario(tmp_path, "gasp", env={"TG_GASP_DIR": str(gasp)})
    assert status is JobStatus.SUCCEEDED and report["rounds"][0]["error_source"] == "hang"
    assert sorted(p.name for p in gasp.iterdir()) == ["rank-0", "rank-1"]


def test_hang_interval_advice():
    log = "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, Timeout(ms)=600000) ran"
    assert advise_hang_interval(log) == (600.0, 450.0)
    assert advise_hang_interval("Timeout(ms)=1800000") == (1800.0, 1650.0)
    assert advise_hang_interval("nothing here") is None
