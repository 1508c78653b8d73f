"""Learned preload: what a rank imports before its first step, learned from its first start.

For a rank's first start (and every cold start until the list is learned), the standby pool
puts :mod:`trainguard.adapters.learn_hook` on ``PYTHONPATH`` as ``sitecustomize``; the hook
removes itself at start-up and appends the non-stdlib modules the rank imports to a file, one
``EPOCH NAME`` line each. :class:`Learner` reads that file as it grows, so spares can import the
names while the rank is still starting, and stops at the rank's first SDK ``step`` record, at
its end, or ``learn_seconds`` after its start (``TRAINGUARD_PRELOAD_SECONDS``, default 30)
when the script reports no steps. The script's own modules are left out by the spare, which
knows where the script lives.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Mapping

LEARN_VAR = "TRAINGUARD_PRELOAD_LEARN"
SECONDS_VAR = "TRAINGUARD_PRELOAD_SECONDS"
SAVED_PYTHONPATH_VAR = "TRAINGUARD_PRELOAD_PYTHONPATH"
DEFAULT_SECONDS = 30.0
SPARE_DELAY_VAR = "TRAINGUARD_SPARE_DELAY"
DEFAULT_SPARE_DELAY = 8.0
_HOOK = Path(__file__).with_name("learn_hook.py")


def _seconds(var: str, default: float) -> float:
    try:
        value = float(os.environ.get(var, default))
    except ValueError:
        return default
    return max(0.0, value) if value == value and value != float("inf") else default


def learn_seconds() -> float:
    """How long a rank's first start is watched for imports when it reports no SDK step."""
    return _seconds(SECONDS_VAR, DEFAULT_SECONDS)


def spare_delay() -> float:
    """How long spares wait for ranks that started cold to settle when they report no SDK step."""
    return _seconds(SPARE_DELAY_VAR, DEFAULT_SPARE_DELAY)


def install_hook(directory: Path) -> Path:
    """A directory holding the hook as ``sitecustomize.py``, to put first on ``PYTHONPATH``."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_HOOK, directory / "sitecustomize.py")
    return directory


def learning_env(env: Mapping[str, str], hook_dir: Path, out: Path, seconds: float) -> dict[str, str]:
    """``env`` with the hook injected; the hook restores ``PYTHONPATH`` before the script runs."""
    original = env.get("PYTHONPATH")
    learning = dict(env)
    learning["PYTHONPATH"] = str(hook_dir) + (os.pathsep + original if original else "")
    learning[SAVED_PYTHONPATH_VAR] = "-" if original is None else "=" + original
    learning[LEARN_VAR] = str(out)
    learning[SECONDS_VAR] = repr(seconds)
    return learning


class Learner:
    """One learning start of one rank: the names its hook wrote, up to the cut-off."""

    def __init__(self, path: Path, seconds: float) -> None:
        self.path = path
        self.deadline = time.time() + seconds
        self.cutoff: float | None = None  # epoch of the first step; names after it are not learned
        self.done = False
        self._offset = 0
        self._partial = b""

    def stop_at(self, epoch: float) -> None:
        if self.cutoff is None:
            self.cutoff = epoch

    def read(self, ended: bool = False) -> list[str]:
        """New names since the last call; ``ended``: the rank is gone, this is the last read."""
        if self.done:
            return []
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        names = []
        for line in lines:
            stamp, _, name = line.decode("utf-8", "replace").partition(" ")
            try:
                at = float(stamp)
            except ValueError:
                continue
            if name and (self.cutoff is None or at <= self.cutoff):
                names.append(name)
        if ended or self.cutoff is not None or time.time() > self.deadline:
            self.done = True
        return names
