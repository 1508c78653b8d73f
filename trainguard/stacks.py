"""Call-stack snapshots of hung ranks: parse ``py-spy dump`` output and group identical stacks.

Seed 000's analysis: identical stacks are grouped; each group has its ``frames``, the
``ranks`` (and ``threads``) that show it and a ``count``. Ranks stuck somewhere the majority
is not are the likely culprits, so groups are ordered by count, smallest first, and flagged
``suspect`` when fewer threads share them than share the most common stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

_THREAD = re.compile(r'^Thread (?P<tid>\d+) \((?P<state>[^)]*)\)(?:: "(?P<name>.*)")?')
_PROCESS = re.compile(r"^Process (?P<pid>\d+):")


@dataclass(frozen=True)
class ThreadStack:
    """One thread of one rank: innermost frame first, each ``function (file:line)``."""

    rank: int
    pid: int
    thread: str
    frames: tuple[str, ...]


def parse_py_spy(rank: int, pid: int, text: str) -> list[ThreadStack]:
    """Threads from ``py-spy dump`` output (one or several processes; each ``Process N:``
    header names the pid, else ``pid`` is used); processes that are not Python yield none."""
    threads: list[ThreadStack] = []
    header: re.Match[str] | None = None
    frames: list[str] = []

    def flush() -> None:
        if header is not None:
            label = header.group("name") or header.group("tid")
            threads.append(ThreadStack(rank, pid, label, tuple(frames)))

    for line in text.splitlines():
        process = _PROCESS.match(line)
        if process:
            flush()
            header, frames, pid = None, [], int(process.group("pid"))
            continue
        match = _THREAD.match(line)
        if match:
            flush()
            header, frames = match, []
        elif header is not None and line.startswith("    ") and line.strip():
            frames.append(line.strip())
    flush()
    return threads


def group_stacks(threads: Iterable[ThreadStack]) -> list[dict[str, Any]]:
    """Group identical stacks across ranks; smallest groups (likely culprits) first."""
    groups: dict[tuple[str, ...], list[ThreadStack]] = {}
    for stack in threads:
        if stack.frames:
            groups.setdefault(stack.frames, []).append(stack)
    if not groups:
        return []
    largest = max(len(members) for members in groups.values())
    out = []
    for frames, members in groups.items():
        out.append({
            "frames": list(frames),
            "ranks": sorted({m.rank for m in members}),
            "threads": [f"rank-{m.rank}/{m.pid}/{m.thread}" for m in members],
            "count": len(members),
            "suspect": len(members) < largest,
        })
    out.sort(key=lambda g: (g["count"], g["ranks"]))
    return out


def format_groups(groups: Iterable[Mapping[str, Any]]) -> str:
    """A readable rendering for ``trainguard stacks``."""
    lines = []
    for group in groups:
        flag = "  <- likely culprit" if group.get("suspect") else ""
        ranks = ", ".join(str(r) for r in group["ranks"])
        lines.append(f"count {group['count']}, rank(s) {ranks}{flag}")
        lines.extend(f"    {frame}" for frame in group["frames"])
    return "\n".join(lines)
