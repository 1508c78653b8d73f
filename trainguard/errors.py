"""Errors trainguard raises. Every one is a :class:`TrainguardError` with structured attributes."""

from __future__ import annotations


class TrainguardError(Exception):
    """Base of every error trainguard raises on purpose; the CLI turns it into one line and exit 2."""

    exit_code = 2


class PolicyError(TrainguardError):
    """A policy value is missing, malformed or out of range.

    ``parameter`` is the AIMaster-style name (``--job-hang-interval``) so the message points at
    exactly what the user typed.
    """

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"{parameter}: {message}")
        self.parameter = parameter


class JobStateError(TrainguardError):
    """The run history does not allow what was asked (unknown job id, job already finished)."""

    def __init__(self, job_id: str, message: str) -> None:
        super().__init__(f"job {job_id}: {message}")
        self.job_id = job_id


class AdapterError(TrainguardError):
    """A scheduler refused or failed an operation; ``permanent`` says whether retrying can help."""

    def __init__(self, adapter: str, message: str, *, permanent: bool = True) -> None:
        super().__init__(f"{adapter}: {message}")
        self.adapter = adapter
        self.permanent = permanent


class PluginError(TrainguardError):
    """A plugin registered something invalid (a duplicate adapter name, a malformed pattern)."""
