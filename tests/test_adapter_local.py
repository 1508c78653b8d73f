"""The adapter contract (tests/adapter_contract.py) on the local adapter: real processes."""

from __future__ import annotations

import pytest

from adapter_contract import AdapterContract
from trainguard.adapters.local import LocalAdapter
from trainguard.model import JobSpec


@pytest.fixture
def make_adapter(tmp_path):
    counter = iter(range(100))

    def make(*, nproc, nodes, slots, policy):
        job = f"contract-{next(counter)}"
        spec = JobSpec(job_id=job, command=("python",), nproc=nproc, nodes=nodes, slots_per_node=slots)
        return LocalAdapter(spec=spec, policy=policy, log_dir=tmp_path / job / "logs")

    return make


class TestLocalAdapter(AdapterContract):
    pass
