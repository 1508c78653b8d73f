"""Errors trainguard raises. Every one is a :class:`TrainguardError` with structured attributes.

The CLI prints each as one line on stderr and exits with its ``exit_code``: 2 for bad input and
unusable state, 3 (:class:`JobOwnedError`) when another live supervisor owns the job.
"""

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


class JobOwnedError(TrainguardError):
    """Another live supervisor owns the job (holds its lease); exit code 3.

    ``host``, ``pid`` and ``since`` (epoch seconds) name the owner as its lease records it.
    ``trainguard run --takeover`` takes the job over anyway.
    """

    exit_code = 3

    def __init__(self, job_id: str, host: str, pid: int, since: float) -> None:
        import time

        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))
        super().__init__(f"job {job_id}: owned by a live supervisor (host {host}, pid {pid}, since {when}); "
                         "wait for it to end, or take the job over with --takeover")
        self.job_id = job_id
        self.host = host
        self.pid = pid
        self.since = since


class StoreUnavailableError(TrainguardError):
    """The run history cannot be read or written (disk full, read-only, corrupted, unreachable)."""


class AdapterError(TrainguardError):
    """A scheduler refused or failed an operation; ``permanent`` says whether retrying can help."""

    def __init__(self, adapter: str, message: str, *, permanent: bool = True) -> None:
        super().__init__(f"{adapter}: {message}")
        self.adapter = adapter
        self.permanent = permanent


class PluginError(TrainguardError):
    """A plugin registered something invalid (a duplicate adapter name, a malformed pattern)."""
