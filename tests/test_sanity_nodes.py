"""Sanity checks on real virtual nodes: real check processes through the real LocalAdapter.

A node is made slow by a CPU quota on its processes and a link is broken by a worker that
drops its connections with one peer; the check has to find both by measuring.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from helpers.sanity_nodes import DrillAdapter
from trainguard.adapters.local import LocalAdapter
from trainguard.engine import supervise
from trainguard.hooks import PluginHost, hookimpl
from trainguard.model import JobSpec, JobStatus
from trainguard.policy import build_policy
from trainguard.sanity import CheckVerdict, FailAction, SanityConfig, preflight
from trainguard.sanity.link import DROP_VAR
from trainguard.store import RunStore

pytestmark = pytest.mark.torch

JOB = (sys.executable, "-c", "import os; print('rank on', os.environ['TRAINGUARD_NODE'])")


def spec(job_id: str, nodes: int = 4) -> JobSpec:
    return JobSpec(job_id, JOB, nproc=nodes - 1, nodes=nodes, slots_per_node=1)


def check(adapter, job: JobSpec, *items: str, action=FailAction.REBUILD):
    config = SanityConfig(items=items, enabled=True, fail_action=action, timeout_minutes=3, window=0.5)
    try:
        return preflight(adapter, job, config)
    finally:
        adapter.close()


def item(report, name):
    return {row.node: row for row in next(i for i in report.items if i.item == name).nodes}


def test_a_really_slow_node_is_named_by_the_compute_check_and_each_fail_action_acts(tmp_path):
    job = spec("slow-node")
    slow = DrillAdapter(spec=job, log_dir=tmp_path / "check-logs", slow="node-2")
    report = check(slow, job, "gemm_flops")
    gemm = item(report, "gemm_flops")
    assert report.bad_nodes == ("node-2",), report.reason
    assert gemm["node-2"].verdict is CheckVerdict.SLOW
    assert gemm["node-2"].value < 0.6 * gemm["node-2"].peers_median
    assert "node-2: slow on gemm_flops" in report.reason
    # The check's processes logged under rounds of their own: no job log was written.
    assert (tmp_path / "check-logs" / "round--1").is_dir() and not (tmp_path / "check-logs" / "round-0").exists()

    # The engine acts on it: rebuild isolates node-2 before the job starts; fail starts nothing.
    rebuild = supervise_checked(tmp_path, job, FailAction.REBUILD)
    assert rebuild.status is JobStatus.SUCCEEDED
    (record,) = rebuild.report["rounds"]
    assert (record["error_source"], record["action"], record["isolated_nodes"]) == (
        "health_check", "reschedule_isolated", ["node-2"])
    logs = rebuild.state_dir / "jobs" / rebuild.job_id / "logs" / f"round-{record['round']}"
    assert sorted(p.read_text().split()[-1] for p in logs.glob("rank-*.log")) == ["node-0", "node-1", "node-3"]
    assert rebuild.events[1]["type"] == "sanity_check_failed"
    assert rebuild.report["sanity_check"]["bad_nodes"] == ["node-2"], "history --json carries the report"
    failed = supervise_checked(tmp_path, job, FailAction.FAIL)
    assert failed.status is JobStatus.FAILED and failed.report["rounds"] == []
    assert failed.report["failure"]["error_source"] == "health_check" and "node-2" in failed.report["failure"]["reason"]
    assert not (failed.state_dir / "jobs" / failed.job_id / "logs" / "round-0").exists(), "no rank started"


class _Drill:
    """Registers the drill adapter (a slow node-2) as a plugin adapter, as a site would."""

    @hookimpl
    def trainguard_register_adapters(self, registry):
        registry.add_adapter("drill", lambda **options: DrillAdapter(slow="node-2", **options))


@dataclass
class Checked:
    status: JobStatus
    report: dict
    events: list
    state_dir: Path
    job_id: str


def supervise_checked(tmp_path: Path, job: JobSpec, action: FailAction) -> Checked:
    job = replace(job, job_id=f"job-{action.value}")
    config = SanityConfig(items=("gemm_flops",), enabled=True, fail_action=action, timeout_minutes=3, window=0.5)
    state = tmp_path / f"state-{action.value}"  # one store per job: isolations carry across jobs
    status = supervise(job, build_policy({}), state_dir=state, adapter="drill", sanity=config,
                       host=PluginHost(load_entry_points=False, plugins={"drill": _Drill()}))
    with RunStore(state) as store:
        return Checked(status, store.report(job.job_id), list(store.events(job.job_id)), state, job.job_id)


def test_a_broken_link_is_named_by_the_pairwise_rounds(tmp_path):
    job = spec("bad-link")
    adapter = DrillAdapter(spec=job, log_dir=tmp_path / "logs", node_env={"node-1": {DROP_VAR: "node-0"}})
    report = check(adapter, job, "all_reduce_2")
    assert report.bad_links == (("node-0", "node-1"),), report.reason
    assert report.bad_nodes == () and report.pair_rounds == 2
    assert report.isolate == ("node-1",)
    first = [p for p in report.pairs if p.round == 1 and p.verdict is CheckVerdict.FAILED]
    assert [p.nodes for p in first] == [("node-0", "node-1")] and "Connection reset" in first[0].message
    assert all(p.verdict is CheckVerdict.PASSED for p in report.pairs if p.round == 2)


def test_a_node_that_reaches_no_peer_is_named_by_pairs_and_by_connectivity(tmp_path):
    job = spec("bad-nic")
    adapter = DrillAdapter(spec=job, log_dir=tmp_path / "logs", node_env={"node-2": {DROP_VAR: "*"}})
    report = check(adapter, job, "pytorch_gloo_2", "network_connectivity", action=FailAction.FAIL)
    assert report.bad_nodes == ("node-2",) and report.bad_links == (), report.reason
    assert report.pair_rounds == 2 and "healthy node-0 in round 2" in report.reason
    connectivity = item(report, "network_connectivity")
    assert connectivity["node-2"].verdict is CheckVerdict.FAILED
    assert connectivity["node-0"].verdict is CheckVerdict.PASSED and connectivity["node-0"].value > 0
    assert not report.outcome.start


def test_an_item_this_hardware_cannot_run_says_so(tmp_path):
    job = JobSpec("one-node", JOB, nproc=1, nodes=1)
    report = check(LocalAdapter(spec=job, log_dir=tmp_path / "logs"), job, "gemm_flops", "all_reduce_2")
    assert report.passed
    assert item(report, "gemm_flops")["node-0"].verdict is CheckVerdict.PASSED
    assert item(report, "all_reduce_2")["node-0"].verdict is CheckVerdict.UNSUPPORTED


def test_a_site_item_from_a_plugin_runs_on_every_node_and_names_the_one_it_fails_on(tmp_path):
    from helpers.sanity_site_items import SitePlugin
    from trainguard.hooks import PluginHost

    host = PluginHost(load_entry_points=False, plugins={"site": SitePlugin()})
    tests = str(Path(__file__).parent)
    job = JobSpec("site-item", JOB, nproc=3, nodes=3, env={"PYTHONPATH": tests, "SITE_BROKEN_NODE": "node-1"})
    adapter = LocalAdapter(spec=job, log_dir=tmp_path / "logs")
    # The next item is one with no speed to compare: gemm_flops here once named a node 0.59x its
    # peers on a loaded machine.
    config = SanityConfig(items=("ecc_scan", "site_marker"), enabled=True, window=0.2)
    try:
        report = preflight(adapter, job, config, host=host)
    finally:
        adapter.close()
    scan = item(report, "ecc_scan")
    assert report.bad_nodes == ("node-1",), report.reason
    assert scan["node-1"].verdict is CheckVerdict.FAILED and "ECC" in scan["node-1"].message
    assert scan["node-0"].verdict is CheckVerdict.PASSED
    # The node that failed kept its peers in step: the next item ran everywhere.
    assert {row.verdict for row in item(report, "site_marker").values()} == {CheckVerdict.PASSED}
    assert set(item(report, "site_marker")) == {"node-0", "node-1", "node-2"}
