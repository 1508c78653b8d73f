"""Classify a fault by the tail of the failed instance's log (and a scheduler event's reason).

Patterns come from the catalog ``patterns.yaml`` beside this module (documented there) and from
any plugin implementing ``trainguard_log_patterns``. The root cause wins over cascades: of all
patterns that match, the one with the highest ``priority`` wins, and among equals the earliest
line in the tail (the first error in time). A tail that matches nothing gets no verdict here
(the fault stays ``unknown``): benign needs positive evidence, and never holds for a process
that died with a failure exit code or a signal. Custom retryable keywords (``--retryable-error``,
``Monitor.set_retryable_errors``) make a fault retryable when they appear in the tail, as
AIMaster's ExitCodeAndErrorMsg policy does.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import yaml

from trainguard.errors import PluginError
from trainguard.hooks.markers import hookimpl
from trainguard.model import Category, ErrorSource, Fault, LogPattern, Verdict
from trainguard.plugins import device_memory, rank_range
from trainguard.plugins.regex_literals import (ASCII_LOWER, LETTERS, UNSPLITTABLE, alternatives, letter_key,
                                               lowercase_regex, required_literals)
from trainguard.policy import Policy

CATALOG = Path(__file__).with_name("patterns.yaml")
_FIELDS = {"id", "regex", "signal", "category", "fault_code", "retryable", "node_fault",
           "user_error", "priority", "confidence", "node_group", "gpu_group"}


# zsh's words for a job a signal ended (its signames table, as `zsh: killed  CMD` prints them).
# Not SIGSEGV's and SIGBUS's: `zsh: segmentation fault` and `zsh: bus error` read as a shell's
# report of the crash, like bash's `Segmentation fault (core dumped)` (TG-SIGSEGV-LIB, TG-SIGBUS-LIB).
_ZSH_WORDS = {1: "hangup", 4: "illegal hardware instruction", 6: "abort", 8: "floating point exception", 9: "killed",
              13: "broken pipe", 15: "terminated"}


def signal_reports(number: int) -> str:
    """A regex for what launchers, schedulers and shells print when a process died of signal
    ``number``: torch elastic's ``exitcode: -9`` and ``traceback : Signal 9 (SIGKILL) received by
    PID``, Python's ``died with <Signals.SIGKILL: 9>`` and ``returned non-zero exit status -9``, a
    shell's or a container's exit status 128 + N, Open MPI's ``exited on signal 9``, MPICH's
    ``KILLED BY SIGNAL: 9`` and ``EXIT CODE: 137``, fish's ``terminated by signal SIGKILL``, zsh's
    job report (``zsh: abort      python train.py``, in zsh's own words for the signal),
    paddle.distributed.launch's ``Container rank 0 status failed cmd [...] code -9``. One template
    serves every signal, so that each is recognised in every form, not only in the ones someone
    once pasted.
    """
    name = signal.Signals(number).name
    n, status = number, 128 + number
    zsh = _ZSH_WORDS.get(number)
    return "|".join((
        *((rf"\bzsh: {zsh}(?: \(core dumped\))?(?:\s|$)",) if zsh else ()),
        rf"exitcode\s*:\s*-{n}\b",
        rf"exit\w* (?:code|status)\s*[:=]?\s*(?:-{n}|{status})\b",
        rf"return\w* (?:code|status)\s*[:=]?\s*(?:-{n}|{status})\b",
        rf"(?:[Ee]xit ?[Cc]ode:?\s*|EXIT (?:CODE|STATUS): ){status}\b",
        rf"(?:exit|exited|finished|terminated) with (?:exit )?(?:code|status) {status}\b",
        rf"non-zero (?:exit )?status of {status}\b",
        rf"returned non-zero exit status -{n}\b",
        rf"Signal {n} \({name}\) received by PID",
        rf"died with <Signals\.{name}: {n}>",
        rf"(?:exited on|interrupted by|killed by) signal {n}\b",
        rf"KILLED BY SIGNAL: {n}\b",
        rf"terminated (?:with|by) signal {name}\b",
        rf"Container rank \d+ status failed cmd .* code -{n}\b",
    ))


def _entry_regex(entry: dict[str, Any]) -> str:
    """The entry's ``regex``, widened by the reports of its ``signal`` when it names one."""
    number = entry.get("signal")
    if number is None:
        return entry["regex"]
    if isinstance(number, bool) or not isinstance(number, int) or number not in set(signal.Signals):
        raise ValueError(f"signal must be a signal number, not {number!r}")
    # Appended, not prepended: a regex's (?i) must stay its first characters.
    return "|".join(filter(None, (entry.get("regex"), signal_reports(number))))


def parse_catalog(data: Any, source: str) -> tuple[LogPattern, ...]:
    """Turn the YAML structure ``{patterns: [{id, regex, category, ...}]}`` into patterns."""
    if not isinstance(data, dict) or not isinstance(data.get("patterns"), list):
        raise PluginError(f"{source}: expected a mapping with a 'patterns' list")
    out = []
    for i, entry in enumerate(data["patterns"]):
        where = f"{source}: pattern {entry.get('id', i) if isinstance(entry, dict) else i}"
        if not isinstance(entry, dict):
            raise PluginError(f"{where}: not a mapping")
        unknown = set(entry) - _FIELDS
        missing = {"id", "category", "fault_code", "retryable"} - set(entry)
        if not {"regex", "signal"} & set(entry):
            missing.add("regex")
        if unknown or missing:
            raise PluginError(f"{where}: unknown keys {sorted(unknown)} / missing keys {sorted(missing)}")
        fields = {k: v for k, v in entry.items() if k != "signal"}
        try:
            pattern = LogPattern(**{**fields, "regex": _entry_regex(entry),
                                    "category": Category.parse(entry["category"]), "source": source})
            compiled = re.compile(pattern.regex, re.MULTILINE)
        except (ValueError, re.error, TypeError) as exc:
            raise PluginError(f"{where}: {exc}") from None
        for group in (pattern.node_group, pattern.gpu_group):
            if group and group not in compiled.groupindex:
                raise PluginError(f"{where}: regex has no group named {group!r}")
        out.append(pattern)
    return tuple(out)


@lru_cache(maxsize=1)
def builtin_patterns() -> tuple[LogPattern, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_catalog(yaml.load(CATALOG.read_text(), Loader=loader), "builtin")


@hookimpl
def trainguard_log_patterns() -> Sequence[LogPattern]:
    return builtin_patterns()


@dataclass(frozen=True)
class Match:
    pattern: LogPattern
    start: int
    line: str
    node: str | None
    gpu: str | None


# One top-level alternative of a pattern: its regex, and the (literal, letter key, whole word)
# triples of which every match contains one literal (None: no such set is known, always search).
_Alternative = tuple[re.Pattern[str], tuple[tuple[str, str, bool], ...] | None]
# A pattern's gate when every alternative has literals: the whole-word keys and the substring
# keys of all of them (the pattern is skipped when the text holds none).
_Gate = tuple[frozenset[str], tuple[str, ...]]


# Decoration a log picks up on its way to the reader, which hides where its lines begin: colour
# codes (ANSI SGR and cursor sequences from rich/tqdm/loguru) and the "> " of a quoted paste.
# A carriage return ends a line as far as a reader can see: tqdm redraws its bar after one, and
# a Windows or a pty's log ends each line with one before the newline.
_COLOUR = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_QUOTE_MARKERS = re.compile(r"^(?:[ \t]*>)+[ \t]?", re.MULTILINE)
_QUOTED_LINE = re.compile(r"\n[ \t]*>")  # a cheap look before the line-anchored substitution
_CARRIAGE_RETURN = re.compile(r"\r+\n?")


def plain(text: str) -> str:
    """The text without colour codes, quote markers and carriage returns (patterns are written
    for plain lines). Each substitution runs only when its character is there: this is on every
    classification of a 64 KiB tail, where ``>`` alone (``->``, ``>>``) is common."""
    if "\r" in text:
        text = _CARRIAGE_RETURN.sub("\n", text)
    if "\x1b" in text:
        text = _COLOUR.sub("", text)
    if text.lstrip(" \t").startswith(">") or _QUOTED_LINE.search(text):
        text = _QUOTE_MARKERS.sub("", text)
    return text


class Catalog:
    """Compiled patterns, matched against a log tail.

    Each pattern is split at its top-level ``|``, and an alternative is searched only when one
    of the literals it must contain is in the text. Literal checks are themselves gated by a
    run of letters of the literal, looked up in the text's distinct words (a log repeats
    itself: far fewer words than bytes), mostly as a whole word in a set.
    So a catalog of broad vocabularies costs little on a tail that says nothing of them.
    """

    def __init__(self, patterns: Iterable[LogPattern]) -> None:
        self.patterns = tuple(patterns)
        self._compiled: list[tuple[LogPattern, bool, _Gate | None, list[_Alternative]]] = []
        for p in self.patterns:
            lowered = p.regex.startswith("(?i)")
            regex = lowercase_regex(p.regex) if lowered else p.regex
            parts = [regex] if UNSPLITTABLE.search(regex) else alternatives(regex)
            compiled = []
            for part in parts:
                literals = required_literals(part)
                keyed = tuple((lit, *letter_key(lit)) for lit in literals) if literals is not None else None
                compiled.append((re.compile(part, re.MULTILINE), keyed))
            gate = None
            if all(keyed is not None for _, keyed in compiled):
                keys = [(key, whole) for _, keyed in compiled for _, key, whole in keyed or ()]
                gate = (frozenset(key for key, whole in keys if whole),
                        tuple(dict.fromkeys(key for key, whole in keys if not whole)))
            self._compiled.append((p, lowered, gate, compiled))

    def matches(self, text: str) -> list[Match]:
        """Every pattern's first match in ``text``; positions index ``plain(text)``."""
        return self._matches(plain(text))

    def _matches(self, text: str) -> list[Match]:
        found = []
        lowered_text = text.translate(ASCII_LOWER)  # same length: spans index the original
        vocabulary = set(LETTERS.findall(lowered_text))
        words = "\n".join(vocabulary)
        for pattern, lowered, gate, parts in self._compiled:
            if gate is not None and gate[0].isdisjoint(vocabulary) and not any(key in words for key in gate[1]):
                continue  # no alternative can match: none of their letter keys is in the text
            haystack = lowered_text if lowered else text
            m = None
            for regex, literals in parts:
                if literals is not None and not any(
                        (key in vocabulary if whole else key in words) and literal in haystack
                        for literal, key, whole in literals):
                    continue
                here = regex.search(haystack)
                if here is not None and (m is None or here.start() < m.start()):
                    m = here
            if m is None:
                continue
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            line = text[start: end if end >= 0 else len(text)].strip()
            node = _group(text, m, pattern.node_group)
            gpu = _group(text, m, pattern.gpu_group)
            found.append(Match(pattern, m.start(), line, node, gpu))
        return found

    def verdict(self, text: str, classifier: str = "log_classifier") -> Verdict | None:
        """The root cause (highest priority, then the earliest position in the text) as a verdict.

        What the fault is and where it is may come from different lines: a node fault takes
        the GPU or host from any other matching pattern when its own does not name one.
        """
        text = plain(text)
        candidates = self._matches(text)
        if not candidates:
            return None
        match = min(candidates, key=lambda m: (-m.pattern.priority, m.start))
        p = match.pattern
        node, gpu = match.node, match.gpu
        if p.node_fault:
            node = node or next((m.node for m in candidates if m.node and m.pattern.node_fault), None)
            gpu = gpu or next((m.gpu for m in candidates if m.gpu), None)
        verdict = Verdict(p.category, p.fault_code, retryable=p.retryable, node_fault=p.node_fault,
                          user_error=p.user_error, evidence=match.line[:500], confidence=p.confidence,
                          node=node, gpu=gpu, classifier=f"{classifier}:{p.id}")
        refine = REFINERS.get(p.fault_code)
        return refine(verdict, text, match.start) if refine else verdict


def _group(text: str, match: re.Match[str], name: str | None) -> str | None:
    """A named group's text, taken from the original (not lowered) text."""
    if not name or name not in match.re.groupindex or match.group(name) is None:
        return None
    begin, end = match.span(name)
    return text[begin:end]


# What a verdict's numbers can change once its pattern matched (a regex cannot compare sizes):
# fault code -> refine(verdict, the plain text, where the match starts) -> verdict.
REFINERS: dict[str, Callable[[Verdict, str, int], Verdict]] = {"TG-CUDA-OOM": device_memory.refine,
                                                               "TG-RENDEZVOUS": rank_range.refine}

_catalogs: dict[tuple[LogPattern, ...], Catalog] = {}


def catalog_for(patterns: tuple[LogPattern, ...]) -> Catalog:
    """Compile each distinct pattern set once per process."""
    catalog = _catalogs.get(patterns)
    if catalog is None:
        catalog = _catalogs[patterns] = Catalog(patterns)
    return catalog


def keyword_line(text: str, keywords: Iterable[str]) -> str | None:
    """The last line of ``text`` holding any keyword (case-insensitive), or None."""
    lowered = text.lower()
    best = -1
    for keyword in keywords:
        best = max(best, lowered.rfind(keyword.lower()))
    if best < 0:
        return None
    start = text.rfind("\n", 0, best) + 1
    end = text.find("\n", best)
    return text[start: end if end >= 0 else len(text)].strip()


def died_failing(fault: Fault) -> bool:
    """Whether the fault is a process that ended with a failure exit code or a signal."""
    return bool(fault.signal) or (fault.exit_code is not None and fault.exit_code != 0)


@hookimpl
def trainguard_catalog_ready(patterns: tuple[LogPattern, ...]) -> None:
    catalog_for(patterns)


@hookimpl
def trainguard_classify_fault(fault: Fault, log_tail: str, policy: Policy,
                              patterns: tuple[LogPattern, ...]) -> Verdict | None:
    if fault.source in (ErrorSource.HANG, ErrorSource.EXIT_HANG):
        return None
    if fault.source in (ErrorSource.EVENT, ErrorSource.SDK) and fault.message:
        # A scheduler event's reason ("NodeNotReady", "Evicted: ...") or what the engine saw in
        # SDK reports (a persistently slow rank) is read like a log line after the tail: the
        # latest evidence.
        log_tail = f"{log_tail}\n{fault.message}" if log_tail else fault.message
    verdict = catalog_for(patterns).verdict(log_tail) if log_tail else None
    if verdict is not None and verdict.category is Category.SUCCESS_OR_BENIGN and died_failing(fault):
        # A harmless warning says nothing about why a process died: the exit classifier's
        # verdict (or the conservative default) speaks for a failure exit code or a signal.
        verdict = None
    line = keyword_line(log_tail, policy.retryable_errors) if policy.retryable_errors else None
    if line is None:
        return verdict
    # A custom keyword is the user's word that this failure is transient.
    base = verdict or Verdict(Category.NODE_OR_INFRA, "TG-RETRYABLE-KEYWORD", retryable=True)
    return replace(base, retryable=True, user_error=False, evidence=line[:500], confidence=0.95,
                   classifier="log_classifier:retryable-keyword")
