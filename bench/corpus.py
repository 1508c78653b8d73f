"""The classifier corpus in ``tests/data/faultlogs/``: its schema, its loader, and each batch's
split, made once, into a tuning part and a part never tuned on.

``split()`` (``python bench/classify.py --split``) leaves out an excerpt whose text is in the
corpus already, and one that shares 40 % or more of its word 5-grams with a corpus text or one
taken before it from its batch (the same log posted again, or cut differently); it prints what it
left out and why. ``bench/classify.py`` scores the corpus, ``bench/train_fallback.py`` trains on
its tuning part, ``tests/test_classifier_holdout.py`` holds a floor on its untouched part.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from trainguard.model import Category

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
          (("collected_da.jsonl", "collected_db.jsonl", "collected_dc.jsonl"), "tune36.jsonl", "holdout35.jsonl"),
          (("collected_dd.jsonl", "collected_de.jsonl", "collected_df.jsonl"), "tune37.jsonl", "holdout36.jsonl"),
          (("collected_dg.jsonl", "collected_dh.jsonl", "collected_di.jsonl"), "tune38.jsonl", "holdout37.jsonl"))


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
