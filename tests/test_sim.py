"""The simulator (``--adapter sim``): the adapter contract where it applies, simulated time,
fault mixes judged by the real classifiers, 1,000 simultaneous failures in one round, the
no-progress guard, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from adapter_contract import AdapterContract, launches
from trainguard.adapters import Launch
from trainguard.adapters.sim import FaultMix, SimAdapter, simulate
from trainguard.hooks import PluginHost
from trainguard.model import Action, ExecutionMode, Instance, JobSpec, JobStatus
from trainguard.policy import Policy
from trainguard.store import RunStore

ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
SWITCH = "NCCL WARN NET/IB : Got completion from peer 10.0.3.17<52311> with error 12, opcode 0, len 0, vendor err 129"
RESTARTS = Policy(enable_job_restart=True, max_num_of_job_restart=50)
PROCESSES = "simulated instances are not processes: covered by the simulated tests below"


@pytest.fixture
def make_adapter():
    counter = iter(range(100))

    def make(*, nproc, nodes, slots, policy):
        spec = JobSpec(job_id=f"contract-{next(counter)}", command=("x",), nproc=nproc, nodes=nodes,
                       slots_per_node=slots)
        return SimAdapter(spec=spec, policy=policy)

    return make


class TestSimAdapterContract(AdapterContract):
    """The contract suite; the tests that need a real process's behaviour are replaced below."""

    processes_are_local = False

    def test_start_runs_every_rank_and_its_output_is_logged(self, adapter):
        a = adapter()
        started = a.start(launches(a, "sleep", [0, 1]))
        assert set(started) == {0, 1}
        assert a.running() == frozenset({0, 1})
        assert all("up on" in a.log_tail(r, 4096) for r in (0, 1))
        assert all(a.last_output(r) is not None for r in (0, 1))

    @pytest.mark.skip(reason=PROCESSES)
    def test_an_exit_is_detected_with_its_code(self, adapter): ...

    @pytest.mark.skip(reason=PROCESSES)
    def test_stop_honours_the_grace_period(self, adapter, tmp_path): ...

    @pytest.mark.skip(reason=PROCESSES)
    def test_stop_kills_a_rank_that_ignores_sigterm_after_the_grace(self, adapter): ...

    @pytest.mark.skip(reason=PROCESSES)
    def test_silence_shows_in_last_output(self, adapter): ...

    @pytest.mark.skip(reason=PROCESSES)
    def test_sdk_records_arrive_and_a_restart_does_not_redeliver_them(self, adapter): ...


def _sim(nproc=16, nodes=2, slots=8, mix=None, **kw) -> SimAdapter:
    spec = JobSpec(job_id="unit", command=("x",), nproc=nproc, nodes=nodes, slots_per_node=slots)
    return SimAdapter(spec=spec, policy=Policy(), mix=mix, **kw)


def _start(adapter: SimAdapter, ranks, round_no=0, current=None):
    placement = adapter.place(ranks, current or {}, frozenset())
    return adapter.start([Launch(Instance(r, placement[r], 0), ("x",), {}, None, round_no) for r in ranks])


def test_simulated_time_moves_only_when_the_simulator_says_so():
    a = _sim(workload={"work": 3600, "checkpoint_interval": 600}, costs={"schedule": 100, "init": 50})
    before = a.clock.wall()
    _start(a, list(range(16)))
    assert a.clock.wall() - before == 150  # placing the whole job, then starting it
    assert a.wait(30) == [] and a.clock.wall() - before == 180
    exits = a.wait(10_000)
    assert {(e.rank, e.exit_code) for e in exits} == {(r, 0) for r in range(16)}, "the job finished its work"
    assert a.clock.wall() - before == 150 + 3600
    assert a.running() == frozenset()
    kinds = [r["type"] for _, r in a.sdk_records()]
    assert "step" in kinds and "checkpoint" in kinds


def test_a_scripted_fault_exits_its_node_with_the_log_line_the_classifiers_read():
    mix = {"classes": {"hbm": {"log": ECC, "exit_code": 1, "broken": True}},
           "scripted": [{"at": 60, "fault": "hbm", "nodes": ["node-1"]}]}
    a = _sim(mix=mix)
    _start(a, list(range(16)))
    exits = a.wait(120)
    assert sorted(e.rank for e in exits) == list(range(8, 16)) and {e.exit_code for e in exits} == {1}
    assert ECC in a.log_tail(8, 4096) and ECC not in a.log_tail(0, 4096)
    a.stop(list(range(8)), 10)
    _start(a, list(range(16)), round_no=1)  # back on the broken node: it fails again
    assert {e.rank for e in a.wait(120)} == set(range(8, 16))


def test_a_hang_freezes_output_and_stacks_say_why_there_are_none():
    a = _sim(mix={"classes": {"stuck": {"hang": True}}, "scripted": [{"at": 10, "fault": "stuck"}]})
    _start(a, list(range(16)))
    assert a.wait(100) == []
    frozen = a.last_output(0)
    a.wait(100)
    assert a.last_output(0) == frozen and a.running() == frozenset(range(16))
    with pytest.raises(Exception, match="no processes"):
        a.stacks([0], 1)


def test_fault_mix_files_are_validated(tmp_path):
    with pytest.raises(ValueError, match="unknown key"):
        FaultMix.from_dict({"classes": {"x": {"rat": 1}}})
    with pytest.raises(ValueError, match="no fault class"):
        FaultMix.from_dict({"classes": {}, "scripted": [{"at": 1, "fault": "x"}]})
    path = tmp_path / "mix.yaml"
    path.write_text("classes:\n  switch: {rate: 0.5, burst: 32, log: 'NCCL WARN'}\n")
    assert FaultMix.load(path).classes["switch"].burst == 32


def test_the_real_engine_isolates_a_bad_node_and_the_job_finishes(tmp_path):
    mix = {"classes": {"hbm": {"log": ECC, "broken": True}},
           "scripted": [{"at": 3600, "fault": "hbm", "nodes": ["node-3"]}]}
    result = simulate(64, state_dir=tmp_path, policy=RESTARTS, mix=mix, spare_nodes=1,
                      workload={"work": 7200}, job_id="isolate")
    assert result.status is JobStatus.SUCCEEDED
    with RunStore(tmp_path) as store:
        (record,) = store.rounds("isolate")
    assert record.action is Action.RESCHEDULE_ISOLATED and record.error_code == "TG-GPU-ECC"
    assert record.isolated == ("node-3",)
    assert record.stages["restart"] == pytest.approx(600 + 180), "simulated seconds, not real ones"
    assert result.real_seconds < 30


def test_a_thousand_instances_failing_in_the_same_second_are_one_round_charged_once(tmp_path):
    nodes = [f"node-{i}" for i in range(125)]  # 125 nodes x 8 = 1,000 instances
    mix = {"classes": {"switch": {"log": SWITCH}},
           "scripted": [{"at": 600, "fault": "switch", "nodes": nodes, "spread": 0.9}]}
    policy = RESTARTS.replace(enable_in_place_restart=False)
    result = simulate(2000, state_dir=tmp_path, policy=policy, mix=mix, workload={"work": 3600}, job_id="burst")
    assert result.status is JobStatus.SUCCEEDED
    with RunStore(tmp_path) as store:
        rounds = store.rounds("burst")
        history = store.history("burst")
    assert len(rounds) == 1 and rounds[0].action is Action.RESTART_JOB
    assert rounds[0].error_code == "TG-NCCL-ERROR"
    assert history.budget_used == 1


def test_simultaneous_failures_of_an_async_job_are_gathered_into_one_incident(tmp_path):
    nodes = [f"node-{i}" for i in range(125)]
    mix = {"classes": {"switch": {"log": SWITCH}},
           "scripted": [{"at": 600, "fault": "switch", "nodes": nodes}]}
    policy = RESTARTS.replace(job_execution_mode=ExecutionMode.ASYNC)
    result = simulate(1000, state_dir=tmp_path, policy=policy, mix=mix, workload={"work": 3600}, job_id="async")
    assert result.status is JobStatus.SUCCEEDED
    with RunStore(tmp_path) as store:
        (record,) = store.rounds("async")
        faults = store.faults("async")
    assert record.action is Action.RESTART_INSTANCES and len(record.ranks) == 1000
    assert len([f for f in faults if f["round"] == 1]) == 1000, "every rank's fault is recorded"


def test_the_no_progress_guard_stops_a_job_that_never_gets_further(tmp_path):
    # A fault every ~2 simulated minutes and a restart of 3: no step survives a round.
    mix = {"classes": {"flaky": {"log": SWITCH, "rate": 86400 / 120 / 2}}}
    policy = RESTARTS.replace(max_rounds_without_progress=3, max_num_of_same_error=1000)
    result = simulate(16, state_dir=tmp_path, policy=policy, mix=mix, workload={"work": 36000}, job_id="stuck",
                      costs={"init": 180, "schedule": 60})
    assert result.status is JobStatus.FAILED
    with RunStore(tmp_path) as store:
        report = store.report("stuck")
    assert "no progress: 3 recovery round(s) in a row" in report["failure"]["reason"]
    assert len(report["rounds"]) == 3


def test_the_guard_leaves_a_progressing_job_alone(tmp_path):
    mix = {"classes": {"flaky": {"log": SWITCH, "rate": 86400 / 3 / 3600 / 2}}}  # one every ~3 hours
    policy = RESTARTS.replace(max_rounds_without_progress=2, max_num_of_job_restart=1000, max_num_of_same_error=1000)
    result = simulate(16, state_dir=tmp_path, policy=policy, mix=mix, workload={"work": 8 * 3600}, job_id="ok",
                      seed=3)
    assert result.status is JobStatus.SUCCEEDED
    with RunStore(tmp_path) as store:
        assert len(store.rounds("ok")) >= 2


def test_cli_runs_a_scenario_file_with_the_sim_adapter(tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(json.dumps({
        "spare_nodes": 1, "workload": {"work": 3600},
        "mix": {"classes": {"hbm": {"log": ECC, "broken": True}},
                "scripted": [{"at": 600, "fault": "hbm", "nodes": ["node-0"]}]}}))
    env = {**os.environ, "TRAINGUARD_SIM_SCENARIO": str(scenario)}
    run = subprocess.run([sys.executable, "-m", "trainguard", "run", "--adapter", "sim", "--nproc", "32", "--nodes",
                          "4", "--job-id", "cli-sim", "--state-dir", str(tmp_path / "state"),
                          "--enable-job-restart", "true", "--", "train.py"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = subprocess.run([sys.executable, "-m", "trainguard", "history", "cli-sim", "--state-dir",
                          str(tmp_path / "state"), "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(out.stdout)
    assert [r["action"] for r in report["rounds"]] == ["reschedule_isolated"]
    assert 0 < report["goodput"]["ettr"] < 1 and report["goodput"]["source"] == "sdk_steps"


def test_the_adapter_is_registered_lazily():
    registry = PluginHost(load_entry_points=False).adapters()
    spec = JobSpec(job_id="j", command=("x",), nproc=2, nodes=1)
    assert registry.create("sim", spec=spec, policy=Policy(), base_env={}, log_dir="/nonexistent").name == "sim"


def test_dry_run_logs_the_decision_and_carries_none_out(tmp_path):
    mix = {"classes": {"hbm": {"log": ECC, "broken": True}},
           "scripted": [{"at": 600, "fault": "hbm", "nodes": ["node-1"]}]}
    result = simulate(16, state_dir=tmp_path, policy=RESTARTS.replace(decide_only=True), mix=mix, spare_nodes=1,
                      workload={"work": 3600}, job_id="dry")
    assert result.status is JobStatus.FAILED, "nothing restarted the ranks: the watchdog ended the others"
    with RunStore(tmp_path) as store:
        report = store.report("dry")
        notified = [e for e in store.events("dry") if e["type"] == "fault_notified"]
    assert report["rounds"] == []
    assert "dry run: would reschedule_isolated (node fault on node-1" in notified[0]["message"]
    assert "dry run: would" in report["failure"]["reason"]


@pytest.mark.parametrize("flag", ["--dry-run", "--decide-only"])
def test_cli_dry_run_on_a_simulated_job(tmp_path, flag):
    # run --dry-run is --decide-only on every adapter but kubernetes (where it prints manifests).
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(json.dumps({"workload": {"work": 3600}, "mix": {
        "classes": {"net": {"log": SWITCH}}, "scripted": [{"at": 600, "fault": "net", "nodes": ["node-0"]}]}}))
    env = {**os.environ, "TRAINGUARD_SIM_SCENARIO": str(scenario)}
    run = subprocess.run([sys.executable, "-m", "trainguard", "run", "--adapter", "sim", flag, "--nproc", "16",
                          "--nodes", "2", "--job-id", "dry-cli", "--state-dir", str(tmp_path / "state"),
                          "--enable-job-restart", "true", "--", "train.py"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert "dry run: would restart_in_place" in run.stderr
