"""Read only the end of a log, so a 100 GB log costs what a 1 kB one does."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO


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
    return _decode(data, cut=start > 0)


def read_stream_tail(stream: BinaryIO, nbytes: int) -> str:
    """The last ``nbytes`` of a stream (a pipe: read to its end, keeping only a tail's worth)."""
    tail, total = b"", 0
    while chunk := stream.read(1 << 20):
        total += len(chunk)
        tail = (tail + chunk)[-nbytes:]
    return _decode(tail, cut=total > nbytes)


def _decode(data: bytes, cut: bool) -> str:
    """A tail from its first whole line (when it was cut from a longer text), decoded."""
    if cut:
        at = data.find(b"\n")
        data = data[at + 1:] if at >= 0 else data
    return data.decode("utf-8", errors="replace")
