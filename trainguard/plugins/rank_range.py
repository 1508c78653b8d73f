"""A rendezvous that cannot succeed: the traceback shows a rank outside the world it joins.

A rank must lie in ``[0, world_size)``. A script that calls
``init_process_group(..., world_size=1, rank=1)`` (a hard-coded rank, a launcher's rank passed
to a one-process world) never meets a peer that hosts the store: the TCP rendezvous waits for
it and times out (``connect() timed out``, ``DistNetworkError``), which reads as a network fault
and would be retried. The same call fails the same way on every node, so when the traceback
above the timeout shows such a call with literal numbers, the fault is the script's. A regex
cannot compare two numbers, so this refines the rendezvous pattern's verdict in code.
"""

from __future__ import annotations

import dataclasses
import re

from trainguard.model import Category, Verdict

CODE = "TG-USER-CONFIG"
WINDOW = 4000  # the traceback lines above the timeout that may hold the call
_CALL = re.compile(r"init_process_group\((?P<args>[^\n]*)\)")
_WORLD = re.compile(r"\bworld_size\s*=\s*(\d+)\b")
_RANK = re.compile(r"\brank\s*=\s*(\d+)\b")


def rank_outside_world(text: str) -> bool:
    """Whether ``text`` holds an ``init_process_group`` call whose literal rank is not below its
    literal world size."""
    for call in _CALL.finditer(text):
        world, rank = _WORLD.search(call["args"]), _RANK.search(call["args"])
        if world and rank and int(rank.group(1)) >= int(world.group(1)):
            return True
    return False


def refine(verdict: Verdict, text: str, start: int) -> Verdict:
    """The rendezvous verdict, or the script's configuration error when the call shown above the
    match (``text[start]``) asks for a rank outside its world."""
    if not rank_outside_world(text[max(0, start - WINDOW):start]):
        return verdict
    return dataclasses.replace(verdict, category=Category.USER_CODE, fault_code=CODE, retryable=False,
                               node_fault=False, node=None, gpu=None, user_error=True,
                               classifier=f"{verdict.classifier}+rank-outside-world")
