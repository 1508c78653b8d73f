"""Classify a fault by the tail of the failed instance's log.

Patterns come from the catalog ``patterns.yaml`` beside this module (documented there) and from
any plugin implementing ``trainguard_log_patterns``. The root cause wins over cascades: of all
patterns that match, the one with the highest ``priority`` wins, and among equals the earliest
line in the tail (the first error in time). Custom retryable keywords (``--retryable-error``,
``Monitor.set_retryable_errors``) make a fault retryable when they appear in the tail, as
AIMaster's ExitCodeAndErrorMsg policy does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from trainguard.errors import PluginError
from trainguard.hooks.markers import hookimpl
from trainguard.model import Category, ErrorSource, Fault, LogPattern, Verdict
from trainguard.policy import Policy

CATALOG = Path(__file__).with_name("patterns.yaml")
_FIELDS = {"id", "regex", "category", "fault_code", "retryable", "node_fault", "user_error",
           "priority", "confidence", "node_group", "gpu_group"}


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
        missing = {"id", "regex", "category", "fault_code", "retryable"} - set(entry)
        if unknown or missing:
            raise PluginError(f"{where}: unknown keys {sorted(unknown)} / missing keys {sorted(missing)}")
        try:
            pattern = LogPattern(**{**entry, "category": Category.parse(entry["category"]), "source": source})
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


class Catalog:
    """Compiled patterns, matched against a log tail in one pass per pattern."""

    def __init__(self, patterns: Iterable[LogPattern]) -> None:
        self.patterns = tuple(patterns)
        self._compiled = [(p, re.compile(p.regex, re.MULTILINE)) for p in self.patterns]

    def matches(self, text: str) -> list[Match]:
        found = []
        for pattern, regex in self._compiled:
            m = regex.search(text)
            if m is None:
                continue
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            line = text[start: end if end >= 0 else len(text)].strip()
            node = m.group(pattern.node_group) if pattern.node_group else None
            gpu = m.group(pattern.gpu_group) if pattern.gpu_group else None
            found.append(Match(pattern, m.start(), line, node, gpu))
        return found

    def verdict(self, text: str, classifier: str = "log_classifier") -> Verdict | None:
        """The root cause (highest priority, then the earliest position in the text) as a verdict.

        What the fault is and where it is may come from different lines: a node fault takes
        the GPU or host from any other matching pattern when its own does not name one.
        """
        candidates = self.matches(text)
        if not candidates:
            return None
        match = min(candidates, key=lambda m: (-m.pattern.priority, m.start))
        p = match.pattern
        node, gpu = match.node, match.gpu
        if p.node_fault:
            node = node or next((m.node for m in candidates if m.node and m.pattern.node_fault), None)
            gpu = gpu or next((m.gpu for m in candidates if m.gpu), None)
        return Verdict(p.category, p.fault_code, retryable=p.retryable, node_fault=p.node_fault,
                       user_error=p.user_error, evidence=match.line[:500], confidence=p.confidence,
                       node=node, gpu=gpu, classifier=f"{classifier}:{p.id}")


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


@hookimpl
def trainguard_classify_fault(fault: Fault, log_tail: str, policy: Policy,
                              patterns: tuple[LogPattern, ...]) -> Verdict | None:
    if fault.source in (ErrorSource.HANG, ErrorSource.EXIT_HANG):
        return None
    verdict = catalog_for(patterns).verdict(log_tail) if log_tail else None
    line = keyword_line(log_tail, policy.retryable_errors) if policy.retryable_errors else None
    if line is None:
        return verdict
    # A custom keyword is the user's word that this failure is transient.
    base = verdict or Verdict(Category.NODE_OR_INFRA, "TG-RETRYABLE-KEYWORD", retryable=True)
    return replace(base, retryable=True, user_error=False, evidence=line[:500], confidence=0.95,
                   classifier="log_classifier:retryable-keyword")
