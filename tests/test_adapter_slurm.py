"""The adapter contract (tests/adapter_contract.py) on the Slurm adapter: ranks as srun steps of
a real allocation on the local Slurm cluster (tests/slurm_cluster.py), driven from the test
process as the supervisor in the batch script drives them."""

from __future__ import annotations

import subprocess
import time

import pytest

from adapter_contract import AdapterContract
from slurm_cluster import LocalSlurmCluster, require_slurm
from trainguard.adapters.slurm import SlurmAdapter
from trainguard.model import JobSpec

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def allocation(tmp_path_factory):
    """A 3-node allocation held by a sleeping batch job: ``(cluster, slurm job id)``."""
    require_slurm()
    cluster = LocalSlurmCluster(nodes=3).start()
    try:
        script = tmp_path_factory.mktemp("alloc") / "hold.sh"
        script.write_text("#!/bin/bash\nsleep 600\n")
        job = subprocess.run(["sbatch", "--nodes=3", "--parsable", f"--output={script}.out", str(script)],
                             env=cluster.env, capture_output=True, text=True, check=True).stdout.strip()
        deadline = time.time() + 30
        while cluster.run("squeue", "--noheader", "--format=%t", f"--jobs={job}").stdout.strip() != "R":
            assert time.time() < deadline, "the allocation did not start"
            time.sleep(0.2)
        yield cluster, job
    finally:
        cluster.stop()


@pytest.fixture
def make_adapter(allocation, tmp_path, monkeypatch):
    cluster, slurm_job = allocation
    # Launches carry this process's environment, as ranks carry the batch script's.
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    counter = iter(range(100))

    def make(*, nproc, nodes, slots, policy):
        job = f"contract-{next(counter)}"
        spec = JobSpec(job_id=job, command=("python",), nproc=nproc, nodes=nodes, slots_per_node=slots)
        return SlurmAdapter(spec=spec, policy=policy, log_dir=tmp_path / job / "logs", slurm_job_id=slurm_job,
                            nodelist="tg[1-3]", base_env=cluster.env)

    return make


class TestSlurmAdapter(AdapterContract):
    pass
