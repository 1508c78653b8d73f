"""Timestamps as the records show them: ISO 8601, UTC, milliseconds."""

from __future__ import annotations

from datetime import datetime, timezone


def iso_ms(epoch: float) -> str:
    """``1700000000.1234`` → ``2023-11-14T22:13:20.123Z``."""
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
