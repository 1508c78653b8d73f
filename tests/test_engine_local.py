"""The supervisor loop on the local adapter, with real processes (tests/helpers/rank.py)."""

from __future__ import annotations

import json

import pytest

from trainguard.model import JobStatus

NCCL = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
USER = "KeyError: 'labels'"


def test_clean_job_sets_torchrun_and_trainguard_variables(run_job):
    run = run_job(nproc=3, nodes=2, slots=2)
    assert run.status is JobStatus.SUCCEEDED
    assert run.report["rounds"] == [] and run.report["status"] == "succeeded"
    by_rank = {s["RANK"]: s for s in run.starts}
    assert sorted(by_rank) == ["0", "1", "2"]
    assert {s["WORLD_SIZE"] for s in run.starts} == {"3"}
    assert [by_rank[r]["TRAINGUARD_NODE"] for r in "012"] == ["node-0", "node-0", "node-1"]
    assert [by_rank[r]["LOCAL_RANK"] for r in "012"] == ["0", "1", "0"]
    assert [by_rank[r]["LOCAL_WORLD_SIZE"] for r in "012"] == ["2", "2", "1"]
    assert [by_rank[r]["GROUP_RANK"] for r in "012"] == ["0", "0", "1"]
    assert len({s["MASTER_PORT"] for s in run.starts}) == 1
    for s in run.starts:
        assert (s["TRAINGUARD_JOB_ID"], s["TRAINGUARD_RESTART_ROUND"]) == (run.job_id, "0")
        assert (s["TRAINGUARD_SCHEDULE_COUNT"], s["TRAINGUARD_PROC_START_COUNT"]) == ("1", "1")


def test_retryable_fault_restarts_in_place_then_the_job(run_job):
    plan = [{"round": 0, "rank": 1, "do": "fail", "say": NCCL}, {"round": 1, "rank": 1, "do": "fail", "say": NCCL}]
    run = run_job(plan, enable_job_restart=True)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place", "restart_job"]
    first, second = run.report["rounds"]
    assert first["error_code"] == "TG-NCCL-ERROR" and first["error_source"] == "exit_code"
    assert first["instance"] == "rank-1" and first["node"] == "node-0"
    assert NCCL in first["error_message"]
    assert first["consumes_budget"] is False and second["consumes_budget"] is True
    assert run.report["restarts"] == 1
    assert set(first["stages"]) == {"diagnose", "decide", "stop", "isolate", "restart"}
    counters = [(s["TRAINGUARD_RESTART_ROUND"], s["TRAINGUARD_SCHEDULE_COUNT"], s["TRAINGUARD_PROC_START_COUNT"])
                for s in run.starts_of(0)]
    # In-place keeps the placement (process start count grows); a job restart re-places it.
    assert counters == [("0", "1", "1"), ("1", "1", "2"), ("2", "2", "1")]
    ports = [s["MASTER_PORT"] for s in run.starts_of(0)]
    assert len(set(ports)) == 3, "every whole-job start gets a fresh rendezvous port"


def test_user_error_fails_at_once_under_exit_code_and_error_msg(run_job):
    run = run_job([{"rank": 0, "do": "fail", "say": f"Traceback (most recent call last):\n{USER}"}],
                  enable_job_restart=True)
    assert run.status is JobStatus.FAILED
    assert run.actions == []
    failure = run.report["failure"]
    assert failure["action"] == "fail" and failure["error_code"] == "TG-USER-EXCEPTION"
    assert "not retryable" in failure["reason"] and failure["instance"] == "rank-0"
    assert len(run.starts) == 2, "no pointless restart"


def test_restart_disabled_by_default_fails_a_sync_job(run_job):
    run = run_job([{"round": 0, "rank": 0, "do": "fail", "say": NCCL}])
    assert run.status is JobStatus.FAILED
    assert "--enable-job-restart=False" in run.report["failure"]["reason"]


def test_never_policy_tolerates_nothing(run_job):
    run = run_job([{"round": 0, "rank": 0, "do": "fail", "say": NCCL}], enable_job_restart=True,
                  fault_tolerant_policy="never")
    assert run.status is JobStatus.FAILED and run.actions == []
    assert "Never" in run.report["failure"]["reason"]


def test_on_failure_restarts_unconditionally_then_calls_it_user_code(run_job):
    run = run_job([{"rank": 1, "do": "fail", "say": USER}], enable_job_restart=True, fault_tolerant_policy="OnFailure",
                  max_num_of_job_restart=10)
    assert run.status is JobStatus.FAILED
    assert run.actions == ["restart_job"] * 3
    assert "user-code error" in run.report["failure"]["reason"]


def test_a_failure_nothing_explains_is_restarted_then_given_up(run_job):
    """A rank that exits 1 saying nothing of why: unknown, so no free in-place restart, but no
    instant failure either; three unexplained restarts in a row end the job."""
    run = run_job([{"rank": 1, "do": "fail", "say": "exiting"}], enable_job_restart=True,
                  max_num_of_job_restart=10)
    assert run.status is JobStatus.FAILED
    assert run.actions == ["restart_job"] * 3
    failure = run.report["failure"]
    assert failure["error_code"] == "TG-UNKNOWN" and "no cause found in the log" in failure["reason"]
    assert all(r["consumes_budget"] for r in run.report["rounds"][:3])


def test_restart_budget_is_enforced(run_job):
    run = run_job([{"rank": 0, "do": "fail", "say": NCCL}], enable_job_restart=True, max_num_of_job_restart=2,
                  enable_in_place_restart=False, isolate_after_same_fault=10)
    assert run.status is JobStatus.FAILED
    assert run.actions == ["restart_job", "restart_job"]
    assert "restart budget exhausted (2 of --max-num-of-job-restart=2 used)" in run.report["failure"]["reason"]


def test_custom_retryable_keyword_makes_an_unknown_error_retryable(run_job):
    plan = [{"round": 0, "rank": 0, "do": "fail", "say": "ValueError: connect timeout to the data service"}]
    without = run_job(plan, enable_job_restart=True)
    assert without.status is JobStatus.FAILED
    run = run_job(plan, enable_job_restart=True, retryable_errors=["Connect Timeout"])
    assert run.status is JobStatus.SUCCEEDED and run.actions == ["restart_in_place"]
    assert "connect timeout" in run.report["rounds"][0]["error_message"]


def test_max_num_of_same_error(run_job):
    run = run_job([{"rank": 0, "do": "fail", "say": NCCL}], enable_job_restart=True, max_num_of_same_error=2,
                  max_num_of_job_restart=10, isolate_after_same_fault=10)
    assert run.status is JobStatus.FAILED
    assert len(run.actions) == 2
    assert "occurred 3 times on rank-0" in run.report["failure"]["reason"]


def test_async_restarts_only_the_failed_instance(run_job):
    plan = [{"round": 0, "rank": 2, "do": "fail", "say": NCCL}, {"rank": 0, "do": "sleep", "seconds": 2}]
    run = run_job(plan, nproc=3, job_execution_mode="async")
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_instances"]
    assert len(run.starts_of(0)) == 1 and len(run.starts_of(1)) == 1, "healthy instances are left alone"
    restarted = run.starts_of(2)
    assert [(s["TRAINGUARD_SCHEDULE_COUNT"], s["TRAINGUARD_PROC_START_COUNT"]) for s in restarted] == [
        ("1", "1"), ("1", "2")]
    assert restarted[0]["MASTER_PORT"] == restarted[1]["MASTER_PORT"]


def test_async_correlated_failures_are_one_round(run_job):
    plan = [{"round": 0, "rank": 1, "do": "fail", "say": NCCL, "after": 0.3},
            {"round": 0, "rank": 2, "do": "fail", "say": NCCL, "after": 0.35},
            {"rank": 0, "do": "sleep", "seconds": 2}]
    run = run_job(plan, nproc=3, job_execution_mode="Async", failure_window=0.5)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_instances"]
    assert run.report["rounds"][0]["instance"] == "rank-1", "the first failure in time is the root cause"
    assert len(run.starts_of(1)) == 2 and len(run.starts_of(2)) == 2


def test_sync_cascade_is_one_round_with_the_first_failure_as_root(run_job):
    # rank 0 dies first; its peers die of it a moment later, as gloo peers do.
    plan = [{"round": 0, "rank": 0, "do": "fail", "say": NCCL, "after": 0.2},
            {"round": 0, "do": "fail", "say": "RuntimeError: Connection reset by peer", "after": 0.25}]
    run = run_job(plan, nproc=4, enable_job_restart=True)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place"]
    assert run.report["rounds"][0]["instance"] == "rank-0"
    assert run.report["rounds"][0]["error_code"] == "TG-NCCL-ERROR"


def test_failure_rate_limit_counts_async_failures(run_job):
    plan = [{"round": 0, "rank": r, "do": "fail", "say": NCCL, "after": 0.3} for r in (1, 2)]
    run = run_job(plan + [{"rank": 0, "do": "sleep", "seconds": 1}], nproc=4, job_execution_mode="Async",
                  max_tolerated_failure_rate=0.3, failure_window=0.5)
    assert run.status is JobStatus.FAILED
    assert "2 of 4 instances failed" in run.report["failure"]["reason"]


def test_node_fault_isolates_the_node_and_moves_to_the_spare(run_job):
    plan = [{"node": "node-1", "rank": 3, "do": "fail", "say": ECC}]
    run = run_job(plan, nproc=4, nodes=3, slots=2, enable_job_restart=True)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["reschedule_isolated"]
    rnd = run.report["rounds"][0]
    assert (rnd["node"], rnd["error_code"], rnd["isolated_nodes"]) == ("node-1", "TG-GPU-ECC", ["node-1"])
    after = {s["RANK"]: s["TRAINGUARD_NODE"] for s in run.starts if s["TRAINGUARD_RESTART_ROUND"] == "1"}
    assert after == {"0": "node-0", "1": "node-0", "2": "node-2", "3": "node-2"}
    assert all(s["TRAINGUARD_SCHEDULE_COUNT"] == "2" for s in run.starts if s["TRAINGUARD_RESTART_ROUND"] == "1")


def test_node_fault_without_spare_capacity_fails(run_job):
    run = run_job([{"rank": 1, "do": "fail", "say": ECC}], nproc=2, nodes=1, enable_job_restart=True)
    assert run.status is JobStatus.FAILED
    assert "no healthy spare capacity" in run.report["failure"]["reason"]
    assert run.report["failure"]["error_code"] == "TG-GPU-ECC"


def test_same_fault_three_times_on_a_node_isolates_it(run_job):
    plan = [{"node": "node-0", "rank": 0, "do": "fail", "say": NCCL}]
    run = run_job(plan, nproc=2, nodes=2, slots=2, enable_job_restart=True)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place", "restart_job", "reschedule_isolated"]
    assert run.report["rounds"][2]["isolated_nodes"] == ["node-0"]
    assert "3 times in a row on node-0" in run.report["rounds"][2]["reason"]
    assert {s["TRAINGUARD_NODE"] for s in run.starts if s["TRAINGUARD_RESTART_ROUND"] == "3"} == {"node-1"}


def test_pod_level_rescheduling_moves_only_the_ranks_of_the_bad_node(run_job):
    plan = [{"node": "node-1", "do": "fail", "say": ECC}]
    run = run_job(plan, nproc=4, nodes=3, slots=2, enable_job_restart=True, max_num_of_pod_restart=1)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["replace_instances"]
    after = {s["RANK"]: (s["TRAINGUARD_NODE"], s["TRAINGUARD_SCHEDULE_COUNT"], s["TRAINGUARD_PROC_START_COUNT"])
             for s in run.starts if s["TRAINGUARD_RESTART_ROUND"] == "1"}
    assert after == {"0": ("node-0", "1", "2"), "1": ("node-0", "1", "2"),
                     "2": ("node-2", "2", "1"), "3": ("node-2", "2", "1")}


def test_async_node_fault_replaces_the_instances_of_that_node(run_job):
    plan = [{"node": "node-1", "round": 0, "rank": 2, "do": "fail", "say": ECC},
            {"rank": 0, "do": "sleep", "seconds": 2}]
    run = run_job(plan, nproc=4, nodes=3, slots=2, job_execution_mode="Async")
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["replace_instances"]
    moved = {s["RANK"]: s["TRAINGUARD_NODE"] for s in run.starts if s["TRAINGUARD_RESTART_ROUND"] == "1"}
    assert moved == {"2": "node-2", "3": "node-2"}
    assert len(run.starts_of(0)) == 1


def test_hang_is_detected_and_restarted_in_place_without_budget(run_job):
    run = run_job([{"round": 0, "rank": 1, "do": "hang"}, {"round": 0, "rank": 0, "do": "hang"}],
                  enable_job_restart=True, enable_job_hang_detection=True, job_hang_interval=1.5,
                  max_num_of_job_restart=0)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place"]
    rnd = run.report["rounds"][0]
    assert rnd["error_source"] == "hang" and rnd["error_code"] == "TG-HANG" and rnd["consumes_budget"] is False


def test_one_chatty_rank_is_progress_not_a_hang(run_job):
    plan = [{"rank": 0, "do": "chatty", "seconds": 3}, {"rank": 1, "do": "sleep", "seconds": 3}]
    run = run_job(plan, enable_job_restart=True, enable_job_hang_detection=True, job_hang_interval=1.5)
    assert run.status is JobStatus.SUCCEEDED and run.actions == []


def test_repeated_hangs_fail_the_job(run_job):
    run = run_job([{"do": "hang"}], enable_job_restart=True, enable_job_hang_detection=True, job_hang_interval=1,
                  max_consecutive_hang_restarts=2)
    assert run.status is JobStatus.FAILED
    assert run.actions == ["restart_in_place", "restart_in_place"]
    assert "hung again after 2 restarts" in run.report["failure"]["reason"]


def test_exit_hang(run_job):
    plan = [{"round": 0, "rank": 1, "do": "chatty-hang"}]
    run = run_job(plan, enable_job_restart=True, enable_job_exit_hang_detection=True, job_exit_hang_interval=1)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place"]
    assert run.report["rounds"][0]["error_source"] == "exit_hang"
    assert "rank(s) 1 still running" in run.report["rounds"][0]["error_message"]


def test_events_file_gets_every_event(run_job, tmp_path):
    events = tmp_path / "events.jsonl"
    run_job([{"round": 0, "rank": 0, "do": "fail", "say": NCCL}], enable_job_restart=True, events_file=events)
    kinds = [json.loads(line)["type"] for line in events.read_text().splitlines()]
    assert kinds[0] == "job_started" and kinds[-1] == "job_succeeded"
    for kind in ("fault_detected", "round_started", "round_finished"):
        assert kind in kinds
    first = json.loads(events.read_text().splitlines()[0])
    assert first["at"].endswith("Z") and len(first["at"]) == 24


@pytest.mark.parametrize("signame", ["SIGSEGV", "SIGKILL"])
def test_fatal_signals_are_classified(run_job, signame):
    run = run_job([{"round": 0, "rank": 0, "do": "signal", "sig": signame}], enable_job_restart=True)
    if signame == "SIGSEGV":
        assert run.status is JobStatus.SUCCEEDED and run.report["rounds"][0]["error_code"] == "TG-SIGSEGV"
        assert "killed by SIGSEGV" in run.report["rounds"][0]["error_message"]
    else:
        # SIGKILL with nothing in the log is most likely the OOM killer: no free retry.
        assert run.status is JobStatus.FAILED and run.report["failure"]["error_code"] == "TG-SIGKILL"


def test_warm_standbys_take_over_restarted_ranks(run_job, monkeypatch):
    # Failures come within a second: spares need not wait for the cold first start to settle.
    monkeypatch.setenv("TRAINGUARD_SPARE_DELAY", "0")
    plan = [{"round": 0, "rank": 1, "do": "fail", "say": NCCL},
            {"round": 1, "rank": 0, "do": "fail", "say": NCCL, "code": 3}]
    run = run_job(plan, enable_job_restart=True, warm_standby=True, preload=["json"])
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place", "restart_job"]
    by_round = {}
    for start in run.starts:
        by_round.setdefault(start["TRAINGUARD_RESTART_ROUND"], []).append(start)
    assert not any("standby.py" in " ".join(s["cmdline"]) for s in by_round["0"]), "first start is cold"
    for rnd in ("1", "2"):
        assert all(s["cmdline"][-1].endswith("standby.py") for s in by_round[rnd])
        assert sorted(s["RANK"] for s in by_round[rnd]) == ["0", "1"]
    assert "exited with code 3" in run.report["rounds"][1]["error_message"], "the script's exit code comes through"
    assert [(s["TRAINGUARD_SCHEDULE_COUNT"], s["TRAINGUARD_PROC_START_COUNT"]) for s in run.starts_of(0)] == [
        ("1", "1"), ("1", "2"), ("2", "1")]
