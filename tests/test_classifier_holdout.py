"""Floors on the part of the corpus the catalog was never tuned on (tests/data/faultlogs/holdout.jsonl).

The collected excerpts were split once by a hash of their source and text (see the README
there); ``tune.jsonl`` is tuning data like ``dev.jsonl``, ``holdout.jsonl`` is only scored.
``tune2.jsonl`` was collected later, from threads none of the other files quotes, and is
tuning data too.
The floors are what the catalog honestly reaches on the holdout part, not the goals: the goals
(category >= 0.90, retryable >= 0.90) are printed by ``bench/classify.py`` next to the scores.
Many retryable labels there follow the thread's later resolution (a configuration bug found
behind a timeout), which no text of the excerpt can decide.
"""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from conftest import REPO
from trainguard.hooks import PluginHost
from trainguard.model import ErrorSource, Fault
from trainguard.policy import Policy

DATA = REPO / "tests" / "data" / "faultlogs"
LABELS = {"nccl_timeout", "nccl_error", "cuda_oom", "host_oom", "gpu_hardware", "node_or_infra", "user_code",
          "hang_or_stuck", "segfault_or_signal", "success_or_benign"}
HOST = PluginHost(load_entry_points=False)

CATEGORY_FLOOR = 0.82
RETRYABLE_FLOOR = 0.68


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def classify(text: str):
    return HOST.classify(Fault(ErrorSource.LOG, time.time()), text[-65536:], Policy())


@pytest.mark.parametrize("name", ["dev.jsonl", "tune.jsonl", "tune2.jsonl", "holdout.jsonl"])
def test_corpus_lines_follow_the_schema(name):
    ids = set()
    for row in rows(name):
        assert set(row) == {"id", "source", "label", "retryable", "node_fault", "note", "text"}, row.get("id")
        assert row["label"] in LABELS, (row["id"], row["label"])
        assert isinstance(row["retryable"], bool) and isinstance(row["node_fault"], bool), row["id"]
        assert row["source"].startswith("http") and row["text"].strip(), row["id"]
        assert row["id"] not in ids, row["id"]
        ids.add(row["id"])


def test_the_split_is_the_documented_one():
    def holdout(row):
        return hashlib.sha256(f"{row['source']}\n{row['text']}".encode()).digest()[0] % 2 == 1

    assert all(holdout(row) for row in rows("holdout.jsonl"))
    assert not any(holdout(row) for row in rows("tune.jsonl"))
    tuned = {row["text"].strip() for row in rows("dev.jsonl") + rows("tune.jsonl")}
    assert not any(row["text"].strip() in tuned for row in rows("holdout.jsonl"))


def test_later_tuning_excerpts_come_from_threads_the_split_does_not_quote():
    quoted = {row["source"].rstrip("/") for name in ("dev.jsonl", "tune.jsonl", "holdout.jsonl") for row in rows(name)}
    assert not any(row["source"].rstrip("/") in quoted for row in rows("tune2.jsonl"))


def test_holdout_floors():
    holdout = rows("holdout.jsonl")
    verdicts = [(row, classify(row["text"])) for row in holdout]
    n = len(verdicts)
    category = sum(v.category.value == r["label"] for r, v in verdicts) / n
    retryable = sum(v.retryable == r["retryable"] for r, v in verdicts) / n
    assert n >= 50
    assert category >= CATEGORY_FLOOR, f"holdout category accuracy {category:.3f}"
    assert retryable >= RETRYABLE_FLOOR, f"holdout retryable accuracy {retryable:.3f}"


def test_no_user_code_fault_is_marked_retryable():
    for row in rows("holdout.jsonl") + rows("tune.jsonl") + rows("tune2.jsonl") + rows("dev.jsonl"):
        if row["label"] == "user_code":
            verdict = classify(row["text"])
            assert not verdict.retryable, (row["id"], verdict.classifier)
