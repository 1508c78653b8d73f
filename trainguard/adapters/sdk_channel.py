"""Reading the SDK channel files ranks write (one JSON record a line, see :mod:`trainguard.sdk`)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class Channel:
    """One rank's SDK channel file and how far it has been read; a partial last line waits."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[dict]:
        try:
            if os.stat(self.path).st_size <= self.offset:
                return []
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                log.warning("ignoring a malformed SDK record in %s: %r", self.path, line[:200])
                continue
            if isinstance(record, dict):
                records.append(record)
        return records
