"""Volcano pieces without a running controller: annotation vocabularies (seeds 002, 003, 004),
manifests that move a job off nodes, leader election, and the stand-in Volcano itself."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from k8s_cluster import environ_for, wait_for
from trainguard.adapters.kubernetes.client import KubeApi, load_api_client
from trainguard.adapters.volcano import BATCH, VOLCANO, pod_rank, recreated, with_node_anti_affinity
from trainguard.controller import annotations as notes
from trainguard.controller.leader import LeaderElector
from trainguard.errors import PolicyError
from trainguard.model import FaultTolerantPolicy
from volcano_fake import VolcanoCluster

DATA = Path(__file__).parent / "data" / "annotations"


# -- annotations --------------------------------------------------------------------------------

def test_seed_002_example_annotations() -> None:
    settings = notes.parse(json.loads((DATA / "modelarts_seed002.json").read_text()))
    policy = settings.policy
    assert (policy.enable_job_restart, policy.max_num_of_job_restart) == (True, 8)
    assert policy.fault_tolerant_policy is FaultTolerantPolicy.ON_FAILURE
    assert policy.enable_job_hang_detection and policy.max_num_of_pod_restart == 3


def test_every_policy_parameter_under_trainguard_io_and_the_old_prefix() -> None:
    policy = notes.parse({"trainguard.io/max-num-of-job-restart": "7", "trainguard.io/job-hang-interval": "90",
                          "trainguard.io/enable-job-hang-detection": "true",
                          "trainguard/max-num-of-same-error": "4"}).policy
    assert (policy.max_num_of_job_restart, policy.job_hang_interval, policy.enable_job_hang_detection,
            policy.max_num_of_same_error) == (7, 90, True, 4)
    # The controller's own keys are not policy parameters.
    assert notes.parse({"trainguard.io/status": "{}", "trainguard.io/job-id": "x",
                        "trainguard.io/progress": "{}"}).policy.max_num_of_job_restart == 3


def test_supervised_needs_one_of_the_vocabularies() -> None:
    assert not notes.supervised({"trainguard.io/status": "{}"}, {})
    assert notes.supervised({"fault-tolerance/job-retry-num": "1"}, {})
    assert notes.supervised({}, {"fault-scheduling": "grace"})
    assert notes.supervised({"recover-strategy": "recover"}, {})
    assert not notes.supervised({"app": "x"}, {"app": "y"})


@pytest.mark.parametrize(("strategy", "check"), [
    ("recover-in-place", lambda s: s.policy.enable_in_place_restart and not s.notes),
    ("recover", lambda s: s.policy.max_num_of_pod_restart >= 1),
    ("exit", lambda s: s.policy.fault_tolerant_policy is FaultTolerantPolicy.NEVER),
    ("retry", lambda s: "MindIO" in s.notes[0]),
    ("elastic-training", lambda s: "elastic agent" in s.notes[0]),
    ("dump", lambda s: "dying-gasp" in s.notes[0]),
    ("recover,exit", lambda s: s.policy.fault_tolerant_policy is not FaultTolerantPolicy.NEVER),
])
def test_seed_003_recover_strategy_values(strategy: str, check) -> None:
    assert check(notes.parse({"recover-strategy": strategy, "fault-retry-times": "4"}))


def test_seed_003_mindcluster_keys() -> None:
    sample = yaml.safe_load((DATA / "mindcluster_seed003.yaml").read_text())
    settings = notes.parse({**sample["annotations"], "fault-retry-times": "5", "pod-rescheduling": "on"},
                           sample["labels"])
    assert (settings.policy.enable_job_restart, settings.policy.max_num_of_job_restart) == (True, 5)
    assert settings.policy.max_num_of_pod_restart == 5 and settings.grace_seconds is None
    assert notes.parse({}, {"fault-scheduling": "force"}).grace_seconds == 0
    assert not notes.parse({"fault-retry-times": "2"}, {"fault-scheduling": "off"}).policy.enable_job_restart


@pytest.mark.parametrize(("annotations", "labels", "key"), [
    ({"fault-tolerance/job-retry-num": "0"}, {}, "fault-tolerance/job-retry-num"),
    ({"fault-tolerance/job-retry-num": "2", "fault-tolerance/hang-retry": "maybe"}, {}, "fault-tolerance/hang-retry"),
    ({"trainguard.io/job-hang-interval": "-5"}, {}, "--job-hang-interval"),
    ({"trainguard.io/no-such-thing": "1"}, {}, "--no-such-thing"),
    ({"recover-strategy": "retry,teleport"}, {}, "recover-strategy"),
    ({"fault-retry-times": "many"}, {}, "fault-retry-times"),
    ({"pod-rescheduling": "sometimes"}, {}, "pod-rescheduling"),
    ({}, {"fault-scheduling": "gentle"}, "fault-scheduling"),
    ({"trainguard.io/cce-replica-specs": "launcher: [1, 2"}, {}, "trainguard.io/cce-replica-specs"),
    ({"trainguard.io/cce-replica-specs": "w: {faultTolerantPolicy: [{exitCodes: abc}]}"}, {},
     "trainguard.io/cce-replica-specs"),
    ({"trainguard.io/cce-replica-specs": "w: {faultTolerantPolicy: [{exceptionalEvent: meteor}]}"}, {},
     "trainguard.io/cce-replica-specs"),
])
def test_a_bad_value_names_its_key(annotations: dict[str, str], labels: dict[str, str], key: str) -> None:
    with pytest.raises(PolicyError) as caught:
        notes.parse(annotations, labels)
    assert str(caught.value).startswith(key)


def test_seed_004_fault_tolerant_policy_as_written() -> None:
    cce = notes.parse({"trainguard.io/cce-replica-specs": (DATA / "cce_seed004.yaml").read_text()}).cce
    assert cce is not None
    launcher, trainer = cce.replicas["launcher"], cce.replicas["trainer"]
    assert launcher.rules[0].exit_codes == {129, 101} and launcher.rules[0].restart_scope == "Pod"
    assert launcher.rules[1].events == {"nodenotready"} and launcher.rules[1].restart_policy == "OnNodeFail"
    assert trainer.rules[0].events == {"nodenotready", "podforcedeleted"}
    assert (launcher.restart_limit, launcher.fail_policy, trainer.fail_policy) == (100, "Any", "None")
    # The whole replicaSpecs block, templates included, is accepted too.
    wrapped = yaml.safe_dump({"replicaSpecs": yaml.safe_load((DATA / "cce_seed004.yaml").read_text())})
    assert notes.parse({"trainguard.io/cce-replica-specs": wrapped}).cce == cce


# -- manifests ----------------------------------------------------------------------------------

def test_node_anti_affinity_is_added_to_every_term_and_keeps_the_rest() -> None:
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["old"]}]}]}}}}
    out = with_node_anti_affinity(spec, ["n2", "n1"])
    terms = out["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
    for term in terms:
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["n1", "n2"]}]
    assert with_node_anti_affinity({}, []) == {}


def test_a_recreated_volcano_job_drops_what_the_server_owns() -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "9", "annotations": {"a": "1"}},
           "spec": {"tasks": [{"name": "w", "replicas": 2, "template": {"spec": {"containers": []}}}]},
           "status": {"version": 3}}
    out = recreated(VOLCANO, job, avoid=["bad"], annotations={"trainguard.io/job-id": "x"})
    assert "status" not in out and "uid" not in out["metadata"] and "resourceVersion" not in out["metadata"]
    assert out["metadata"]["annotations"] == {"a": "1", "trainguard.io/job-id": "x"}
    assert out["spec"]["tasks"][0]["template"]["spec"]["affinity"]["nodeAffinity"]
    batch = {"metadata": {"name": "b", "uid": "u"}, "spec": {"selector": {"matchLabels": {"controller-uid": "u"}},
                                                             "template": {"metadata": {"labels": {"controller-uid": "u",
                                                                                                  "app": "t"}},
                                                                          "spec": {}}}}
    out = recreated(BATCH, batch, avoid=[], annotations={})
    assert "selector" not in out["spec"] and out["spec"]["template"]["metadata"]["labels"] == {"app": "t"}


def test_pod_rank_counts_across_tasks() -> None:
    job = {"spec": {"tasks": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 3}]}}
    pod = {"metadata": {"name": "j-worker-2", "labels": {"volcano.sh/task-spec": "worker"}, "annotations": {}}}
    assert pod_rank(VOLCANO, job, pod) == 3


# -- the stand-in and leader election ------------------------------------------------------------

@pytest.fixture
def volcano(tmp_path: Path):
    cluster = VolcanoCluster(tmp_path / "cluster", nodes=2, slots=2).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_volcano_and_batch_jobs_of_one_name_are_different_resources(volcano: VolcanoCluster) -> None:
    api = load_api_client(str(volcano.kubeconfig))
    custom, batch = client.CustomObjectsApi(api), client.BatchV1Api(api)
    vc = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "same"},
          "spec": {"minAvailable": 1, "tasks": [{"name": "w", "replicas": 1, "template": {"spec": {
              "containers": [{"name": "m", "image": "x", "command": ["sh", "-c", "exit 0"]}]}}}]}}
    created = custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs", vc)
    assert created["metadata"]["uid"]
    batch.create_namespaced_job("default", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "same"},
                                            "spec": {"template": {"spec": {"containers": []}}}})
    assert [j.metadata.name for j in batch.list_namespaced_job("default").items] == ["same"]
    stream = batch.list_namespaced_job("default", watch=True, resource_version="0", timeout_seconds=1,
                                       _preload_content=False)
    kinds = {json.loads(line)["object"]["apiVersion"] for line in stream if line.strip()}
    assert kinds == {"batch/v1"}
    wait_for(lambda: (volcano.vcjob("same") or {}).get("status", {}).get("state", {}).get("phase") == "Completed", 15)


def test_only_one_replica_leads_and_another_takes_over_after_the_lease_expires(volcano: VolcanoCluster) -> None:
    kube = KubeApi(load_api_client(str(volcano.kubeconfig)))
    first = LeaderElector(kube, "default", "tg", "first", duration=1.5)
    second = LeaderElector(kube, "default", "tg", "second", duration=1.5)
    stop = threading.Event()
    assert first.wait_for_leadership(stop)
    assert not second.try_acquire()
    first._stop.set()  # stops renewing, as a killed replica would
    started = time.monotonic()
    assert second.wait_for_leadership(stop)
    assert 0.5 < time.monotonic() - started < 5
    lease = client.CoordinationV1Api(kube.api_client).read_namespaced_lease("tg", "default")
    assert lease.spec.holder_identity == "second" and lease.spec.lease_transitions == 1
    second.release()
    assert LeaderElector(kube, "default", "tg", "third", duration=1.5).try_acquire()


# -- deploy/controller ---------------------------------------------------------------------------

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "controller"


def test_the_cluster_role_grants_what_the_controller_uses_and_no_more() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    grants = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert grants[("batch.volcano.sh", "jobs")] == {"get", "list", "watch", "patch", "create", "delete"}
    assert grants[("bus.volcano.sh", "commands")] == {"create"}
    assert grants[("", "pods/log")] == {"get"} and "create" not in grants[("", "pods")]
    assert all("*" not in verbs for verbs in grants.values())
    leader = next(d for d in docs if d["kind"] == "Role")
    assert leader["rules"][0]["resources"] == ["leases"]


@pytest.mark.parametrize("sample", sorted(p.name for p in (DEPLOY / "samples").glob("*.yaml")))
def test_the_samples_are_supervised_and_parse(sample: str) -> None:
    job = yaml.safe_load((DEPLOY / "samples" / sample).read_text())
    meta = job["metadata"]
    assert notes.supervised(meta.get("annotations") or {}, meta.get("labels") or {})
    notes.parse(meta.get("annotations") or {}, meta.get("labels") or {})


# -- trainguard run --adapter volcano ------------------------------------------------------------

RANK = Path(__file__).parent / "helpers" / "k8s_rank.py"


def _run_volcano(volcano: VolcanoCluster, tmp_path: Path, plan: list[dict], *options: str) -> tuple[int, dict, str]:
    record = tmp_path / "starts.jsonl"
    argv = [sys.executable, "-m", "trainguard", "--log-level", "WARNING", "run", "--adapter", "volcano",
            "--queue", "research", "--image", "python:3.11", "--nproc", "2", "--state-dir", str(tmp_path / "state"),
            "--job-id", "vj", "--stop-grace-period", "2", "--env", f"TG_PLAN={json.dumps(plan)}",
            "--env", f"TG_RECORD={record}", "--env", "TG_WORK=1", *options, "--", sys.executable, str(RANK)]
    env = {**environ_for(volcano), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=90)
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "trainguard", "history", "vj", "--state-dir", str(tmp_path / "state"), "--json"],
        capture_output=True, text=True, check=True, env=env).stdout)
    starts = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return proc.returncode, {"report": report, "starts": starts}, proc.stdout + proc.stderr


@pytest.mark.parametrize("taint", [False, True])
def test_run_adapter_volcano_steers_replaced_pods_only_with_the_taint(volcano: VolcanoCluster, tmp_path: Path,
                                                                      taint: bool) -> None:
    """Volcano recreates a replaced rank's pod from the round's task: only the taint keeps it off a
    bad node, so without it the strategy must not count on pod-level replacement (stand-in cluster)."""
    from trainguard.adapters.volcano.adapter import VolcanoAdapter
    from trainguard.model import JobSpec

    adapter = VolcanoAdapter(spec=JobSpec(job_id="steer", command=("sleep", "1"), nproc=2), log_dir=tmp_path,
                             base_env={}, image="busybox", taint_bad_nodes=taint,
                             api_client=load_api_client(str(volcano.kubeconfig)))
    try:
        capacity = adapter.capacity(frozenset())
        assert capacity.nodes and capacity.steers_replacements is taint
        assert capacity.keeps_off(capacity.nodes[0]) is taint
    finally:
        adapter.close()


def test_run_adapter_volcano_submits_a_gang_job_and_moves_it_off_a_bad_node(volcano: VolcanoCluster,
                                                                             tmp_path: Path) -> None:
    submitted: list[dict] = []
    server = volcano.server
    code, result, output = _run_volcano(volcano, tmp_path, [{"rank": 1, "round": 0, "do": "ecc"}],
                                        "--enable-job-restart", "--max-num-of-job-restart", "3")
    assert code == 0, output[-3000:]
    report = result["report"]
    (round_,) = report["rounds"]
    bad = next(s["TRAINGUARD_NODE"] for s in result["starts"]
               if s["RANK"] == "1" and s["TRAINGUARD_RESTART_ROUND"] == "0")
    assert (round_["error_code"], round_["node"], round_["action"]) == ("TG-GPU-ECC", bad, "reschedule_isolated")
    later = [s for s in result["starts"] if s["TRAINGUARD_RESTART_ROUND"] == "1"]
    # Both ranks ran again, none on the bad node. (One CI run saw rank 0 start twice within round 1,
    # not reproduced since; the record names each start's pod to tell a retried start from a
    # duplicate if it happens again.)
    assert {s["RANK"] for s in later} == {"0", "1"} and all(s["TRAINGUARD_NODE"] != bad for s in later), (
        later, output[-3000:])
    for _, kind, obj in server.history:
        if obj.get("apiVersion") == "batch.volcano.sh/v1alpha1" and kind == "ADDED":
            submitted.append(obj)
    assert [j["metadata"]["name"] for j in submitted] == ["vj-r0", "vj-r1"]
    spec = submitted[1]["spec"]
    assert (spec["schedulerName"], spec["queue"], spec["minAvailable"], spec["policies"], spec["maxRetry"]) == (
        "volcano", "research", 2, [], 1)
    assert [t["name"] for t in spec["tasks"]] == ["r0", "r1"]
    terms = spec["tasks"][0]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert any(f["values"] == [bad] for t in terms for f in t.get("matchFields", []))
    assert volcano.vcjob("vj-r0") is None and volcano.vcjob("vj-r1") is None  # cleaned up at the end
