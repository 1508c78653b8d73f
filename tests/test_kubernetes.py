"""``trainguard run --adapter kubernetes`` end to end on the stand-in cluster (tests/k8s_cluster.py:
kmock's emulator over HTTP plus a fake scheduler and kubelet, 3 nodes; no real API server can
run here), driven through the CLI as a subprocess with KUBECONFIG pointing at the stand-in.
Unit tests of the manifests, the retries and the status lines come first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed")
pytest.importorskip("kmock", reason="kmock (dev extra) is not installed")

from conftest import REPO  # noqa: E402
from k8s_cluster import StandInCluster, environ_for, k8s_cluster, wait_for  # noqa: E402,F401
from trainguard.adapters.kubernetes import manifests  # noqa: E402
from trainguard.adapters.kubernetes.client import KubeApi  # noqa: E402
from trainguard.adapters.kubernetes.status import describe, exit_code  # noqa: E402
from trainguard.errors import AdapterError  # noqa: E402

RANK = REPO / "tests" / "helpers" / "k8s_rank.py"


# -- units ------------------------------------------------------------------------------------

TEMPLATE = """
apiVersion: v1
kind: Pod
metadata:
  labels: {team: vision}
spec:
  serviceAccountName: trainer
  nodeSelector: {gpu: a100}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: imagenet}}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]
  containers:
  - name: trainer
    image: registry.example/train:1
    args: [--old]
    resources: {limits: {nvidia.com/gpu: 8, memory: 64Gi}}
    volumeMounts: [{name: data, mountPath: /data}]
    env: [{name: NCCL_DEBUG, value: INFO}, {name: RANK, value: "99"}]
"""


def test_manifest_keeps_the_template_and_adds_only_trainguard_fields(tmp_path: Path) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(TEMPLATE)
    pod = manifests.pod_manifest(manifests.load_template(path), job_id="Job_1", namespace="ml", rank=1,
                                 restart_round=2, command=["python", "train.py"], env={"RANK": "1"},
                                 isolated=["node-b", "node-a"])
    spec, main = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"]["name"] == "job-1-1-r2"
    assert pod["metadata"]["labels"] == {"team": "vision", "trainguard.io/job-id": "Job_1", "trainguard.io/rank": "1",
                                         "trainguard.io/round": "2"}
    assert (spec["serviceAccountName"], spec["nodeSelector"], spec["restartPolicy"]) == ("trainer", {"gpu": "a100"}, "Never")
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu" and spec["volumes"][0]["name"] == "data"
    assert main["image"] == "registry.example/train:1" and main["resources"]["limits"]["memory"] == "64Gi"
    assert main["command"] == ["python", "train.py"] and "args" not in main
    assert main["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in main["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["RANK"] == "1" and env["LOCAL_RANK"] == "0"
    assert env["TRAINGUARD_NODE"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["key"] == "zone"
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a", "node-b"]}]
    assert (spec["hostname"], spec["subdomain"]) == ("job-1-1", "job-1")
    assert manifests.master_address("Job_1", "ml") == "job-1-0.job-1.ml.svc"


def test_dry_run_prints_the_manifests(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "trainguard", "run", "--adapter", "kubernetes", "--dry-run",
                          "--namespace", "ml", "--image", "train:1", "--nproc", "2", "--job-id", "dry",
                          "--", "python", "train.py"], capture_output=True, text=True, timeout=60, check=True)
    kinds = [line for line in out.stdout.splitlines() if line.startswith("kind:")]
    assert kinds == ["kind: Service", "kind: Pod", "kind: Pod"]
    assert "name: dry-1-r0" in out.stdout and "image: train:1" in out.stdout


class _Busy(kubernetes.client.ApiException):
    def __init__(self, status: int, retry_after: str | None = None) -> None:
        super().__init__(status=status, reason="busy")
        self.headers = {"Retry-After": retry_after} if retry_after else {}


def test_client_retries_429_honouring_retry_after_and_5xx_but_not_404() -> None:
    kube = KubeApi(object.__new__(kubernetes.client.ApiClient), patience=5)
    answers: list[Any] = [_Busy(429, "0.3"), _Busy(503), "ok"]
    calls: list[float] = []

    def method() -> str:
        calls.append(time.monotonic())
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert kube.call(method) == "ok"
    assert calls[1] - calls[0] >= 0.3  # Retry-After honoured
    with pytest.raises(kubernetes.client.ApiException):
        kube.call(lambda: (_ for _ in ()).throw(_Busy(404)))
    with pytest.raises(AdapterError, match="did not answer"):
        kube.call(lambda: (_ for _ in ()).throw(_Busy(500)), patience=0.5)


def test_status_lines_and_exit_codes() -> None:
    oom = {"spec": {"nodeName": "n1"}, "status": {"phase": "Failed", "containerStatuses": [
        {"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}
    assert exit_code(oom) == -9
    assert describe(oom, "p", [])[0] == "[trainguard] pod p on node n1: terminated reason=OOMKilled exitCode=137"
    lost = {"spec": {"nodeName": "n2"}, "status": {"phase": "Failed", "reason": "NodeLost", "message": "gone",
                                                   "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                                   "reason": "DeletionByTaintManager"}]}}
    assert exit_code(lost) == -9
    assert describe(lost, "p", [{"type": "Warning", "reason": "NodeNotReady", "message": "Node is not ready"}]) == [
        "[trainguard] pod p on node n2: status reason=NodeLost: gone",
        "[trainguard] pod p: condition DisruptionTarget reason=DeletionByTaintManager",
        "[trainguard] pod p: event NodeNotReady (Warning): Node is not ready"]
    assert exit_code({"status": {"phase": "Succeeded"}}) == 0


def test_the_sdk_stderr_channel_round_trips_through_a_log() -> None:
    from trainguard.adapters.kubernetes.logs import sdk_records

    code = "from trainguard import job_monitor as jm; print('loss', flush=True); jm.Monitor().report_step(3, loss=0.5)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRAINGUARD_SDK_CHANNEL": "stderr"},
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == "loss\n"
    (record,) = sdk_records([b"partial output " + out.stderr.strip().encode(), b"no record here"])
    assert (record["type"], record["step"], record["metrics"]) == ("step", 3, {"loss": 0.5})


# -- end to end on the stand-in -----------------------------------------------------------------

class K8sRun:
    def __init__(self, returncode: int, report: dict[str, Any], starts: list[dict[str, Any]], output: str) -> None:
        self.returncode, self.report, self.starts, self.output = returncode, report, starts, output

    @property
    def rounds(self) -> list[dict[str, Any]]:
        return self.report["rounds"]


def launch(cluster: StandInCluster, tmp_path: Path, plan: list[dict[str, Any]], *options: str, job_id: str = "job",
           work: float = 1.0) -> subprocess.Popen[str]:
    record = tmp_path / f"{job_id}.starts.jsonl"
    argv = [sys.executable, "-m", "trainguard", "--log-level", "WARNING", "run", "--adapter", "kubernetes",
            "--image", "python:3.11", "--nproc", "2", "--state-dir", str(tmp_path / "state"), "--job-id", job_id,
            "--stop-grace-period", "2", "--env", f"TG_PLAN={json.dumps(plan)}", "--env", f"TG_RECORD={record}",
            "--env", f"TG_WORK={work}", *options, "--", sys.executable, str(RANK)]
    return subprocess.Popen(argv, env=environ_for(cluster), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=tmp_path, start_new_session=True)


def finish(proc: subprocess.Popen[str], tmp_path: Path, job_id: str = "job", timeout: float = 60) -> K8sRun:
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError(f"trainguard did not finish in {timeout} s:\n{output[-4000:]}")
    report = json.loads(subprocess.run(
        [sys.executable, "-m", "trainguard", "history", job_id, "--state-dir", str(tmp_path / "state"), "--json"],
        capture_output=True, text=True, check=True).stdout)
    record = tmp_path / f"{job_id}.starts.jsonl"
    starts = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return K8sRun(proc.returncode, report, starts, output)


def run(cluster: StandInCluster, tmp_path: Path, plan: list[dict[str, Any]], *options: str, job_id: str = "job",
        work: float = 1.0, during: Callable[[], None] | None = None, timeout: float = 60) -> K8sRun:
    proc = launch(cluster, tmp_path, plan, *options, job_id=job_id, work=work)
    if during is not None:
        during()
    return finish(proc, tmp_path, job_id, timeout)


def running_pod(cluster: StandInCluster, job_id: str, rank: int) -> dict[str, Any]:
    """The rank's pod once it runs."""
    def find() -> dict[str, Any] | None:
        for pod in cluster.pods(**{"trainguard.io/job-id": job_id, "trainguard.io/rank": str(rank)}):
            if pod["status"].get("phase") == "Running":
                return pod
        return None
    return wait_for(find)


RESTART = ("--enable-job-restart", "--max-num-of-job-restart", "3")


@pytest.mark.kubernetes
def test_ecc_error_isolates_the_node_and_the_replacement_lands_elsewhere(k8s_cluster, tmp_path):
    result = run(k8s_cluster, tmp_path, [{"rank": 1, "round": 0, "do": "ecc"}], *RESTART)
    assert result.returncode == 0, result.output
    assert result.report["status"] == "succeeded"
    (round_,) = result.rounds
    bad = next(s["TRAINGUARD_NODE"] for s in result.starts if s["RANK"] == "1" and s["TRAINGUARD_RESTART_ROUND"] == "0")
    assert (round_["error_code"], round_["node"], round_["instance"]) == ("TG-GPU-ECC", bad, "rank-1")
    assert round_["action"] in ("reschedule_isolated", "replace_instances")
    later = [s for s in result.starts if s["TRAINGUARD_RESTART_ROUND"] == "1"]
    assert later and all(s["TRAINGUARD_NODE"] != bad for s in later)
    shared = k8s_cluster.objects("configmaps", "default")
    assert bad in shared[0]["data"]
    assert all(s["TRAINGUARD_SDK_CHANNEL"] == "stderr" for s in result.starts)
    assert not k8s_cluster.pods(), "pods are deleted when the job ends"
    log = (tmp_path / "state" / "jobs" / "job" / "logs" / "round-0" / "rank-1.log").read_text()
    assert "uncorrectable ECC error" in log and "terminated reason=Error exitCode=1" in log


@pytest.mark.kubernetes
def test_a_second_job_avoids_the_node_the_first_isolated(k8s_cluster, tmp_path):
    first = run(k8s_cluster, tmp_path, [{"rank": 1, "round": 0, "do": "ecc"}], *RESTART, job_id="first")
    assert first.returncode == 0, first.output
    bad = first.rounds[0]["node"]
    second = run(k8s_cluster, tmp_path, [], job_id="second")
    assert second.returncode == 0, second.output
    assert {s["TRAINGUARD_NODE"] for s in second.starts}.isdisjoint({bad})


@pytest.mark.kubernetes
def test_an_oom_killed_pod_is_classified_as_memory_not_user_code(k8s_cluster, tmp_path):
    def oom() -> None:
        k8s_cluster.oom_kill(running_pod(k8s_cluster, "job", 0)["metadata"]["name"])

    result = run(k8s_cluster, tmp_path, [{"rank": 0, "round": 0, "do": "wait"}], *RESTART, work=3, during=oom)
    record = result.rounds[0] if result.rounds else result.report["failure"]
    assert record["error_code"] == "TG-K8S-OOMKILLED", record
    log = tmp_path / "state" / "jobs" / "job" / "logs" / "round-0" / "rank-0.log"
    assert "terminated reason=OOMKilled exitCode=137" in log.read_text()
    verdict = json.loads(subprocess.run([sys.executable, "-m", "trainguard", "classify", str(log), "--exit-code", "137",
                                         "--json"], capture_output=True, text=True, check=True).stdout)
    assert verdict["category"] == "host_oom"  # memory, not user_code


@pytest.mark.kubernetes
def test_a_node_failure_is_recovered(k8s_cluster, tmp_path):
    lost: list[str] = []

    def fail() -> None:
        lost.append(running_pod(k8s_cluster, "job", 0)["spec"]["nodeName"])
        k8s_cluster.fail_node(lost[0])

    result = run(k8s_cluster, tmp_path, [{"rank": 0, "round": 0, "do": "wait"}], *RESTART, work=1, during=fail)
    assert result.returncode == 0, result.output
    assert result.rounds[0]["node"] == lost[0]
    assert "NodeLost" in result.rounds[0]["error_message"] or result.rounds[0]["error_code"].startswith("TG-K8S")
    assert all(s["TRAINGUARD_NODE"] != lost[0] for s in result.starts if s["TRAINGUARD_RESTART_ROUND"] != "0")


@pytest.mark.kubernetes
def test_a_user_code_error_fails_at_once_without_restart(k8s_cluster, tmp_path):
    result = run(k8s_cluster, tmp_path, [{"rank": 0, "do": "keyerror"}], *RESTART)
    assert result.returncode == 1
    assert result.rounds == []
    assert result.report["failure"]["error_code"] == "TG-USER-EXCEPTION"
    # Nothing started again. Rank 1's pod may not have run yet when rank 0 failed (a loaded
    # machine): the job is stopped then, so it starts at most once, in round 0.
    ranks = [s["RANK"] for s in result.starts]
    assert "0" in ranks and len(ranks) == len(set(ranks)), result.starts
    assert {s["TRAINGUARD_RESTART_ROUND"] for s in result.starts} == {"0"}


@pytest.mark.kubernetes
def test_a_hang_is_detected_from_the_followed_logs(k8s_cluster, tmp_path):
    result = run(k8s_cluster, tmp_path, [{"rank": 1, "round": 0, "do": "hang"}, {"rank": 0, "round": 0, "do": "hang"}],
                 *RESTART, "--enable-job-hang-detection", "--job-hang-interval", "2", work=1)
    assert result.returncode == 0, result.output
    assert result.rounds[0]["error_source"] == "hang"


@pytest.mark.kubernetes
def test_an_api_outage_of_429_and_503_is_not_a_job_failure(k8s_cluster, tmp_path):
    outage = float(os.environ.get("TG_K8S_OUTAGE", "5"))

    def misbehave() -> None:
        running_pod(k8s_cluster, "job", 1)
        k8s_cluster.api_fault(429, outage / 2, retry_after=1)
        k8s_cluster.expire_watches()  # the watch must re-list, into the outage
        time.sleep(outage / 2)
        k8s_cluster.api_fault(503, outage / 2)

    # The ranks end during the 503s: reading their events and deleting their pods meet them too.
    result = run(k8s_cluster, tmp_path, [], work=outage * 0.7, during=misbehave, timeout=60 + outage)
    assert result.returncode == 0, result.output
    assert result.rounds == [] and result.report["status"] == "succeeded"
    assert len(result.starts) == 2
    counts = k8s_cluster.request_counts()
    assert counts["refused 429"] and counts["refused 503"], counts
    assert not k8s_cluster.pods(), "the pods were deleted once the API answered again"


@pytest.mark.kubernetes
def test_a_restarted_supervisor_adopts_the_running_pods(k8s_cluster, tmp_path):
    proc = launch(k8s_cluster, tmp_path, [], work=4)
    running_pod(k8s_cluster, "job", 0)
    running_pod(k8s_cluster, "job", 1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    names = sorted(p["metadata"]["name"] for p in k8s_cluster.pods())
    again = launch(k8s_cluster, tmp_path, [], work=4)
    seen: set[str] = set()
    while again.poll() is None:
        seen.update(p["metadata"]["name"] for p in k8s_cluster.pods())
        time.sleep(0.1)
    result = finish(again, tmp_path)
    assert result.returncode == 0, result.output
    assert seen <= set(names), f"new pods were created: {sorted(seen - set(names))}"
    assert len(result.starts) == 2


# -- the adapter driven directly, as the engine drives it ------------------------------------------

def make_adapter(cluster: StandInCluster, tmp_path: Path, *, job_id: str = "unit", nproc: int = 1, **options: Any):
    from trainguard.adapters.kubernetes.adapter import KubernetesAdapter
    from trainguard.adapters.kubernetes.client import load_api_client
    from trainguard.model import JobSpec
    from trainguard.policy import Policy

    spec = JobSpec(job_id=job_id, command=("sleep", "60"), nproc=nproc)
    policy = Policy().replace(stop_grace_period=1, isolate_window=options.pop("isolate_window", 3600))
    return KubernetesAdapter(spec=spec, log_dir=tmp_path / job_id, policy=policy, base_env={}, image="busybox",
                             api_client=load_api_client(str(cluster.kubeconfig)), **options)


def start_one(adapter: Any, rank: int = 0, round_no: int = 0) -> None:
    from trainguard.adapters import Launch
    from trainguard.model import Instance

    adapter.start([Launch(Instance(rank, f"scheduler:{rank}", 0), ("sleep", "60"), {}, None, round_no)])


def exits_of(adapter: Any, timeout: float = 20) -> list[Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exits = adapter.wait(0.5)
        if exits:
            return exits
    raise AssertionError("no exit")


@pytest.mark.kubernetes
def test_an_evicted_pod_ends_with_its_reason_in_the_log(k8s_cluster, tmp_path):
    adapter = make_adapter(k8s_cluster, tmp_path)
    try:
        start_one(adapter)
        k8s_cluster.evict(running_pod(k8s_cluster, "unit", 0)["metadata"]["name"])
        (exit_,) = exits_of(adapter)
        assert exit_.exit_code == -signal.SIGKILL
        assert "status reason=Evicted: The node was low on resource: memory." in adapter.log_tail(0, 4096)
    finally:
        adapter.close()


@pytest.mark.kubernetes
def test_a_pod_pending_too_long_is_a_fault_with_the_scheduler_message(k8s_cluster, tmp_path):
    template = tmp_path / "pod.yaml"
    template.write_text("spec: {nodeSelector: {gpu: h100}, containers: [{name: main, image: busybox}]}\n")
    adapter = make_adapter(k8s_cluster, tmp_path, pod_template=str(template), pending_timeout=1.0)
    try:
        with pytest.raises(AdapterError, match="still Pending") as raised:
            start_one(adapter)
        assert not raised.value.permanent
        tail = adapter.log_tail(0, 4096)
        assert "pending for" in tail and "event FailedScheduling (Warning): 0/3 nodes are available" in tail
    finally:
        adapter.close()


@pytest.mark.kubernetes
def test_taint_bad_nodes_taints_and_lifts_the_taint_when_the_window_ends(k8s_cluster, tmp_path):
    def taints() -> list[dict[str, Any]]:
        node = next(n for n in k8s_cluster.objects("nodes") if n["metadata"]["name"] == "node-1")
        return [t for t in node["spec"].get("taints") or [] if t["key"] == "trainguard.io/unhealthy"]

    adapter = make_adapter(k8s_cluster, tmp_path, taint_bad_nodes=True, isolate_window=1)
    adapter.isolate(["node-1"], "TG-GPU-ECC: uncorrectable ECC error")
    assert taints() == [{"key": "trainguard.io/unhealthy", "value": "TG-GPU-ECC", "effect": "NoSchedule"}]
    adapter.close()
    time.sleep(1.1)
    make_adapter(k8s_cluster, tmp_path, job_id="next", taint_bad_nodes=True).close()
    assert taints() == []


@pytest.mark.kubernetes
def test_restart_in_place_pins_the_replacement_pod_to_the_same_node(k8s_cluster, tmp_path):
    from trainguard.adapters import Launch
    from trainguard.model import Instance

    adapter = make_adapter(k8s_cluster, tmp_path)
    try:
        start_one(adapter)
        node = running_pod(k8s_cluster, "unit", 0)["spec"]["nodeName"]
        adapter.stop([0], 1.0)
        # The engine keeps the placement of a rank restarted in place: the launch names its node.
        started = adapter.start([Launch(Instance(0, node, 0), ("sleep", "60"), {}, None, 1)])
        assert started[0].node == node
        assert adapter.start_notes() == (f"rank 0: no in-place restart with restartPolicy Never; new pod unit-0-r1 "
                                         f"pinned to node {node}",)
        pod = next(p for p in k8s_cluster.pods() if p["metadata"]["labels"]["trainguard.io/round"] == "1")
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"][0]["matchFields"] == [{"key": "metadata.name", "operator": "In",
                                                                  "values": [node]}]
    finally:
        adapter.close()
