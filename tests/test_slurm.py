"""The Slurm adapter on a real Slurm cluster on localhost (three emulated nodes: munged,
slurmctld and three slurmd from Debian's slurm-wlm, started by tests/slurm_cluster.py and
always torn down by pid). Jobs are submitted with sbatch; the batch script runs
``trainguard run --adapter slurm`` and ranks become srun steps in the allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import RANK_SCRIPT, REPO
from slurm_cluster import LocalSlurmCluster, require_slurm
from trainguard.store import RunStore

pytestmark = pytest.mark.slurm

NCCL = "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


@pytest.fixture(scope="module")
def cluster():
    require_slurm()
    cluster = LocalSlurmCluster(nodes=3).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def submit(cluster, tmp_path, plan, *options, nodes=3, nproc=2, run_nodes=2, timeout=90, during=None,
           sbatch=(), ended=("",)):
    """sbatch a script running trainguard with the slurm adapter; wait for it; return the history.

    The job has ended when squeue shows one of the ``ended`` states ("" once it left the queue;
    "CG" while Slurm still cleans up after its script ended).
    """
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n"
                      f"exec {sys.executable} -m trainguard --log-level WARNING run --adapter slurm --nproc {nproc} "
                      f"--nodes {run_nodes} --state-dir {tmp_path / 'state'} --stop-grace-period 2 "
                      f"{' '.join(options)} -- {sys.executable} {RANK_SCRIPT}\n")
    env = {**cluster.env, "TG_PLAN": json.dumps(plan), "TG_RECORD": str(tmp_path / "starts.jsonl"),
           "PYTHONPATH": str(REPO), "TG_WORK": "0.5"}
    out = subprocess.run(["sbatch", f"--nodes={nodes}", "--parsable", "--open-mode=append",
                          f"--output={tmp_path / 'batch.out'}", *sbatch, str(script)],
                         env=env, capture_output=True, text=True, check=True)
    job = out.stdout.strip().split(";")[0]
    if during:
        during(job)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cluster.run("squeue", "--noheader", "--format=%t", f"--jobs={job}").stdout.strip() in ended:
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"job {job} still queued or running after {timeout} s: {(tmp_path / 'batch.out').read_text()}")
    store = RunStore(tmp_path / "state")
    try:
        report = store.report(f"slurm-{job}")
    finally:
        store.close()
    path = tmp_path / "starts.jsonl"
    starts = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return report, starts, (tmp_path / "batch.out").read_text()


def test_ranks_run_as_steps_and_a_retryable_failure_restarts_in_place(cluster, tmp_path):
    report, starts, batch = submit(cluster, tmp_path, [{"round": 0, "rank": 1, "do": "fail", "say": NCCL}],
                                   "--enable-job-restart")
    assert report["status"] == "succeeded", batch
    assert [r["action"] for r in report["rounds"]] == ["restart_in_place"]
    assert report["rounds"][0]["node"] == "tg2" and report["rounds"][0]["error_code"] == "TG-NCCL-ERROR"
    # --nodes 2 of a 3-node allocation: one rank a node, the third node spare.
    assert {(s["RANK"], s["TRAINGUARD_NODE"], s["SLURMD_NODENAME"]) for s in starts} == {
        ("0", "tg1", "tg1"), ("1", "tg2", "tg2")}
    assert all(s["SLURM_STEP_ID"] is not None for s in starts), "every rank is a step of the allocation"
    assert len({s["SLURM_STEP_ID"] for s in starts}) == 4
    restarted = [s for s in starts if s["TRAINGUARD_RESTART_ROUND"] == "1"]
    assert {(s["TRAINGUARD_SCHEDULE_COUNT"], s["TRAINGUARD_PROC_START_COUNT"]) for s in restarted} == {("1", "2")}


def test_async_restarts_only_the_failed_task(cluster, tmp_path):
    plan = [{"round": 0, "rank": 1, "do": "fail", "say": NCCL}, {"rank": 0, "do": "sleep", "seconds": 4}]
    report, starts, batch = submit(cluster, tmp_path, plan, "--job-execution-mode=Async", nproc=2)
    assert report["status"] == "succeeded", batch
    assert [r["action"] for r in report["rounds"]] == ["restart_instances"]
    assert len([s for s in starts if s["RANK"] == "0"]) == 1 and len([s for s in starts if s["RANK"] == "1"]) == 2


def test_a_node_fault_isolates_the_node_and_moves_to_the_spare(cluster, tmp_path):
    plan = [{"node": "tg2", "do": "fail", "say": ECC}]
    report, starts, batch = submit(cluster, tmp_path, plan, "--enable-job-restart", nproc=2, run_nodes=2)
    assert report["status"] == "succeeded", batch
    (rnd,) = report["rounds"]
    assert (rnd["action"], rnd["node"], rnd["isolated_nodes"]) == ("reschedule_isolated", "tg2", ["tg2"])
    after = {s["RANK"]: s["SLURMD_NODENAME"] for s in starts if s["TRAINGUARD_RESTART_ROUND"] == "1"}
    assert after == {"0": "tg1", "1": "tg3"}


def test_no_spare_left_requeues_without_the_bad_node_and_keeps_the_history(cluster, tmp_path):
    plan = [{"node": "tg2", "do": "fail", "say": ECC}]
    try:
        report, starts, batch = submit(cluster, tmp_path, plan, "--enable-job-restart", "--drain-bad-nodes",
                                       nodes=2, run_nodes=2, sbatch=["--requeue"], timeout=120)
        drained = cluster.run("sinfo", "--noheader", "--nodes=tg2", "--format=%t %E").stdout
    finally:
        cluster.run("scontrol", "update", "NodeName=tg2", "State=RESUME")
    assert report["status"] == "succeeded", batch
    (rnd,) = report["rounds"]
    assert (rnd["action"], rnd["result"], rnd["node"], rnd["isolated_nodes"]) == (
        "reschedule_isolated", "requeued", "tg2", ["tg2"])
    assert drained.startswith("drain") and "TG-GPU-ECC" in drained, drained
    first = [s for s in starts if s["SLURM_RESTART_COUNT"] is None]
    second = [s for s in starts if s["SLURM_RESTART_COUNT"] == "1"]
    assert {s["SLURMD_NODENAME"] for s in first} == {"tg1", "tg2"}
    assert {s["SLURMD_NODENAME"] for s in second} == {"tg1", "tg3"}, "the drained node is not allocated again"
    assert {s["TRAINGUARD_SCHEDULE_COUNT"] for s in second} == {"2"}
    assert report["restarts"] == 1, "the budget used before the requeue is still counted"


def test_the_sdk_works_unchanged_under_slurm(cluster, tmp_path):
    script = tmp_path / "sdk.sh"
    code = ("from trainguard import job_monitor as jm; import os; "
            "jm.Monitor().send_custom_message(content='hello from ' + os.environ['SLURMD_NODENAME'])")
    script.write_text(f"#!/bin/bash\nexec {sys.executable} -m trainguard --log-level WARNING run --adapter slurm "
                      f"--nproc 2 --nodes 2 --state-dir {tmp_path / 'state'} -- {sys.executable} -c \"{code}\"\n")
    out = subprocess.run(["sbatch", "--nodes=2", "--parsable", "--wait", f"--output={tmp_path / 'out.txt'}",
                          str(script)], env={**cluster.env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                         timeout=90)
    job = out.stdout.strip().split(";")[0]
    store = RunStore(tmp_path / "state")
    messages = sorted(e["message"] for e in store.events(f"slurm-{job}") if e["type"] == "sdk_message")
    store.close()
    nodes = {m.removeprefix("hello from ") for m in messages}
    assert len(messages) == 2 and len(nodes) == 2 and nodes <= {"tg1", "tg2", "tg3"}, (tmp_path / "out.txt").read_text()


def test_a_hang_is_caught_with_stacks_taken_inside_the_allocation(cluster, tmp_path):
    plan = [{"round": 0, "do": "hang"}]
    report, _, batch = submit(cluster, tmp_path, plan, "--enable-job-restart", "--enable-job-hang-detection",
                              "--job-hang-interval 2")
    assert report["status"] == "succeeded", batch
    (rnd,) = report["rounds"]
    assert rnd["error_source"] == "hang"
    frames = [f for group in rnd["stacks"] for f in group["frames"]]
    assert any(f.startswith("main (") and "rank.py" in f for f in frames), rnd["stacks"]
    assert sorted({r for group in rnd["stacks"] for r in group["ranks"]}) == [0, 1]


def test_a_slurmctld_restart_is_not_a_job_failure(cluster, tmp_path):
    def restart_controller(job):
        deadline = time.time() + 30
        while time.time() < deadline and not (tmp_path / "starts.jsonl").exists():
            time.sleep(0.1)
        cluster.stop_slurmctld()
        time.sleep(3)
        cluster.start_slurmctld()

    plan = [{"do": "sleep", "seconds": 6}]
    report, starts, batch = submit(cluster, tmp_path, plan, "--enable-job-restart", during=restart_controller)
    assert report["status"] == "succeeded", batch
    assert report["rounds"] == [] and len(starts) == 2


def test_outside_an_allocation_is_one_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = subprocess.run([sys.executable, "-m", "trainguard", "run", "--adapter", "slurm", "--state-dir",
                             str(tmp_path), "--", "true"], capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "trainguard: error: slurm: not inside a Slurm allocation (SLURM_JOB_ID is unset): run trainguard from an "
        "sbatch script, or use trainguard sbatch"]


def test_asking_for_more_nodes_than_the_allocation_has(cluster, tmp_path):
    script = tmp_path / "big.sh"
    script.write_text(f"#!/bin/bash\n{sys.executable} -m trainguard run --adapter slurm --nodes 3 --nproc 3 "
                      f"--state-dir {tmp_path / 'state'} -- true\necho exit=$?\n")
    out = subprocess.run(["sbatch", "--nodes=1", "--parsable", "--wait", f"--output={tmp_path / 'big.out'}",
                          str(script)], env={**cluster.env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                         timeout=60)
    text = (tmp_path / "big.out").read_text()
    assert "the allocation has 1 node(s)" in text and "--nodes 3 needs more" in text and "exit=2" in text, (out, text)


def test_trainguard_sbatch_submits_a_supervised_job(cluster, tmp_path):
    env = {**cluster.env, "PYTHONPATH": str(REPO), "TG_RECORD": str(tmp_path / "starts.jsonl"),
           "TG_PLAN": json.dumps([{"round": 0, "rank": 0, "do": "fail", "say": NCCL}])}
    out = subprocess.run([sys.executable, "-m", "trainguard", "sbatch", "--nproc", "2", "--nodes", "2",
                          "--enable-job-restart", "--state-dir", str(tmp_path / "state"), "--",
                          "--nodes=2", f"--output={tmp_path / 'out.txt'}", sys.executable, str(RANK_SCRIPT)],
                         env=env, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    job = out.stdout.split("submitted Slurm job ")[1].split(";")[0]
    deadline = time.time() + 60
    while time.time() < deadline and cluster.run("squeue", "--noheader", f"--jobs={job}").stdout.strip():
        time.sleep(0.3)
    store = RunStore(tmp_path / "state")
    report = store.report(f"slurm-{job}")
    store.close()
    assert report["status"] == "succeeded" and [r["action"] for r in report["rounds"]] == ["restart_in_place"]


def test_an_sbatch_refusal_is_one_clear_line(cluster, tmp_path):
    out = subprocess.run([sys.executable, "-m", "trainguard", "sbatch", "--nproc", "2", "--state-dir",
                          str(tmp_path), "--", "--partition=nope", "true"], env={**cluster.env, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("trainguard: error: slurm: sbatch --parsable:") and "nvalid partition" in line, line


def test_squeue_json_schemas_old_and_new():
    from trainguard.adapters.slurm_submit import parse_scontrol_job, parse_squeue_json

    old = json.dumps({"jobs": [{"job_id": 7, "job_state": "FAILED", "state_reason": "NonZeroExitCode",
                                "nodes": "tg[1-2]", "exit_code": 768}]})
    new = json.dumps({"jobs": [{"job_id": 7, "job_state": ["NODE_FAIL"], "state_reason": "None", "nodes": "tg2",
                                "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "number": 3}}}]})
    assert parse_squeue_json(old, "7").__dict__ == {"state": "FAILED", "reason": "NonZeroExitCode",
                                                    "nodes": "tg[1-2]", "exit_code": 3}
    assert (parse_squeue_json(new, "7").state, parse_squeue_json(new, "7").exit_code) == ("NODE_FAIL", 3)
    assert parse_squeue_json(new, "8") is None and parse_squeue_json("not json", "7") is None
    text = "JobId=7 JobName=x JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15 NodeList=tg1"
    assert parse_scontrol_job(text).__dict__ == {"state": "TIMEOUT", "reason": "TimeLimit", "nodes": "tg1",
                                                 "exit_code": 0}


def submit_from_outside(cluster, tmp_path, plan, *options, during=None, timeout=180):
    env = {**cluster.env, "PYTHONPATH": str(REPO), "TG_RECORD": str(tmp_path / "starts.jsonl"),
           "TG_PLAN": json.dumps(plan), "TG_WORK": "0.5"}
    proc = subprocess.Popen([sys.executable, "-m", "trainguard", "--log-level", "WARNING", "run", "--adapter",
                             "slurm", "--submit", "--sbatch-option=--nodes=2", "--job-id", "outside", "--nproc", "2",
                             "--nodes", "2", "--state-dir", str(tmp_path / "state"), *options, "--", sys.executable,
                             str(RANK_SCRIPT)], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if during:
        during()
    out, err = proc.communicate(timeout=timeout)
    store = RunStore(tmp_path / "state")
    report, events = store.report("outside"), list(store.events("outside"))
    store.close()
    path = tmp_path / "starts.jsonl"
    starts = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return proc.returncode, report, events, starts, out + err


def test_a_node_failure_outside_the_allocation_resubmits_without_the_node(cluster, tmp_path):
    def fail_a_node():
        deadline = time.time() + 60
        while time.time() < deadline:
            path = tmp_path / "starts.jsonl"
            if path.exists() and '"RANK": "1"' in path.read_text():
                break
            time.sleep(0.2)
        starts = [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]
        node = next(s["SLURMD_NODENAME"] for s in starts if s["RANK"] == "1")
        # A crash: the node's slurmd is gone (so it cannot come back by itself) and it is down.
        cluster.stop_slurmd(node)
        cluster.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=test-crash", check=True)
        failed.append(node)

    failed: list[str] = []
    try:
        # --no-requeue: Slurm would otherwise requeue the job itself (and the inner supervisor
        # resume it); this exercises trainguard's own resubmission.
        code, report, events, starts, output = submit_from_outside(
            cluster, tmp_path, [{"round": 0, "do": "sleep", "seconds": 8}], "--enable-job-restart",
            "--sbatch-option=--no-requeue", during=fail_a_node)
    finally:
        for node in failed:
            cluster.start_slurmd(node)
            cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    assert code == 0, output
    assert report["status"] == "succeeded"
    kinds = [e["type"] for e in events]
    assert kinds.count("slurm_submitted") == 2 and "slurm_resubmitting" in kinds, kinds
    (resubmit,) = [e for e in events if e["type"] == "slurm_resubmitting"]
    assert "NODE_FAIL" in resubmit["message"] and resubmit["data"]["exclude"] == failed
    second = {s["SLURMD_NODENAME"] for s in starts[2:]}
    assert second and failed[0] not in second


def test_a_user_error_outside_the_allocation_is_not_resubmitted(cluster, tmp_path):
    code, report, events, _, output = submit_from_outside(
        cluster, tmp_path, [{"rank": 0, "do": "fail", "say": "KeyError: 'labels'"}], "--enable-job-restart")
    assert code == 1, output
    assert report["status"] == "failed" and report["failure"]["error_code"] == "TG-USER-EXCEPTION"
    assert [e["type"] for e in events].count("slurm_submitted") == 1


def test_a_cancelled_allocation_is_recorded_as_the_jobs_failure(cluster, tmp_path):
    def cancel_once_running():
        deadline = time.time() + 60
        while time.time() < deadline and not (tmp_path / "starts.jsonl").exists():
            time.sleep(0.2)
        store = RunStore(tmp_path / "state")
        try:
            (submitted,) = [e for e in store.events("outside") if e["type"] == "slurm_submitted"]
        finally:
            store.close()
        cluster.run("scancel", submitted["data"]["slurm_job"], check=True)

    code, report, events, _, output = submit_from_outside(
        cluster, tmp_path, [{"round": 0, "do": "sleep", "seconds": 30}], "--enable-job-restart",
        during=cancel_once_running)
    assert code == 1, output
    # The inner supervisor was cut off (SIGTERM); the outer one decided, and the history says so.
    assert report["status"] == "failed"
    failure = report["failure"]
    assert (failure["error_code"], failure["action"], failure["transient"]) == ("TG-CANCELLED", "fail", False)
    assert "ended CANCELLED" in failure["reason"] and [e["type"] for e in events].count("slurm_submitted") == 1


@pytest.fixture
def own_cluster():
    """A 2-node cluster of the test's own: after a controller outage, Slurm takes a minute to
    clean up the steps whose srun was stopped meanwhile, and the next job would wait for that."""
    require_slurm()
    own = LocalSlurmCluster(nodes=2).start()
    try:
        yield own
    finally:
        own.stop()


def _wait_for_ranks(tmp_path, count, timeout=30):
    deadline = time.time() + timeout
    path = tmp_path / "starts.jsonl"
    while time.time() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{count} rank(s) did not start within {timeout} s")


def test_a_controller_outage_around_a_fault_is_waited_out_in_the_same_round(own_cluster, tmp_path):
    # Rank 1 fails 1 s in while slurmctld answers nothing for 20 s: rank 0 cannot be signalled
    # through Slurm (its srun is stopped instead, the step cancelled once the controller is back)
    # and the new steps cannot be created until it is back. One round, recovered once running.
    plan = [{"round": 0, "rank": 1, "do": "fail", "say": NCCL, "after": 1},
            {"round": 0, "rank": 0, "do": "sleep", "seconds": 30}]
    resumed = []

    def pause(job):
        _wait_for_ranks(tmp_path, 2)
        resumed.append(own_cluster.pause_slurmctld(20))

    began = time.time()
    # Slurm itself takes a minute to clean up the steps whose srun was stopped during the outage.
    report, starts, batch = submit(own_cluster, tmp_path, plan, "--enable-job-restart", during=pause, nodes=2,
                                   timeout=50, ended=("", "CG"))
    resumed[0].join()
    assert report["status"] == "succeeded", batch
    (rnd,) = report["rounds"]
    assert (rnd["action"], rnd["result"], rnd["error_code"]) == ("restart_in_place", "recovered", "TG-NCCL-ERROR")
    # The round is recovered only once the ranks run, and it says what it waited for and how long.
    assert rnd["stages"]["scheduler_wait"] > 8 and rnd["stages"]["restart"] < 5, rnd["stages"]
    assert any("for the scheduler" in note for note in rnd["notes"]), rnd
    assert "waited" in batch and "for the scheduler" in batch, batch
    assert sorted(s["RANK"] for s in starts if s["TRAINGUARD_RESTART_ROUND"] == "1") == ["0", "1"]
    assert time.time() - began < 60


def test_an_outage_past_the_tolerance_fails_the_job_transiently(own_cluster, tmp_path):
    plan = [{"round": 0, "rank": 1, "do": "fail", "say": NCCL, "after": 1}, {"round": 0, "rank": 0, "do": "ok"}]
    resumed = []

    def pause(job):
        _wait_for_ranks(tmp_path, 2)
        resumed.append(own_cluster.pause_slurmctld(15))

    report, starts, batch = submit(own_cluster, tmp_path, plan, "--enable-job-restart",
                                   "--scheduler-outage-tolerance 5", during=pause, nodes=2, timeout=50,
                                   ended=("", "CG"))
    resumed[0].join()
    assert report["status"] == "failed", batch
    (rnd,) = report["rounds"]
    assert rnd["result"] == "failed", "a step that never launched is not recovered"
    failure = report["failure"]
    assert (failure["error_code"], failure["transient"], failure["action"]) == ("TG-START-FAILED", True, "fail")
    assert "--scheduler-outage-tolerance 5 s" in failure["error_message"], failure
    assert "Unable to confirm allocation" in failure["error_message"], failure
    assert not [s for s in starts if s["TRAINGUARD_RESTART_ROUND"] == "1"], "no rank of round 1 ever ran"
    # srun's complaints went to a launch log, not to the rank's log that its faults are judged by.
    logs = tmp_path / "state" / "jobs" / report["job_id"] / "logs" / "round-1"
    assert "Unable to confirm allocation" in (logs / "rank-1.launch.log").read_text()
    assert "Unable to confirm allocation" not in (logs / "rank-1.log").read_text()


def test_a_stop_signal_while_waiting_out_an_outage_is_acted_on_at_once(own_cluster, tmp_path):
    """Slurm sends SIGTERM and, KillWait seconds later, SIGKILL: a supervisor that waits out a
    controller outage (up to --scheduler-outage-tolerance) before acting on it is killed with its
    work unrecorded. The wait is where a stop signal is acted on."""
    import signal

    plan = [{"round": 0, "rank": 1, "do": "fail", "say": NCCL, "after": 1},
            {"round": 0, "rank": 0, "do": "sleep", "seconds": 30}]
    resumed, stopped = [], {}

    def stop_during_the_outage(job):
        _wait_for_ranks(tmp_path, 2)
        resumed.append(own_cluster.pause_slurmctld(30))
        batch, deadline = tmp_path / "batch.out", time.time() + 20
        while time.time() < deadline and "round_started" not in (batch.read_text() if batch.exists() else ""):
            time.sleep(0.1)
        time.sleep(4)  # the old steps are stopped (grace 2 s); the new ones wait for the controller
        found = subprocess.run(["pgrep", "-f", f"trainguard .*--state-dir {tmp_path / 'state'}"],
                               capture_output=True, text=True).stdout.split()
        assert len(found) == 1, found
        pid = int(found[0])
        began = time.time()
        os.kill(pid, signal.SIGTERM)
        while time.time() - began < 20 and os.path.exists(f"/proc/{pid}") and \
                open(f"/proc/{pid}/stat").read().split()[2] != "Z":
            time.sleep(0.05)
        stopped["seconds"] = time.time() - began
        stopped["paused"] = own_cluster._paused

    report, starts, batch = submit(own_cluster, tmp_path, plan, "--enable-job-restart",
                                   "--scheduler-outage-tolerance 120", during=stop_during_the_outage, nodes=2,
                                   timeout=90, ended=("", "CG"))
    resumed[0].join()
    # Acted on while the controller still answers nothing: stopping the launched steps then takes
    # one unanswered scancel (2 s) and srun's stop grace (2 s); the outage itself lasts 30 s.
    assert stopped["paused"] and stopped["seconds"] < 10, (stopped, batch)
    assert report["status"] == "failed" and report["failure"]["error_code"] == "TG-INTERRUPTED", batch
    (rnd,) = report["rounds"]
    assert rnd["result"] == "interrupted", rnd
    assert not [s for s in starts if s["TRAINGUARD_RESTART_ROUND"] == "1"], "no rank of round 1 ran"


def test_a_bare_run_inside_an_allocation_takes_its_ranks_and_nodes_from_it(cluster, tmp_path):
    script = tmp_path / "bare.sh"
    script.write_text(f"#!/bin/bash\nexec {sys.executable} -m trainguard run --state-dir {tmp_path / 'state'} "
                      f"-- {sys.executable} {RANK_SCRIPT}\n")
    env = {**cluster.env, "PYTHONPATH": str(REPO), "TG_RECORD": str(tmp_path / "starts.jsonl")}
    out = subprocess.run(["sbatch", "-N2", "-n2", "--parsable", "--wait", f"--output={tmp_path / 'out.txt'}",
                          str(script)], env=env, capture_output=True, text=True, timeout=60)
    job = out.stdout.strip().split(";")[0]
    text = (tmp_path / "out.txt").read_text()
    assert out.returncode == 0, text
    starts = [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert sorted((s["RANK"], s["WORLD_SIZE"]) for s in starts) == [("0", "2"), ("1", "2")]
    assert {s["SLURMD_NODENAME"] for s in starts} == {"tg1", "tg2"} and all(s["SLURM_STEP_ID"] for s in starts)
    assert (f"inside Slurm allocation {job}: the slurm adapter, --nodes 2, --nproc 2 from the allocation"
            in text), text
    store = RunStore(tmp_path / "state")
    try:
        assert store.report(f"slurm-{job}")["status"] == "succeeded"
    finally:
        store.close()


@pytest.mark.parametrize("given, env, expected", [
    ((None, None, None), {}, ("local", 1, 1)),
    ((None, None, None), {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "2"}, ("slurm", 2, 2)),
    ((None, None, None), {"SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "4"}, ("slurm", 8, 2)),
    ((None, None, None), {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "8"},
     ("slurm", 16, 2)),
    ((None, None, None), {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "3"}, ("slurm", 3, 3)),
    (("slurm", 4, None), {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "2"}, ("slurm", 4, 2)),
    (("local", None, None), {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "2"}, ("local", 1, 1)),
    ((None, 0, None), {}, ("local", 0, 1)),  # given values are kept, to be refused as given
    ((None, 0, 0), {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2"}, ("slurm", 0, 0)),
])
def test_run_shape_from_the_allocation(given, env, expected):
    from trainguard.adapters.slurm_alloc import run_shape

    shape = run_shape(*given, env)
    assert (shape.adapter, shape.nproc, shape.nodes) == expected


def test_an_unreachable_controller_outside_the_allocation_is_a_transient_failure(own_cluster, tmp_path):
    resumed = own_cluster.pause_slurmctld(8)
    try:
        code, report, events, _, output = submit_from_outside(own_cluster, tmp_path, [{"do": "ok"}],
                                                              "--scheduler-outage-tolerance", "3", timeout=60)
    finally:
        resumed.join()
    assert code == 1, output
    failure = report["failure"]
    assert (failure["error_code"], failure["transient"], failure["action"]) == ("TG-SLURM-CONTROLLER", True, "fail")
    assert "slurmctld did not answer sbatch" in failure["error_message"], failure
    assert [e["type"] for e in events].count("job_failed") == 1


# What srun printed on the test cluster (22.05) when its step did not launch.
CONFIRM = ("srun: error: Unable to confirm allocation for job 3: Socket timed out on send/recv operation\n"
           "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 3\n")


@pytest.mark.parametrize("text, outage, message", [
    (CONFIRM, True, "srun: error: Unable to confirm allocation for job 3: Socket timed out on send/recv operation"),
    ("srun: Job step creation temporarily disabled, retrying (Requested nodes are busy)\n", True,
     "srun: Job step creation temporarily disabled, retrying (Requested nodes are busy)"),
    ("srun: error: Unable to create step for job 3: Requested node configuration is not available\n", False,
     "srun: error: Unable to create step for job 3: Requested node configuration is not available"),
    ("slurmstepd: error: execve(): /bin/sh: No such file or directory\n", False,
     "slurmstepd: error: execve(): /bin/sh: No such file or directory"),
    ("", False, ""),
])
def test_launcher_messages_tell_an_outage_from_a_lasting_launch_failure(text, outage, message):
    from trainguard.adapters.slurm_outage import is_outage, launcher_message

    assert (is_outage(text), launcher_message(text)) == (outage, message)


def test_a_started_ranks_output_is_judged_without_srun_complaints_about_the_controller():
    from trainguard.adapters.slurm_outage import STARTED, without_outage_lines

    log = (b"[trainguard] step 3.7 started on tg2 as pid 4242\n" + NCCL.encode() + b"\n"
           b"srun: error: slurm_receive_msg: Socket timed out on send/recv operation\n"
           b"srun: error: tg2: task 0: Exited with exit code 1\n")
    found = STARTED.search(log)
    assert found and found.groups() == (b"3.7", b"tg2", b"4242")
    assert without_outage_lines(log[found.end():].decode()) == f"{NCCL}\nsrun: error: tg2: task 0: Exited with exit code 1\n"


def test_a_submission_the_controller_took_while_not_answering_is_not_made_twice(own_cluster, tmp_path):
    # sbatch gives up after MessageTimeout (10 s) while slurmctld still holds the request, which
    # it carries out once it goes on: a blind retry would run the job twice.
    resumed = own_cluster.pause_slurmctld(12)
    try:
        code, report, events, starts, output = submit_from_outside(own_cluster, tmp_path, [{"do": "ok"}],
                                                                   "--scheduler-outage-tolerance", "60", timeout=60)
    finally:
        resumed.join()
    assert code == 0 and report["status"] == "succeeded", output
    jobs = own_cluster.run("squeue", "--noheader", "--states=all", "--format=%i %j").stdout.split("\n")
    shown = own_cluster.run("scontrol", "show", "job", "--oneliner").stdout.splitlines()
    assert len([line for line in shown if "JobName=outside.sh" in line]) == 1, (jobs, shown)
    assert [e["type"] for e in events].count("slurm_submitted") == 1 and len(starts) == 2
