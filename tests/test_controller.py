"""``trainguard controller`` end to end on the stand-in cluster with the fake Volcano, through the
official client: annotated Volcano Jobs whose pods fail, hang, or carry bad annotations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from k8s_cluster import wait_for
from trainguard.adapters.kubernetes.client import load_api_client
from trainguard.controller import Controller, ControllerOptions
from trainguard.store import RunStore
from volcano_fake import VolcanoCluster

DATA = Path(__file__).parent / "data" / "annotations"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def volcano(tmp_path: Path):
    cluster = VolcanoCluster(tmp_path / "cluster", nodes=3, slots=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


class ControllerThread:
    """A controller running in this process until :meth:`stop`."""

    def __init__(self, cluster: VolcanoCluster, state_dir: Path, identity: str = "test") -> None:
        options = ControllerOptions(namespace="default", state_dir=state_dir, identity=identity, lease_duration=3,
                                    tick=0.2, watch_timeout=20, kinds=("volcano",))
        self.controller = Controller(load_api_client(str(cluster.kubeconfig)), options)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stopping,), daemon=True)

    def __enter__(self) -> "ControllerThread":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(15)


def submit(cluster: VolcanoCluster, name: str, script: str, annotations: dict[str, str], *, replicas: int = 2,
           tasks: list[dict[str, Any]] | None = None, policies: list[dict[str, Any]] | None = None,
           workdir: Path) -> None:
    """An annotated Volcano Job running ``script`` (sh) in every pod, with ``DIR``, ``NODE`` set."""
    def template(body: str) -> dict[str, Any]:
        return {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "stand-in", "command": ["sh", "-c", body],
            "env": [{"name": "DIR", "value": str(workdir)},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}

    spec_tasks = [{"name": t["name"], "replicas": t["replicas"], "template": template(t["script"])}
                  for t in tasks] if tasks else [{"name": "worker", "replicas": replicas, "template": template(script)}]
    spec: dict[str, Any] = {"schedulerName": "volcano", "minAvailable": sum(t["replicas"] for t in spec_tasks),
                            "tasks": spec_tasks}
    if policies:
        spec["policies"] = policies
    body = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations}, "spec": spec}
    custom = client.CustomObjectsApi(load_api_client(str(cluster.kubeconfig)))
    custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs", body)


def job_phase(cluster: VolcanoCluster, name: str) -> str | None:
    job = cluster.vcjob(name)
    return ((job or {}).get("status") or {}).get("state", {}).get("phase")


def report(state_dir: Path, name: str) -> dict[str, Any]:
    with RunStore(state_dir) as store:
        job_id = next(j for j in store.job_ids() if f".{name}." in f".{j}")
        return store.report(job_id)


def reasons(cluster: VolcanoCluster, name: str) -> list[str]:
    return [e["reason"] for e in cluster.events_for(name)]


# A worker (task index 1) that fails on the first node it ran on, every time it lands there.
ECC = """
if [ "$VC_TASK_INDEX" = "1" ]; then
  [ -f "$DIR/bad" ] || echo "$NODE" > "$DIR/bad"
  if [ "$(cat "$DIR/bad")" = "$NODE" ]; then
    echo "step 10 loss 2.3"; echo "RuntimeError: CUDA error: uncorrectable ECC error encountered" >&2; exit 1
  fi
fi
echo "training on $NODE"; sleep 1; echo done
"""


def test_ecc_error_restarts_the_job_away_from_the_node(volcano: VolcanoCluster, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        submit(volcano, "ecc", ECC, {"fault-tolerance/job-retry-num": "3"}, workdir=tmp_path)
        wait_for(lambda: job_phase(volcano, "ecc") == "Completed", 40)
        bad = (tmp_path / "bad").read_text().strip()
        pods = volcano.pods(**{"volcano.sh/job-name": "ecc"})
        assert pods and all(p["spec"]["nodeName"] != bad for p in pods)
        job = volcano.vcjob("ecc")
        assert job is not None
        terms = job["spec"]["tasks"][0]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert {"key": "metadata.name", "operator": "NotIn", "values": [bad]} in terms[0]["matchFields"]
        wait_for(lambda: report(state, "ecc")["status"] == "succeeded", 10)
    history = report(state, "ecc")
    cli = subprocess.run([sys.executable, "-m", "trainguard", "history", history["job_id"], "--state-dir", str(state),
                          "--json"], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert json.loads(cli.stdout)["rounds"] == history["rounds"]
    [round_] = history["rounds"]
    assert (round_["action"], round_["error_code"], round_["node"], round_["result"]) == (
        "reschedule_isolated", "TG-GPU-ECC", bad, "recovered")
    assert round_["instance"] == "ecc-worker-1" and round_["isolated_nodes"] == [bad]
    assert "TrainguardIsolate" in reasons(volcano, "ecc")
    status = json.loads(job["metadata"]["annotations"]["trainguard.io/status"])
    assert (status["round"], status["action"], status["result"]) == (1, "reschedule_isolated", "recovered")


def test_pod_level_rescheduling_off_a_node_that_stays_schedulable_takes_the_job_away(volcano: VolcanoCluster,
                                                                                     tmp_path: Path) -> None:
    """Pod-level rescheduling is allowed (``pod-retry-num``), but the ECC node is Ready: Volcano
    would recreate the deleted pod from the template, possibly on that node again (the worker
    fails every time it lands there). The round rescheduled the job with the node excluded."""
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        submit(volcano, "podecc", ECC, {"fault-tolerance/job-retry-num": "3", "fault-tolerance/pod-retry-num": "3"},
               workdir=tmp_path)
        wait_for(lambda: job_phase(volcano, "podecc") == "Completed", 40)
        wait_for(lambda: report(state, "podecc")["status"] == "succeeded", 10)
    bad = (tmp_path / "bad").read_text().strip()
    [round_] = report(state, "podecc")["rounds"]
    assert (round_["action"], round_["isolated_nodes"], round_["result"]) == ("reschedule_isolated", [bad],
                                                                              "recovered")
    assert f"could be placed on {bad} again" in round_["reason"]
    assert all(p["spec"]["nodeName"] != bad for p in volcano.pods(**{"volcano.sh/job-name": "podecc"}))


def test_user_code_error_is_aborted_without_a_restart(volcano: VolcanoCluster, tmp_path: Path) -> None:
    script = """
if [ "$VC_TASK_INDEX" = "1" ]; then
  printf 'Traceback (most recent call last):\\n  File "/app/train.py", line 12, in <module>\\n    cfg["lr"]\\n' >&2
  echo "KeyError: 'lr'" >&2; exit 1
fi
sleep 30
"""
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        submit(volcano, "bug", script, {"trainguard.io/enable-job-restart": "true",
                                        "trainguard.io/max-num-of-job-restart": "3"}, workdir=tmp_path)
        wait_for(lambda: job_phase(volcano, "bug") == "Aborted", 30)
        wait_for(lambda: "TrainguardGiveUp" in reasons(volcano, "bug"), 10)
    assert volcano.volcano is not None and volcano.volcano.restarts == []
    history = report(state, "bug")
    assert history["status"] == "failed" and history["rounds"] == []
    assert history["failure"]["error_code"] == "TG-USER-EXCEPTION"
    assert [c[1] for c in volcano.volcano.commands_done] == ["AbortJob"]


def test_a_silent_worker_gets_the_job_restarted(volcano: VolcanoCluster, tmp_path: Path) -> None:
    script = """
if [ ! -f "$DIR/hung-$VC_TASK_INDEX" ]; then touch "$DIR/hung-$VC_TASK_INDEX"; echo start; exec sleep 60; fi
echo resumed; sleep 0.5; echo done
"""
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        submit(volcano, "hang", script, {"fault-tolerance/job-retry-num": "2", "fault-tolerance/hang-retry": "true",
                                         "trainguard.io/job-hang-interval": "2"}, workdir=tmp_path)
        wait_for(lambda: job_phase(volcano, "hang") == "Completed", 40)
        wait_for(lambda: report(state, "hang")["status"] == "succeeded", 10)
    [round_] = report(state, "hang")["rounds"]
    assert (round_["error_source"], round_["action"], round_["result"]) == ("hang", "restart_in_place", "recovered")
    assert volcano.volcano is not None and len(volcano.volcano.restarts) == 1
    assert "TrainguardRestart" in reasons(volcano, "hang")


FLAKY = 'echo "step 1"; sleep 0.3; exit 1\n'


@pytest.mark.parametrize("annotations", [
    {"fault-tolerance/job-retry-num": "2", "fault-tolerance/job-unconditional-retry": "true"},
    {"trainguard.io/enable-job-restart": "true", "trainguard.io/max-num-of-job-restart": "2",
     "trainguard.io/fault-tolerant-policy": "OnFailure"},
], ids=["modelarts", "trainguard.io"])
def test_the_restart_budget_is_exact(volcano: VolcanoCluster, tmp_path: Path, annotations: dict[str, str]) -> None:
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        submit(volcano, "flaky", FLAKY, annotations, replicas=1, workdir=tmp_path)
        wait_for(lambda: job_phase(volcano, "flaky") == "Aborted", 40)
    history = report(state, "flaky")
    assert [r["action"] for r in history["rounds"]] == ["restart_job", "restart_job"]
    assert history["restarts"] == 2 and "budget exhausted" in history["failure"]["reason"]
    assert volcano.volcano is not None and len(volcano.volcano.restarts) == 2


def _cce_job(volcano: VolcanoCluster, tmp_path: Path, launcher: str, trainer: str) -> None:
    annotations = {"trainguard.io/cce-replica-specs": (DATA / "cce_seed004.yaml").read_text()}
    submit(volcano, "aitj", "", annotations, workdir=tmp_path,
           tasks=[{"name": "launcher", "replicas": 1, "script": launcher},
                  {"name": "trainer", "replicas": 2, "script": trainer}])


def test_cce_fault_tolerant_policy_replaces_the_pod_on_a_listed_exit_code(volcano: VolcanoCluster,
                                                                            tmp_path: Path) -> None:
    launcher = '[ -f "$DIR/once" ] || { touch "$DIR/once"; echo "launcher lost rendezvous"; exit 129; }; sleep 1\n'
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        _cce_job(volcano, tmp_path, launcher, "sleep 2.5")
        wait_for(lambda: len(volcano.pods(**{"volcano.sh/job-name": "aitj"})) == 3, 10)
        trainers = {p["metadata"]["uid"] for p in volcano.pods(**{"volcano.sh/task-spec": "trainer"})}
        wait_for(lambda: job_phase(volcano, "aitj") == "Completed", 30)
        assert {p["metadata"]["uid"] for p in volcano.pods(**{"volcano.sh/task-spec": "trainer"})} == trainers
        wait_for(lambda: report(state, "aitj")["status"] == "succeeded", 10)
    [round_] = report(state, "aitj")["rounds"]
    assert (round_["action"], round_["instance"], round_["result"]) == ("replace_instances", "aitj-launcher-0",
                                                                       "recovered")
    assert "exit code 129" in round_["reason"]
    assert volcano.volcano is not None and volcano.volcano.restarts == []
    assert "TrainguardReplace" in reasons(volcano, "aitj")


def test_cce_fault_tolerant_policy_fails_the_job_on_an_unlisted_launcher_exit(volcano: VolcanoCluster,
                                                                               tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        _cce_job(volcano, tmp_path, 'echo "bad config"; exit 3\n', "sleep 20")
        wait_for(lambda: job_phase(volcano, "aitj") == "Aborted", 30)
    history = report(state, "aitj")
    assert history["status"] == "failed" and history["rounds"] == []
    assert "no faultTolerantPolicy rule covers it" in history["failure"]["reason"]


def test_a_malformed_annotation_is_an_event_and_the_job_keeps_its_own_policies(volcano: VolcanoCluster,
                                                                                tmp_path: Path) -> None:
    script = '[ -f "$DIR/once" ] || { touch "$DIR/once"; exit 1; }; sleep 0.5\n'
    state = tmp_path / "state"
    with ControllerThread(volcano, state) as running:
        submit(volcano, "typo", script, {"fault-tolerance/job-retry-num": "lots"}, replicas=1, workdir=tmp_path,
               policies=[{"event": "PodFailed", "action": "RestartJob"}])
        event = wait_for(lambda: next((e for e in volcano.events_for("typo")
                                       if e["reason"] == "TrainguardBadAnnotation"), None), 15)
        wait_for(lambda: job_phase(volcano, "typo") == "Completed", 30)
        assert running.thread.is_alive()
    assert "fault-tolerance/job-retry-num" in event["message"] and "'lots'" in event["message"]
    assert event["type"] == "Warning"
    assert volcano.volcano is not None and [r[1].startswith("policy") for r in volcano.volcano.restarts] == [True]
    with RunStore(state) as store:
        assert store.job_ids() == []


def _controller_process(volcano: VolcanoCluster, state: Path, identity: str, die_at: str | None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRAINGUARD_CONTROLLER_DIE_AT", None)
    if die_at:
        env["TRAINGUARD_CONTROLLER_DIE_AT"] = die_at
    return subprocess.Popen([sys.executable, "-m", "trainguard", "controller", "--kubeconfig", str(volcano.kubeconfig),
                             "--namespace", "default", "--state-dir", str(state), "--identity", identity,
                             "--lease-duration", "2", "--kinds", "volcano", "--watch-timeout", "20"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.parametrize("die_at", ["acting", "acted"])
def test_a_controller_killed_mid_round_is_finished_once_by_the_next(volcano: VolcanoCluster, tmp_path: Path,
                                                                    die_at: str) -> None:
    script = '[ -f "$DIR/once" ] || { touch "$DIR/once"; echo "connection reset by peer"; exit 1; }; sleep 1\n'
    state = tmp_path / "state"
    first = _controller_process(volcano, state, "first", die_at)
    try:
        submit(volcano, "crash", script, {"fault-tolerance/job-retry-num": "3",
                                          "fault-tolerance/job-unconditional-retry": "true"},
               replicas=1, workdir=tmp_path)
        assert first.wait(30) == -9  # it killed itself with SIGKILL at the stage
    finally:
        first.kill()
    job = volcano.vcjob("crash")
    assert job is not None
    assert json.loads(job["metadata"]["annotations"]["trainguard.io/progress"])["stage"] == die_at
    second = _controller_process(volcano, state, "second", None)
    try:
        wait_for(lambda: job_phase(volcano, "crash") == "Completed", 40)
        wait_for(lambda: report(state, "crash")["status"] == "succeeded", 15)
    finally:
        second.terminate()
        second.wait(15)
    history = report(state, "crash")
    assert [(r["round"], r["result"]) for r in history["rounds"]] == [(1, "recovered")]
    assert volcano.volcano is not None
    assert [c[1] for c in volcano.volcano.commands_done] == ["RestartJob"]
    assert len(volcano.volcano.restarts) == 1
    assert reasons(volcano, "crash").count("TrainguardRestart") == 1


def test_cce_fault_tolerant_policy_replaces_a_trainer_whose_node_failed(volcano: VolcanoCluster,
                                                                         tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        _cce_job(volcano, tmp_path, "sleep 4", "sleep 4")
        pod = wait_for(lambda: next((p for p in volcano.pods(**{"volcano.sh/task-spec": "trainer"})
                                     if p["metadata"]["name"] == "aitj-trainer-1"
                                     and p["status"].get("phase") == "Running"), None), 15)
        node = pod["spec"]["nodeName"]
        volcano.fail_node(node)
        wait_for(lambda: job_phase(volcano, "aitj") == "Completed", 30)
        wait_for(lambda: report(state, "aitj")["status"] == "succeeded", 10)
    rounds = report(state, "aitj")["rounds"]
    assert rounds and all(r["action"] == "replace_instances" and r["isolated_nodes"] == [node] for r in rounds)
    assert any(r["instance"] == "aitj-trainer-1" and "nodenotready" in r["reason"] for r in rounds)
    assert all(p["spec"]["nodeName"] != node for p in volcano.pods(**{"volcano.sh/job-name": "aitj"}))
    assert volcano.volcano is not None and volcano.volcano.restarts == []


def test_a_controller_killed_between_deleting_and_recreating_a_job_finishes_the_recreation(
        volcano: VolcanoCluster, tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _controller_process(volcano, state, "first", "deleted")
    try:
        submit(volcano, "ecc", ECC, {"fault-tolerance/job-retry-num": "3"}, workdir=tmp_path)
        assert first.wait(30) == -9
    finally:
        first.kill()
    assert volcano.vcjob("ecc") is None  # deleted, not yet created again
    assert volcano.objects("configmaps", "default")[0]["metadata"]["name"] == "trainguard-recreate-ecc"
    second = _controller_process(volcano, state, "second", None)
    try:
        wait_for(lambda: job_phase(volcano, "ecc") == "Completed", 40)
        wait_for(lambda: report(state, "ecc")["status"] == "succeeded", 15)
    finally:
        second.terminate()
        second.wait(15)
    history = report(state, "ecc")
    assert [(r["round"], r["action"], r["result"]) for r in history["rounds"]] == [
        (1, "reschedule_isolated", "recovered")]
    assert volcano.objects("configmaps", "default") == []
    created = [obj for _, kind, obj in volcano.server.history
               if kind == "ADDED" and obj.get("kind") == "Job" and obj["metadata"]["name"] == "ecc"]
    assert len(created) == 2  # the user's, and one recreation


def test_cce_fault_tolerant_policy_records_a_force_deleted_trainer(volcano: VolcanoCluster, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ControllerThread(volcano, state):
        _cce_job(volcano, tmp_path, "sleep 3", "sleep 3")
        pod = wait_for(lambda: next((p for p in volcano.pods(**{"volcano.sh/task-spec": "trainer"})
                                     if p["metadata"]["name"] == "aitj-trainer-0"
                                     and p["status"].get("phase") == "Running"), None), 15)
        core = client.CoreV1Api(load_api_client(str(volcano.kubeconfig)))
        core.delete_namespaced_pod("aitj-trainer-0", "default", grace_period_seconds=0)
        wait_for(lambda: job_phase(volcano, "aitj") == "Completed", 30)
        wait_for(lambda: report(state, "aitj")["status"] == "succeeded", 10)
    [round_] = report(state, "aitj")["rounds"]
    assert (round_["action"], round_["instance"], round_["result"]) == ("replace_instances", "aitj-trainer-0",
                                                                       "recovered")
    assert "podforcedeleted" in round_["reason"] and round_["error_source"] == "event"
    replacement = volcano.pods(**{"volcano.sh/task-spec": "trainer"})
    assert pod["metadata"]["uid"] not in {p["metadata"]["uid"] for p in replacement}


def test_an_annotated_batch_job_with_an_ecc_error_is_recreated_away_from_the_node(volcano: VolcanoCluster,
                                                                                  tmp_path: Path) -> None:
    script = ECC.replace("$VC_TASK_INDEX", "$JOB_COMPLETION_INDEX")
    body = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "tune", "namespace": "default",
                         "annotations": {"trainguard.io/enable-job-restart": "true",
                                         "trainguard.io/max-num-of-job-restart": "2"}},
            "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "main", "image": "stand-in", "command": ["sh", "-c", script],
                    "env": [{"name": "DIR", "value": str(tmp_path)},
                            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}}}
    state = tmp_path / "state"
    options = ControllerOptions(namespace="default", state_dir=state, identity="batch", lease_duration=3, tick=0.2,
                                watch_timeout=20, kinds=("batch",))
    controller = Controller(load_api_client(str(volcano.kubeconfig)), options)
    stopping = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stopping,), daemon=True)
    thread.start()
    batch = client.BatchV1Api(load_api_client(str(volcano.kubeconfig)))
    try:
        batch.create_namespaced_job("default", body)

        def complete() -> bool:
            job = volcano.server.store.get(("batchjobs", "default", "tune")) or {}
            return any(c["type"] == "Complete" for c in (job.get("status") or {}).get("conditions") or [])

        wait_for(complete, 40)
        wait_for(lambda: report(state, "tune")["status"] == "succeeded", 10)
    finally:
        stopping.set()
        thread.join(15)
    bad = (tmp_path / "bad").read_text().strip()
    [round_] = report(state, "tune")["rounds"]
    assert (round_["action"], round_["node"], round_["result"]) == ("reschedule_isolated", bad, "recovered")
    job = batch.read_namespaced_job("tune", "default")
    affinity = job.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    assert affinity.node_selector_terms[0].match_fields[0].values == [bad]


def test_two_replicas_never_both_act(volcano: VolcanoCluster, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with ControllerThread(volcano, state, "one") as one, ControllerThread(volcano, state, "two") as two:
        submit(volcano, "pair", FLAKY.replace("exit 1", '[ -f "$DIR/once" ] || { touch "$DIR/once"; exit 1; }'),
               {"fault-tolerance/job-retry-num": "3", "fault-tolerance/job-unconditional-retry": "true"},
               replicas=1, workdir=tmp_path)
        wait_for(lambda: job_phase(volcano, "pair") == "Completed", 30)
        wait_for(lambda: report(state, "pair")["status"] == "succeeded", 10)
        assert sorted([one.controller.actions, two.controller.actions]) == [0, 1]
    assert [r["round"] for r in report(state, "pair")["rounds"]] == [1]
    assert volcano.volcano is not None and len(volcano.volcano.restarts) == 1
