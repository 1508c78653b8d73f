"""Read only the end of a log, so a 100 GB log costs what a 1 kB one does."""

from __future__ import annotations

import os
from pathlib import Path


def read_tail(path: str | Path, nbytes: int) -> str:
    """The last ``nbytes`` of a file from its first whole line, decoded; '' if unreadable."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - nbytes)
            handle.seek(start)
            data = handle.read(nbytes)
    except OSError:
        return ""
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else data
    return data.decode("utf-8", errors="replace")
