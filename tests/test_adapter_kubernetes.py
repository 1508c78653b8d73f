"""The adapter contract (tests/adapter_contract.py) on the Kubernetes adapter, against the
stand-in cluster (tests/k8s_cluster.py; no real API server can run here): ranks are pods the
fake kubelet runs as local processes, driven from the test process as the engine drives them."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes extra is not installed")
pytest.importorskip("kmock", reason="kmock (dev extra) is not installed")

from adapter_contract import AdapterContract  # noqa: E402
from k8s_cluster import k8s_cluster  # noqa: E402,F401
from trainguard.adapters.kubernetes.adapter import KubernetesAdapter  # noqa: E402
from trainguard.adapters.kubernetes.client import load_api_client  # noqa: E402
from trainguard.model import JobSpec  # noqa: E402

pytestmark = pytest.mark.kubernetes


@pytest.fixture
def make_adapter(k8s_cluster, tmp_path):  # noqa: F811
    def make(*, nproc, nodes, slots, policy):
        # One job id per test: a second adapter is that job's restarted supervisor.
        spec = JobSpec(job_id="contract", command=("python",), nproc=nproc, nodes=nodes, slots_per_node=slots)
        return KubernetesAdapter(spec=spec, policy=policy, log_dir=tmp_path / "logs", base_env=dict(os.environ),
                                 image="python:3.11", api_client=load_api_client(str(k8s_cluster.kubeconfig)))

    return make


class TestKubernetesAdapter(AdapterContract):
    ranks_outlive_supervisor = True
    processes_are_local = False  # instance pids are PID 1 of each pod's container
