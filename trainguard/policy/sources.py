"""Where policy values come from besides flags: AIMaster-style argument strings, policy files
(YAML or JSON, size- and depth-limited) and job annotations."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any, Mapping

import yaml

from trainguard.errors import PolicyError
from trainguard.policy.parameters import (
    ANNOTATION_PREFIX,
    POLICY_FILE_MAX_BYTES,
    POLICY_FILE_MAX_DEPTH,
    Policy,
    _attr,
    _parse_bool,
    _shown,
    build_policy,
)


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
    """Read a YAML (or ``.json``) policy file: a mapping of parameter names to values.

    The file must be a regular file of at most :data:`POLICY_FILE_MAX_BYTES` in UTF-8, holding
    a mapping whose keys are names and whose values are scalars or lists of scalars; anything
    else is a :class:`PolicyError` naming ``--policy``.
    """
    text = _read_policy_text(Path(path))
    try:
        if str(path).endswith(".json"):
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except RecursionError:
        raise PolicyError("--policy", f"{path} is nested too deeply") from None
    except yaml.YAMLError as exc:
        raise PolicyError("--policy", f"{path} is not valid YAML: {exc}".splitlines()[0]) from None
    except ValueError as exc:
        raise PolicyError("--policy", f"{path} is not valid JSON: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PolicyError("--policy", f"{path} must hold a mapping of parameters")
    for key, value in data.items():
        if not isinstance(key, str):
            raise PolicyError("--policy", f"{path}: key {_shown(key)} is not a parameter name")
        if _depth(value) >= POLICY_FILE_MAX_DEPTH:
            raise PolicyError("--policy", f"{path}: {key} is nested too deeply (a value or a list of values)")
    return data


def _read_policy_text(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise PolicyError("--policy", f"{path} is not a regular file")
            raw = handle.read(POLICY_FILE_MAX_BYTES + 1)
    except IsADirectoryError:
        raise PolicyError("--policy", f"{path} is a directory, not a policy file") from None
    except OSError as exc:
        raise PolicyError("--policy", f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > POLICY_FILE_MAX_BYTES:
        raise PolicyError("--policy", f"{path} is larger than {POLICY_FILE_MAX_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError("--policy", f"{path} is not UTF-8 (byte {exc.start})") from None


def _depth(value: Any, limit: int = POLICY_FILE_MAX_DEPTH + 1) -> int:
    """How deeply ``value`` nests lists and mappings (1 for a list of scalars), up to ``limit``."""
    if not isinstance(value, (list, dict)) or limit <= 0:
        return 0
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(item, limit - 1) for item in items), default=0)


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
