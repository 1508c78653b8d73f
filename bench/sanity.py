"""Sanity-check cost and the pairwise search: ``python bench/sanity.py [--nodes 2 4 8]``.

For each node count it times ``preflight`` with the seed's default items (gemm_flops,
all_reduce_1, all_reduce_2) on healthy virtual nodes of the local adapter, then breaks one
node's network (its check worker drops every connection, ``TRAINGUARD_SANITY_DROP_PEERS=*``)
and one link (one worker drops one peer), and prints how many pairwise rounds it took to name
the culprit. Everything runs on this machine, so virtual nodes share its cores: the times are
an upper bound for nodes that have machines of their own.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from trainguard.adapters.local import LocalAdapter
from trainguard.model import JobSpec
from trainguard.sanity import DEFAULT_ITEMS, SanityConfig, preflight
from trainguard.sanity.link import DROP_VAR


class _Broken(LocalAdapter):
    """The local adapter with extra environment for one node's processes."""

    def __init__(self, node_env: dict[str, dict[str, str]], **options) -> None:
        super().__init__(**options)
        self.node_env = node_env

    def start(self, launches):
        return super().start([replace(l, env={**l.env, **self.node_env.get(l.instance.node, {})}) for l in launches])


def _check(nodes: int, items: tuple[str, ...], node_env: dict[str, dict[str, str]], log_dir: Path):
    spec = JobSpec(f"bench-sanity-{nodes}", (sys.executable, "-c", "pass"), nproc=nodes, nodes=nodes)
    adapter = _Broken(node_env, spec=spec, log_dir=log_dir)
    start = time.perf_counter()
    try:
        report = preflight(adapter, spec, SanityConfig(items=items, enabled=True, timeout_minutes=5))
    finally:
        adapter.close()
    return report, time.perf_counter() - start


def _explain(report, nodes: list[str], links: list[tuple[str, str]]) -> None:
    """Print the pairs when the culprit named is not the one broken."""
    if list(report.bad_nodes) == nodes and list(report.bad_links) == links:
        return
    print(f"    expected nodes {nodes} links {links}; {report.reason}")
    for pair in report.pairs:
        print(f"    round {pair.round} {pair.nodes}: {pair.verdict.value} {pair.value} {pair.message[:120]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tg-bench-sanity-") as tmp:
        for nodes in args.nodes:
            report, took = _check(nodes, DEFAULT_ITEMS, {}, Path(tmp) / f"ok-{nodes}")
            verdict = "passed" if report.passed else f"FAILED: {report.reason}"
            print(f"{nodes} nodes, default items ({','.join(DEFAULT_ITEMS)}): {took:.1f} s, {verdict}")
            if nodes < 3:
                continue
            bad = f"node-{nodes - 3}"
            report, took = _check(nodes, ("all_reduce_2",), {bad: {DROP_VAR: "*"}}, Path(tmp) / f"nic-{nodes}")
            print(f"  {bad} reaches no peer: named {list(report.bad_nodes)} in {report.pair_rounds} pairwise "
                  f"round(s), {took:.1f} s")
            _explain(report, [bad], [])
            a, b = "node-0", "node-1"
            report, took = _check(nodes, ("all_reduce_2",), {b: {DROP_VAR: a}}, Path(tmp) / f"link-{nodes}")
            print(f"  link {a}<->{b} broken: named links {[list(l) for l in report.bad_links]}, nodes "
                  f"{list(report.bad_nodes)} in {report.pair_rounds} pairwise round(s), {took:.1f} s")
            _explain(report, [], [(a, b)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
