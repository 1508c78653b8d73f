"""A rendezvous timeout under a call that asks for a rank outside its world is the script's
(trainguard/plugins/rank_range.py). Synthetic tracebacks, written for these tests."""

from __future__ import annotations

import time

import pytest

from trainguard.hooks import PluginHost
from trainguard.model import ErrorSource, Fault
from trainguard.plugins.rank_range import rank_outside_world
from trainguard.policy import Policy

HOST = PluginHost(load_entry_points=False)


def traceback(call: str) -> str:
    return ("Traceback (most recent call last):\n"
            '  File "train.py", line 38, in main_worker\n'
            f"    {call}\n"
            '  File "/opt/torch/distributed/rendezvous.py", line 120, in _tcp_rendezvous_handler\n'
            "    store = TCPStore(result.hostname, result.port, world_size, start_daemon)\n"
            "RuntimeError: connect() timed out.\n")


def classify(text: str):
    return HOST.classify(Fault(ErrorSource.LOG, time.time()), text, Policy())


@pytest.mark.parametrize("call", [
    "dist.init_process_group(backend='nccl', init_method=url, world_size=1, rank=1)",
    "torch.distributed.init_process_group('gloo', rank=4, world_size=4)",
])
def test_a_rank_outside_its_world_is_the_scripts_configuration(call):
    verdict = classify(traceback(call))
    assert (verdict.category.value, verdict.fault_code, verdict.retryable, verdict.user_error) == \
        ("user_code", "TG-USER-CONFIG", False, True)
    assert verdict.classifier.endswith("+rank-outside-world")


@pytest.mark.parametrize("call", [
    "dist.init_process_group(backend='nccl', init_method=url, world_size=2, rank=1)",  # a valid rank
    "dist.init_process_group(backend='nccl', world_size=args.world_size, rank=args.rank)",  # not literal
    "dist.init_process_group(backend='nccl')",  # from the environment
])
def test_otherwise_the_timeout_stays_a_rendezvous_fault(call):
    verdict = classify(traceback(call))
    assert (verdict.category.value, verdict.fault_code, verdict.retryable) == ("node_or_infra", "TG-RENDEZVOUS", True)


def test_only_the_call_is_read():
    assert rank_outside_world("init_process_group(world_size=2, rank=2)")
    assert not rank_outside_world("world_size=1, rank=1 (printed by the script, not a call)")
