"""Elastic jobs (trainguard/elastic.py): scale in when a node is lost with no spare, grow back
at a later restart once the node's isolation ended; real processes, then a real gloo job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainguard import elastic
from trainguard.errors import PolicyError
from trainguard.model import (
    Action,
    Capacity,
    Category,
    ErrorSource,
    Fault,
    History,
    Incident,
    JobSpec,
    JobStatus,
    Verdict,
)
from trainguard.plugins.strategy import trainguard_decide_recovery
from trainguard.policy import build_policy

ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
TIMEOUT = ("[E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
           "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.")


@pytest.mark.parametrize(("flags", "bounds"), [
    ({"nnodes": "1:2"}, (1, 2)),
    ({"--nnodes": "3"}, (3, 3)),
    ({"min_nodes": 1}, (1, 0)),
    ({"trainguard/min-nodes": "2", "max-nodes": "4"}, (2, 4)),
])
def test_bounds_are_read_in_every_spelling(flags, bounds):
    policy = build_policy(flags)
    assert (policy.min_nodes, policy.max_nodes) == bounds


@pytest.mark.parametrize("bad", ["0:2", "3:1", "a:b", ""])
def test_bad_nnodes_names_the_flag(bad):
    with pytest.raises(PolicyError, match="--nnodes"):
        build_policy({"nnodes": bad})


def test_sizes_follow_whole_healthy_nodes():
    spec = JobSpec(job_id="j", command=("x",), nproc=8, nodes=4, slots_per_node=2)
    policy = build_policy({"nnodes": "2:3"})
    full = Capacity(("n0", "n1", "n2", "n3"), 2, 8)
    assert elastic.full_size(spec, policy) == 6 and elastic.min_size(spec, policy) == 4
    assert elastic.size_for(spec, policy, full) == 6
    two_left = Capacity(full.nodes, 2, 8, frozenset({"n0", "n3"}))
    assert elastic.size_for(spec, policy, two_left) == 4 and elastic.refusal(spec, policy, two_left) is None
    one_left = Capacity(full.nodes, 2, 8, frozenset({"n0", "n1", "n3"}))
    assert "fewer than --min-nodes=2" in elastic.refusal(spec, policy, one_left)
    assert "not elastic" in elastic.refusal(spec, build_policy({}), full)
    tf = JobSpec(job_id="j", command=("x",), nproc=2, nodes=2, framework="tensorflow", roles=(("worker", 2),))
    assert "fixed number of tasks" in elastic.refusal(tf, policy, Capacity(("n0", "n1"), 1, 2))
    assert elastic.note(4, 2, ["n1"]) == "scaled in: world size 4 -> 2 on n1"


def _decide(policy, capacity):
    fault = Fault(ErrorSource.EXIT_CODE, 100.0, rank=3, node="node-1", exit_code=1)
    verdict = Verdict(Category.GPU_HARDWARE, "TG-GPU-ECC", True, node_fault=True)
    return trainguard_decide_recovery(Incident((fault,)), verdict, History(), policy, capacity)


@pytest.mark.parametrize(("flags", "action"), [
    ({"enable_job_restart": True, "min_nodes": 1}, Action.SCALE_IN),
    ({"enable_job_restart": True, "min_nodes": 2}, Action.FAIL),  # too few nodes would be left
    ({"enable_job_restart": True}, Action.FAIL),  # not elastic: as before
    ({"enable_job_restart": True, "min_nodes": 1, "max_num_of_job_restart": 0}, Action.FAIL),  # budgeted
])
def test_the_ladder_scales_in_only_an_elastic_job_with_enough_nodes_left(flags, action):
    decision = _decide(build_policy(flags), Capacity(("node-0", "node-1"), 2, 4))
    assert decision.action is action
    if action is Action.SCALE_IN:
        assert decision.isolate == ("node-1",) and decision.consumes_budget
        assert "going on smaller on 1 node(s)" in decision.reason


def test_a_spare_still_wins_over_scaling_in():
    decision = _decide(build_policy({"enable_job_restart": True, "min_nodes": 1}),
                       Capacity(("node-0", "node-1", "node-2"), 2, 4))
    assert decision.action is Action.REPLACE_INSTANCES or decision.action is Action.RESCHEDULE_ISOLATED


def test_scale_in_renumbers_the_ranks_and_grows_back_when_the_window_ends(run_job):
    # Round 0: rank 3 (node-1) hits an ECC error: node-1 is isolated and no spare is left, so
    # the job goes on as 2 ranks on node-0. Round 1: a retryable fault after the 1 s isolation
    # window ended: the restart grows the job back to 4 ranks over both nodes.
    plan = [{"round": 0, "rank": 3, "do": "fail", "say": ECC},
            {"round": 1, "rank": 1, "do": "fail", "say": TIMEOUT, "after": 1.5}]
    run = run_job(plan, nproc=4, nodes=2, slots=2, enable_job_restart=True, nnodes="1:2", isolate_window=1)
    assert run.status is JobStatus.SUCCEEDED, run.report
    first, second = run.report["rounds"]
    assert first["action"] == "scale_in" and first["error_code"] == "TG-GPU-ECC"
    assert first["isolated_nodes"] == ["node-1"]
    assert (first["world_size_before"], first["world_size_after"]) == (4, 2)
    assert "scaled in: world size 4 -> 2 on node-0" in first["notes"]
    assert (second["world_size_before"], second["world_size_after"]) == (2, 4)
    assert any(n.startswith("grew back: world size 2 -> 4") for n in second["notes"])
    assert first["consumes_budget"] and not second["consumes_budget"]  # growth rides on a free in-place restart
    by_round = {}
    for start in run.starts:
        by_round.setdefault(start["TRAINGUARD_RESTART_ROUND"], []).append(start)
    small = sorted((s["RANK"], s["WORLD_SIZE"], s["TRAINGUARD_NODE"], s["LOCAL_RANK"]) for s in by_round["1"])
    assert small == [("0", "2", "node-0", "0"), ("1", "2", "node-0", "1")]
    grown = sorted((s["RANK"], s["WORLD_SIZE"], s["TRAINGUARD_NODE"], s["GROUP_RANK"]) for s in by_round["2"])
    assert grown == [("0", "4", "node-0", "0"), ("1", "4", "node-0", "0"),
                     ("2", "4", "node-1", "1"), ("3", "4", "node-1", "1")]
    assert len({s["MASTER_PORT"] for s in by_round["2"]}) == 1


def test_the_command_line_takes_torchruns_nnodes(tmp_path, capsys):
    import json

    from trainguard.cli import main

    rank = Path(__file__).parent / "helpers" / "rank.py"
    plan = json.dumps([{"round": 0, "rank": 3, "do": "fail", "say": ECC}])
    code = main(["run", "--nproc", "4", "--nodes", "2", "--nnodes", "1:2", "--enable-job-restart", "--job-id", "cli",
                 "--state-dir", str(tmp_path / "state"), "--tee", "0", "--env", f"TG_PLAN={plan}",
                 "--env", f"TG_RECORD={tmp_path / 'starts.jsonl'}", "--", sys.executable, str(rank)])
    assert code == 0
    capsys.readouterr()
    assert main(["history", "cli", "--state-dir", str(tmp_path / "state"), "--json"]) == 0
    (only,) = json.loads(capsys.readouterr().out)["rounds"]
    assert (only["action"], only["world_size_before"], only["world_size_after"]) == ("scale_in", 4, 2)
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--nnodes", "3:1", "--", "true"])
    assert exit_.value.code == 2 and "need 1 <= MIN <= MAX" in capsys.readouterr().err


def test_an_elastic_job_below_its_minimum_fails_as_a_static_one(run_job):
    run = run_job([{"round": 0, "rank": 3, "do": "fail", "say": ECC}], nproc=4, nodes=2, slots=2,
                  enable_job_restart=True, min_nodes=2)
    assert run.status is JobStatus.FAILED and run.report["rounds"] == []
    assert "no healthy spare capacity" in run.report["failure"]["reason"]


@pytest.mark.torch
def test_gloo_job_scales_in_on_a_node_fault_and_grows_back(tmp_path):
    pytest.importorskip("torch")
    from trainguard.demo.run import TRAIN
    from trainguard.engine import supervise
    from trainguard.store import RunStore

    # Round 0: rank 2 (node-1) hits an ECC error at step 3; round 1 runs on node-0 alone from the
    # step-2 checkpoint; at step 12 its rank 1 times out, after node-1's 2 s isolation window
    # ended, and round 2 runs on both nodes again from the step-12 checkpoint to the end.
    spec = JobSpec(
        job_id="elastic-gloo", nproc=4, nodes=2, slots_per_node=2, cwd=str(tmp_path),
        command=(sys.executable, str(TRAIN), "--steps", "16", "--checkpoint", str(tmp_path / "ck.pt"),
                 "--checkpoint-every", "2", "--step-time", "0.2"),
        env={"TRAINGUARD_DEMO_FAULTS": "0:2:3:ecc,1:1:12:nccl", "OMP_NUM_THREADS": "1"})
    policy = build_policy({"enable_job_restart": True, "nnodes": "1:2", "isolate_window": 2,
                           "stop_grace_period": 3})
    status = supervise(spec, policy, state_dir=tmp_path / "state")
    with RunStore(tmp_path / "state") as store:
        report = store.report("elastic-gloo")
    assert status is JobStatus.SUCCEEDED, report
    rounds = report["rounds"]
    assert [(r["action"], r["error_code"]) for r in rounds] == [("scale_in", "TG-GPU-ECC"),
                                                                 ("restart_in_place", "TG-NCCL-TIMEOUT")]
    assert [(r["world_size_before"], r["world_size_after"]) for r in rounds] == [(4, 2), (2, 4)]
    logs = tmp_path / "state" / "jobs" / "elastic-gloo" / "logs"
    small = (logs / "round-1" / "rank-0.log").read_text()
    assert "rank 0/2 round 1 node node-0 resuming at step 2" in small
    assert not (logs / "round-1" / "rank-2.log").exists()
    last = (logs / "round-2" / "rank-0.log").read_text()
    assert "rank 0/4 round 2" in last and "step 16/16" in last and "rank 0 finished" in last
    assert "node node-1" in (logs / "round-2" / "rank-3.log").read_text()
