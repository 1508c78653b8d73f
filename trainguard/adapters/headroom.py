"""Whether this host can afford warm spares: ``--warm-standby=auto`` asks before every spare.

A spare holding torch costs hundreds of MB of resident memory per rank, which the job itself
may need. The judgement:

- **available** is ``MemAvailable`` from ``/proc/meminfo`` (the kernel's estimate of what can be
  allocated without swapping, page cache it can drop included), or the integer in
  ``TRAINGUARD_MEMAVAILABLE_BYTES`` when set, which is how tests pretend a host short of memory;
- **a spare's cost** is the largest resident set (``VmRSS``) of this job's spares that imported
  the whole learned list, or, until one has, the largest of the job's ranks and spares (a spare
  imports what its rank imported, so a rank is an upper bound of its spare);
- spares are started while ``available - cost x spares_to_start >= margin`` and all are given
  back once ``available < margin``, where the margin is the larger of 10 % of ``MemTotal`` and
  1 GiB: what the job and the page cache keep for themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MEMAVAILABLE_VAR = "TRAINGUARD_MEMAVAILABLE_BYTES"
MARGIN_FRACTION = 0.10
MARGIN_MIN = 1 << 30


def meminfo(field: str) -> int | None:
    """A ``/proc/meminfo`` field in bytes, or None where there is no such file or field."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if name == field:
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available() -> int | None:
    override = os.environ.get(MEMAVAILABLE_VAR)
    if override is not None:
        try:
            return int(override)
        except ValueError:
            raise ValueError(f"{MEMAVAILABLE_VAR}={override!r} is not a number of bytes") from None
    return meminfo("MemAvailable")


def rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


@dataclass(frozen=True)
class Headroom:
    """One judgement: ``ok`` and, when not, why (said in the log and the round's notes)."""

    ok: bool
    reason: str = ""


def margin() -> int:
    total = meminfo("MemTotal") or 0
    return max(int(total * MARGIN_FRACTION), MARGIN_MIN)


def judge(spares: int, cost: int) -> Headroom:
    """Whether ``spares`` more spares of ``cost`` bytes each fit (0 spares: whether those held may stay)."""
    free = available()
    if free is None:
        return Headroom(False, "the host's free memory is unknown (no /proc/meminfo)")
    keep = margin()
    need = spares * cost + keep
    if free >= need:
        return Headroom(True)
    return Headroom(False, f"{free >> 20} MiB available, {spares} spare(s) of about {cost >> 20} MiB "
                           f"need {need >> 20} MiB with a {keep >> 20} MiB margin")
