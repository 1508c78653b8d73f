"""The plugin host: built-ins as plugins, entry points, block list, tracing, failure isolation."""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
import time
from pathlib import Path

import pluggy
import pytest

from trainguard import Action, Category, Decision, ErrorSource, Fault, JobStatus, Verdict, hookimpl
from trainguard.errors import PluginError
from trainguard.hooks import PluginHost, specs
from trainguard.hooks.registry import AdapterRegistry
from trainguard.policy import Policy

HOOKS = [name for name, fn in inspect.getmembers(specs, inspect.isfunction) if name.startswith("trainguard_")]
NCCL = "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error"


def fault(rank=0):
    return Fault(ErrorSource.EXIT_CODE, time.time(), rank=rank, node="node-0", exit_code=1)


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_is_documented_and_tested(name):
    fn = getattr(specs, name)
    doc = inspect.getdoc(fn) or ""
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"{name} does not document {param}"
    assert "Implemented by" in doc and ("First result wins" in doc or "Fan-out" in doc or "Called once" in doc)
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py") if p.name != "test_hooks.py")
    assert name in Path(__file__).read_text() or name in tests


def test_builtins_are_ordinary_plugins(monkeypatch):
    monkeypatch.delenv("TRAINGUARD_DISABLE_PLUGINS", raising=False)
    host = PluginHost(load_entry_points=False)
    assert {"adapters", "exit_classifier", "log_classifier", "strategy", "log_notifier"} <= set(host.plugin_names)
    assert "local" in host.adapters().names


class _FakeDist:
    """Distribution metadata as an installed package would carry it; nothing is installed."""

    def __init__(self, name: str, entry_points: list[importlib.metadata.EntryPoint]) -> None:
        self.entry_points = entry_points
        self.metadata = {"name": name}
        self.version = "1.0"

    @property
    def name(self):
        return self.metadata["name"]


@pytest.fixture
def acme_installed(monkeypatch):
    ep = importlib.metadata.EntryPoint(name="acme", value="helpers.thirdparty", group="trainguard")
    other = importlib.metadata.EntryPoint(name="unrelated", value="nowhere.at.all", group="console_scripts")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [_FakeDist("acme-trainguard", [ep, other])])


def test_entry_point_plugins_load_and_their_patterns_classify(acme_installed):
    host = PluginHost()
    assert "acme" in host.plugin_names
    assert any(p.id == "acme-fabric-down" and p.source == "acme" for p in host.patterns())
    verdict = host.classify(fault(), "noise\nACME fabric link host-17 down\n" + NCCL, Policy())
    assert (verdict.fault_code, verdict.node, verdict.node_fault) == ("ACME-FABRIC", "host-17", True)


def test_block_list_variable_keeps_plugins_out(acme_installed, monkeypatch):
    monkeypatch.setenv("TRAINGUARD_DISABLE_PLUGINS", "acme, log_classifier")
    host = PluginHost()
    assert "acme" not in host.plugin_names and "log_classifier" not in host.plugin_names
    assert host.classify(fault(), NCCL, Policy()).fault_code == "TG-UNKNOWN"


def test_a_broken_entry_point_is_one_clear_error(monkeypatch):
    ep = importlib.metadata.EntryPoint(name="broken", value="no_such_module_anywhere", group="trainguard")
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [_FakeDist("broken", [ep])])
    with pytest.raises(PluginError, match="cannot load a plugin .*ModuleNotFoundError"):
        PluginHost()


def test_plugins_with_arguments_outside_the_spec_are_rejected():
    class Bad:
        @hookimpl
        def trainguard_classify_fault(self, fault, log_tail, surprise):
            return None

    with pytest.raises(pluggy.PluginValidationError):
        PluginHost(load_entry_points=False, plugins={"bad": Bad()})


def test_tracing_logs_every_hook_call(monkeypatch, caplog):
    monkeypatch.setenv("TRAINGUARD_TRACE_HOOKS", "1")
    host = PluginHost(load_entry_points=False)
    with caplog.at_level(logging.DEBUG, logger="trainguard.hooks.host"):
        host.classify(fault(), NCCL, Policy())
    assert any("trainguard_classify_fault <- log_classifier" in r.getMessage() for r in caplog.records)


class Exploding:
    @hookimpl
    def trainguard_classify_fault(self, fault):
        raise RuntimeError("classifier bug")

    @hookimpl
    def trainguard_on_event(self, event):
        raise RuntimeError("notifier bug")

    @hookimpl(tryfirst=True)
    def trainguard_decide_recovery(self, incident):
        raise RuntimeError("strategy bug")


def test_a_failing_plugin_never_kills_the_job(run_job):
    host = PluginHost(load_entry_points=False, plugins={"exploding": Exploding()})
    run = run_job([{"round": 0, "rank": 0, "do": "fail", "say": NCCL}], host=host, enable_job_restart=True)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place"] and run.report["rounds"][0]["error_code"] == "TG-NCCL-ERROR"
    from trainguard.store import RunStore

    store = RunStore(run.state_dir)
    errors = [e["message"] for e in store.events(run.job_id) if e["type"] == "plugin_error"]
    store.close()
    assert any("trainguard_classify_fault" in m and "classifier bug" in m for m in errors)
    assert any("trainguard_decide_recovery" in m for m in errors)
    assert any("trainguard_on_event" in m for m in errors)


class AlwaysReplace:
    """A site strategy: replace instances on any NCCL error, defer everything else."""

    @hookimpl
    def trainguard_decide_recovery(self, incident, verdict):
        if verdict.category is Category.NCCL_ERROR:
            return Decision(Action.RESTART_JOB, "site rule: NCCL errors restart the job", strategy="site")
        return None


def test_a_strategy_plugin_decides_first_and_defers_with_none(run_job):
    host = PluginHost(load_entry_points=False, plugins={"site": AlwaysReplace()})
    run = run_job([{"round": 0, "rank": 0, "do": "fail", "say": NCCL},
                   {"round": 1, "rank": 0, "do": "fail", "say": "KeyError: 'x'"}], host=host, enable_job_restart=True)
    assert run.actions == ["restart_job"] and run.report["rounds"][0]["reason"].startswith("site rule")
    assert run.status is JobStatus.FAILED and "not retryable" in run.report["failure"]["reason"]


class SiteEnv:
    @hookimpl
    def trainguard_instance_env(self, job, instance, restart_round):
        return {"PLUGIN_VAR": f"{job.job_id}/{instance.node}/{restart_round}", "RANK": "999"}


def test_instance_env_contributions_cannot_override_the_contract(run_job):
    run = run_job(host=PluginHost(load_entry_points=False, plugins={"site": SiteEnv()}))
    assert {s["PLUGIN_VAR"] for s in run.starts} == {f"{run.job_id}/node-0/0"}
    assert sorted(s["RANK"] for s in run.starts) == ["0", "1"]


class Recorder:
    def __init__(self):
        self.events = []

    @hookimpl
    def trainguard_on_event(self, event):
        self.events.append(event.type)


def test_notifiers_hear_every_event(run_job):
    recorder = Recorder()
    run_job(host=PluginHost(load_entry_points=False, plugins={"rec": recorder}))
    assert recorder.events[0] == "job_started" and recorder.events[-1] == "job_succeeded"


def test_adapter_registry_validates():
    registry = AdapterRegistry()
    registry.add_adapter("slurm", dict)
    with pytest.raises(PluginError, match="registered twice"):
        registry.add_adapter("slurm", dict)
    with pytest.raises(PluginError, match="lower-case"):
        registry.add_adapter("Slurm!", dict)
    with pytest.raises(PluginError, match="not callable"):
        registry.add_adapter("k8s", "nope")
    from trainguard.errors import AdapterError

    with pytest.raises(AdapterError, match=r"no such adapter \(known: slurm\)"):
        registry.create("volcano")


def test_trainguard_register_adapters_from_a_plugin(run_job):
    class Named:
        @hookimpl
        def trainguard_register_adapters(self, registry):
            from trainguard.adapters.local import LocalAdapter

            registry.add_adapter("mylocal", LocalAdapter)

    host = PluginHost(load_entry_points=False, plugins={"named": Named()})
    assert "mylocal" in host.adapters().names


def test_duplicate_pattern_ids_are_rejected():
    class Dup:
        @hookimpl
        def trainguard_log_patterns(self):
            from trainguard.plugins.log_classifier import builtin_patterns

            return [builtin_patterns()[0]]

    with pytest.raises(PluginError, match="contributed twice"):
        PluginHost(load_entry_points=False, plugins={"dup": Dup()}).patterns()


def test_merge_takes_the_most_confident_verdict():
    class Sure:
        @hookimpl
        def trainguard_classify_fault(self, fault):
            return Verdict(Category.NODE_OR_INFRA, "SITE-1", retryable=True, confidence=0.99)

    host = PluginHost(load_entry_points=False, plugins={"sure": Sure()})
    assert host.classify(fault(), NCCL, Policy()).fault_code == "SITE-1"


def test_a_malformed_plugin_pattern_is_one_clear_error():
    from trainguard.model import LogPattern

    class Broken:
        @hookimpl
        def trainguard_log_patterns(self):
            return [LogPattern(id="broken", regex="(unclosed", category=Category.NCCL_ERROR, fault_code="X",
                               retryable=True, source="broken-plugin")]

    with pytest.raises(PluginError, match=r"log pattern 'broken' \(broken-plugin\): missing \)"):
        PluginHost(load_entry_points=False, plugins={"broken": Broken()}).patterns()
