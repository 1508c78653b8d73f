"""Events: one typed vocabulary, every type documented, one JSON form on every surface."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from trainguard.model import Event, EventType

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "events.md").read_text()


def documented_types() -> list[str]:
    return re.findall(r"^### `([a-z_]+)`$", DOC, re.MULTILINE)


def test_every_event_type_is_documented_once_and_nothing_else_is():
    documented = documented_types()
    assert sorted(documented) == sorted(t.value for t in EventType)
    assert len(documented) == len(set(documented))


def test_the_documented_schema_lists_every_type_and_the_fields_to_json_writes():
    schema = json.loads(re.search(r"```json\n(\{\n  \"\$schema\".*?)\n```", DOC, re.DOTALL).group(1))
    assert sorted(schema["properties"]["type"]["enum"]) == sorted(t.value for t in EventType)
    event = Event("job-1", EventType.ROUND_STARTED, time.time(), "round 1: restart_job (x)", 1, 0, "node-0",
                  {"error_code": "X"}).to_json()
    assert set(event) == set(schema["required"]) and set(event) <= set(schema["properties"])
    # A member serialises as its plain value and compares equal to it.
    assert json.loads(json.dumps(event))["type"] == "round_started" == EventType.ROUND_STARTED


def test_every_event_the_code_emits_is_a_member():
    emitted = set()
    for path in (REPO / "trainguard").rglob("*.py"):
        text = path.read_text()
        emitted |= set(re.findall(r"\bemit\((?:store, )?\"([a-z_]+)\"", text))
        emitted |= set(re.findall(r"\bemit\(\"[a-z_]+\" if \w+ else \"([a-z_]+)\"", text))
        emitted |= set(re.findall(r"\bEvent\([^,()]+, \"([a-z_]+)\"", text))
        emitted |= {EventType[name].value for name in re.findall(r"\bEventType\.([A-Z_]+)\b", text)
                    if name in EventType.__members__}
    assert len(emitted) >= 15, "the emit() calls were not found: update this test's patterns"
    assert emitted <= {t.value for t in EventType}


def test_the_notifier_hookspec_lists_every_event_type():
    import inspect

    from trainguard.hooks import specs

    doc = inspect.getdoc(specs.trainguard_on_event) or ""
    assert {t.value for t in EventType} <= set(re.findall(r"``([a-z_]+)``", doc))
