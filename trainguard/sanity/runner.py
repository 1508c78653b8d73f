"""Run the check rounds through an adapter and judge every node against its peers.

:func:`preflight` is what the engine calls before it places the job. It starts one check worker
per healthy node through the adapter (``start``/``wait``/``stop``/``log_tail``, so it works on
every adapter), as ranks from ``CHECK_RANK_BASE`` up and in log rounds ``-1`` (round 1) and
``-2`` (round 2), so job ranks and job logs are untouched. Round 1 runs the node items on all
nodes at once, the pairwise items on neighbouring pairs and the all-node items over every node;
round 2, only when a pair failed, re-pairs the suspects with healthy nodes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, Mapping, Sequence

from trainguard.adapters import Adapter, Launch
from trainguard.errors import PolicyError
from trainguard.model import Instance, JobSpec
from trainguard.sanity.config import SanityConfig
from trainguard.sanity.items import Scope, SanityItem, collect_items
from trainguard.sanity.pairing import Pair, first_pairs, resolve, second_pairs
from trainguard.sanity.report import (
    CheckVerdict, ItemReport, NodeResult, PairResult, SanityReport, judge, peer_median,
)
from trainguard.sanity.worker import PLAN_VAR, RESULT_PREFIX

log = logging.getLogger(__name__)

CHECK_RANK_BASE = 1_000_000
MAX_OP_TIMEOUT = 60.0
REPEATS = 3
# faulthandler prints the worker's stacks if it crashes; the interpreter flag also tells the
# local adapter's warm-standby pool not to prepare spares of these one-shot processes.
WORKER_COMMAND = (sys.executable, "-X", "faulthandler", "-m", "trainguard.sanity.worker")


def preflight(adapter: Adapter, spec: JobSpec, config: SanityConfig, isolated: frozenset[str] = frozenset(), *,
              host: Any = None, base_env: Mapping[str, str] | None = None) -> SanityReport:
    """Check every node the job may use and say which are bad, before the job starts.

    :param adapter: the job's adapter; nothing of the job may be running on it yet.
    :param spec: the job (its ``env`` reaches the check workers, its id names the logs).
    :param config: items, budget, fail action, slow factor.
    :param isolated: nodes already kept out (not checked).
    :param host: the plugin host, for items that plugins add (built-ins only when None).
    :param base_env: the environment the workers start from (default: this process's).
    :return: the report; see :attr:`SanityReport.outcome` for what to do with it.
    :raises PolicyError: an item no plugin provides (before anything starts).
    :raises AdapterError: the adapter could not start the check workers (``permanent`` says
        whether trying again can help), as when starting the job itself.
    """
    catalog = collect_items(host)
    unknown = [name for name in config.items if name not in catalog]
    if unknown:
        raise PolicyError("--sanity-check", f"no such check item: {', '.join(unknown)}")
    items = [catalog[name] for name in config.items]
    nodes = [n for n in adapter.capacity(frozenset(isolated)).nodes if n not in isolated]
    started, clock = time.time(), time.monotonic()
    check = _Check(adapter, spec, config, nodes, dict(base_env if base_env is not None else os.environ),
                   clock + config.timeout)
    log.info("[%s] sanity check of %s on %d node(s)", spec.job_id, ",".join(config.items), len(nodes))
    return check.run(items, started, clock)


class _Check:
    def __init__(self, adapter: Adapter, spec: JobSpec, config: SanityConfig, nodes: list[str],
                 env: dict[str, str], deadline: float) -> None:
        self.adapter, self.spec, self.config, self.nodes = adapter, spec, config, nodes
        self.env = {**env, **spec.env}
        self.deadline = deadline
        self.bad: dict[str, str] = {}
        self.pair_bad: dict[str, str] = {}
        self.links: dict[Pair, str] = {}

    def run(self, items: list[SanityItem], started: float, clock: float) -> SanityReport:
        by_scope = {scope: [i for i in items if i.scope is scope] for scope in Scope}
        if not self.nodes:
            return SanityReport(self.config.fail_action, (), (), started_at=started)
        multi = len(self.nodes) > 1
        pairs = first_pairs(self.nodes) if by_scope[Scope.PAIR] and multi else []
        groups = [(f"r1-pair-{i}", list(p), by_scope[Scope.PAIR]) for i, p in enumerate(pairs)]
        if by_scope[Scope.ALL] and multi:
            groups.append(("r1-all", list(self.nodes), by_scope[Scope.ALL]))
        results = self._round(1, self.nodes, by_scope[Scope.NODE], groups)
        reports = [self._node_item(item, results) for item in by_scope[Scope.NODE]]
        pair_results, rounds = self._pairwise(by_scope[Scope.PAIR], pairs, results) if pairs else ([], 0)
        if multi:
            reports += [self._pair_item(item, pair_results) for item in by_scope[Scope.PAIR]]
            reports += self._all_items(by_scope[Scope.ALL], results) if by_scope[Scope.ALL] else []
        else:
            reports += [_unsupported(item, self.nodes, "needs at least two nodes")
                        for item in items if item.scope is not Scope.NODE]
        reasons: dict[str, str] = dict(self.bad)
        reasons.update({f"{a}<->{b}": why for (a, b), why in self.links.items()})
        return SanityReport(
            fail_action=self.config.fail_action, nodes=tuple(self.nodes), items=tuple(reports),
            pairs=tuple(pair_results), bad_nodes=tuple(n for n in self.nodes if n in self.bad),
            bad_links=tuple(self.links), pair_rounds=rounds, started_at=started,
            duration=time.monotonic() - clock, reasons=reasons)

    # -- rounds ---------------------------------------------------------------------------

    def _round(self, number: int, nodes: Sequence[str], node_items: Sequence[SanityItem],
               groups: Sequence[tuple[str, list[str], Sequence[SanityItem]]]) -> dict[str, dict[str, Any]]:
        """Start a worker on each of ``nodes``, wait for them (up to the budget), read their results."""
        left = self.deadline - time.monotonic()
        if left <= 1:
            return {n: {"error": "the sanity-check timeout ran out before this round"} for n in nodes}
        master = self.adapter.rendezvous({0: nodes[0]})
        launches = []
        for node in nodes:
            plan = {"node": node, "nodes": list(nodes), "master": list(master), "window": self.config.window,
                    "repeats": REPEATS, "timeout": max(5.0, min(MAX_OP_TIMEOUT, left / 2)),
                    "items": [i.to_json() for i in node_items], "order": [gid for gid, _, _ in groups],
                    "groups": [{"id": gid, "members": members, "items": [i.to_json() for i in group_items]}
                               for gid, members, group_items in groups if node in members]}
            index = self.nodes.index(node)
            env = {**self.env, PLAN_VAR: json.dumps(plan), "TRAINGUARD_NODE": node,
                   "TRAINGUARD_SANITY_GPU": str(index), "TRAINGUARD_JOB_ID": self.spec.job_id,
                   "PYTHONUNBUFFERED": "1"}
            instance = Instance(rank=CHECK_RANK_BASE + index, node=node, local_rank=0)
            launches.append(Launch(instance, WORKER_COMMAND, env, self.spec.cwd, -number))
        ranks = {launch.instance.rank: launch.instance.node for launch in launches}
        self.adapter.start(launches)
        pending, codes = set(ranks), {}
        while pending and time.monotonic() < self.deadline:
            for exit_ in self.adapter.wait(min(1.0, max(0.0, self.deadline - time.monotonic()))):
                if exit_.rank in pending:
                    pending.discard(exit_.rank)
                    codes[exit_.rank] = exit_.exit_code
        if pending:
            self.adapter.stop(sorted(pending), grace=2.0)
        return {node: self._result(rank, node, codes.get(rank)) for rank, node in ranks.items()}

    def _result(self, rank: int, node: str, code: int | None) -> dict[str, Any]:
        tail = self.adapter.log_tail(rank, 1 << 16)
        for line in reversed(tail.splitlines()):
            if line.startswith(RESULT_PREFIX):
                return json.loads(line[len(RESULT_PREFIX):])  # type: ignore[no-any-return]
        last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
        why = "timed out (the sanity-check timeout ran out)" if code is None else f"exited with code {code}"
        return {"node": node, "error": f"check process {why}" + (f": {last[:300]}" if last else "")}

    # -- judging ----------------------------------------------------------------------------

    def _node_item(self, item: SanityItem, results: Mapping[str, dict[str, Any]]) -> ItemReport:
        outcomes = {node: _outcome(results.get(node, {}), item.name) for node in self.nodes}
        values = {n: o["value"] for n, o in outcomes.items() if o["status"] == "ok"}
        rows = []
        for node in self.nodes:
            outcome = outcomes[node]
            if outcome["status"] == "ok":
                median = peer_median(values, node)
                verdict, message = judge(outcome["value"], median, item.higher_is_better, self.config.slow_factor)
                rows.append(NodeResult(node, verdict, outcome["value"], median, message))
            else:
                rows.append(NodeResult(node, CheckVerdict(_status(outcome)), None, peer_median(values, node),
                                       outcome["message"]))
        return self._recorded(item, rows)

    def _recorded(self, item: SanityItem, rows: list[NodeResult]) -> ItemReport:
        for row in rows:
            if row.verdict.bad and row.node not in self.bad:
                unit = f" {item.unit}" if row.value is not None else ""
                self.bad[row.node] = f"{row.verdict.value} on {item.name}: {row.message}{unit}"
        return ItemReport(item.name, item.scope.value, item.unit, item.higher_is_better, tuple(rows))

    def _pairwise(self, items: Sequence[SanityItem], pairs: list[Pair],
                  results: Mapping[str, dict[str, Any]]) -> tuple[list[PairResult], int]:
        first = self._judge_pairs(1, items, {f"r1-pair-{i}": p for i, p in enumerate(pairs)}, results, [])
        failed = list(dict.fromkeys(r.nodes for r in first if r.verdict.bad))
        if not failed:
            return first, 1
        reasons = {p: "; ".join(r.message for r in first if r.nodes == p and r.verdict.bad) for p in failed}
        broke = {n for r in first if r.verdict is CheckVerdict.FAILED for n in r.nodes}
        slow_only = [p for p in failed if not any(r.nodes == p and r.verdict is CheckVerdict.FAILED for r in first)]
        retest = second_pairs(failed, self.nodes)
        retest += slow_only if retest else []
        second: list[PairResult] = []
        if retest:
            groups = {f"r2-pair-{i}": p for i, p in enumerate(retest)}
            members = [n for n in self.nodes if any(n in p for p in retest)]
            results2 = self._round(2, members, [], [(gid, list(p), items) for gid, p in groups.items()])
            second = self._judge_pairs(2, items, groups, results2, [r for r in first if not r.verdict.bad])
        # A retest looks for the symptom seen in round 1: a suspect whose pair broke must break
        # again, one whose pair was slow must be slow again, so load noise cannot name a node.
        counts = [r for r in second if r.verdict is CheckVerdict.FAILED
                  or (r.verdict is CheckVerdict.SLOW and not broke & set(r.nodes))]
        passed = {p: not any(r.nodes == p for r in counts) for p in retest}
        reasons.update({r.nodes: r.message for r in counts})
        bad, links = resolve(failed, passed, reasons)
        for node, why in bad.items():
            self.pair_bad[node] = f"pairwise check: {why}"
            self.bad.setdefault(node, self.pair_bad[node])
        self.links.update(links)
        return first + second, 2 if retest else 1

    def _judge_pairs(self, number: int, items: Sequence[SanityItem], groups: Mapping[str, Pair],
                     results: Mapping[str, dict[str, Any]], baseline: Sequence[PairResult]) -> list[PairResult]:
        out = []
        for item in items:
            raw = {}
            for gid, pair in groups.items():
                outcomes = [_outcome(results.get(n, {}), item.name, gid) for n in pair]
                bad = [(n, o) for n, o in zip(pair, outcomes) if o["status"] != "ok"]
                raw[pair] = (min(o["value"] for o in outcomes), "") if not bad else \
                    (None, "; ".join(f"{n}: {o['message']}" for n, o in bad))
            values = {"|".join(p): v for p, (v, _) in raw.items() if v is not None}
            # A lone retest is judged against the pairs that passed round 1.
            reference = values if len(values) > 1 else {
                **values, **{f"base{i}": r.value for i, r in enumerate(baseline)
                             if r.item == item.name and r.value is not None}}
            for pair, (value, message) in raw.items():
                median = peer_median(reference, "|".join(pair))
                if value is None:
                    unsupported = all(_outcome(results.get(n, {}), item.name, _gid(groups, pair))["status"]
                                      == "unsupported" for n in pair)
                    verdict = CheckVerdict.UNSUPPORTED if unsupported else CheckVerdict.FAILED
                else:
                    verdict, message = judge(value, median, item.higher_is_better, self.config.slow_factor)
                out.append(PairResult(number, item.name, pair, verdict, value, median, message))
        return out

    def _pair_item(self, item: SanityItem, pair_results: Sequence[PairResult]) -> ItemReport:
        rows = []
        for node in self.nodes:
            mine = [r for r in pair_results if r.item == item.name and node in r.nodes]
            if not mine:
                rows.append(NodeResult(node, CheckVerdict.FAILED, message="not checked"))
                continue
            last = mine[-1]
            peer = last.nodes[0] if last.nodes[1] == node else last.nodes[1]
            if node in self.pair_bad:
                verdict = last.verdict if last.verdict.bad else CheckVerdict.FAILED
                message = self.pair_bad[node]
            else:
                link = next(((a, b) for a, b in self.links if node in (a, b)), None)
                verdict = CheckVerdict.PASSED if last.verdict.bad else last.verdict
                message = f"with {peer} (round {last.round})"
                if link:
                    message += f"; link {link[0]}<->{link[1]} is bad"
            rows.append(NodeResult(node, verdict, last.value, last.peers_median, message))
        return ItemReport(item.name, item.scope.value, item.unit, item.higher_is_better, tuple(rows))

    def _all_items(self, items: Sequence[SanityItem], results: Mapping[str, dict[str, Any]]) -> list[ItemReport]:
        down: dict[Pair, str] = {}
        for node in self.nodes:
            links = results.get(node, {}).get("groups", {}).get("r1-all", {}).get("links", {})
            for peer, link in links.items():
                if not link.get("ok"):
                    pair: Pair = (node, peer) if self.nodes.index(node) < self.nodes.index(peer) else (peer, node)
                    down.setdefault(pair, link.get("error", "down"))
        for node in self.nodes:
            dead = [p for p in down if node in p]
            if len(dead) > 1:
                peers = ", ".join(a if b == node else b for a, b in dead)
                self.bad.setdefault(node, f"cannot reach {peers}")
        for (a, b), error in down.items():
            if a not in self.bad and b not in self.bad:
                self.links[(a, b)] = f"link probe failed: {error}"
        reports = []
        for item in items:
            outcomes = {n: _outcome(results.get(n, {}), item.name, "r1-all") for n in self.nodes}
            values = {n: o["value"] for n, o in outcomes.items() if o["status"] == "ok"}
            rows = []
            for node, outcome in outcomes.items():
                median = peer_median(values, node)
                if outcome["status"] == "ok":
                    verdict, message = judge(outcome["value"], median, item.higher_is_better,
                                             self.config.slow_factor)
                    rows.append(NodeResult(node, verdict, outcome["value"], median, message))
                elif down:
                    # Explained by the dead links above: the culprits are named there.
                    rows.append(NodeResult(node, CheckVerdict.FAILED, None, median, outcome["message"]))
                else:
                    rows.append(NodeResult(node, CheckVerdict(_status(outcome)), None, median, outcome["message"]))
            if down:
                reports.append(ItemReport(item.name, item.scope.value, item.unit, item.higher_is_better, tuple(rows)))
            else:
                reports.append(self._recorded(item, rows))
        return reports


def _gid(groups: Mapping[str, Pair], pair: Pair) -> str:
    return next(gid for gid, p in groups.items() if p == pair)


def _outcome(result: Mapping[str, Any], item: str, group: str | None = None) -> dict[str, Any]:
    """One node's outcome of one item (in ``group``), or a failure saying why there is none."""
    if "error" in result:
        return {"status": "failed", "value": None, "message": result["error"]}
    where = result.get("items", {}) if group is None else result.get("groups", {}).get(group, {}).get("items", {})
    if item not in where:
        return {"status": "failed", "value": None, "message": "no result"}
    return dict(where[item])


def _status(outcome: Mapping[str, Any]) -> str:
    return "unsupported" if outcome["status"] == "unsupported" else "failed"


def _unsupported(item: SanityItem, nodes: Sequence[str], why: str) -> ItemReport:
    rows = tuple(NodeResult(n, CheckVerdict.UNSUPPORTED, message=why) for n in nodes)
    return ItemReport(item.name, item.scope.value, item.unit, item.higher_is_better, rows)
