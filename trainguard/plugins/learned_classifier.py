"""A learned fallback for log tails that no catalog pattern recognises (issue 13, item 4).

A multinomial naive Bayes model over the distinct lowercase words of the tail and their
neighbouring pairs (numbers, hex ids, paths, addresses and timestamps removed first, so it learns
vocabulary, not ids), trained by ``bench/train_fallback.py`` on the tuning files of
``tests/data/faultlogs/`` and shipped as data (``learned_model.json`` beside this module). It only
speaks when no pattern does:

* its verdict's ``confidence`` (0.15) is below that of every catalog pattern that names a
  category (the lowest is 0.4) and of the exit classifier, so the host's merge lets it decide
  only when nothing else did; it is above the catalog's ``failure-marker`` (0.1: the tail shows
  that something failed, not what), which is when a guess is most wanted;
* it is a hook wrapper around the other classifiers: it reads the tail only when none of their
  verdicts is as confident as a guess, so a fault a pattern names costs nothing more;
* it returns None unless its most probable class passes the threshold chosen by
  leave-one-file-out cross-validation on the tuning files (stored in the model);
* it never says ``success_or_benign`` (benign needs positive evidence): a log fault's tail it
  reads as healthy output, which no pattern found healthy, is output that stopped, and is said as
  a stall (``QUIET_READING``; of an exit or an event it says nothing); its verdict is never a
  node fault, and it is retryable only when the family usually is and the tail shows no sign of
  a program error (``PROGRAM_ERROR``), so no user-code fault is marked retryable;
* its verdict carries the family's generic fault code, ``classifier="learned:<label>"``, and as
  evidence the line of the tail that weighs most for the chosen class.

It is the built-in plugin ``learned_classifier``, **on by default**: on the untouched holdout
files it gets more categories and retryable flags right than the patterns alone and marks no
user-code fault retryable (figures in docs/fault-codes.md). ``TRAINGUARD_LEARNED_FALLBACK=0``
turns it off (the catalog alone decides; what no pattern names stays ``unknown``);
``TRAINGUARD_DISABLE_PLUGINS=learned_classifier`` keeps it from loading at all. The model is read
on the first fault it is asked about, not at import.
"""

from __future__ import annotations

import json
import math
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Generator, Iterable

from trainguard.hooks.markers import hookimpl
from trainguard.model import Category, ErrorSource, Fault, LogPattern, Verdict
from trainguard.policy import Policy

MODEL = Path(__file__).with_name("learned_model.json")
ENABLE_VAR = "TRAINGUARD_LEARNED_FALLBACK"
ENABLED_BY_DEFAULT = True
CONFIDENCE = 0.15  # below every pattern naming a category (min 0.4) and the exit classifier (0.3)
MAX_CHARS = 8 * 1024  # the end of the tail holds the failure; reading more only costs time
# A guess needs words to go on: with a handful of features naive Bayes is as sure of itself as
# with a page (`shutting down` alone read as a segfault at 0.87), and a wrong non-retryable guess
# ends a job at once. No tuning excerpt the model decides has fewer; on the untouched ones it
# leaves one more unknown (1,023 at the time: category 0.810 -> 0.809).
MIN_FEATURES = 4  # two words and their pair are three: a guess needs at least three words

# label -> (fault code, retryable as the label usually is, user_error): the family's generic
# code. A guess never isolates a node (that needs a pattern's evidence), and it is retryable
# only when its family usually is AND the tail shows no sign of a program error (below): a
# user-code fault the model took for, say, an NCCL error must not burn the restart budget.
# In leave-one-file-out cross-validation on the 742 tuning excerpts, taking the family's flag
# alone marked 14 user-code excerpts retryable (of 620 guesses), every ceiling on the model's
# user-code probability still let some through, and this rule none (while keeping half of the
# flags the family's flag fixed).
FAMILY: dict[str, tuple[str, bool, bool]] = {
    "nccl_timeout": ("TG-NCCL-TIMEOUT", True, False),
    "nccl_error": ("TG-NCCL-ERROR", True, False),
    "cuda_oom": ("TG-CUDA-OOM", False, True),
    "host_oom": ("TG-HOST-OOM", False, True),
    "gpu_hardware": ("TG-GPU-ERROR", True, False),
    "node_or_infra": ("TG-INFRA", True, False),
    "user_code": ("TG-USER-EXCEPTION", False, True),
    "hang_or_stuck": ("TG-STALL", True, False),
    # Not retried: a crash the process reports (frames, addresses, a handler's banner) is what the
    # model reads as one, and the corpus labels those not retryable (in leave-one-file-out
    # cross-validation on the 1,046 tuning excerpts, 42 of its 64 guesses the family's flag made
    # retryable were labelled not retryable).
    "segfault_or_signal": ("TG-SIGSEGV-LIB", False, False),
}

# What the model calls healthy output is never said (benign needs a pattern's positive evidence);
# with no pattern's evidence either way, a log fault (no exit, no event: the log alone) whose tail
# reads as healthy and ends is output that stopped: a stall, retried as the family is. In
# leave-one-file-out cross-validation on the 1,408 tuning excerpts, 206 confident benign readings
# held 46 hangs (now right) and 160 other excerpts (mostly benign: unknown before, wrong either
# way), and changed 7 retry flags against unknown's (6 right).
QUIET_LABEL = "success_or_benign"
QUIET_READING = "hang_or_stuck"


def said(label: str) -> str | None:
    """The label a guess says for the model's most probable one (None: no guess), where the fault
    is the log's alone; training scores the guesses by it too."""
    label = QUIET_READING if label == QUIET_LABEL else label
    return label if label in FAMILY else None

# Signs that the program itself failed: a Python traceback, an exception or error class
# (``ValueError``, ``DistBackendError``), a script's ``error:`` (argparse), a failed assertion or
# check (C++ ``CHECK``, glog's ``LogMessageFatal``), a fatal Python error, a file or command the
# launch names that does not exist.
PROGRAM_ERROR = re.compile(r"Traceback|Error\b|Exception|\berror:|[Aa]ssert|Check failed|LogMessageFatal|"
                           r"Fatal Python|\bFATAL\b|No such file or directory|can't open file|command not found")

# Things that are ids, not vocabulary: a run of word characters holding a digit or a slash (ids,
# sizes, host names and addresses, timestamps, paths) is removed before the words are taken.
_NOISE = re.compile(r"[\w-]*[\d/][\w/.-]*")
_WORD = re.compile(r"[a-z][a-z_]{1,30}")


def tokens(text: str) -> set[str]:
    """The distinct features of a text (a whole tail, or one line of it): its lowercase words
    (ids removed) and each pair of neighbouring words (``out__of``, ``of__memory``: a phrase
    weighs more than its words)."""
    words = _WORD.findall(_NOISE.sub(" ", text.lower()))
    return {*words, *(f"{a}__{b}" for a, b in zip(words, words[1:]))}


class Model:
    """Naive Bayes log-probabilities: ``prior[c]`` and ``weights[word][c]`` (words not in the
    model count for nothing); ``scale`` tempers the sum of the word weights."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.labels: list[str] = data["labels"]
        self.prior: list[float] = data["prior"]
        self.scale: float = data["scale"]
        self.weights: dict[str, list[float]] = data["weights"]
        self.threshold: float = data["threshold"]

    def probabilities(self, words: Iterable[str]) -> list[float]:
        n = len(self.prior)
        sums = [0.0] * n
        for word in words:
            w = self.weights.get(word)
            if w is not None:
                for i in range(n):
                    sums[i] += w[i]
        scores = [p + self.scale * s for p, s in zip(self.prior, sums)]
        top = max(scores)
        exp = [math.exp(s - top) for s in scores]
        total = sum(exp)
        return [e / total for e in exp]

    def predict(self, text: str) -> tuple[str, float]:
        return self.predict_tokens(tokens(text))

    def predict_tokens(self, features: set[str]) -> tuple[str, float]:
        probs = self.probabilities(features)
        best = max(range(len(probs)), key=lambda i: (probs[i], -i))
        return self.labels[best], probs[best]

    def evidence(self, text: str, label: str) -> str:
        """The line whose words weigh most for ``label`` against the other classes."""
        c = self.labels.index(label)
        best, best_score = "", -math.inf
        for line in text.splitlines():
            score = 0.0
            for word in tokens(line):
                w = self.weights.get(word)
                if w is not None:
                    score += w[c] - max(w[i] for i in range(len(w)) if i != c)
            if score > best_score and line.strip():
                best, best_score = line.strip(), score
        return best


@lru_cache(maxsize=1)
def model() -> Model | None:
    """The shipped model, read once; None if it is not installed (the fallback then says nothing)."""
    try:
        return Model(json.loads(MODEL.read_text()))
    except FileNotFoundError:
        return None


def enabled() -> bool:
    value = os.environ.get(ENABLE_VAR)
    if value is None:
        return ENABLED_BY_DEFAULT
    return value.strip().lower() not in ("", "0", "false", "no", "off")


# Characters no text log holds: C0 controls other than tab, newlines, backspace and the escape of
# colour codes. A tail rich in them is a binary file (a core dump, a checkpoint, a compressed
# log), whose random letter runs the model would still weigh into a confident guess.
_CONTROL = re.compile(r"[\x00-\x07\x0b\x0c\x0e-\x1a\x1c-\x1f]")
_BINARY_SHARE = 0.01


def is_text(text: str) -> bool:
    """Whether a tail reads as a text log (a mangled progress bar's U+FFFD is still text)."""
    return len(_CONTROL.findall(text)) <= _BINARY_SHARE * len(text)


def judge(text: str, quiet_is_stall: bool = True) -> Verdict | None:
    """The learned verdict on a text, or None when the model is not sure, or the tail is not text,
    or it reads as healthy output and ``quiet_is_stall`` is false (the fault is not the log's alone:
    a process that exited did not stall)."""
    text = text[-MAX_CHARS:]
    if not text.strip() or not is_text(text):
        return None
    m = model()
    if m is None:
        return None
    features = tokens(text)
    if sum(1 for feature in features if feature in m.weights) < MIN_FEATURES:
        return None
    read, probability = m.predict_tokens(features)
    # A healthy reading, yet no pattern found the positive evidence benign needs (progress, a
    # clean finish, a known harmless warning): where the log is all there is, the output stopped
    # without an error, which is a stall (QUIET_LABEL's comment).
    label = said(read) if quiet_is_stall or read != QUIET_LABEL else None
    if probability < m.threshold or label is None:
        return None
    code, retryable, user_error = FAMILY[label]
    retryable = retryable and PROGRAM_ERROR.search(text) is None
    return Verdict(Category.parse(label), code, retryable=retryable, node_fault=False, user_error=user_error,
                   evidence=m.evidence(text, label)[:500], confidence=CONFIDENCE, classifier=f"learned:{label}")


def asked(fault: Fault, log_tail: str, verdicts: Iterable[Verdict]) -> bool:
    """Whether a guess could change the merged verdict: only a tail no other classifier named
    (no verdict as confident as a guess), of a fault that is not a hang or a clean exit."""
    if not log_tail or fault.source in (ErrorSource.HANG, ErrorSource.EXIT_HANG) or not enabled():
        return False
    if fault.source is ErrorSource.EXIT_CODE and fault.exit_code == 0 and not fault.signal:
        return False  # a clean exit is benign by the engine's rule, whatever the log's words
    # Another plugin's garbage is the host's to report (it checks the list after the wrappers).
    return all(verdict.confidence < CONFIDENCE for verdict in verdicts if isinstance(verdict, Verdict))


@hookimpl(wrapper=True)
def trainguard_classify_fault(fault: Fault, log_tail: str, policy: Policy,
                              patterns: tuple[LogPattern, ...]) -> Generator[None, list[Verdict], list[Verdict]]:
    # A wrapper, so that it sees every other classifier's verdict first and the model reads the
    # tail (2-3 ms) only when its guess could be the answer: most faults have a pattern's verdict.
    verdicts = yield
    if not asked(fault, log_tail, verdicts):
        return verdicts
    # A healthy reading is a stall only where the log is the whole fault: an exit (code 1 and a
    # healthy-looking log) or a scheduler's event did not stop the output, it ended it.
    guess = judge(log_tail, quiet_is_stall=fault.source is ErrorSource.LOG)
    return verdicts if guess is None else [*verdicts, guess]
