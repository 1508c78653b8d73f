"""Sanity-check settings: the seed's flags and JSON block, parsed once into frozen data.

The JSON file is the one PAI-EAS/AIMaster users already write (seed 001), accepted as written::

    {"aimaster": {
        "runtime_check": {"fail_action": "retain", "micro_benchmarks": "c4d"},
        "sanity_check": {"fail_action": "retain", "timeout": 100,
                         "micro_benchmarks": "gemm_flops,all_reduce_1,all_reduce_2,..."}}}

``timeout`` is in minutes and covers the whole check (items run one after another). The seed's
runtime ``fail_action`` values are ``ignore`` (its only choice) and ``retain`` (record only);
trainguard adds ``record`` (an alias of ``retain``) and ``isolate``. Command-line flags win over
the file.
"""

from __future__ import annotations

import argparse
import enum
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from trainguard.errors import PolicyError

ITEMS = ("gemm_flops", "kernel_launch", "all_reduce_1", "all_reduce_2", "all_reduce", "all_to_all_2",
         "all_gather_2", "all_gather", "multi_all_reduce_2", "multi_all_reduce", "pytorch_gloo_2",
         "network_connectivity", "comp_comm_overlap")
# The seed: "By default, GPU GEMM, All-Reduce (single-node), and All-Reduce (between two nodes)".
DEFAULT_ITEMS = ("gemm_flops", "all_reduce_1", "all_reduce_2")
RUNTIME_ITEMS = ("c4d", "reachability")
_ITEM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class FailAction(str, enum.Enum):
    """What a failed pre-start check does: ``fail`` the job, ``retain`` (record, start anyway),
    or ``rebuild`` (isolate the bad nodes, place the job on the healthy ones)."""

    FAIL = "fail"
    RETAIN = "retain"
    REBUILD = "rebuild"


class RuntimeFailAction(str, enum.Enum):
    """What an unhealthy runtime probe does: ``ignore`` (log only), ``record`` (an event in the
    history) or ``isolate`` (the engine treats the node as faulty)."""

    IGNORE = "ignore"
    RECORD = "record"
    ISOLATE = "isolate"


def _choice(enum_type: Any, text: Any, parameter: str, aliases: Mapping[str, str] | None = None) -> Any:
    value = str(text).strip().lower()
    value = (aliases or {}).get(value, value)
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum_type)
        raise PolicyError(parameter, f"{text!r} is not one of {allowed}") from None


def parse_items(text: str | Any, parameter: str = "--sanity-check", known: tuple[str, ...] | None = None) \
        -> tuple[str, ...]:
    """``"gemm_flops, all_reduce_2"`` → a tuple of item names.

    ``default`` stands for the seed's default set and ``all`` for every built-in item. With
    ``known``, every name must be one of them; without, any well-formed name passes here, so
    items that plugins add can be named, and :func:`trainguard.sanity.preflight` rejects a name
    no plugin provides before anything starts.
    """
    names = [n.strip().lower() for n in (text.split(",") if isinstance(text, str) else text) if str(n).strip()]
    out: list[str] = []
    for name in names:
        for item in {"default": DEFAULT_ITEMS, "all": ITEMS}.get(name, (name,)):
            if not _ITEM_NAME.match(item) or (known is not None and item not in known):
                hint = ", ".join(known) if known is not None else "lower-case letters, digits and _"
                raise PolicyError(parameter, f"{item!r} is not a check item ({hint})")
            if item not in out:
                out.append(item)
    if not out:
        raise PolicyError(parameter, "names no check item")
    return tuple(out)


@dataclass(frozen=True)
class RuntimeConfig:
    """The in-run probe: which items, how often, and what an unhealthy node leads to."""

    items: tuple[str, ...] = ("c4d", "reachability")
    fail_action: RuntimeFailAction = RuntimeFailAction.IGNORE
    interval: float = 60.0

    def to_json(self) -> dict[str, Any]:
        return {"items": list(self.items), "fail_action": self.fail_action.value, "interval": self.interval}


@dataclass(frozen=True)
class SanityConfig:
    """Pre-start checks. ``enabled`` is False until items are named (flag or file).

    ``slow_factor``: a node is slow on an item when its value is below ``slow_factor`` x the
    median of its peers (above median / ``slow_factor`` for latencies). ``window`` is the seconds
    each measurement runs; ``runtime`` is None unless a runtime check was configured.
    """

    items: tuple[str, ...] = DEFAULT_ITEMS
    enabled: bool = False
    timeout_minutes: float = 5.0
    fail_action: FailAction = FailAction.FAIL
    slow_factor: float = 0.6
    window: float = 0.5
    runtime: RuntimeConfig | None = None

    def __post_init__(self) -> None:
        if not 0 < self.slow_factor < 1:
            raise PolicyError("--sanity-check-slow-factor", f"{self.slow_factor} must be between 0 and 1")
        if self.timeout_minutes <= 0:
            raise PolicyError("--sanity-check-timeout", f"{self.timeout_minutes} minutes must be positive")
        if self.window <= 0:
            raise PolicyError("sanity window", f"{self.window} s must be positive")

    @property
    def timeout(self) -> float:
        """The whole check's budget in seconds."""
        return self.timeout_minutes * 60.0

    def to_json(self) -> dict[str, Any]:
        return {"items": list(self.items), "enabled": self.enabled, "timeout_minutes": self.timeout_minutes,
                "fail_action": self.fail_action.value, "slow_factor": self.slow_factor, "window": self.window,
                "runtime": self.runtime.to_json() if self.runtime else None}


def config_from_json(data: Mapping[str, Any], base: SanityConfig | None = None) -> SanityConfig:
    """Apply the seed's JSON block (the whole document or its ``aimaster`` object) to ``base``."""
    if not isinstance(data, Mapping):
        raise PolicyError("--sanity-check-config", "the file must hold a JSON object")
    block = data.get("aimaster", data)
    if not isinstance(block, Mapping):
        raise PolicyError("--sanity-check-config", "'aimaster' must be an object")
    config = base or SanityConfig()
    sanity = block.get("sanity_check")
    if sanity is not None:
        if not isinstance(sanity, Mapping):
            raise PolicyError("--sanity-check-config", "'sanity_check' must be an object")
        changes: dict[str, Any] = {"enabled": True}
        if "micro_benchmarks" in sanity:
            changes["items"] = parse_items(sanity["micro_benchmarks"], "sanity_check.micro_benchmarks")
        if "timeout" in sanity:
            changes["timeout_minutes"] = _number(sanity["timeout"], "sanity_check.timeout")
        if "fail_action" in sanity:
            changes["fail_action"] = _choice(FailAction, sanity["fail_action"], "sanity_check.fail_action")
        if "slow_factor" in sanity:
            changes["slow_factor"] = _number(sanity["slow_factor"], "sanity_check.slow_factor")
        config = replace(config, **changes)
    runtime = block.get("runtime_check")
    if runtime is not None:
        if not isinstance(runtime, Mapping):
            raise PolicyError("--sanity-check-config", "'runtime_check' must be an object")
        current = config.runtime or RuntimeConfig()
        rt: dict[str, Any] = {}
        if "micro_benchmarks" in runtime:
            rt["items"] = parse_items(runtime["micro_benchmarks"], "runtime_check.micro_benchmarks", RUNTIME_ITEMS)
        if "fail_action" in runtime:
            rt["fail_action"] = _choice(RuntimeFailAction, runtime["fail_action"], "runtime_check.fail_action",
                                        {"retain": "record"})
        if "interval" in runtime:
            rt["interval"] = _number(runtime["interval"], "runtime_check.interval")
        config = replace(config, runtime=replace(current, **rt))
    return config


def load_config_file(path: str | Path, base: SanityConfig | None = None) -> SanityConfig:
    """Read the seed's JSON file; every mistake is a :class:`PolicyError` naming the key."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PolicyError("--sanity-check-config", f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise PolicyError("--sanity-check-config", f"{path} is not JSON: {exc}") from None
    return config_from_json(data, base)


def _number(value: Any, parameter: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PolicyError(parameter, f"{value!r} is not a number") from None
    if number <= 0:
        raise PolicyError(parameter, f"{value!r} must be positive")
    return number


def _checked(parse: Any) -> Any:
    """An argparse ``type`` that reports a :class:`PolicyError` as a usage error (exit 2)."""
    def check(text: str) -> Any:
        try:
            parse(text)
        except PolicyError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    check.__name__ = getattr(parse, "__name__", "value")
    return check


def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add the sanity-check flags to a parser or an argument group (``trainguard run``).

    Values are checked while parsing; :func:`config_from_args` turns them into a config.
    """
    group = parser.add_argument_group("sanity checks (seed 001)") if isinstance(parser, argparse.ArgumentParser) \
        else parser
    group.add_argument("--sanity-check", dest="sanity_check", metavar="ITEMS", default=None,
                       type=_checked(parse_items),
                       help="check items before the job starts, comma-separated (default: "
                            f"{','.join(DEFAULT_ITEMS)}; 'all' for every item)")
    group.add_argument("--sanity-check-timeout", dest="sanity_check_timeout", metavar="MINUTES", default=None,
                       type=_checked(lambda v: _number(v, "--sanity-check-timeout")),
                       help="budget for all checks together (default 5)")
    group.add_argument("--sanity-check-fail-action", dest="sanity_check_fail_action", default=None,
                       choices=[a.value for a in FailAction],
                       help="fail: do not start; retain: record and start; rebuild: isolate bad nodes first")
    group.add_argument("--sanity-check-slow-factor", dest="sanity_check_slow_factor", metavar="FACTOR", default=None,
                       type=_checked(lambda v: SanityConfig(slow_factor=_number(v, "--sanity-check-slow-factor"))),
                       help="a node below FACTOR x its peers' median is slow (default 0.6)")
    group.add_argument("--sanity-check-config", dest="sanity_check_config", metavar="FILE", default=None,
                       type=_checked(load_config_file),
                       help="the seed's JSON (aimaster.sanity_check, aimaster.runtime_check)")


def config_from_args(args: argparse.Namespace) -> SanityConfig:
    """The config the flags of :func:`add_arguments` describe: the file first, then the flags."""
    config = SanityConfig()
    path = getattr(args, "sanity_check_config", None)
    if path:
        config = load_config_file(path, config)
    changes: dict[str, Any] = {}
    if getattr(args, "sanity_check", None):
        changes.update(enabled=True, items=parse_items(args.sanity_check))
    if getattr(args, "sanity_check_timeout", None) is not None:
        changes["timeout_minutes"] = _number(args.sanity_check_timeout, "--sanity-check-timeout")
    if getattr(args, "sanity_check_fail_action", None):
        changes["fail_action"] = _choice(FailAction, args.sanity_check_fail_action, "--sanity-check-fail-action")
    if getattr(args, "sanity_check_slow_factor", None) is not None:
        changes["slow_factor"] = _number(args.sanity_check_slow_factor, "--sanity-check-slow-factor")
    if changes and "enabled" not in changes:
        changes["enabled"] = True
    return replace(config, **changes)
