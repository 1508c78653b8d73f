"""Whose memory was it: a device out-of-memory while the failing process held little of the device.

PyTorch's caching allocator says, in its OOM message, how much of the GPU the failing process
holds and how much is free. When the device is full but this process holds at most a third of
it, something else holds the rest: another job sharing the GPU (a device plugin that hands one GPU
to several pods), or a process left over from an earlier run. A restart after that process is gone,
or on another GPU, escapes it; the workload's own appetite would not, which is why a plain
``CUDA out of memory`` is not retried. Same reading as the driver-level OOM (TG-CUDA-DRIVER-OOM).

Before PyTorch 2.0 the message counts only the caching allocator's memory, so memory the same
process holds outside it (a library's buffers, a leak) reads as someone else's: of the three
tuning excerpts that meet the rule in that form, two are contention (ae-28005, am-36008) and one a
leak in the run itself (aj-33017). The 2.x message says what the whole process holds.
"""

from __future__ import annotations

import dataclasses
import re

from trainguard.model import Verdict

CODE = "TG-CUDA-OOM-ELSEWHERE"
FULL = 0.05        # free memory at most this share of the device: the device is full
OWN_AT_MOST = 1 / 3  # this process holds at most this share: the rest is someone else's

_UNITS = {"b": 1, "bytes": 1, "kb": 2**10, "kib": 2**10, "mb": 2**20, "mib": 2**20, "gb": 2**30, "gib": 2**30,
          "tb": 2**40, "tib": 2**40}
_SIZE = r"([\d.]+) ?(bytes|[KMGT]i?B|B)"
# PyTorch before 2.0: "(GPU 1; 15.78 GiB total capacity; 2.68 GiB already allocated; 53.75 MiB free;
# 77.13 MiB cached)" or "...; 34.89 GiB reserved in total by PyTorch)".
_OLD = re.compile(rf"\(GPU \d+; {_SIZE} total capacity; {_SIZE} already allocated; {_SIZE} free"
                  rf"(?:; {_SIZE} (?:reserved in total by PyTorch|cached))?")
# PyTorch 2.x: "GPU 0 has a total capacity of 79.15 GiB of which 30.00 MiB is free. [Process N has X
# memory in use.] Including non-PyTorch memory, this process has X memory in use. Of the allocated
# memory X is allocated by PyTorch, and Y is reserved by PyTorch but unallocated."
_NEW = re.compile(rf"GPU \d+ has a total capacity of {_SIZE} of which {_SIZE} is free\.")
_THIS_PROCESS = re.compile(rf"this process has {_SIZE} memory in use")
_ALLOCATED = re.compile(rf"Of the allocated memory {_SIZE} is allocated by PyTorch, and {_SIZE} is reserved")


def _bytes(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit.lower()]


def held_elsewhere(message: str) -> bool:
    """Whether an allocator OOM ``message`` shows a full device that this process holds little of."""
    old = _OLD.search(message)
    if old:
        total, allocated, free = (_bytes(*old.group(i, i + 1)) for i in (1, 3, 5))
        own = max(allocated, _bytes(*old.group(7, 8)) if old.group(7) else 0.0)
    else:
        new = _NEW.search(message)
        if not new:
            return False
        total, free = _bytes(*new.group(1, 2)), _bytes(*new.group(3, 4))
        rest = message[new.end():new.end() + 600]
        this = _THIS_PROCESS.search(rest)
        allocated = _ALLOCATED.search(rest)
        if not (this or allocated):
            return False  # the message does not say what this process holds
        # The larger of the two: in a container NVML may not see the process (`has 0 bytes`).
        own = max(_bytes(*this.group(1, 2)) if this else 0.0,
                  _bytes(*allocated.group(1, 2)) + _bytes(*allocated.group(3, 4)) if allocated else 0.0)
    return total > 0 and free <= FULL * total and own <= OWN_AT_MOST * total


def refine(verdict: Verdict, text: str, start: int) -> Verdict:
    """The allocator OOM's verdict, or a retryable one when the memory was held elsewhere (as
    the message that starts at ``text[start]`` says)."""
    if not held_elsewhere(text[start:start + 2000]):
        return verdict
    return dataclasses.replace(verdict, fault_code=CODE, retryable=True, user_error=False,
                               classifier=f"{verdict.classifier}+held-elsewhere")
