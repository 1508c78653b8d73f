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

``--split`` leaves out an excerpt whose text is in the corpus already, and one that shares 40 % or
more of its word 5-grams with a corpus text or one taken before it from its batch (the same log
posted again, or cut differently); it prints what it left out and why.

``--misses`` lists the excerpts of the tuning sets that were classified wrongly (never those
of the holdout sets, whose texts are not for writing patterns).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainguard.hooks import PluginHost  # noqa: E402
from trainguard.logtail import read_tail  # noqa: E402
from trainguard.model import Category, ErrorSource, Fault, Verdict  # noqa: E402
from trainguard.policy import Policy  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "faultlogs"
# The corpus labels: every category but unknown (a verdict, never a label), in Category's order.
LABELS = tuple(c.value for c in Category if c is not Category.UNKNOWN)
KEYS = {"id", "source", "label", "retryable", "node_fault", "note", "text"}
# Not a corpus file (so not beside them): a second annotator's labels of corpus excerpts (README).
SECOND_ANNOTATOR = "audit/second_annotator.jsonl"


def validate(row: Any, where: str) -> list[str]:
    """What is wrong with one corpus line (empty when it is usable)."""
    if not isinstance(row, dict):
        return [f"{where}: not an object"]
    problems = []
    if set(row) != KEYS:
        problems.append(f"{where}: keys {sorted(set(row) ^ KEYS)} differ from the schema")
    if row.get("label") not in LABELS:
        problems.append(f"{where}: label {row.get('label')!r} is not one of the README's")
    for key in ("retryable", "node_fault"):
        if not isinstance(row.get(key), bool):
            problems.append(f"{where}: {key} is not a boolean")
    if not isinstance(row.get("text"), str) or not row.get("text", "").strip():
        problems.append(f"{where}: empty text")
    if not isinstance(row.get("source"), str) or not row.get("source", "").startswith("http"):
        problems.append(f"{where}: source is not an address")
    return problems


def load(name: str) -> list[dict[str, Any]]:
    path = DATA / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def goes_to_holdout(row: dict[str, Any]) -> bool:
    """The split rule: the first byte of sha256(source + newline + text) is odd."""
    return hashlib.sha256(f"{row['source']}\n{row['text']}".encode()).digest()[0] % 2 == 1


# Each split, made once: the collected files it took, its tuning part and its untouched part.
SPLITS = ((("collected_a.jsonl", "collected_b.jsonl"), "tune.jsonl", "holdout.jsonl"),
          (("collected_c.jsonl", "collected_d.jsonl"), "tune3.jsonl", "holdout2.jsonl"),
          (("collected_e.jsonl", "collected_f.jsonl"), "tune4.jsonl", "holdout3.jsonl"),
          (("collected_g.jsonl", "collected_h.jsonl"), "tune5.jsonl", "holdout4.jsonl"),
          (("collected_i.jsonl", "collected_j.jsonl"), "tune6.jsonl", "holdout5.jsonl"),
          (("collected_k.jsonl", "collected_l.jsonl"), "tune7.jsonl", "holdout6.jsonl"),
          (("collected_m.jsonl", "collected_n.jsonl"), "tune8.jsonl", "holdout7.jsonl"),
          (("collected_o.jsonl", "collected_p.jsonl"), "tune9.jsonl", "holdout8.jsonl"),
          (("collected_q.jsonl", "collected_r.jsonl"), "tune10.jsonl", "holdout9.jsonl"),
          (("collected_s.jsonl", "collected_t.jsonl"), "tune11.jsonl", "holdout10.jsonl"),
          (("collected_u.jsonl", "collected_v.jsonl"), "tune12.jsonl", "holdout11.jsonl"),
          (("collected_w.jsonl", "collected_x.jsonl"), "tune13.jsonl", "holdout12.jsonl"),
          (("collected_y.jsonl", "collected_z.jsonl"), "tune14.jsonl", "holdout13.jsonl"),
          (("collected_aa.jsonl", "collected_ab.jsonl", "collected_ac.jsonl"), "tune15.jsonl", "holdout14.jsonl"),
          (("collected_ad.jsonl", "collected_ae.jsonl", "collected_af.jsonl"), "tune16.jsonl", "holdout15.jsonl"),
          (("collected_ag.jsonl", "collected_ah.jsonl", "collected_ai.jsonl"), "tune17.jsonl", "holdout16.jsonl"),
          (("collected_aj.jsonl", "collected_ak.jsonl", "collected_al.jsonl"), "tune18.jsonl", "holdout17.jsonl"),
          (("collected_am.jsonl", "collected_an.jsonl", "collected_ao.jsonl"), "tune19.jsonl", "holdout18.jsonl"),
          (("collected_ap.jsonl", "collected_aq.jsonl", "collected_ar.jsonl"), "tune20.jsonl", "holdout19.jsonl"),
          (("collected_as.jsonl", "collected_at.jsonl", "collected_au.jsonl"), "tune21.jsonl", "holdout20.jsonl"),
          (("collected_av.jsonl", "collected_aw.jsonl", "collected_ax.jsonl"), "tune22.jsonl", "holdout21.jsonl"),
          (("collected_ay.jsonl", "collected_az.jsonl", "collected_ba.jsonl", "collected_bb.jsonl"), "tune23.jsonl",
           "holdout22.jsonl"),
          (("collected_bc.jsonl", "collected_bd.jsonl", "collected_be.jsonl", "collected_bf.jsonl"), "tune24.jsonl",
           "holdout23.jsonl"),
          (("collected_bg.jsonl", "collected_bh.jsonl", "collected_bi.jsonl", "collected_bj.jsonl"), "tune25.jsonl",
           "holdout24.jsonl"),
          (("collected_bk.jsonl", "collected_bl.jsonl", "collected_bm.jsonl", "collected_bn.jsonl",
            "collected_bo.jsonl"), "tune26.jsonl", "holdout25.jsonl"),
          (("collected_bp.jsonl", "collected_bq.jsonl", "collected_br.jsonl", "collected_bs.jsonl",
            "collected_bt.jsonl"), "tune27.jsonl", "holdout26.jsonl"),
          (("collected_bu.jsonl", "collected_bv.jsonl", "collected_bx.jsonl", "collected_by.jsonl"), "tune28.jsonl",
           "holdout27.jsonl"),
          (("collected_bz.jsonl", "collected_ca.jsonl", "collected_cb.jsonl", "collected_cc.jsonl"), "tune29.jsonl",
           "holdout28.jsonl"),
          (("collected_cd.jsonl", "collected_ce.jsonl", "collected_cf.jsonl", "collected_cg.jsonl"), "tune30.jsonl",
           "holdout29.jsonl"),
          (("collected_ch.jsonl", "collected_ci.jsonl", "collected_cj.jsonl", "collected_ck.jsonl"), "tune31.jsonl",
           "holdout30.jsonl"),
          (("collected_cl.jsonl", "collected_cm.jsonl", "collected_cn.jsonl", "collected_co.jsonl"), "tune32.jsonl",
           "holdout31.jsonl"),
          (("collected_cp.jsonl", "collected_cq.jsonl", "collected_cr.jsonl", "collected_cs.jsonl"), "tune33.jsonl",
           "holdout32.jsonl"),
          (("collected_ct.jsonl", "collected_cu.jsonl", "collected_cv.jsonl", "collected_cw.jsonl"), "tune34.jsonl",
           "holdout33.jsonl"),
          (("collected_cx.jsonl", "collected_cy.jsonl", "collected_cz.jsonl"), "tune35.jsonl", "holdout34.jsonl"),
          (("collected_da.jsonl", "collected_db.jsonl", "collected_dc.jsonl"), "tune36.jsonl", "holdout35.jsonl"))


# Near-duplicates: an excerpt that shares this share of its word 5-grams with one text of the
# corpus (or one taken earlier from its batch) is the same log posted again, or cut differently;
# scoring it as untouched would count a tuned text twice. Found by comparison, never by reading.
SHINGLE = 5
NEAR_DUPLICATE = 0.40
_SHINGLE_WORD = re.compile(r"\w+")


def shingles(text: str) -> set[tuple[str, ...]]:
    words = _SHINGLE_WORD.findall(text.lower())
    return {tuple(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


class NearDuplicates:
    """The texts taken so far, indexed by their 5-grams, to tell whether a new one repeats one."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, ...], set[int]] = collections.defaultdict(set)
        self.names: list[str] = []

    def add(self, text: str, name: str) -> None:
        for shingle in shingles(text):
            self.index[shingle].add(len(self.names))
        self.names.append(name)

    def repeats(self, text: str) -> tuple[str, float] | None:
        """The text this one repeats (its name and the share of this one's 5-grams it holds), or None."""
        own = shingles(text)
        if not own:
            return None
        shared = collections.Counter(i for shingle in own for i in self.index.get(shingle, ()))
        if not shared:
            return None
        i, count = shared.most_common(1)[0]
        share = count / len(own)
        return (self.names[i], share) if share >= NEAR_DUPLICATE else None


def split() -> None:
    """Validate the collected excerpts and split each batch once into its tuning and holdout
    files, leaving out texts already in the corpus and near-duplicates (``NEAR_DUPLICATE``); a
    batch whose files exist is never split again."""
    seen: set[str] = set()
    near: NearDuplicates | None = None  # the corpus's index, built for the first batch to split
    for sources, tune_name, holdout_name in SPLITS:
        tune_path, holdout_path = DATA / tune_name, DATA / holdout_name
        if tune_path.exists() or holdout_path.exists():
            print(f"{', '.join(sources)}: split already ({tune_name}, {holdout_name})")
            continue
        if near is None:
            near = NearDuplicates()
            for path in sorted(DATA.glob("*.jsonl")):
                if not path.stem.startswith("collected_"):
                    for row in load(path.name):
                        seen.add(row["text"].strip())
                        near.add(row["text"], f"{path.name}:{row['id']}")
        parts: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        dropped = []
        for name in sources:
            path = DATA / name
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if not line.strip():
                    continue
                where = f"{path.name}:{number}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    dropped.append(f"{where}: not JSON ({exc})")
                    continue
                problems = validate(row, where)
                if not problems and row["text"].strip() in seen:
                    problems = [f"{where}: the same text is in the corpus already"]
                if not problems and (repeated := near.repeats(row["text"])):
                    problems = [f"{where}: {repeated[1]:.0%} of its word 5-grams are in {repeated[0]}"]
                if problems:
                    dropped.extend(problems)
                    continue
                seen.add(row["text"].strip())
                row = {**row, "id": _split_id(path.stem.removeprefix("collected_"), str(row["id"]))}
                near.add(row["text"], f"{path.name}:{row['id']}")
                parts[goes_to_holdout(row)].append(row)
        for path, rows in ((tune_path, parts[False]), (holdout_path, parts[True])):
            path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        print(f"{', '.join(sources)} -> {tune_name}: {len(parts[False])} excerpts, {holdout_name}: "
              f"{len(parts[True])} excerpts, dropped: {len(dropped)}")
        for problem in dropped:
            print(f"  dropped {problem}")


def _split_id(batch: str, row_id: str) -> str:
    """``a-1004`` for id 1004 of collected_a; ids already prefixed by their batch stay as they are."""
    return row_id if row_id.startswith(f"{batch}-") else f"{batch}-{row_id}"


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
