"""The plugin host: built-ins as plugins, entry points, block list, tracing, failure isolation."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pluggy
import pytest

from trainguard import Action, Category, Decision, ErrorSource, Event, Fault, JobStatus, Verdict, hookimpl
from trainguard.errors import PluginError
from trainguard.hooks import PluginHost, specs
from trainguard.hooks.registry import AdapterRegistry
from trainguard.model import EventType
from trainguard.policy import Policy

HOOKS = [name for name, fn in inspect.getmembers(specs, inspect.isfunction) if name.startswith("trainguard_")]
NCCL = "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error"


def fault(rank=0):
    return Fault(ErrorSource.EXIT_CODE, time.time(), rank=rank, node="node-0", exit_code=1)


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_is_documented_in_pytests_shape_and_tested(name):
    fn = getattr(specs, name)
    doc = inspect.getdoc(fn) or ""
    summary, blank, *_ = doc.splitlines() + ["", ""]
    assert summary.endswith(".") and len(summary) <= 100 and blank == "", f"{name}: one summary line, then a blank"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"{name} does not document {param}"
    assert ":return:" in doc, f"{name} does not say what its result means"
    assert re.search(r"^(First result wins|Fan-out|Called once)", doc, re.MULTILINE), f"{name}: no call semantics"
    assert "Implemented by" in doc
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    assert name in tests, f"no test exercises {name}"


def test_every_hookspec_is_declared_once_with_the_project_prefix():
    assert HOOKS and all(name.startswith("trainguard_") for name in HOOKS)
    host = PluginHost(load_entry_points=False)
    assert sorted(name for name in dir(host.pm.hook) if name.startswith("trainguard_")) == sorted(HOOKS)


def test_the_catalog_is_handed_over_once_validated_before_any_fault():
    """trainguard_catalog_ready gets the catalog the classifiers will get, once; the built-in
    log classifier compiles it then, not during the first fault's round."""
    from trainguard.plugins import log_classifier

    seen: list[tuple[object, ...]] = []

    class Preparing:
        @hookimpl
        def trainguard_catalog_ready(self, patterns):
            seen.append(patterns)

    host = PluginHost(load_entry_points=False, plugins={"preparing": Preparing()})
    log_classifier._catalogs.clear()
    patterns = host.patterns()
    assert seen == [patterns] and patterns
    assert patterns in log_classifier._catalogs, "compiled before the first classification"
    host.classify(fault(), "NCCL WARN Call to connect returned Connection refused", Policy())
    assert seen == [patterns]


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
    monkeypatch.setenv("TRAINGUARD_DISABLE_PLUGINS", "acme, log_classifier, learned_classifier")
    host = PluginHost()
    assert not {"acme", "log_classifier", "learned_classifier"} & set(host.plugin_names)
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


def test_tracing_uses_pluggys_tracer_and_names_the_plugins(monkeypatch, caplog):
    monkeypatch.setenv("TRAINGUARD_TRACE_HOOKS", "1")
    host = PluginHost(load_entry_points=False)
    with caplog.at_level(logging.DEBUG, logger="trainguard.hooks.host"):
        host.classify(fault(), NCCL, Policy())
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("hook trainguard_classify_fault calls") and "log_classifier" in line for line in lines)
    assert any("finish trainguard_classify_fault -->" in line and "TG-NCCL-ERROR" in line for line in lines)


class ExplodingClassifier:
    @hookimpl
    def trainguard_classify_fault(self, fault):
        raise RuntimeError("classifier bug")


class ExplodingNotifier:
    @hookimpl
    def trainguard_on_event(self, event):
        raise RuntimeError("notifier bug")


class ExplodingStrategy:
    @hookimpl(tryfirst=True)
    def trainguard_decide_recovery(self, incident):
        raise RuntimeError("strategy bug")


def plugin_errors(run):
    from trainguard.store import RunStore

    with RunStore(run.state_dir) as store:
        return {e["data"]["plugin"]: e["message"] for e in store.events(run.job_id) if e["type"] == "plugin_error"}


def test_a_failing_plugin_never_kills_the_job(run_job):
    host = PluginHost(load_entry_points=False, plugins={"bad-classifier": ExplodingClassifier(),
                                                        "bad-notifier": ExplodingNotifier(),
                                                        "bad-strategy": ExplodingStrategy()})
    run = run_job([{"round": 0, "rank": 0, "do": "fail", "say": NCCL}], host=host, enable_job_restart=True)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place"] and run.report["rounds"][0]["error_code"] == "TG-NCCL-ERROR"
    errors = plugin_errors(run)
    assert "trainguard_classify_fault" in errors["bad-classifier"] and "classifier bug" in errors["bad-classifier"]
    assert "trainguard_decide_recovery" in errors["bad-strategy"] and "strategy bug" in errors["bad-strategy"]
    assert "trainguard_on_event" in errors["bad-notifier"] and "notifier bug" in errors["bad-notifier"]
    assert all(m.endswith("disabled for the rest of the job") for m in errors.values())
    assert {"bad-classifier", "bad-notifier", "bad-strategy"} <= set(host.disabled)
    assert not {"bad-classifier", "bad-notifier", "bad-strategy"} & set(host.plugin_names)


class Counting:
    """Raises on its first call only: once disabled it must never be called again."""

    def __init__(self):
        self.calls = 0

    @hookimpl
    def trainguard_classify_fault(self, fault):
        self.calls += 1
        raise RuntimeError("boom")


def test_a_disabled_plugin_stays_disabled_and_is_reported_once():
    reported = []
    counting = Counting()
    host = PluginHost(load_entry_points=False, plugins={"counting": counting},
                      on_plugin_error=lambda *args: reported.append(args))
    for _ in range(3):
        assert host.classify(fault(), NCCL, Policy()).fault_code == "TG-NCCL-ERROR"
    assert counting.calls == 1 and [(p, h) for p, h, _ in reported] == [("counting", "trainguard_classify_fault")]
    assert isinstance(reported[0][2], PluginError) and isinstance(reported[0][2].__cause__, RuntimeError)


class NewStyleWrapper:
    @hookimpl(wrapper=True)
    def trainguard_classify_fault(self, fault):
        verdicts = yield
        return [replace(v, evidence=f"wrapped: {v.evidence}") for v in verdicts]


class OldStyleWrapper:
    @hookimpl(hookwrapper=True)
    def trainguard_decide_recovery(self, incident):
        outcome = yield
        decision = outcome.get_result()
        outcome.force_result(replace(decision, reason=f"{decision.reason} (seen by the site)"))


def test_pluggy_hook_wrappers_work(run_job):
    host = PluginHost(load_entry_points=False, plugins={"new": NewStyleWrapper(), "old": OldStyleWrapper()})
    assert host.classify(fault(), NCCL, Policy()).evidence == f"wrapped: {NCCL}"
    run = run_job([{"round": 0, "rank": 0, "do": "fail", "say": NCCL}], host=host, enable_job_restart=True)
    assert run.status is JobStatus.SUCCEEDED and run.report["rounds"][0]["reason"].endswith("(seen by the site)")
    assert not host.disabled


class RaisingWrapper:
    @hookimpl(wrapper=True)
    def trainguard_classify_fault(self, fault):
        yield
        raise ValueError("wrapper bug")


class GarbageWrapper:
    @hookimpl(wrapper=True)
    def trainguard_classify_fault(self, fault):
        yield
        return "not a list"


@pytest.mark.parametrize("plugin, why", [(RaisingWrapper(), "ValueError: wrapper bug"),
                                          (GarbageWrapper(), "returned 'not a list' where a list of results")])
def test_a_broken_wrapper_is_named_and_disabled(plugin, why):
    reported = []
    host = PluginHost(load_entry_points=False, plugins={"wrapper": plugin, "sure": Sure()},
                      on_plugin_error=lambda *args: reported.append(args))
    assert host.classify(fault(), NCCL, Policy()).fault_code == "SITE-1"
    ((name, hook, error),) = reported
    assert (name, hook) == ("wrapper", "trainguard_classify_fault") and why in str(error)


class Sure:
    @hookimpl
    def trainguard_classify_fault(self, fault):
        return Verdict(Category.NODE_OR_INFRA, "SITE-1", retryable=True, confidence=0.99)


class GarbageEverywhere:
    """Each hook answers with the wrong type."""

    def __init__(self, hook):
        self.hook = hook

    @hookimpl
    def trainguard_classify_fault(self, fault):
        return {"category": "nccl_error"} if self.hook == "classify" else None

    @hookimpl(tryfirst=True)
    def trainguard_decide_recovery(self, incident):
        return "restart_job" if self.hook == "decide" else None

    @hookimpl
    def trainguard_instance_env(self, instance):
        return {"SITE_RANK": instance.rank} if self.hook == "env" else None

    @hookimpl
    def trainguard_log_patterns(self):
        return "ACME.*down" if self.hook == "patterns" else []


@pytest.mark.parametrize("hook, expected", [
    ("classify", "where a Verdict is expected"),
    ("decide", "where a Decision or None is expected"),
    ("env", "where a mapping of str to str is expected"),
    ("patterns", "where a list of LogPattern is expected"),
])
def test_garbage_from_a_plugin_disables_it_and_the_default_decides(hook, expected):
    from trainguard import Capacity, History, Incident, Instance, JobSpec

    reported = []
    host = PluginHost(load_entry_points=False, plugins={"garbage": GarbageEverywhere(hook)},
                      on_plugin_error=lambda *args: reported.append(args))
    assert host.patterns()
    assert host.classify(fault(), NCCL, Policy()).fault_code == "TG-NCCL-ERROR"
    verdict = Verdict(Category.NCCL_ERROR, "TG-NCCL-ERROR", retryable=True)
    decision = host.decide(Incident((fault(),)), verdict, History(), Policy(enable_job_restart=True),
                           Capacity(nodes=("node-0",), slots_per_node=2, world_size=1))
    assert isinstance(decision, Decision)
    job = JobSpec(job_id="j", command=("true",), nproc=1)
    assert host.instance_env(job, Instance(rank=0, node="node-0", local_rank=0), 0) == {}
    ((name, _, error),) = reported
    assert name == "garbage" and expected in str(error) and "garbage" in host.disabled


def test_a_failure_no_plugin_can_be_blamed_for_is_reported_and_nothing_is_disabled():
    class NoYield:
        """A wrapper that never yields: pluggy raises, and no plugin frame is in the traceback."""

        @hookimpl(wrapper=True)
        def trainguard_on_event(self, event):
            if event is not None:
                return None
            yield

    reported = []
    host = PluginHost(load_entry_points=False, plugins={"noyield": NoYield()},
                      on_plugin_error=lambda *args: reported.append(args))
    host.notify(Event("j", EventType.JOB_STARTED, time.time()))
    ((name, hook, error),) = reported
    assert (name, hook) == ("(unidentified plugin)", "trainguard_on_event") and "did not yield" in str(error)
    assert "noyield" in host.plugin_names and not host.disabled


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


def test_trainguard_sanity_items_from_a_plugin_reach_the_check():
    from trainguard.sanity.items import SanityItem, Scope, collect_items

    class SiteCheck:
        @hookimpl
        def trainguard_sanity_items(self):
            return [SanityItem("site_dcgm", Scope.NODE, "site_checks:dcgm", "pass")]

    host = PluginHost(load_entry_points=False, plugins={"site": SiteCheck()})
    assert collect_items(host)["site_dcgm"].function == "site_checks:dcgm"


def test_duplicate_pattern_ids_are_rejected():
    class Dup:
        @hookimpl
        def trainguard_log_patterns(self):
            from trainguard.plugins.log_classifier import builtin_patterns

            return [builtin_patterns()[0]]

    with pytest.raises(PluginError, match="contributed twice"):
        PluginHost(load_entry_points=False, plugins={"dup": Dup()}).patterns()


def test_merge_takes_the_most_confident_verdict():
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


# -- a real third-party package, installed the way users install one --------------------------

PLUGIN_SOURCES = Path(__file__).parent / "data" / "plugins"


def pip_install(name: str, tmp: Path) -> Path:
    """Build and install ``tests/data/plugins/NAME`` into its own directory; pip writes its build
    files next to the sources, so it builds a copy."""
    source = shutil.copytree(PLUGIN_SOURCES / name, tmp / "src" / name)
    target = tmp / "site" / name
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                    "--quiet", "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    return target


@pytest.fixture(scope="module")
def site_packages(tmp_path_factory):
    """``acme-trainguard`` (a hook wrapper, a pattern, a notifier) and ``acme-broken`` (three
    misbehaving plugins), each installed with pip into its own directory."""
    # Built without isolation (no index needed): the build backend must be installed here. It is
    # in the dev setup (torch requires it); a bare Python 3.12+ venv lacks it.
    pytest.importorskip("setuptools", reason="building the test plugin packages needs setuptools")
    tmp = tmp_path_factory.mktemp("plugins")
    return {name: pip_install(name, tmp) for name in ("acme-trainguard", "acme-broken")}


def trainguard_cli(*args: str, path: list[Path], cwd: Path, env: dict | None = None):
    environ = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(map(str, path))}
    environ.pop("TRAINGUARD_DISABLE_PLUGINS", None)
    return subprocess.run([sys.executable, "-m", "trainguard", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=120)


def test_an_installed_hook_wrapper_plugin_loads_by_entry_point_and_wraps_classification(site_packages, tmp_path):
    log = tmp_path / "rank.log"
    log.write_text("noise\nACME fabric link host-17 down\n" + NCCL + "\n")
    done = trainguard_cli("classify", str(log), "--exit-code", "1", "--json", path=[site_packages["acme-trainguard"]],
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    # The pattern came from the package, and its wrapper saw and signed the merged verdicts.
    assert (verdict["fault_code"], verdict["node"]) == ("ACME-FABRIC", "host-17")
    assert verdict["evidence"].startswith("[acme saw ") and "ACME fabric link host-17 down" in verdict["evidence"]
    assert "plugin" not in done.stderr


def test_installed_plugins_that_raise_or_return_garbage_are_named_and_disabled_and_the_job_goes_on(
        site_packages, tmp_path):
    from trainguard.store import RunStore

    fail_once = ("import os, sys; sys.exit(3 if os.environ['TRAINGUARD_RESTART_ROUND'] == '0' "
                 "and os.environ['RANK'] == '0' else 0)")
    done = trainguard_cli("run", "--nproc", "2", "--state-dir", "state", "--job-id", "acme-job", "--events-file",
                          "events.jsonl", "--fault-tolerant-policy", "OnFailure", "--enable-job-restart", "True",
                          "--", sys.executable, "-c", fail_once,
                          path=[site_packages["acme-trainguard"], site_packages["acme-broken"]], cwd=tmp_path,
                          env={"ACME_EVENTS": str(tmp_path / "acme.jsonl")})
    assert done.returncode == 0, done.stderr
    with RunStore(tmp_path / "state") as store:
        report = store.report("acme-job")
        errors = {e["data"]["plugin"]: (e["data"]["hook"], e["message"])
                  for e in store.events("acme-job") if e["type"] == "plugin_error"}
    assert report["status"] == "succeeded" and [r["action"] for r in report["rounds"]] == ["restart_job"]
    assert errors["acme_raises"][0] == "trainguard_classify_fault" and "acme classifier bug" in errors["acme_raises"][1]
    assert errors["acme_garbage"][0] == "trainguard_decide_recovery"
    assert "returned 'restart it please' where a Decision or None is expected" in errors["acme_garbage"][1]
    assert errors["acme_badenv"][0] == "trainguard_instance_env"
    assert "where a mapping of str to str is expected" in errors["acme_badenv"][1]
    for plugin, (_, message) in errors.items():
        assert message.endswith("disabled for the rest of the job")
        assert f"plugin {plugin} failed" in done.stderr
    # Each misbehaving plugin is reported once: disabled, it is not called again.
    assert done.stderr.count("acme_badenv failed") == 1
    # The package's own notifier, on its queue, heard every event in order.
    written = [json.loads(line)["type"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    heard = [json.loads(line)["type"] for line in (tmp_path / "acme.jsonl").read_text().splitlines()]
    assert heard == written and written[0] == "job_started" and written[-1] == "job_succeeded"
