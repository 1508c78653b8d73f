"""Frameworks (trainguard/frameworks): TF_CONFIG and per-role recovery for TensorFlow, a real
``mpirun`` job over trainguard's hostfile, and ``trainguard hosts`` for Horovod host discovery."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.engine import supervise
from trainguard.errors import PolicyError
from trainguard.frameworks import FRAMEWORKS, for_job, parse_roles, role_of
from trainguard.frameworks import mpi as mpi_fw
from trainguard.frameworks.horovod import hosts_lines
from trainguard.frameworks.horovod import wrap as horovod_wrap
from trainguard.frameworks.tensorflow import cluster_spec
from trainguard.model import Action, ErrorSource, JobSpec, JobStatus, RoundRecord, RoundResult
from trainguard.policy import build_policy
from trainguard.store import RunStore

HELPERS = Path(__file__).parent / "helpers"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
RETRYABLE = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error"
ROLES = "chief=1,worker=2,ps=1,evaluator=1"


def test_roles_take_ranks_in_the_order_given():
    spec = JobSpec(job_id="j", command=("x",), nproc=5, roles=parse_roles(ROLES))
    assert [role_of(spec, rank) for rank in range(5)] == [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0),
                                                          ("evaluator", 0)]
    for bad in ("chief", "chief=0", "worker=2,worker=1", ""):
        with pytest.raises(PolicyError, match="--roles"):
            parse_roles(bad)


def test_cluster_spec_follows_the_placement_and_leaves_the_evaluator_out():
    spec = JobSpec(job_id="j", command=("x",), nproc=5, roles=parse_roles(ROLES))
    placement = {0: "n0", 1: "n0", 2: "n1", 3: "n1", 4: "n2"}
    assert cluster_spec(spec, placement, ("n0", 7000)) == {
        "chief": ["n0:7000"], "worker": ["n0:7001", "n1:7002"], "ps": ["n1:7003"]}
    moved = cluster_spec(spec, {**placement, 2: "n2"}, ("n0", 7000))
    assert moved["worker"] == ["n0:7001", "n2:7002"], "a task that moved is found at its new host"
    assert cluster_spec(spec, placement, ("localhost", 7000))["ps"] == ["localhost:7003"]


def isolate(store, job_id, node):
    """Record a round of ``job_id`` that isolated ``node`` (as a node fault would)."""
    record = RoundRecord(job_id=job_id, round=store.next_round(job_id), reason="ECC", error_code="TG-GPU-ECC",
                         error_message="", error_source=ErrorSource.EXIT_CODE, action=Action.RESCHEDULE_ISOLATED,
                         started_at=time.time(), isolated=(node,))
    store.open_round(record)
    store.close_round(replace(record, result=RoundResult.RECOVERED))


def _tf_run(tmp_path, plan=(), *, nodes=2, slots=3, env=None, **policy):
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    record = tmp_path / "tf.jsonl"
    spec = JobSpec(job_id="tf", command=(sys.executable, str(HELPERS / "fw_task.py")), nproc=5, nodes=nodes,
                   slots_per_node=slots, cwd=str(tmp_path), framework="tensorflow", roles=parse_roles(ROLES),
                   env={"FW_RECORD": str(record), "FW_DIR": str(marks), "FW_PLAN": json.dumps(list(plan)),
                        "FW_WORK": "0.5", **(env or {})})
    settings = {"stop_grace_period": 2, "enable_job_restart": True, **policy}
    status = supervise(spec, build_policy(settings), state_dir=tmp_path / "state")
    with RunStore(tmp_path / "state") as store:
        report = store.report("tf")
        events = [e["type"] for e in store.events("tf")]
    starts = [json.loads(line) for line in record.read_text().splitlines()]
    return status, report, starts, events


def test_every_task_reads_its_own_tf_config(tmp_path):
    status, report, starts, _ = _tf_run(tmp_path)
    assert status is JobStatus.SUCCEEDED, report
    assert report["rounds"] == []
    by_rank = {s["rank"]: s for s in starts}
    assert sorted(by_rank) == [0, 1, 2, 3, 4]
    cluster = by_rank[0]["tf_config"]["cluster"]
    assert sorted(cluster) == ["chief", "ps", "worker"] and len(cluster["worker"]) == 2
    addresses = [a for hosts in cluster.values() for a in hosts]
    assert len(set(addresses)) == 4 and all(a.startswith("localhost:") for a in addresses)
    for rank, (role, index) in enumerate([("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("evaluator", 0)]):
        config = by_rank[rank]["tf_config"]
        assert config["task"] == {"type": role, "index": index}
        assert config["cluster"] == cluster, "every task sees the same cluster"
        assert by_rank[rank]["role"][:2] == [role, str(index)]
    assert by_rank[2]["role"][2] == "2"


def test_a_lost_worker_restarts_alone_under_async(tmp_path):
    plan = [{"role": "worker", "index": 1, "round": 0, "do": "fail", "say": RETRYABLE}]
    status, report, starts, _ = _tf_run(tmp_path, plan, job_execution_mode="Async")
    assert status is JobStatus.SUCCEEDED, report
    assert [(r["action"], r["instance"]) for r in report["rounds"]] == [("restart_instances", "rank-2")]
    again = [s for s in starts if s["round"] == 1]
    assert [s["rank"] for s in again] == [2]
    first = next(s for s in starts if s["rank"] == 2 and s["round"] == 0)
    assert again[0]["tf_config"] == first["tf_config"], "the others still find it where it was"


def test_a_lost_parameter_server_restarts_the_job(tmp_path):
    plan = [{"role": "ps", "round": 0, "do": "fail", "say": RETRYABLE}]
    # The chief finishes only with the workers of the restarted job (round 1).
    status, report, starts, _ = _tf_run(tmp_path, plan, job_execution_mode="Async", env={"FW_MIN_ROUND": "1"})
    assert status is JobStatus.SUCCEEDED, report
    (only,) = report["rounds"]
    assert only["action"] == "restart_job" and "ps 0 (rank 3) lost: restarting the job (ps=job)" in only["reason"]
    assert sorted(s["rank"] for s in starts if s["round"] == 1) == [0, 1, 2, 3, 4]


def test_a_lost_evaluator_leaves_the_job_running_and_a_role_policy_changes_that(tmp_path):
    plan = [{"role": "evaluator", "round": 0, "do": "fail", "say": RETRYABLE, "after": 0}]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # The workers take 3 s: the evaluator's loss is seen well before the chief finishes.
    status, report, _, events = _tf_run(tmp_path / "a", plan, job_execution_mode="Async", env={"FW_WORK": "3"})
    assert status is JobStatus.SUCCEEDED and report["rounds"] == []
    assert "fault_notified" in events
    status, report, _, _ = _tf_run(tmp_path / "b", plan, job_execution_mode="Async", role_policy="evaluator=job",
                                   env={"FW_WORK": "3"})
    assert status is JobStatus.SUCCEEDED
    assert [r["action"] for r in report["rounds"]] == ["restart_job"]


def test_a_worker_on_a_bad_node_moves_with_the_job_and_every_task_gets_the_new_tf_config(tmp_path):
    # 4 nodes of 2 slots hold 5 tasks: worker 1 (rank 2, on node-1 with ps 0) hits an ECC error;
    # node-1 is isolated, and since moving tasks changes the cluster, the whole job is rescheduled.
    plan = [{"role": "worker", "index": 1, "round": 0, "do": "fail", "say": ECC}]
    status, report, starts, _ = _tf_run(tmp_path, plan, nodes=4, slots=2, job_execution_mode="Async")
    assert status is JobStatus.SUCCEEDED, report
    (only,) = report["rounds"]
    assert only["action"] == "reschedule_isolated" and only["isolated_nodes"] == ["node-1"]
    again = [s for s in starts if s["round"] == 1]
    assert sorted(s["rank"] for s in again) == [0, 1, 2, 3, 4]
    assert all(s["node"] != "node-1" for s in again)
    clusters = {json.dumps(s["tf_config"]["cluster"], sort_keys=True) for s in again}
    assert len(clusters) == 1, "every task started with the same, rebuilt cluster"
    assert clusters != {json.dumps(s["tf_config"]["cluster"], sort_keys=True) for s in starts if s["round"] == 0}


def tf_python():
    """A Python with TensorFlow for the ranks: ``$TRAINGUARD_TF_PYTHON``, else this one if it has it."""
    candidate = os.environ.get("TRAINGUARD_TF_PYTHON", sys.executable)
    found = subprocess.run([candidate, "-c", "import tensorflow"], capture_output=True, timeout=120).returncode == 0
    return candidate if found else None


@pytest.mark.tensorflow
def test_real_tensorflow_ps_job_restarts_a_killed_worker_alone(tmp_path):
    python = tf_python()
    if python is None:
        pytest.skip("no Python with TensorFlow (set TRAINGUARD_TF_PYTHON)")
    spec = JobSpec(job_id="tf-real", command=(python, str(HELPERS / "fw_tf_job.py")), nproc=4, nodes=2,
                   slots_per_node=2, cwd=str(tmp_path), framework="tensorflow",
                   roles=parse_roles("chief=1,worker=2,ps=1"),
                   env={"TF_KILL_WORKER": "1", "TF_KILL_ONCE": str(tmp_path / "killed"), "TF_KILL_AFTER": "3",
                        "TF_STEPS": "150", "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""})
    policy = build_policy({"job_execution_mode": "Async", "fault_tolerant_policy": "OnFailure",
                           "stop_grace_period": 3, "warm_standby": "false"})
    status = supervise(spec, policy, state_dir=tmp_path / "state")
    with RunStore(tmp_path / "state") as store:
        report = store.report("tf-real")
    logs = tmp_path / "state" / "jobs" / "tf-real" / "logs"
    assert status is JobStatus.SUCCEEDED, (report, (logs / "round-0" / "rank-0.log").read_text()[-3000:])
    assert [(r["action"], r["instance"]) for r in report["rounds"]] == [("restart_instances", "rank-2")]
    assert sorted(p.name for p in (logs / "round-1").glob("rank-*.log")) == ["rank-2.log"]
    assert "chief: 150 steps done, total 150" in (logs / "round-0" / "rank-0.log").read_text()


def test_mpi_hostfile_and_command():
    placement = {0: "a", 1: "a", 2: "c", 3: "c"}
    text = mpi_fw.hostfile(placement, local=False, job_id="j", round_no=2)
    assert text.splitlines() == ["# trainguard job j round 2: a=2, c=2", "a slots=2", "c slots=2"]
    local = mpi_fw.hostfile(placement, local=True)
    assert local.splitlines()[1] == "localhost slots=4" and "a=2, c=2" in local.splitlines()[0]
    argv = mpi_fw.wrap(["mpirun", "-np", "8", "--bind-to", "none", "python", "t.py"], "/h", 4)
    assert argv[:5] == ("mpirun", "--hostfile", "/h", "-np", "4")
    assert argv[-4:] == ("--bind-to", "none", "python", "t.py") and "8" not in argv
    assert mpi_fw.wrap(["python", "t.py"], "/h", 2)[:5] == ("mpirun", "--hostfile", "/h", "-np", "2")
    with pytest.raises(PolicyError, match="--hostfile"):
        mpi_fw.wrap(["mpirun", "--hostfile", "x", "python"], "/h", 2)
    with pytest.raises(PolicyError, match="Sync"):
        for_job(JobSpec(job_id="j", command=("x",), framework="mpi"), build_policy({"job_execution_mode": "Async"}))


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI (mpirun) is not installed")
def test_real_mpirun_job_restarts_away_from_an_isolated_node_and_finishes(tmp_path):
    pytest.importorskip("mpi4py")
    # node-1 is isolated by an earlier job of the same store; the MPI job of 4 ranks runs on
    # node-0 and node-2, rank 2 is killed once, and the job restarts as a whole and finishes.
    with RunStore(tmp_path / "state") as store:
        store.begin_job("earlier", {}, {"isolate_window": 3600})
        isolate(store, "earlier", "node-1")
    record_file = tmp_path / "mpi.jsonl"
    spec = JobSpec(job_id="mpi", command=("mpirun", "-np", "4", sys.executable, str(HELPERS / "fw_mpi.py")),
                   nproc=4, nodes=3, slots_per_node=2, cwd=str(tmp_path), framework="mpi",
                   env={"FW_RECORD": str(record_file), "FW_KILL_RANK": "2", "FW_KILL_ONCE": str(tmp_path / "killed"),
                        "OMP_NUM_THREADS": "1"})
    status = supervise(spec, build_policy({"enable_job_restart": True, "stop_grace_period": 3}),
                       state_dir=tmp_path / "state")
    with RunStore(tmp_path / "state") as store:
        report = store.report("mpi")
    assert status is JobStatus.SUCCEEDED, report
    (only,) = report["rounds"]
    assert only["error_code"] == "TG-MPI-RANK-SIGNAL" and only["action"] == "restart_in_place"
    runs = [json.loads(line) for line in record_file.read_text().splitlines()]
    assert {r["size"] for r in runs} == {4} and {r["round"] for r in runs} == {"0", "1"}
    assert sorted(r["rank"] for r in runs if r["round"] == "1") == [0, 1, 2, 3]
    assert {r["hosts"] for r in runs} == {"node-0:2,node-2:2"}
    assert {r["RANK"] for r in runs} == {None}, "the launcher's per-rank variables do not leak into the ranks"
    for path in {r["hostfile"] for r in runs}:
        text = Path(path).read_text()
        assert "node-1" not in text and "localhost slots=4" in text
    log = (tmp_path / "state" / "jobs" / "mpi" / "logs" / "round-1" / "rank-0.log").read_text()
    assert "mpi job done: 4 ranks" in log


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI (mpirun) is not installed")
def test_a_node_fault_a_rank_prints_isolates_that_ranks_node_and_the_hostfile_leaves_it_out(tmp_path):
    pytest.importorskip("mpi4py")
    # 4 ranks on node-0 (0, 1) and node-1 (2, 3), node-2 spare: rank 3 prints an ECC error. Its
    # tagged line names rank 3, the placement says node-1: node-1 is isolated (not the
    # launcher's node-0) and the job runs again on node-0 and node-2.
    record_file = tmp_path / "mpi.jsonl"
    spec = JobSpec(job_id="mpi-ecc", command=("mpirun", sys.executable, str(HELPERS / "fw_mpi.py")), nproc=4,
                   nodes=3, slots_per_node=2, cwd=str(tmp_path), framework="mpi",
                   env={"FW_RECORD": str(record_file), "FW_ECC_RANK": "3", "FW_ECC_ONCE": str(tmp_path / "ecc"),
                        "OMP_NUM_THREADS": "1"})
    status = supervise(spec, build_policy({"enable_job_restart": True, "stop_grace_period": 3}),
                       state_dir=tmp_path / "state")
    with RunStore(tmp_path / "state") as store:
        report = store.report("mpi-ecc")
    assert status is JobStatus.SUCCEEDED, report
    (only,) = report["rounds"]
    assert (only["error_code"], only["node"], only["isolated_nodes"]) == ("TG-GPU-ECC", "node-1", ["node-1"])
    assert only["action"] == "reschedule_isolated"
    runs = [json.loads(line) for line in record_file.read_text().splitlines()]
    assert {r["hosts"] for r in runs if r["round"] == "0"} == {"node-0:2,node-1:2"}
    assert {r["hosts"] for r in runs if r["round"] == "1"} == {"node-0:2,node-2:2"}
    hostfile = Path(next(r["hostfile"] for r in runs if r["round"] == "1")).read_text()
    assert "node-1" not in hostfile and "node-0=2, node-2=2" in hostfile


def test_hosts_lines_are_horovods_host_slots_format():
    assert hosts_lines(["a", "b", "c"], 4, {"b"}, merge_local=False) == ["a:4", "c:4"]
    assert hosts_lines(["node-0", "node-1"], 2, {"node-1"}, merge_local=True) == ["localhost:2"]
    assert hosts_lines(["a"], 2, {"a"}, merge_local=False) == []
    argv = horovod_wrap(["horovodrun", "--min-np", "2", "python", "t.py"], "/s.sh", 4)
    assert argv == ("horovodrun", "--host-discovery-script", "/s.sh", "-np", "4", "--min-np", "2", "python", "t.py")
    assert horovod_wrap(["horovodrun", "-H", "a:1", "python"], "/s.sh", 1) == ("horovodrun", "-H", "a:1", "python")


def test_trainguard_hosts_drives_a_discovery_script(tmp_path, capsys):
    # The contract horovodrun relies on: the script exits 0 and prints host:slots lines; a node
    # isolated drops out of the next call, and comes back when released.
    state = tmp_path / "state"
    spec = JobSpec(job_id="hvd", command=(sys.executable, "-c", "pass"), nproc=2, nodes=3, slots_per_node=2,
                   cwd=str(tmp_path), framework="horovod")
    assert supervise(spec, build_policy({}), state_dir=state) is JobStatus.SUCCEEDED
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m trainguard hosts hvd --state-dir {state} --virtual\n")
    script.chmod(0o755)

    def discover():
        out = subprocess.run([str(script)], capture_output=True, text=True, timeout=60, check=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}).stdout
        lines = out.splitlines()
        assert all(line.count(":") == 1 and line.split(":")[1].isdigit() for line in lines), out
        return lines

    assert discover() == ["node-0:2", "node-1:2", "node-2:2"]
    assert main(["hosts", "hvd", "--state-dir", str(state)]) == 0
    assert capsys.readouterr().out.splitlines() == ["localhost:6"]
    with RunStore(state) as store:
        isolate(store, "hvd", "node-1")
    assert discover() == ["node-0:2", "node-2:2"]
    assert main(["nodes", "release", "node-1", "--state-dir", str(state)]) == 0
    assert discover() == ["node-0:2", "node-1:2", "node-2:2"]
    assert main(["hosts", "nope", "--state-dir", str(state)]) != 0


def test_the_command_line_runs_a_tensorflow_job_from_roles(tmp_path, capsys):
    marks = tmp_path / "marks"
    marks.mkdir()
    state = tmp_path / "state"
    code = main(["run", "--framework", "tensorflow", "--roles", "chief=1,worker=1,ps=1", "--job-id", "cli-tf",
                 "--state-dir", str(state), "--tee", "0", "--env", f"FW_RECORD={tmp_path / 'tf.jsonl'}",
                 "--env", f"FW_DIR={marks}", "--", sys.executable, str(HELPERS / "fw_task.py")])
    assert code == 0
    starts = [json.loads(line) for line in (tmp_path / "tf.jsonl").read_text().splitlines()]
    assert sorted((s["tf_config"]["task"]["type"], s["rank"]) for s in starts) == [("chief", 0), ("ps", 2),
                                                                                   ("worker", 1)]
    capsys.readouterr()
    assert main(["run", "--roles", "worker=2", "--state-dir", str(state), "--", "true"]) != 0
    assert "--roles is for --framework tensorflow" in capsys.readouterr().err
    assert main(["run", "--framework", "tensorflow", "--nproc", "3", "--roles", "worker=2", "--state-dir",
                 str(state), "--", "true"]) != 0


def horovod_python():
    """A Python with Horovod: ``$TRAINGUARD_HOROVOD_PYTHON``, else this one if it has it."""
    candidate = os.environ.get("TRAINGUARD_HOROVOD_PYTHON", sys.executable)
    found = subprocess.run([candidate, "-c", "import horovod.runner.elastic.discovery"], capture_output=True,
                           timeout=120).returncode == 0
    return candidate if found else None


def test_horovods_own_discovery_reads_trainguard_hosts(tmp_path):
    python = horovod_python()
    if python is None:
        pytest.skip("no Python with Horovod (set TRAINGUARD_HOROVOD_PYTHON)")
    state = tmp_path / "state"
    spec = JobSpec(job_id="hvd", command=(sys.executable, "-c", "pass"), nproc=2, nodes=3, slots_per_node=2,
                   cwd=str(tmp_path), framework="horovod")
    assert supervise(spec, build_policy({}), state_dir=state) is JobStatus.SUCCEEDED
    # The script trainguard wrote for the job, read by Horovod's HostDiscoveryScript as
    # horovodrun --host-discovery-script does.
    script = state / "jobs" / "hvd" / "horovod" / "discover_hosts.sh"
    read = ("import json, sys\nfrom horovod.runner.elastic.discovery import HostDiscoveryScript\n"
            "print(json.dumps(HostDiscoveryScript(sys.argv[1], 1).find_available_hosts_and_slots()))")

    def horovod_sees():
        out = subprocess.run([python, "-c", read, str(script)], capture_output=True, text=True, timeout=120,
                             check=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
        return json.loads(out.stdout.splitlines()[-1])

    assert horovod_sees() == {"localhost": 6}
    with RunStore(state) as store:
        isolate(store, "hvd", "node-1")
    assert horovod_sees() == {"localhost": 4}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_each_frameworks_plugins_load_beside_the_catalog(framework, tmp_path):
    """A framework's log patterns join the catalog when its job starts: an id the catalog also
    uses would stop every job of that framework before its first rank (one clear error)."""
    from trainguard.hooks import PluginHost

    roles = (("chief", 1), ("worker", 1)) if framework == "tensorflow" else ()
    spec = JobSpec(job_id="fw", command=("true",), nproc=2, framework=framework, roles=roles)
    host = PluginHost(load_entry_points=False, plugins=dict(for_job(spec, build_policy({}), tmp_path).plugins()))
    ids = [pattern.id for pattern in host.patterns()]
    assert len(ids) == len(set(ids)) and len(ids) > 100


def test_an_mpi_jobs_abort_is_read_by_its_pack_not_as_a_transport_error(tmp_path):
    """Open MPI's `MPI_ABORT was invoked` is the program's own abort: in an MPI job the pack reads
    it as TG-MPI-ABORT (not retried), and for any log the catalog no longer takes it for the
    transport error it once outranked the pack with; a reason printed before it still decides."""
    from trainguard.hooks import PluginHost
    from trainguard.model import ErrorSource, Fault

    abort = "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 1.\n"
    spec = JobSpec(job_id="mpi", command=("true",), nproc=2, framework="mpi")
    policy = build_policy({})
    mpi_host = PluginHost(load_entry_points=False, plugins=dict(for_job(spec, policy, tmp_path).plugins()))
    plain = PluginHost(load_entry_points=False)
    verdict = mpi_host.classify(Fault(ErrorSource.LOG, 0.0), abort, policy)
    assert (verdict.fault_code, verdict.retryable) == ("TG-MPI-ABORT", False)
    # Without the pack it shows a failure, not a cause (the learned fallback may guess one).
    assert plain.classify(Fault(ErrorSource.LOG, 0.0), abort, policy).category.value not in ("nccl_error",
                                                                                              "nccl_timeout")
    oom = "amrex::Abort::0::CUDA error 2 in file AMReX_Arena.cpp line 173: out of memory !!!\n" + abort
    assert mpi_host.classify(Fault(ErrorSource.LOG, 0.0), oom, policy).fault_code == "TG-CUDA-OOM"
