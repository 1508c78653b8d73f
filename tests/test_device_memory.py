"""A device OOM while the failing process held little of a full GPU: memory held elsewhere.

Messages in the allocator's two formats (before and since PyTorch 2.0), through the whole
classifier (``trainguard classify``'s path) and through :func:`held_elsewhere` for the edges.
"""

from __future__ import annotations

import time

import pytest

from trainguard.hooks import PluginHost
from trainguard.model import ErrorSource, Fault
from trainguard.plugins.device_memory import held_elsewhere
from trainguard.policy import Policy

HOST = PluginHost(load_entry_points=False)

OLD_ELSEWHERE = ("RuntimeError: CUDA out of memory. Tried to allocate 14.00 MiB (GPU 1; 15.78 GiB total capacity; "
                 "2.68 GiB already allocated; 53.75 MiB free; 77.13 MiB cached)")
OLD_OWN = ("RuntimeError: CUDA out of memory. Tried to allocate 3.00 GiB (GPU 1; 79.35 GiB total capacity; 33.66 GiB "
           "already allocated; 735.69 MiB free; 74.89 GiB reserved in total by PyTorch)")
NEW_ELSEWHERE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity "
                 "of 14.76 GiB of which 14.75 MiB is free. Process 4242 has 10.30 GiB memory in use. Including "
                 "non-PyTorch memory, this process has 4.37 GiB memory in use. Of the allocated memory 4.10 GiB is "
                 "allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.")
NEW_OWN = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 132.00 MiB. GPU 3 has a total capacity of "
           "79.10 GiB of which 98.00 MiB is free. Process 387746 has 78.89 GiB memory in use. Of the allocated memory "
           "70.12 GiB is allocated by PyTorch, and 765.81 MiB is reserved by PyTorch but unallocated.")


def classify(text: str):
    return HOST.classify(Fault(ErrorSource.LOG, time.time()), text, Policy())


@pytest.mark.parametrize("text,code,retryable", [
    (OLD_ELSEWHERE, "TG-CUDA-OOM-ELSEWHERE", True),
    (NEW_ELSEWHERE, "TG-CUDA-OOM-ELSEWHERE", True),
    (OLD_OWN, "TG-CUDA-OOM", False),
    (NEW_OWN, "TG-CUDA-OOM", False),
    # the workload's own size: no numbers to say otherwise
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "TG-CUDA-OOM", False),
])
def test_whose_memory_decides_whether_a_device_oom_is_retried(text, code, retryable):
    verdict = classify(f"step 10 loss 2.31\n{text}\n")
    assert (verdict.category.value, verdict.fault_code, verdict.retryable, verdict.node_fault) == (
        "cuda_oom", code, retryable, False)
    assert verdict.user_error is not retryable
    assert verdict.evidence.startswith(text.split(" Tried")[0])


def test_the_process_that_nvml_cannot_see_is_judged_by_the_allocator():
    # In a container NVML may report 0 bytes for this process; the allocator knows better.
    text = ("GPU 0 has a total capacity of 21.99 GiB of which 759.38 MiB is free. Including non-PyTorch memory, this "
            "process has 0 bytes memory in use. Of the allocated memory 20.52 GiB is allocated by PyTorch, and 102.08 "
            "MiB is reserved by PyTorch but unallocated.")
    assert not held_elsewhere(text)


@pytest.mark.parametrize("text", [
    # the device is not full: the allocation itself is too big
    "(GPU 0; 79.20 GiB total capacity; 10.85 GiB already allocated; 40.00 GiB free; 14.73 GiB reserved in total "
    "by PyTorch)",
    # the process holds the device: its own size
    "(GPU 0; 16.00 GiB total capacity; 15.00 GiB already allocated; 10.00 MiB free; 15.50 GiB reserved in total "
    "by PyTorch)",
    # 2.x without a word on what this process holds
    "GPU 0 has a total capacity of 79.10 GiB of which 98.00 MiB is free. Process 387746 has 78.89 GiB memory in use.",
])
def test_not_held_elsewhere(text):
    assert not held_elsewhere(text)
