"""One :class:`Policy` object: how a job is supervised and when it is given up.

The parameters and defaults are AIMaster's (seed 000), spelled ``--job-hang-interval`` on the
command line and in AIMaster-style argument strings, ``job_hang_interval`` or
``job-hang-interval`` in YAML, and ``trainguard/job-hang-interval`` in job annotations. The
degradation ladder of seed 002 adds a few parameters of its own, and its annotations
(``fault-tolerance/job-retry-num`` ...) are understood as well.

Sources stack in this order, later ones winning: defaults, ``--policy FILE.yaml``, an
AIMaster-style string, explicit command-line flags. Values are case-insensitive; a bad one
raises :class:`~trainguard.errors.PolicyError` naming the parameter.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

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


def _positive(kind: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse(text: Any) -> Any:
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise ValueError(f"{text!r} is not a positive number") from None
        if value <= 0:
            raise ValueError(f"{text!r} must be positive")
        return value

    return parse


def _non_negative_int(text: Any) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"{text!r} must be 0 or more")
    return value


def _failure_rate(text: Any) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not a number") from None
    if value != -1 and not 0 < value <= 1:
        raise ValueError(f"{text!r} must be -1 (off) or a share in (0, 1]")
    return value


def _keywords(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        items: Iterable[Any] = [value]
    elif isinstance(value, Iterable):
        items = value
    else:
        raise ValueError(f"{value!r} is not a keyword or a list of keywords")
    keywords = tuple(str(item) for item in items)
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
    # Diagnosis: stacks of hung ranks, slow ranks.
    enable_stack_snapshots: bool = True
    stack_snapshot_timeout: float = 10
    slow_rank_factor: float = 2.0
    slow_rank_window: int = 5
    isolate_slow_nodes: bool = False
    # Schedulers.
    drain_bad_nodes: bool = False
    # Engine mechanics.
    stop_grace_period: float = 10
    failure_window: float = 0.25
    log_tail_bytes: int = 65536
    warm_standby: bool = False
    preload: tuple[str, ...] = field(default=())

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
    "job_hang_interval": _positive(float),
    "enable_c4d_hang_detection": _parse_bool,
    "c4d_log_level": lambda text: _choice_of(text, ("Info", "Warning", "Error")),
    "c4d_common_envs": str,
    "enable_job_exit_hang_detection": _parse_bool,
    "job_exit_hang_interval": _positive(float),
    "fault_tolerant_policy": _choice(FaultTolerantPolicy),
    "max_num_of_same_error": _positive(int),
    "max_tolerated_failure_rate": _failure_rate,
    "retryable_errors": _keywords,
    "enable_in_place_restart": _parse_bool,
    "max_num_of_pod_restart": _non_negative_int,
    "max_consecutive_hang_restarts": _non_negative_int,
    "max_consecutive_unconditional_restarts": _non_negative_int,
    "isolate_after_same_fault": _positive(int),
    "isolate_window": _positive(float),
    "enable_stack_snapshots": _parse_bool,
    "stack_snapshot_timeout": _positive(float),
    "slow_rank_factor": _positive(float),
    "slow_rank_window": _positive(int),
    "isolate_slow_nodes": _parse_bool,
    "drain_bad_nodes": _parse_bool,
    "stop_grace_period": _positive(float),
    "failure_window": _positive(float),
    "log_tail_bytes": _positive(int),
    "warm_standby": _parse_bool,
    "preload": _keywords,
}

BOOLEAN_PARAMETERS = frozenset(attr for attr, parser in PARSERS.items() if parser is _parse_bool)

# AIMaster spells the repeatable keyword option in the singular on our command line.
ALIASES = {"retryable_error": "retryable_errors"}


def flag(attr: str) -> str:
    """``job_hang_interval`` → ``--job-hang-interval``."""
    return "--" + attr.replace("_", "-")


def _attr(name: str) -> str:
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


def parse_aimaster_args(text: str) -> dict[str, str]:
    """Parse ``"--job-execution-mode=Sync --enable-job-restart=True ..."`` as AIMaster accepts it.

    Both ``--name=value`` and ``--name value`` work; repeated ``--retryable-error`` accumulate.
    """
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise PolicyError("--aimaster-args", f"cannot split {text!r}: {exc}") from None
    values: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            raise PolicyError("--aimaster-args", f"expected --name=value, got {token!r}")
        if "=" in token:
            name, value = token.split("=", 1)
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            name, value = token, tokens[i + 1]
            i += 1
        else:
            raise PolicyError(token, "needs a value")
        if _attr(name) == "retryable_errors":
            values.setdefault(name, []).append(value)
        else:
            values[name] = value
        i += 1
    return values


def load_policy_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML policy file: a mapping of parameter names to values."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise PolicyError("--policy", f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PolicyError("--policy", f"{path} is not valid YAML: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PolicyError("--policy", f"{path} must hold a mapping of parameters")
    return data


def from_annotations(annotations: Mapping[str, str], base: Policy | None = None) -> Policy:
    """Build a policy from job annotations.

    ``trainguard/<parameter>`` carries any AIMaster-style parameter. The ModelArts keys of
    seed 002 map onto the same policy: ``fault-tolerance/job-retry-num`` (1-128) enables job
    restarts with that budget, ``fault-tolerance/job-unconditional-retry`` selects OnFailure,
    ``fault-tolerance/hang-retry`` turns on hang detection (restart upon suspension), and
    ``fault-tolerance/pod-retry-num`` allows that many pod-level reschedules.
    """
    layer: dict[str, Any] = {}
    retry = annotations.get("fault-tolerance/job-retry-num")
    if retry is not None:
        try:
            count = int(retry)
        except ValueError:
            count = 0
        if not 1 <= count <= 128:
            raise PolicyError("fault-tolerance/job-retry-num", f"{retry!r} must be 1-128")
        layer.update(enable_job_restart=True, max_num_of_job_restart=count)
        if _parse_annotation_bool(annotations, "fault-tolerance/job-unconditional-retry"):
            layer["fault_tolerant_policy"] = "OnFailure"
        if _parse_annotation_bool(annotations, "fault-tolerance/hang-retry"):
            layer["enable_job_hang_detection"] = True
        if "fault-tolerance/pod-retry-num" in annotations:
            layer["max_num_of_pod_restart"] = annotations["fault-tolerance/pod-retry-num"]
    ours = {k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}
    return build_policy(layer, ours, base=base)


def _parse_annotation_bool(annotations: Mapping[str, str], key: str) -> bool:
    try:
        return _parse_bool(annotations.get(key, "false"))
    except ValueError as exc:
        raise PolicyError(key, str(exc)) from None
