"""Floors on the part of the corpus the catalog was never tuned on (tests/data/faultlogs/holdout*.jsonl).

Each batch of collected excerpts was split once by a hash of its source and text into a
``tune*`` file (tuning data like ``dev.jsonl``) and a ``holdout*`` file (only scored); the table of
splits is ``SPLITS`` in ``bench/corpus.py`` and the README there tells each batch's story.
``tune2.jsonl`` was collected between the first two splits, from threads none of the other files
quotes, and is tuning data too.
The floors are what the catalog honestly reaches on the holdout part, not the goals: the goals
(category >= 0.90, retryable >= 0.90) are printed by ``bench/classify.py`` next to the scores.
Many retryable labels there follow the thread's later resolution (a configuration bug found
behind a timeout), which no text of the excerpt can decide.
"""

from __future__ import annotations

import hashlib
import importlib.util
import time

import pytest

from conftest import REPO
from trainguard.hooks import PluginHost
from trainguard.model import ErrorSource, Fault
from trainguard.policy import Policy


def _bench():
    """``bench/corpus.py``, which owns the corpus: its files, labels, loader and splits."""
    spec = importlib.util.spec_from_file_location("bench_corpus", REPO / "bench" / "corpus.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


BENCH = _bench()
DATA, LABELS, rows = BENCH.DATA, BENCH.LABELS, BENCH.load
HOST = PluginHost(load_entry_points=False)

# Over every holdout*.jsonl (1,289 excerpts), with the learned fallback on (the default): measured
# 0.817 / 0.803 (0.817 / 0.800 over the 1,255 before batch 37, 0.800 / 0.801 before the fallback's
# healthy reading became a stall, 0.803 / 0.804 over the 1,238 before batch 36, 0.809 / 0.808 over
# the 1,216 before batch 35, 0.813 / 0.811 over the 1,129 before batch 33; retryable 0.789 over 994
# before an unknown verdict became retryable). The category floor was 0.84 over 554 excerpts, 0.83
# over 768, 0.82 over 809 and 0.81 over 881; the batches added since come from ecosystems the
# catalog had not read about (other accelerators, domain toolkits, cluster platforms, GPU
# operations, TPU stacks) or weigh hangs and benign ends, which a tail tells apart worst, and score
# lower untouched (0.64-0.78 before tuning; batch 25 0.72, batch 26 from other accelerators and
# older stacks 0.65; batch 27, found by the errors' own words, 0.89; batch 28 0.76, batch 29 0.79,
# batch 30 0.78, batch 31 0.79, batch 32 0.73, batch 33 0.77, batch 34 0.69, batch 35 0.50, batch
# 36 0.59, batch 37 0.82), so the floor keeps a margin of about ten excerpts below the measured
# figure, the retryable floor about twenty.
CATEGORY_FLOOR = 0.81
RETRYABLE_FLOOR = 0.78


def classify(text: str):
    return HOST.classify(Fault(ErrorSource.LOG, time.time()), text[-65536:], Policy())


FILES = sorted(path.name for path in DATA.glob("*.jsonl") if not path.name.startswith("collected_"))
# The (tuning, holdout) file of every split, as ``bench/classify.py --split`` (bench/corpus.py) made them.
SPLITS = tuple((tune, holdout) for _, tune, holdout in BENCH.SPLITS)
HOLDOUTS = [name for name in FILES if name.startswith("holdout")]


def test_every_corpus_file_is_accounted_for():
    # dev.jsonl, tune2.jsonl (collected between the first two splits) and the splits' files: no other.
    assert len(SPLITS) == 37
    assert FILES == sorted(["dev.jsonl", "tune2.jsonl", *(name for split in SPLITS for name in split)])


@pytest.mark.parametrize("name", FILES)
def test_corpus_lines_follow_the_schema(name):
    ids = set()
    for row in rows(name):
        assert set(row) == {"id", "source", "label", "retryable", "node_fault", "note", "text"}, row.get("id")
        assert row["label"] in LABELS, (row["id"], row["label"])
        assert isinstance(row["retryable"], bool) and isinstance(row["node_fault"], bool), row["id"]
        assert row["source"].startswith("http") and row["text"].strip(), row["id"]
        assert row["id"] not in ids, row["id"]
        ids.add(row["id"])


@pytest.mark.parametrize("tune,holdout", SPLITS)
def test_the_split_is_the_documented_one(tune, holdout):
    def goes_to_holdout(row):
        return hashlib.sha256(f"{row['source']}\n{row['text']}".encode()).digest()[0] % 2 == 1

    assert all(goes_to_holdout(row) for row in rows(holdout))
    assert not any(goes_to_holdout(row) for row in rows(tune))
    others = {row["text"].strip() for name in FILES if name != holdout for row in rows(name)}
    assert not any(row["text"].strip() in others for row in rows(holdout))


def test_later_excerpts_come_from_threads_no_earlier_file_quotes():
    earlier: set[str] = set()
    # In the order they were collected: dev with the first split, tune2, then each later split.
    for batch in (("dev.jsonl", *SPLITS[0]), ("tune2.jsonl",), *SPLITS[1:]):
        sources = [row["source"].rstrip("/") for name in batch for row in rows(name)]
        assert not earlier & set(sources), f"{batch} quotes threads an earlier batch quotes"
        earlier |= set(sources)


def test_holdout_floors():
    holdout = [row for name in HOLDOUTS for row in rows(name)]
    verdicts = [(row, classify(row["text"])) for row in holdout]
    n = len(verdicts)
    category = sum(v.category.value == r["label"] for r, v in verdicts) / n
    retryable = sum(v.retryable == r["retryable"] for r, v in verdicts) / n
    assert n >= 994
    assert category >= CATEGORY_FLOOR, f"untouched category accuracy {category:.3f}"
    assert retryable >= RETRYABLE_FLOOR, f"untouched retryable accuracy {retryable:.3f}"


# User-code faults marked retryable on the untouched part (the goal is none): one each in
# holdout23, holdout24, holdout25, holdout26, holdout33, holdout34 and holdout35, each since its
# batch was split (not tuned on, so they stay). A ceiling like the floors: it may not grow. On
# dev.jsonl and the tuning files there must be none.
UNTOUCHED_USER_CODE_RETRIED = 7


def test_no_user_code_fault_is_marked_retryable():
    retried = []
    for name in FILES:
        for row in rows(name):
            if row["label"] == "user_code" and classify(row["text"]).retryable:
                retried.append((name, row["id"]))
    assert not [hit for hit in retried if not hit[0].startswith("holdout")], retried
    assert len(retried) <= UNTOUCHED_USER_CODE_RETRIED, retried


def test_the_split_leaves_out_a_log_posted_again_cut_differently():
    near = BENCH.NearDuplicates()
    log = "\n".join(f"[rank{i}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={i}, "
                    f"OpType=ALLREDUCE) ran for 600000 milliseconds before timing out." for i in range(8))
    near.add(log, "tune.jsonl:1")
    # The same log, its first half cut and a line of the poster's own added: still the same log.
    recut = "\n".join(log.splitlines()[4:]) + "\nsame thing happens on 2 nodes"
    name, share = near.repeats(recut)
    assert name == "tune.jsonl:1" and share >= BENCH.NEAR_DUPLICATE
    # One line of the same launcher in another log is not a repeat.
    other = log.splitlines()[0] + "\n" + "\n".join(f"step {i} loss {i / 7:.3f} lr 0.0001 grad norm 1.{i}"
                                                   for i in range(30))
    assert near.repeats(other) is None
    assert near.repeats("too short") is None


def test_the_second_annotators_labels_name_corpus_excerpts():
    # audit/second_annotator.jsonl: labels a second annotator gave corpus excerpts from their text
    # alone (tests/data/faultlogs/README.md); bench/classify.py scores the corpus labels against them.
    audit = rows(BENCH.SECOND_ANNOTATOR)
    ids = {name: {str(row["id"]) for row in rows(name)} for name in FILES}
    named = [(row["file"], str(row["id"])) for row in audit]
    assert len(set(named)) == len(named) == 380
    assert all(file in ids and row_id in ids[file] for file, row_id in named), "an excerpt the corpus lacks"
    assert all(row["label"] in LABELS and isinstance(row["sure"], bool) for row in audit)
    assert not any(row["label"] == "user_code" and row["retryable"] for row in audit)
    assert sum(file.startswith("holdout") for file, _ in named) == 200
