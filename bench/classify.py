"""Classifier quality on the repository's corpus, and classification time.

Reads only ``tests/data/faultlogs/``: ``dev.jsonl`` and every ``tune*.jsonl`` (what the catalog
was tuned on: ``tune.jsonl`` and ``tune3.jsonl`` … ``tune8.jsonl`` from the splits, ``tune2.jsonl``
collected between them from other threads) and every ``holdout*.jsonl`` (never tuned on, only
scored). For each set, and for all holdouts together, it prints the category and retryable
accuracy, node-fault accuracy, how many user_code excerpts were marked retryable, per-category
precision and recall with the retryable flags right per label, and the confusion matrix; then
how far a second annotator's labels of a sample agree with the corpus's (``audit/``: what the texts
themselves allow), and the time to classify a 1 GB log file (only its tail is read, so it costs
what a small one does).
Set ``TRAINGUARD_LEARNED_FALLBACK=0`` to score the catalog alone.

    python bench/classify.py [--big-log-gb 1] [--misses]
    python bench/classify.py --split     # once per batch: collected_*.jsonl -> tune*.jsonl + holdout*.jsonl

``--split`` is ``bench/corpus.py``'s ``split()``: the corpus, its schema and its splits are there.

``--misses`` lists the excerpts of the tuning sets that were classified wrongly (never those
of the holdout sets, whose texts are not for writing patterns).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from corpus import DATA, LABELS, SECOND_ANNOTATOR, load, split  # noqa: E402
from trainguard.hooks import PluginHost  # noqa: E402
from trainguard.logtail import read_tail  # noqa: E402
from trainguard.model import ErrorSource, Fault, Verdict  # noqa: E402
from trainguard.policy import Policy  # noqa: E402


def classify_all(host: PluginHost, policy: Policy, rows: list[dict[str, Any]]) -> list[Verdict]:
    return [host.classify(Fault(ErrorSource.LOG, 0.0), row["text"][-policy.log_tail_bytes:], policy)
            for row in rows]


def scores(rows: list[dict[str, Any]], verdicts: list[Verdict]) -> dict[str, float]:
    n = len(rows) or 1
    return {
        "category": sum(v.category.value == r["label"] for r, v in zip(rows, verdicts)) / n,
        "retryable": sum(v.retryable == r["retryable"] for r, v in zip(rows, verdicts)) / n,
        "node_fault": sum(v.node_fault == r["node_fault"] for r, v in zip(rows, verdicts)) / n,
        "user_code_retryable": sum(1 for r, v in zip(rows, verdicts) if r["label"] == "user_code" and v.retryable),
        "unknown": sum(1 for v in verdicts if v.category.value == "unknown"),
    }


def report(name: str, rows: list[dict[str, Any]], verdicts: list[Verdict], misses: bool) -> None:
    if not rows:
        print(f"{name}: no excerpts")
        return
    s = scores(rows, verdicts)
    print(f"{name}: {len(rows)} excerpts")
    print(f"  category accuracy {s['category']:.3f}   retryable accuracy {s['retryable']:.3f}   "
          f"node-fault accuracy {s['node_fault']:.3f}   user_code marked retryable: {s['user_code_retryable']}   "
          f"unknown: {s['unknown']}")
    predicted_labels = sorted({v.category.value for v in verdicts} - set(LABELS))
    columns = list(LABELS) + predicted_labels
    # retryable: how many of the label's excerpts got the right flag, and of the wrong ones how
    # many were said retryable (+) and not retryable (-) against the label.
    print(f"  {'label':<20} {'precision':>9} {'recall':>7} {'n':>4}   retryable right (wrong: +said / -said)")
    for label in LABELS:
        predicted = sum(1 for v in verdicts if v.category.value == label)
        actual = sum(1 for r in rows if r["label"] == label)
        hits = sum(1 for r, v in zip(rows, verdicts) if v.category.value == label == r["label"])
        precision = f"{hits / predicted:.2f}" if predicted else "-"
        recall = f"{hits / actual:.2f}" if actual else "-"
        flags = [(r["retryable"], v.retryable) for r, v in zip(rows, verdicts) if r["label"] == label]
        right = sum(gold == said for gold, said in flags)
        plus = sum(said and not gold for gold, said in flags)
        retry = f"{right}/{len(flags)} (+{plus} / -{len(flags) - right - plus})" if flags else "-"
        print(f"  {label:<20} {precision:>9} {recall:>7} {actual:>4}   {retry}")
    matrix = collections.Counter((r["label"], v.category.value) for r, v in zip(rows, verdicts))
    short = {label: label[:6] for label in columns}
    print("  confusion (rows: label, columns: verdict)")
    print("  " + " " * 20 + "".join(f"{short[c]:>7}" for c in columns))
    for label in LABELS:
        if any(matrix[(label, c)] for c in columns):
            print(f"  {label:<20}" + "".join(f"{matrix[(label, c)] or '.':>7}" for c in columns))
    if misses:
        for r, v in zip(rows, verdicts):
            if v.category.value != r["label"] or v.retryable != r["retryable"]:
                print(f"    miss {r['id']}: {r['label']}/{r['retryable']} -> {v.category.value}/{v.retryable} "
                      f"({v.classifier}) {v.evidence[:100]!r}")


def big_log(host: PluginHost, policy: Policy, gigabytes: float) -> None:
    size = int(gigabytes * 1024**3)
    chunk = b"".join(f"step {i} loss {1.0 / (i + 1):.5f} lr 0.0003 tokens/s 81234\n".encode() for i in range(20000))
    with tempfile.NamedTemporaryFile(prefix="tg-big-", suffix=".log", delete=False) as handle:
        path = Path(handle.name)
        written = 0
        while written < size:
            handle.write(chunk)
            written += len(chunk)
        handle.write(b"[rank3]:[E ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation timeout: "
                     b"WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 milliseconds\n")
    try:
        times = []
        for _ in range(20):
            started = time.perf_counter()
            verdict = host.classify(Fault(ErrorSource.EXIT_CODE, 0.0, exit_code=-6),
                                    read_tail(path, policy.log_tail_bytes), policy)
            times.append(time.perf_counter() - started)
        assert verdict.fault_code == "TG-NCCL-TIMEOUT", verdict
        print(f"{os.path.getsize(path) / 1024**3:.2f} GB log (tail {policy.log_tail_bytes // 1024} KiB read): "
              f"median {statistics.median(times) * 1000:.2f} ms, max {max(times) * 1000:.2f} ms over {len(times)} "
              f"runs (goal <= 20 ms) -> {verdict.fault_code}")
    finally:
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big-log-gb", type=float, default=1.0)
    parser.add_argument("--misses", action="store_true", help="list the tuning sets' misses")
    parser.add_argument("--split", action="store_true", help="split collected_*.jsonl once, then stop")
    args = parser.parse_args()
    if args.split:
        split()
        return
    host = PluginHost(load_entry_points=False)
    policy = Policy()
    started = time.perf_counter()
    host.patterns()
    print(f"catalog: {len(host.patterns())} patterns loaded and compiled in "
          f"{(time.perf_counter() - started) * 1000:.1f} ms")
    tuning = {"dev": load("dev.jsonl")}
    tuning.update({path.stem: load(path.name) for path in sorted(DATA.glob("tune*.jsonl"))})
    holdouts = {path.stem: load(path.name) for path in sorted(DATA.glob("holdout*.jsonl"))}
    started = time.perf_counter()
    verdicts = {name: classify_all(host, policy, rows) for name, rows in (*tuning.items(), *holdouts.items())}
    elapsed = time.perf_counter() - started
    for name, rows in tuning.items():
        report(f"{name} (tuned on)", rows, verdicts[name], args.misses)
    report(" + ".join(tuning) + " (tuned on)", [row for rows in tuning.values() for row in rows],
           [v for name in tuning for v in verdicts[name]], False)
    goals = "goals: category >= 0.90, retryable >= 0.90, user_code retryable 0"
    for name, rows in holdouts.items():
        report(f"{name} (never tuned on; {goals})", rows, verdicts[name], False)
    if len(holdouts) > 1:
        report(" + ".join(holdouts) + f" (never tuned on; {goals})",
               [row for rows in holdouts.values() for row in rows], [v for name in holdouts for v in verdicts[name]],
               False)
    holdout = [row for rows in holdouts.values() for row in rows]
    total = sum(len(rows) for rows in tuning.values()) + len(holdout)
    print(f"{total} excerpts classified in {elapsed * 1000:.1f} ms ({elapsed / max(total, 1) * 1e6:.0f} us each)")
    second_annotator({**tuning, **holdouts}, verdicts)
    dense_tail(host, policy)
    big_log(host, policy, args.big_log_gb)


def second_annotator(sets: dict[str, list[dict[str, Any]]], verdicts: dict[str, list[Verdict]]) -> None:
    """How far the labels can be read from the texts at all: a second annotator's labels of a
    random sample (``SECOND_ANNOTATOR``; it saw each text and the labelling convention, never the
    label, the source or a verdict) against the corpus labels, beside the classifier's verdicts on
    the same excerpts. The classifier's figure counts only where the excerpt is untouched."""
    rows = load(SECOND_ANNOTATOR)
    where = {(f"{name}.jsonl", str(row["id"])): (row, verdict)
             for name in sets for row, verdict in zip(sets[name], verdicts[name])}
    for part, untouched in (("tuning", False), ("untouched", True)):
        pairs = [(second, *where[(second["file"], str(second["id"]))]) for second in rows
                 if second["file"].startswith("holdout") == untouched]
        if not pairs:
            continue
        sure = [pair for pair in pairs if pair[0]["sure"]]
        category, retryable = _agreement(pairs)
        line = (f"second annotator on {len(pairs)} {part} excerpts: category {category:.3f}, retryable "
                f"{retryable:.3f} ({len(sure)} it was sure of: category {_agreement(sure)[0]:.3f})")
        if untouched:
            ours = scores([row for _, row, _ in pairs], [verdict for *_, verdict in pairs])
            line += f"; the classifier on the same: category {ours['category']:.3f}, retryable {ours['retryable']:.3f}"
        print(line)


def _agreement(pairs: list[tuple[dict[str, Any], dict[str, Any], Verdict]]) -> tuple[float, float]:
    """The share of (annotator's row, corpus row, verdict) whose category and retry flag agree."""
    n = len(pairs) or 1
    return (sum(a["label"] == r["label"] for a, r, _ in pairs) / n,
            sum(a["retryable"] == r["retryable"] for a, r, _ in pairs) / n)


def dense_tail(host: PluginHost, policy: Policy) -> None:
    """The costliest tail met so far: the whole tail one collective's watchdog lines from many
    ranks (every NCCL pattern's words are in it), with and without a rank in another collective."""
    line = ("[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 "
            "milliseconds before timing out.\n")
    text = "".join(line.format(r=r % 1024) for r in range(600))[-policy.log_tail_bytes:]
    text = text[text.index("\n") + 1:]
    other = text + line.format(r=7).replace("ALLREDUCE", "BROADCAST")
    for name, tail in (("same collective", text), ("one rank elsewhere", other)):
        times = []
        for _ in range(10):
            started = time.perf_counter()
            verdict = host.classify(Fault(ErrorSource.LOG, 0.0), tail, policy)
            times.append(time.perf_counter() - started)
        print(f"{len(tail) // 1024} KiB of watchdog lines ({name}): median {statistics.median(times) * 1000:.2f} ms "
              f"-> {verdict.fault_code}")


if __name__ == "__main__":
    main()
