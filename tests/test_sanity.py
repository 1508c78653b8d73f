"""Sanity checks without processes: config and flags, judging, pairing, reports, items as plugins."""

from __future__ import annotations

import argparse
import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from trainguard.errors import PluginError, PolicyError
from trainguard.hooks import PluginHost
from trainguard.hooks.markers import hookimpl
from trainguard.model import Action, Capacity, ErrorSource, JobSpec
from trainguard.sanity import (
    DEFAULT_ITEMS, ITEMS, CheckVerdict, FailAction, ItemReport, NodeResult, RuntimeConfig, RuntimeFailAction,
    SanityConfig, SanityItem, SanityReport, Scope, add_arguments, config_from_args, load_config_file, preflight,
    runtime_check,
)
from trainguard.sanity.items import collect_items
from trainguard.sanity.pairing import first_pairs, resolve, second_pairs
from trainguard.sanity.report import judge, peer_median
from trainguard.sanity.runtime import gpu_health

SEED = Path(__file__).parent / "data" / "sanity" / "seed_001.json"


def parse(*argv: str) -> SanityConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_the_seed_json_is_accepted_as_written():
    config = load_config_file(SEED)
    assert config.enabled and sorted(config.items) == sorted(ITEMS) and config.items[:3] == DEFAULT_ITEMS
    assert config.timeout_minutes == 100 and config.timeout == 6000
    assert config.fail_action is FailAction.RETAIN
    assert config.runtime == RuntimeConfig(items=("c4d",), fail_action=RuntimeFailAction.RECORD)


def test_flags_win_over_the_file_and_default_is_the_seeds_set():
    config = parse("--sanity-check-config", str(SEED), "--sanity-check", "default,kernel_launch",
                   "--sanity-check-timeout", "2", "--sanity-check-fail-action", "rebuild",
                   "--sanity-check-slow-factor", "0.5")
    assert config.items == (*DEFAULT_ITEMS, "kernel_launch")
    assert (config.timeout_minutes, config.fail_action, config.slow_factor) == (2, FailAction.REBUILD, 0.5)
    assert parse() == SanityConfig() and not parse().enabled
    assert parse("--sanity-check-timeout", "3").enabled


@pytest.mark.parametrize("argv", [["--sanity-check", "gemm flops"], ["--sanity-check", ","], ["--sanity-check-timeout", "-1"],
                                  ["--sanity-check-fail-action", "explode"], ["--sanity-check-slow-factor", "2"],
                                  ["--sanity-check-config", "/nonexistent.json"]])
def test_bad_flags_are_usage_errors(argv, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_bad_json_names_the_key(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"aimaster": {"sanity_check": {"fail_action": "explode"}}}))
    with pytest.raises(PolicyError, match="sanity_check.fail_action"):
        load_config_file(path)
    path.write_text(json.dumps({"aimaster": {"runtime_check": {"micro_benchmarks": "dcgm"}}}))
    with pytest.raises(PolicyError, match="runtime_check.micro_benchmarks"):
        load_config_file(path)


def test_an_item_no_plugin_provides_is_refused_before_anything_starts():
    assert parse("--sanity-check", "gemm_flops,dcgm_diag").items == ("gemm_flops", "dcgm_diag")
    with pytest.raises(PolicyError, match="no such check item: dcgm_diag"):
        preflight(_Nodes("local", ("node-0",)), JobSpec("j", ("true",)),
                  SanityConfig(items=("gemm_flops", "dcgm_diag"), enabled=True))


def test_the_cli_run_parser_has_the_flags():
    from trainguard.cli import build_parser

    args = build_parser().parse_args(["run", "--sanity-check", "gemm_flops", "--sanity-check-fail-action", "fail"])
    assert config_from_args(args).items == ("gemm_flops",)


@pytest.mark.parametrize("value, higher, verdict", [(50, True, CheckVerdict.SLOW), (70, True, CheckVerdict.PASSED),
                                                    (200, False, CheckVerdict.SLOW), (150, False, CheckVerdict.PASSED)])
def test_a_node_is_judged_against_its_peers_median(value, higher, verdict):
    median = peer_median({"a": 100.0, "b": 90.0, "c": 110.0, "me": value}, "me")
    assert median == 100.0
    got, message = judge(value, median, higher, 0.6)
    assert got is verdict and (verdict is CheckVerdict.PASSED or "peers' median 100" in message)


def test_pairing_names_a_bad_node_or_a_bad_link_in_two_rounds():
    nodes = ["n0", "n1", "n2", "n3", "n4"]
    assert first_pairs(nodes) == [("n0", "n1"), ("n2", "n3"), ("n4", "n0")]
    failed = [("n2", "n3")]
    retest = second_pairs(failed, nodes)
    assert retest == [("n0", "n2"), ("n1", "n3")]
    bad, links = resolve(failed, {("n0", "n2"): False, ("n1", "n3"): True}, {})
    assert list(bad) == ["n2"] and "healthy n0 in round 2" in bad["n2"] and not links
    bad, links = resolve(failed, {("n0", "n2"): True, ("n1", "n3"): True}, {})
    assert not bad and list(links) == [("n2", "n3")]
    slow_once = {("n0", "n2"): True, ("n1", "n3"): True, ("n2", "n3"): True}
    assert resolve(failed, slow_once, {}) == ({}, {})
    bad, links = resolve(failed, {**slow_once, ("n2", "n3"): False}, {})
    assert not bad and "again in round 2" in links[("n2", "n3")]
    bad, links = resolve([("n0", "n1")], {}, {})
    assert set(bad) == {"n0", "n1"} and "no healthy node" in bad["n0"]


def report(action: FailAction, bad=("node-2",), links=()) -> SanityReport:
    rows = tuple(NodeResult(f"node-{i}", CheckVerdict.SLOW if f"node-{i}" in bad else CheckVerdict.PASSED,
                            10.0 if f"node-{i}" in bad else 50.0, 50.0) for i in range(4))
    return SanityReport(action, tuple(f"node-{i}" for i in range(4)),
                        (ItemReport("gemm_flops", "node", "GFLOP/s", True, rows),), bad_nodes=tuple(bad),
                        bad_links=tuple(links), started_at=1e9, duration=3.0,
                        reasons={"node-2": "slow on gemm_flops: 10 is 0.20 x the peers' median 50 GFLOP/s",
                                 "node-0<->node-1": "link probe failed"})


def test_the_fail_action_decides_the_outcome_and_the_record():
    fail, retain, rebuild = (report(a) for a in (FailAction.FAIL, FailAction.RETAIN, FailAction.REBUILD))
    assert not fail.outcome.start and "node-2" in fail.outcome.message
    assert fail.outcome.event == "sanity_check_failed"
    assert retain.outcome.start and not retain.outcome.isolate
    assert rebuild.outcome.start and rebuild.outcome.isolate == ("node-2",)
    record = rebuild.round_record("job", 1)
    assert record.error_source is ErrorSource.HEALTH_CHECK and record.action is Action.RESCHEDULE_ISOLATED
    assert record.isolated == ("node-2",) and not record.consumes_budget
    assert fail.round_record("job", 1).action is Action.FAIL
    ok = report(FailAction.FAIL, bad=())
    assert ok.passed and ok.outcome.start and ok.outcome.event == "sanity_check_succeeded"
    data = json.loads(json.dumps(rebuild.to_json()))
    assert data["bad_nodes"] == ["node-2"] and data["items"][0]["nodes"][2]["verdict"] == "slow"
    assert data["items"][0]["nodes"][2]["peers_median"] == 50.0


def test_a_bad_link_isolates_one_end():
    linked = report(FailAction.REBUILD, bad=(), links=[("node-0", "node-1")])
    assert not linked.passed and linked.isolate == ("node-1",)
    assert "link node-0<->node-1: link probe failed" in linked.reason


def test_items_are_plugins_and_sites_add_their_own(monkeypatch):
    monkeypatch.delenv("TRAINGUARD_DISABLE_PLUGINS", raising=False)
    host = PluginHost(load_entry_points=False)
    assert "sanity_items" in host.plugin_names
    assert sorted(collect_items(host)) == sorted(ITEMS)

    class Site:
        @hookimpl
        def trainguard_sanity_items(self):
            return [SanityItem("dcgm_diag", Scope.NODE, "site.checks:dcgm", "score")]

    host.pm.register(Site(), name="site")
    assert "dcgm_diag" in collect_items(host)

    class Clash:
        @hookimpl
        def trainguard_sanity_items(self):
            return [replace(SanityItem("gemm_flops", Scope.NODE, "x:y", "s"))]

    host.pm.register(Clash(), name="clash")
    with pytest.raises(PluginError, match="twice"):
        collect_items(host)


class _Nodes:
    def __init__(self, name: str, nodes: tuple[str, ...]) -> None:
        self.name, self.nodes = name, nodes

    def capacity(self, isolated):
        return Capacity(self.nodes, 1, len(self.nodes), isolated)


def test_runtime_check_reports_a_lost_gpu_and_an_unreachable_node(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.'\n"
                   "exit 15\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    healthy, why = gpu_health()
    assert healthy is False and "GPU is lost" in why
    local = runtime_check(_Nodes("local", ("node-0", "node-1")), RuntimeConfig(fail_action=RuntimeFailAction.ISOLATE))
    assert local.unhealthy == ("node-0", "node-1") and local.isolate == local.unhealthy
    assert local.event == "runtime_check_failed"
    remote = runtime_check(_Nodes("slurm", ("gone.invalid",)), RuntimeConfig(items=("reachability",),
                                                                                fail_action=RuntimeFailAction.RECORD))
    assert remote.unhealthy == ("gone.invalid",) and remote.isolate == () and remote.event == "runtime_check_failed"
    ignored = runtime_check(_Nodes("slurm", ("gone.invalid",)), RuntimeConfig(items=("reachability",)))
    assert ignored.event is None
