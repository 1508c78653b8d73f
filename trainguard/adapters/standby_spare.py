"""One warm spare process of the standby pool (:mod:`trainguard.adapters.standby_pool`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Mapping

from trainguard.adapters.standby_match import PythonEntry


class Spare:
    """A spare process: what it was prepared with, and the pipe and status file it is spoken to
    and answers through (the protocol is in :mod:`trainguard.adapters.standby`)."""

    def __init__(self, rank: int, popen: subprocess.Popen[bytes], entry: PythonEntry, cwd: str | None,
                 env: Mapping[str, str], files: tuple[Path, Path]) -> None:
        self.rank = rank
        self.popen = popen
        self.entry = entry
        self.cwd = cwd
        self.env = dict(env)
        self.status, self.out = files
        self.sent = 0  # how many of the pool's names it was told to import
        self.complete = False  # it imported every name of a finished list: its size is a spare's
        self._offset = 0

    def send(self, message: dict) -> bool:
        """Write one JSON line to the spare; False when it can no longer be told anything."""
        try:
            assert self.popen.stdin is not None
            self.popen.stdin.write(json.dumps(message).encode() + b"\n")
            self.popen.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def events(self) -> list[dict]:
        """The status lines the spare has written completely since the last call."""
        try:
            with open(self.status, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        complete = data[:data.rfind(b"\n") + 1]
        self._offset += len(complete)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


    def close_stdin(self) -> None:
        """Close the pipe: the spare reads nothing more (it runs the rank, or is ending)."""
        try:
            assert self.popen.stdin is not None
            self.popen.stdin.close()
        except OSError:
            pass
