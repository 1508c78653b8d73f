"""Telling a step that never started from a rank that failed, and waiting out a controller.

A rank launched with ``srun`` first runs a one-line shell wrapper on its node that prints a
start line (:data:`STARTED_SH`) and then ``exec``s the command, so the rank keeps its pid and
argv. The line reaches the rank's log through srun's own output forwarding (no shared
filesystem, no controller), names the step and the rank's pid, and splits the log in two:

- before it, only ``srun``/``slurmstepd`` can have written: if srun ends there, the step never
  launched, and its messages are a **launcher fault**, judged apart from the rank (a rank that
  never started cannot have a bug);
- after it, the rank's own output, which is what a rank's exit is judged by.

Launcher messages that mean "the controller or the step launcher cannot be reached, or refuses
for now" are an **outage**: the launch is retried (tenacity, exponential backoff) for
``--scheduler-outage-tolerance`` seconds. Any other launcher fault, or an outage that lasts
longer, fails the start with a transient :class:`~trainguard.errors.AdapterError`.

Slurm's client commands (``scontrol``, ``squeue``, ``scancel``, ``sbatch``) go through
:func:`slurm_command`, which waits out an unreachable controller the same way.
"""

from __future__ import annotations

import logging
import re
import subprocess
import time
from typing import Callable, Mapping, NamedTuple

from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from trainguard.errors import AdapterError

log = logging.getLogger(__name__)

# Printed by every srun task before it execs the rank's command; "$@" is the command.
STARTED_SH = ('echo "[trainguard] step $SLURM_JOB_ID.$SLURM_STEP_ID started on $SLURMD_NODENAME as pid $$"; '
              'exec "$@"')
STARTED = re.compile(rb"^\[trainguard\] step (\S+) started on (\S*) as pid (\d+)\n", re.MULTILINE)

# The controller does not answer, or step creation is refused for now: wait it out. These are
# the messages of patterns.yaml's TG-SLURM-CONTROLLER and TG-SLURM-STEP-CREATE; they are matched
# here as well so the adapter does not depend on the catalog.
OUTAGE = (
    "Unable to contact slurm controller",
    "Socket timed out on send/recv operation",
    "Unable to confirm allocation for job",
    "Expired or invalid job",
    "Zero Bytes were transmitted or received",
    "Connection refused",
    "Job step creation temporarily disabled",
    "Requested nodes are busy",
    "Unable to create step",
)
# Step-creation refusals that waiting does not cure: the node is gone from the allocation.
_LASTING = ("Requested node configuration is not available", "Invalid node name specified")


class SchedulerWait(NamedTuple):
    """What a start waited for (Slurm's own message) and for how long (seconds)."""

    reason: str
    seconds: float


class LaunchRefused(Exception):
    """Steps did not start because the scheduler did not answer or refused for now."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def is_outage(text: str) -> bool:
    """Whether launcher output ``text`` says the scheduler is unreachable or refuses for now."""
    return any(marker in text for marker in OUTAGE) and not any(marker in text for marker in _LASTING)


def launcher_message(text: str) -> str:
    """The most telling line of srun's output: its first error, else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return errors[0] if errors else (lines[-1] if lines else "")


def without_outage_lines(text: str) -> str:
    """A started rank's output less srun's complaints about the controller: they cannot be why
    the rank ended (srun needs no controller while its tasks run)."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not (line.startswith(("srun:", "slurmstepd:")) and is_outage(line)))


# How long Slurm commands are retried while slurmctld does not answer, when no policy says.
CONTROLLER_PATIENCE = 60.0
_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused",
                "Zero Bytes were transmitted", "slurm_load_jobs error: Unable to contact")


class _ControllerUnavailable(Exception):
    pass


def slurm_command(*argv: str, env: Mapping[str, str] | None = None, timeout: float = 30,
                  patience: float = CONTROLLER_PATIENCE, outages: list[str] | None = None,
                  sleep: Callable[[float], None] = time.sleep) -> str:
    """Run a Slurm client command; retried while the controller is unreachable.

    A refusal (unknown partition, bad job id) raises :class:`AdapterError` at once with Slurm's
    own message; an unreachable controller is retried for ``patience`` seconds (each call is
    cut short at ``timeout``, or at ``patience`` when that is shorter; ``patience=0`` makes one
    call of up to ``timeout``), then raises a transient (``permanent=False``)
    :class:`AdapterError`. ``outages`` collects the message of every attempt the controller did
    not answer; ``sleep`` waits between attempts (an adapter's interruptible ``pause``).
    """
    call_timeout = timeout if patience == 0 or patience >= timeout else max(patience, 2.0)

    @retry(retry=retry_if_exception_type(_ControllerUnavailable), stop=stop_after_delay(patience),
           wait=wait_exponential(multiplier=0.2, max=5), sleep=sleep, reraise=True)
    def attempt() -> str:
        try:
            done = subprocess.run(list(argv), env=dict(env) if env is not None else None, capture_output=True,
                                  text=True, timeout=call_timeout)
        except FileNotFoundError:
            raise AdapterError("slurm", f"{argv[0]} not found: is Slurm installed on this host?") from None
        except subprocess.TimeoutExpired:
            text = f"slurmctld did not answer {argv[0]} within {call_timeout:g} s"
            if outages is not None:
                outages.append(text)
            raise _ControllerUnavailable(text) from None
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            text = message[-1] if message else f"exit code {done.returncode}"
            if any(marker in (done.stderr or "") for marker in _UNREACHABLE):
                log.warning("slurm controller unreachable (%s); retrying", text)
                if outages is not None:
                    outages.append(text)
                raise _ControllerUnavailable(text)
            raise AdapterError("slurm", f"{' '.join(argv[:2])}: {text}")
        return done.stdout

    try:
        return attempt()
    except _ControllerUnavailable as exc:
        raise AdapterError("slurm", f"slurmctld did not answer {argv[0]} for {patience:g} s "
                                    f"(--scheduler-outage-tolerance): {exc}", permanent=False) from None
