"""Job ids: what a valid one looks like, and a fresh one when the user gives none.

A job id names a directory under the state directory (``jobs/<job_id>/logs``) and a lock file,
so it must never be a path: ``[A-Za-z0-9._-]{1,128}``, and neither ``.`` nor ``..``.
"""

from __future__ import annotations

import re
import secrets
import time

from trainguard.errors import PolicyError

JOB_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,128}")


def validate_job_id(job_id: object, option: str = "--job-id") -> str:
    """Return ``job_id`` if it is a valid job id; else raise :class:`PolicyError` naming ``option``."""
    text = job_id if isinstance(job_id, str) else str(job_id)
    shown = text if len(text) <= 40 else text[:37] + "..."
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.fullmatch(text) or text in (".", ".."):
        why = ("is longer than 128 characters" if len(text) > 128 and JOB_ID_PATTERN.fullmatch(text[:128])
               else "must be 1-128 of A-Z a-z 0-9 . _ - and not . or .. (a job id is never a path)")
        raise PolicyError(option, f"{shown!r} {why}")
    return text


def mint_job_id(prefix: str = "tg") -> str:
    """A new job id: ``tg-20261123-195334-1a2b`` (time of day to the second, then 16 random bits)."""
    return validate_job_id(time.strftime(f"{prefix}-%Y%m%d-%H%M%S-") + secrets.token_hex(2))
