"""Ranks' output on the terminal, as ``torchrun --tee`` shows it, while the logs stay the record.

Every rank writes to its own log file (that is what hang detection, classification and the
history read); the tee follows those files and copies whole lines to the supervisor's stdout
with torchrun's prefix, ``[default0]:`` (role and rank). The spec is torchrun's: ``0`` nothing,
``1`` stdout, ``2`` stderr, ``3`` both, or per rank ``0:3,1:0``. A rank's stdout and stderr
share one log here, so any non-zero value shows the rank's whole output.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import IO, Mapping

from trainguard.errors import PolicyError

_POLL = 0.1


def parse_tee(spec: str) -> dict[int | None, bool]:
    """``{rank or None (every rank): shown}`` from torchrun's ``--tee`` syntax."""
    spec = spec.strip()
    try:
        if ":" not in spec:
            return {None: _level(spec)}
        out: dict[int | None, bool] = {}
        for item in spec.split(","):
            rank, level = item.split(":", 1)
            out[int(rank)] = _level(level)
        return out
    except ValueError:
        raise PolicyError("--tee", f"expected 0-3 or RANK:LEVEL,... (as torchrun), got {spec!r}") from None


def _level(text: str) -> bool:
    level = int(text)
    if not 0 <= level <= 3:
        raise ValueError(text)
    return level > 0


def parse_ranks_filter(spec: str) -> frozenset[int]:
    """torchrun's ``--local-ranks-filter 0,1``."""
    try:
        return frozenset(int(item) for item in spec.split(",") if item.strip())
    except ValueError:
        raise PolicyError("--local-ranks-filter", f"expected ranks like 0,1, got {spec!r}") from None


class Tee:
    """Follows rank logs in a daemon thread; ``follow`` switches a rank to its newest log."""

    def __init__(self, shown: Mapping[int | None, bool], role: str, ranks: frozenset[int] | None = None,
                 out: IO[str] | None = None) -> None:
        self.shown = dict(shown)
        self.role = role
        self.ranks = ranks
        self.out = out or sys.stdout
        self._files: dict[int, tuple[str, int, bytes]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainguard-tee", daemon=True)
        self._thread.start()

    def wants(self, rank: int) -> bool:
        if self.ranks is not None and rank not in self.ranks:
            return False
        return self.shown.get(rank, self.shown.get(None, False))

    def follow(self, rank: int, path: str | None) -> None:
        if path is None or not self.wants(rank):
            return
        with self._lock:
            self._drain(rank)
            self._files[rank] = (path, 0, b"")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with self._lock:
            for rank in list(self._files):
                self._drain(rank, final=True)

    def _run(self) -> None:
        while not self._stop.wait(_POLL):
            with self._lock:
                for rank in list(self._files):
                    self._drain(rank)

    def _drain(self, rank: int, final: bool = False) -> None:
        entry = self._files.get(rank)
        if entry is None:
            return
        path, offset, partial = entry
        try:
            if os.stat(path).st_size <= offset and not final:
                return
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except OSError:
            return
        lines = (partial + data).split(b"\n")
        partial = b"" if final else lines.pop()
        prefix = f"[{self.role}{rank}]:"
        text = "".join(f"{prefix}{line.decode(errors='replace')}\n" for line in lines if line or not final)
        if text:
            try:
                self.out.write(text)
                self.out.flush()
            except (OSError, ValueError):
                pass
        self._files[rank] = (path, offset + len(data), partial)
