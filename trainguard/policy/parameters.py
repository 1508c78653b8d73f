"""Every policy parameter: its name, default, parser and validation; :func:`build_policy`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from trainguard.errors import PolicyError
from trainguard.model import ExecutionMode, FaultTolerantPolicy

ANNOTATION_PREFIX = "trainguard/"


def _parse_bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not True or False")


WARM_STANDBY_MODES = ("auto", "true", "false")


def _parse_warm_standby(text: Any) -> str:
    """``auto``, ``true`` or ``false``; any boolean spelling counts as ``true``/``false``."""
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        return "true" if _parse_bool(text) else "false"
    except ValueError:
        raise ValueError(f"{text!r} is not auto, true or false") from None


# Limits on a policy file: what a person writes is a few hundred bytes of flat key: value lines.
POLICY_FILE_MAX_BYTES = 1 << 20
POLICY_FILE_MAX_DEPTH = 3

_DAY = 86400.0


def _shown(text: Any) -> str:
    shown = repr(text)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _to_float(text: Any, what: str) -> float:
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise ValueError(f"{_shown(text)} is not {what}")
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{_shown(text)} is not {what}") from None
    if not math.isfinite(value):
        # nan compares false with every bound and inf overflows timeouts: neither is a setting.
        raise ValueError(f"{_shown(text)} is not a finite number")
    return value


def _to_int(text: Any, what: str) -> int:
    if isinstance(text, float) and math.isfinite(text) and text.is_integer():
        return int(text)
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise ValueError(f"{_shown(text)} is not {what}")
    try:
        return int(str(text).strip())
    except ValueError:
        raise ValueError(f"{_shown(text)} is not {what}") from None


def _positive(kind: Callable[[Any], Any], high: float) -> Callable[[Any], Any]:
    """A number in (0, high]: seconds, counts, factors."""

    def parse(text: Any) -> Any:
        value = (_to_int if kind is int else _to_float)(text, "a positive number")
        if value <= 0:
            raise ValueError(f"{_shown(text)} must be positive")
        if value > high:
            raise ValueError(f"{_shown(text)} is more than {int(high) if float(high).is_integer() else high}")
        return value

    return parse


def _count(high: int) -> Callable[[Any], int]:
    """A whole number in [0, high]."""

    def parse(text: Any) -> int:
        value = _to_int(text, "a whole number")
        if value < 0:
            raise ValueError(f"{_shown(text)} must be 0 or more")
        if value > high:
            raise ValueError(f"{_shown(text)} is more than {high}")
        return value

    return parse


def _finite_non_negative(text: Any) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"{text!r} must be a finite number of seconds, 0 or more")
    return value


_non_negative_int = _count(1_000_000)


def _failure_rate(text: Any) -> float:
    value = _to_float(text, "a number")
    if value != -1 and not 0 < value <= 1:
        raise ValueError(f"{text!r} must be -1 (off) or a share in (0, 1]")
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{_shown(value)} is not a string")
    return str(value)


RECOVER_STRATEGIES = ("retry", "recover", "recover-in-place", "elastic-training", "dump", "exit")


def _recover_strategy(value: Any) -> tuple[str, ...]:
    """Seed 003's comma-separated list (``retry,recover``), or a list; each one of RECOVER_STRATEGIES."""
    items = _keywords(value)
    names = tuple(dict.fromkeys(name.strip().lower() for item in items for name in item.split(",") if name.strip()))
    unknown = [name for name in names if name not in RECOVER_STRATEGIES]
    if unknown or not names:
        raise ValueError(f"{_shown(','.join(unknown) or value)} is not a list of {', '.join(RECOVER_STRATEGIES)}")
    return names


def _keywords(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items: Iterable[Any] = [value]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise ValueError(f"{_shown(value)} is not a keyword or a list of keywords")
    keywords = tuple(_text(item) for item in items)
    if any(not keyword.strip() for keyword in keywords):
        raise ValueError("an empty keyword would match every log")
    return keywords


def _choice_of(text: Any, allowed: tuple[str, ...]) -> str:
    for value in allowed:
        if value.lower() == str(text).strip().lower():
            return value
    raise ValueError(f"{text!r} is not one of {', '.join(allowed)}")


def _choice(enum_type: Any) -> Callable[[Any], Any]:
    return enum_type.parse


@dataclass(frozen=True)
class Policy:
    """How a job is supervised. Field names are AIMaster's parameters in snake case."""

    # AIMaster general configuration.
    job_execution_mode: ExecutionMode = ExecutionMode.SYNC
    enable_job_restart: bool = False
    max_num_of_job_restart: int = 3
    # AIMaster runtime configuration (no instance has failed).
    enable_job_hang_detection: bool = False
    job_hang_interval: float = 1800
    # Accepted so AIMaster strings work unchanged; C4D needs Alibaba's ACCL (see the engine's warning).
    enable_c4d_hang_detection: bool = False
    c4d_log_level: str = "Warning"
    c4d_common_envs: str = ""
    enable_job_exit_hang_detection: bool = False
    job_exit_hang_interval: float = 600
    # AIMaster fault tolerance configuration (an instance has failed).
    fault_tolerant_policy: FaultTolerantPolicy = FaultTolerantPolicy.EXIT_CODE_AND_ERROR_MSG
    max_num_of_same_error: int = 10
    max_tolerated_failure_rate: float = -1
    retryable_errors: tuple[str, ...] = ()
    # Seed 002 degradation ladder.
    enable_in_place_restart: bool = True
    max_num_of_pod_restart: int = 0
    max_consecutive_hang_restarts: int = 3
    max_consecutive_unconditional_restarts: int = 3
    isolate_after_same_fault: int = 3
    isolate_window: float = 86400
    # Elastic jobs (trainguard/elastic.py; torchrun's ``--nnodes MIN:MAX``): with ``min_nodes``
    # set, a job that loses a node and has no spare goes on smaller instead of failing, and grows
    # back when capacity returns. 0: not elastic; ``max_nodes`` 0: the nodes ``--nproc`` needs.
    min_nodes: int = 0
    max_nodes: int = 0
    # What losing an instance of a role does, over the framework's defaults
    # (trainguard/frameworks): ``ROLE=job|instance|ignore,...``, e.g. ``evaluator=ignore``.
    role_policy: str = ""
    # The no-progress guard: give up after this many recovery rounds in a row with neither a new
    # step nor a new checkpoint reported through the SDK (0: off). Jobs that never report are
    # not judged by it.
    max_rounds_without_progress: int = 10
    # Dry run (``run --dry-run``): decide and log every recovery, carry none out (trial a policy
    # on production jobs; a fault that ends the job's ranks then ends the job).
    decide_only: bool = False
    # Diagnosis: stacks of hung ranks, slow ranks.
    enable_stack_snapshots: bool = True
    stack_snapshot_timeout: float = 10
    slow_rank_factor: float = 2.0
    slow_rank_window: int = 5
    isolate_slow_nodes: bool = False
    # Schedulers.
    drain_bad_nodes: bool = False
    # How long a scheduler that does not answer (or refuses to start a step for now) is waited
    # out before the job fails, transiently (seconds; 0 = one attempt).
    scheduler_outage_tolerance: float = 300
    # Engine mechanics.
    stop_grace_period: float = 10
    failure_window: float = 0.25
    log_tail_bytes: int = 65536
    # ``auto``: spares while the host has memory headroom; ``true``: always; ``false``: never
    # (see trainguard/adapters/standby_pool.py).
    warm_standby: str = "auto"
    preload: tuple[str, ...] = field(default=())
    # Seed 003's recover-strategy: which in-process rungs a job whose ranks run under
    # ``trainguard.inprocess`` may take (README, "In-process recovery"); and how long ranks get to
    # end an iteration before they are killed and started anew (seconds).
    recover_strategy: tuple[str, ...] = RECOVER_STRATEGIES
    inprocess_barrier_timeout: float = 10

    def replace(self, **changes: Any) -> "Policy":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else (
                value.value if isinstance(value, (ExecutionMode, FaultTolerantPolicy)) else value
            )
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Policy":
        return build_policy(data)


PARSERS: dict[str, Callable[[Any], Any]] = {
    "job_execution_mode": _choice(ExecutionMode),
    "enable_job_restart": _parse_bool,
    "max_num_of_job_restart": _non_negative_int,
    "enable_job_hang_detection": _parse_bool,
    "job_hang_interval": _positive(float, 30 * _DAY),
    "enable_c4d_hang_detection": _parse_bool,
    "c4d_log_level": lambda text: _choice_of(_text(text), ("Info", "Warning", "Error")),
    "c4d_common_envs": _text,
    "enable_job_exit_hang_detection": _parse_bool,
    "job_exit_hang_interval": _positive(float, 30 * _DAY),
    "fault_tolerant_policy": _choice(FaultTolerantPolicy),
    "max_num_of_same_error": _positive(int, 1_000_000),
    "max_tolerated_failure_rate": _failure_rate,
    "retryable_errors": _keywords,
    "enable_in_place_restart": _parse_bool,
    "max_num_of_pod_restart": _non_negative_int,
    "max_consecutive_hang_restarts": _non_negative_int,
    "max_consecutive_unconditional_restarts": _non_negative_int,
    "isolate_after_same_fault": _positive(int, 1_000_000),
    "isolate_window": _positive(float, 366 * _DAY),
    "min_nodes": _count(100_000),
    "max_nodes": _count(100_000),
    "role_policy": lambda text: _role_policy(_text(text)),
    "max_rounds_without_progress": _non_negative_int,
    "decide_only": _parse_bool,
    "enable_stack_snapshots": _parse_bool,
    "stack_snapshot_timeout": _positive(float, 3600),
    "slow_rank_factor": _positive(float, 1000),
    "slow_rank_window": _positive(int, 1_000_000),
    "isolate_slow_nodes": _parse_bool,
    "drain_bad_nodes": _parse_bool,
    "scheduler_outage_tolerance": _finite_non_negative,
    "stop_grace_period": _positive(float, _DAY),
    "failure_window": _positive(float, 3600),
    "log_tail_bytes": _positive(int, 64 << 20),
    "warm_standby": _parse_warm_standby,
    "preload": _keywords,
    "recover_strategy": _recover_strategy,
    "inprocess_barrier_timeout": _positive(float, 3600),
}

# Flags that mean "true" when given without a value (``--warm-standby`` too).
BOOLEAN_PARAMETERS = frozenset(attr for attr, parser in PARSERS.items()
                               if parser in (_parse_bool, _parse_warm_standby))

# AIMaster spells the repeatable keyword option in the singular on our command line.
ALIASES = {"retryable_error": "retryable_errors"}


def flag(attr: str) -> str:
    """``job_hang_interval`` → ``--job-hang-interval``."""
    return "--" + attr.replace("_", "-")


def _attr(name: Any) -> str:
    if not isinstance(name, str):
        raise PolicyError("--policy", f"{_shown(name)} is not a parameter name")
    key = name.strip().lstrip("-").removeprefix(ANNOTATION_PREFIX).replace("-", "_").lower()
    return ALIASES.get(key, key)


def build_policy(*layers: Mapping[str, Any], base: Policy | None = None) -> Policy:
    """Apply ``layers`` of ``{name: value}`` over ``base`` (or the defaults), later layers winning.

    Names may be in any of the accepted spellings; unknown names and bad values raise
    :class:`PolicyError`.
    """
    changes: dict[str, Any] = {}
    for layer in layers:
        for name, raw in layer.items():
            attr = _attr(name)
            if attr == "nnodes":  # torchrun's MIN:MAX spelling of the two elastic bounds
                changes.update(_nnodes(raw))
                continue
            parser = PARSERS.get(attr)
            if parser is None:
                raise PolicyError(flag(attr), "unknown parameter")
            try:
                value = parser(raw)
            except ValueError as exc:
                raise PolicyError(flag(attr), str(exc)) from None
            if attr == "retryable_errors":
                value = tuple(dict.fromkeys((*changes.get(attr, ()), *value)))
            changes[attr] = value
    return dataclasses.replace(base or Policy(), **changes)


ROLE_BEHAVIOURS = ("job", "instance", "ignore")


def _role_policy(text: str) -> str:
    """``ps=job, worker=instance`` → ``ps=job,worker=instance`` (checked)."""
    items = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        role, sep, behaviour = (part.strip() for part in item.partition("="))
        if not sep or not role or behaviour.lower() not in ROLE_BEHAVIOURS:
            raise ValueError(f"{item!r} is not ROLE=job|instance|ignore")
        items.append(f"{role}={behaviour.lower()}")
    return ",".join(items)


def _nnodes(raw: Any) -> dict[str, int]:
    """``"1:4"`` → min 1, max 4; ``"2"`` → exactly 2 (torchrun's ``--nnodes``)."""
    low, sep, high = _text(raw).partition(":")
    try:
        bounds = {"min_nodes": _count(100_000)(low), "max_nodes": _count(100_000)(high if sep else low)}
    except ValueError as exc:
        raise PolicyError("--nnodes", f"{_shown(raw)} is not MIN:MAX ({exc})") from None
    if not 1 <= bounds["min_nodes"] <= bounds["max_nodes"]:
        raise PolicyError("--nnodes", f"{_shown(raw)}: need 1 <= MIN <= MAX")
    return bounds
