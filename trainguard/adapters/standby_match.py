"""Whether a warm spare fits a launch, and what a spare's start is predicted to look like.

A spare is used only when the launch matches what it was prepared with: the command, the working
directory and every environment variable except ``PER_START_VARS``, which legitimately differ
from one start to the next and are set at the hand-over, before the script's first line. Any
other difference (placement: ``LOCAL_RANK``, ``TRAINGUARD_NODE``; world size; a changed
variable) means a cold start, and :func:`why_unusable` says why. Only ``python script.py`` and
``python -m module`` commands (flags ``-u``, ``-B``) can be run by a spare (:func:`python_entry`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from trainguard.adapters import Launch
from trainguard.adapters.processes import TAG_VAR
from trainguard.sdk import CHANNEL_VAR

_PYTHON = re.compile(r"^python[0-9.]*$")
_INTERPRETER_FLAGS = ("-u", "-B")

# Variables that differ from one start of a rank to the next by design; a spare is prepared
# with their predicted values and given the launch's at the hand-over.
PER_START_VARS = frozenset({
    "TRAINGUARD_RESTART_ROUND", "TORCHELASTIC_RESTART_COUNT",  # the round (predicted: next)
    "TRAINGUARD_SCHEDULE_COUNT", "TRAINGUARD_PROC_START_COUNT",  # depend on the action taken
    "MASTER_PORT",  # reserved ahead for a whole-job start; kept by a restart of some ranks
    CHANNEL_VAR, "TORCHELASTIC_ERROR_FILE",  # per-round files of the adapter
    TAG_VAR,  # a spare carries the spares' tag until it becomes the rank
    # A rank started anew while its peers re-enter in process: the iteration it joins and the
    # base store (trainguard/engine/inprocess.py).
    "TRAINGUARD_INPROCESS_ITERATION", "TRAINGUARD_INPROCESS_GENERATION", "TRAINGUARD_INPROCESS_STORE",
})


@dataclass(frozen=True)
class PythonEntry:
    """How a plain ``python [-u] [-B] script.py ARGS`` or ``python -m module ARGS`` starts."""

    interpreter: str
    flags: tuple[str, ...]
    argv: tuple[str, ...]
    module: bool


def python_entry(command: Sequence[str]) -> PythonEntry | None:
    """The command as a :class:`PythonEntry`, or None when a spare cannot run it."""
    if not command or not _PYTHON.match(os.path.basename(command[0])):
        return None
    rest = list(command[1:])
    flags = []
    while rest and rest[0] in _INTERPRETER_FLAGS:
        flags.append(rest.pop(0))
    if rest[:1] == ["-m"] and len(rest) > 1:
        return PythonEntry(command[0], tuple(flags), tuple(rest[1:]), True)
    if not rest or rest[0].startswith("-"):
        return None
    return PythonEntry(command[0], tuple(flags), tuple(rest), False)


def next_round_env(env: Mapping[str, str], *, port: int | None) -> dict[str, str]:
    """The environment of a rank's next start predicted from its current one: the next round,
    one more process start in the same placement, and the reserved rendezvous port."""
    out = dict(env)
    for name in ("TRAINGUARD_RESTART_ROUND", "TORCHELASTIC_RESTART_COUNT", "TRAINGUARD_PROC_START_COUNT"):
        if out.get(name, "").isdigit():
            out[name] = str(int(out[name]) + 1)
    if port is not None and "MASTER_PORT" in out:
        out["MASTER_PORT"] = str(port)
    return out


def env_differences(prepared: Mapping[str, str], actual: Mapping[str, str]) -> list[str]:
    """Names of the variables, outside ``PER_START_VARS``, that differ between two environments."""
    names = (set(prepared) | set(actual)) - PER_START_VARS
    return sorted(name for name in names if prepared.get(name) != actual.get(name))



def why_unusable(entry: PythonEntry, cwd: str | None, env: Mapping[str, str], launch: Launch) -> str:
    """Why a spare prepared with ``entry``, ``cwd`` and ``env`` cannot run ``launch`` ('' if it can)."""
    if python_entry(launch.command) != entry:
        return "the command changed"
    if (launch.cwd or None) != (cwd or None):
        return "the working directory changed"
    changed = env_differences(env, launch.env)
    return f"prepared with other {', '.join(changed[:6])}" if changed else ""
