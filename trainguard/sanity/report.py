"""What a sanity check found: per item, per node, the value, the peers' median and a verdict.

``SanityReport.to_json()`` is the schema stored with the job and shown by ``trainguard history``::

    {"passed": false, "fail_action": "rebuild", "nodes": ["node-0", ...],
     "bad_nodes": ["node-2"], "bad_links": [["node-0", "node-1"]], "isolate": ["node-2"],
     "pair_rounds": 2, "reason": "...", "started_at": "...Z", "duration": 12.3,
     "items": [{"item": "gemm_flops", "scope": "node", "unit": "GFLOP/s", "higher_is_better": true,
                "nodes": [{"node": "node-0", "verdict": "passed", "value": 80.1,
                           "peers_median": 79.5, "message": ""}, ...]}, ...],
     "pairs": [{"round": 1, "item": "all_reduce_2", "nodes": ["node-0", "node-1"],
                "verdict": "failed", "value": null, "peers_median": 1.2, "message": "..."}]}

Verdicts: ``passed``; ``slow`` (below ``slow_factor`` x the peers' median, or above median /
``slow_factor`` for latencies); ``failed`` (an error, a timeout, a dead link); ``unsupported``
(this hardware cannot run the item: reported, never counted as a pass or a failure).
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

from trainguard.model import Action, ErrorSource, RoundRecord, RoundResult
from trainguard.sanity.config import FailAction
from trainguard.timefmt import iso_ms


class CheckVerdict(str, enum.Enum):
    """One node's (or pair's) result on one item."""

    PASSED = "passed"
    SLOW = "slow"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"

    @property
    def bad(self) -> bool:
        return self in (CheckVerdict.SLOW, CheckVerdict.FAILED)


@dataclass(frozen=True)
class NodeResult:
    node: str
    verdict: CheckVerdict
    value: float | None = None
    peers_median: float | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "verdict": self.verdict.value, "value": _round(self.value),
                "peers_median": _round(self.peers_median), "message": self.message}


@dataclass(frozen=True)
class ItemReport:
    item: str
    scope: str
    unit: str
    higher_is_better: bool
    nodes: tuple[NodeResult, ...]

    def to_json(self) -> dict[str, Any]:
        return {"item": self.item, "scope": self.scope, "unit": self.unit,
                "higher_is_better": self.higher_is_better, "nodes": [n.to_json() for n in self.nodes]}


@dataclass(frozen=True)
class PairResult:
    """One pair's run of one pairwise item in one pairwise round."""

    round: int
    item: str
    nodes: tuple[str, str]
    verdict: CheckVerdict
    value: float | None = None
    peers_median: float | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"round": self.round, "item": self.item, "nodes": list(self.nodes), "verdict": self.verdict.value,
                "value": _round(self.value), "peers_median": _round(self.peers_median), "message": self.message}


@dataclass(frozen=True)
class Outcome:
    """What the engine does with a report: start or not, which nodes to isolate, which event."""

    start: bool
    isolate: tuple[str, ...]
    event: str
    message: str


@dataclass(frozen=True)
class SanityReport:
    """The whole check; ``passed`` is False when any node or link was found bad."""

    fail_action: FailAction
    nodes: tuple[str, ...]
    items: tuple[ItemReport, ...]
    pairs: tuple[PairResult, ...] = ()
    bad_nodes: tuple[str, ...] = ()
    bad_links: tuple[tuple[str, str], ...] = ()
    pair_rounds: int = 0
    started_at: float = 0.0
    duration: float = 0.0
    reasons: Mapping[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.bad_nodes and not self.bad_links

    @property
    def isolate(self) -> tuple[str, ...]:
        """Nodes that ``rebuild`` keeps out: the bad nodes and, for a bad link between two
        otherwise healthy nodes, its second end (the first is often the rendezvous host)."""
        out = list(self.bad_nodes)
        for a, b in self.bad_links:
            if a not in out and b not in out:
                out.append(b)
        return tuple(out)

    @property
    def reason(self) -> str:
        """One line naming every bad node and link and why."""
        if self.passed:
            return f"sanity check passed on {len(self.nodes)} node(s)"
        parts = [f"{node}: {self.reasons.get(node, 'failed')}" for node in self.bad_nodes]
        parts += [f"link {a}<->{b}: {self.reasons.get(f'{a}<->{b}', 'failed')}" for a, b in self.bad_links]
        return "sanity check failed: " + "; ".join(parts)

    @property
    def outcome(self) -> Outcome:
        if self.passed:
            return Outcome(True, (), "sanity_check_succeeded", self.reason)
        if self.fail_action is FailAction.FAIL:
            return Outcome(False, (), "sanity_check_failed", self.reason)
        if self.fail_action is FailAction.REBUILD:
            return Outcome(True, self.isolate, "sanity_check_failed",
                           f"{self.reason}; isolating {', '.join(self.isolate)}")
        return Outcome(True, (), "sanity_check_failed", f"{self.reason}; starting anyway (retain)")

    def round_record(self, job_id: str, round_no: int) -> RoundRecord:
        """The history record of acting on a failed check: a ``health_check`` round that
        reschedules away from the isolated nodes (``rebuild``) or the job's failure (``fail``)."""
        outcome = self.outcome
        rebuild = bool(outcome.isolate)
        return RoundRecord(
            job_id=job_id, round=round_no, reason=outcome.message, error_code="TG-SANITY-CHECK",
            error_message=self.reason, error_source=ErrorSource.HEALTH_CHECK,
            action=Action.RESCHEDULE_ISOLATED if rebuild else Action.FAIL, started_at=self.started_at,
            result=RoundResult.RECOVERED if rebuild else RoundResult.FAILED,
            node=(self.isolate or self.bad_nodes or (None,))[0], stages={"sanity_check": self.duration},
            consumes_budget=False, node_fault=True, isolated=self.isolate if rebuild else ())

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "fail_action": self.fail_action.value, "nodes": list(self.nodes),
                "bad_nodes": list(self.bad_nodes), "bad_links": [list(link) for link in self.bad_links],
                "isolate": list(self.isolate), "pair_rounds": self.pair_rounds, "reason": self.reason,
                "started_at": iso_ms(self.started_at) if self.started_at else None,
                "duration": round(self.duration, 3), "items": [i.to_json() for i in self.items],
                "pairs": [p.to_json() for p in self.pairs]}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def peer_median(values: Mapping[str, float], node: str) -> float | None:
    """The median of every value but ``node``'s; None without peers."""
    peers = [v for n, v in values.items() if n != node]
    return statistics.median(peers) if peers else None


def judge(value: float, median: float | None, higher_is_better: bool, factor: float) -> tuple[CheckVerdict, str]:
    """``slow`` when ``value`` is far from the peers' ``median`` in the bad direction."""
    if median is None or median <= 0 or value <= 0:
        return (CheckVerdict.FAILED, "measured nothing") if value <= 0 and median else (CheckVerdict.PASSED, "")
    ratio = value / median
    slow = ratio < factor if higher_is_better else ratio > 1 / factor
    if not slow:
        return CheckVerdict.PASSED, ""
    return CheckVerdict.SLOW, f"{value:.4g} is {ratio:.2f} x the peers' median {median:.4g}"
