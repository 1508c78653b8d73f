"""A :class:`~trainguard.model.RoundRecord` as the ``rounds`` and ``jobs`` tables hold it (JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from trainguard.model import Action, ErrorSource, RoundRecord, RoundResult


def record_to_json(record: RoundRecord) -> str:
    data = asdict(record)
    data["error_source"] = record.error_source.value
    data["action"] = record.action.value
    data["result"] = record.result.value
    return json.dumps(data)


def record_from_json(text: str) -> RoundRecord:
    return record_from_dict(json.loads(text))


def record_from_dict(data: dict[str, Any]) -> RoundRecord:
    """The record, from JSON written by this or an older trainguard (unknown keys are ignored)."""
    data = dict(data)
    data["error_source"] = ErrorSource(data["error_source"])
    data["action"] = Action(data["action"])
    data["result"] = RoundResult(data["result"])
    for key in ("ranks", "isolated", "stacks", "notes"):
        data[key] = tuple(data.get(key) or ())
    known = RoundRecord.__dataclass_fields__
    return RoundRecord(**{k: v for k, v in data.items() if k in known})
