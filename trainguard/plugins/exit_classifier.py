"""Classify a fault by its exit code or fatal signal.

Process runners report a signal death as a negative return code (``-9``); shells, Slurm and
Kubernetes as ``128 + signal`` (``137``). Both spellings mean the same here. Confidence is kept
low on purpose: a signal says how a process died, the log usually says why, and the log
classifier's verdict wins when it has evidence of a failure. A harmless log (a warning, a
progress line) never outranks it: the log classifier gives no benign verdict for a process
that died with a failure exit code or a signal.
"""

from __future__ import annotations

import signal as _signal

from trainguard.hooks.markers import hookimpl
from trainguard.model import Category, ErrorSource, Fault, Verdict
from trainguard.policy import Policy

# signal -> (category, retryable, why)
_SIGNALS: dict[int, tuple[Category, bool, str]] = {
    _signal.SIGKILL: (Category.HOST_OOM, False, "killed by SIGKILL (the OOM killer, or a hard kill)"),
    _signal.SIGSEGV: (Category.SEGFAULT_OR_SIGNAL, True, "segmentation fault (SIGSEGV)"),
    _signal.SIGABRT: (Category.SEGFAULT_OR_SIGNAL, True, "aborted (SIGABRT)"),
    # Not retried: in a training job SIGBUS is mostly shared memory running out (a container's
    # small /dev/shm under the DataLoader's workers), which the same placement hits again.
    _signal.SIGBUS: (Category.SEGFAULT_OR_SIGNAL, False, "bus error (SIGBUS; often a full /dev/shm)"),
    _signal.SIGTERM: (Category.NODE_OR_INFRA, True, "terminated (SIGTERM: preemption, eviction or a stop)"),
    _signal.SIGINT: (Category.USER_CODE, False, "interrupted (SIGINT)"),
    _signal.SIGHUP: (Category.SEGFAULT_OR_SIGNAL, True, "hangup (SIGHUP: the terminal or session that started it closed)"),
    _signal.SIGFPE: (Category.SEGFAULT_OR_SIGNAL, False, "floating-point exception (SIGFPE)"),
    _signal.SIGILL: (Category.SEGFAULT_OR_SIGNAL, False, "illegal instruction (SIGILL)"),
}

_EXIT_CODES: dict[int, tuple[Category, bool, str, str]] = {
    126: (Category.USER_CODE, False, "TG-NOT-EXECUTABLE", "command is not executable (exit 126)"),
    127: (Category.USER_CODE, False, "TG-CMD-NOT-FOUND", "command not found (exit 127)"),
}


def signal_of(fault: Fault) -> int | None:
    """The fatal signal of a fault, from ``signal``, a negative code, or a 128+N code."""
    if fault.signal:
        return fault.signal
    code = fault.exit_code
    if code is None:
        return None
    if code < 0:
        return -code
    if 128 < code < 128 + 65:
        return code - 128
    return None


@hookimpl
def trainguard_classify_fault(fault: Fault, log_tail: str, policy: Policy) -> Verdict | None:
    if fault.source is not ErrorSource.EXIT_CODE:
        return None
    sig = signal_of(fault)
    if sig is not None:
        name = _signal.Signals(sig).name if sig in _signal.Signals._value2member_map_ else f"SIG{sig}"
        category, retryable, why = _SIGNALS.get(
            sig, (Category.SEGFAULT_OR_SIGNAL, False, f"killed by signal {name}"))
        return Verdict(category, f"TG-{name}", retryable=retryable, evidence=why,
                       confidence=0.3, classifier="exit_classifier")
    known = _EXIT_CODES.get(fault.exit_code or 0)
    if known is not None:
        category, retryable, code, why = known
        return Verdict(category, code, retryable=retryable, user_error=True, evidence=why,
                       confidence=0.6, classifier="exit_classifier")
    return None
