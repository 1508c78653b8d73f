"""The Airflow integration, against real Airflow 3 in this process.

DAGs run with ``dag.test()``, which runs each task (and a deferred task's trigger, inline) as
Airflow's own task runner does, against a private SQLite metadata database (see conftest). The
jobs are real processes under the real engine. The pages are served by Airflow's own API server
app, and drawn by a real headless Chromium for the screenshot test.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

try:
    import airflow  # noqa: F401
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("Airflow is not installed (pip install -e '.[airflow]')", allow_module_level=True)

from conftest import REPO, RANK_SCRIPT
from helpers.png import colour_counts
from test_slurm import cluster  # noqa: F401 - the module-scoped Slurm cluster fixture

from trainguard.airflow import TrainingJobTrigger
from trainguard.airflow.runners import LocalRunner
from trainguard.airflow.timeline import ACTION_COLOURS, STAGE_COLOURS, STATUS_COLOURS
from trainguard.model import JobSpec
from trainguard.policy import build_policy
from trainguard.store import RunStore

pytestmark = pytest.mark.usefixtures("airflow_db")

NCCL = ("[E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
        "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600061 milliseconds before timing out.")
KEY_ERROR = ('Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n    '
             'batch["labels"]\nKeyError: \'labels\'')


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scenarios() -> Any:
    return _load(REPO / "tests" / "airflow_dags" / "scenarios.py", "tg_scenarios")


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the operators keep the run history ($TRAINGUARD_STATE_DIR)."""
    monkeypatch.setenv("TRAINGUARD_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def run_dag(dag: Any, **conf: Any) -> tuple[Any, Any]:
    run = dag.test(run_conf=conf)
    return run, run.get_task_instance(next(iter(dag.task_dict)))


def xcom(run: Any, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, key=key)).first()
        return None if row is None else XComModel.deserialize_value(row)


def starts(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


class _Hooks(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Any:
    """A loopback HTTP server recording the JSON bodies POSTed to it."""
    handler = type("Hooks", (_Hooks,), {"received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", handler.received
    server.shutdown()


# -- one task try: recovery, failure semantics --------------------------------------------------


def test_retryable_fault_is_recovered_within_one_task_try(scenarios: Any, state_dir: Path, tmp_path: Path) -> None:
    record = tmp_path / "starts.jsonl"
    plan = [{"round": 0, "rank": 1, "do": "fail", "code": 6, "say": NCCL}]
    run, ti = run_dag(scenarios.in_task, plan=json.dumps(plan), record=str(record))
    assert (run.state, ti.state, ti.try_number) == ("success", "success", 1)
    report = xcom(run)
    assert report["status"] == "succeeded" and report["job_id"] == xcom(run, "trainguard_job_id")
    assert [(r["round"], r["action"], r["error_code"], r["result"]) for r in report["rounds"]] == [
        (1, "restart_in_place", "TG-NCCL-TIMEOUT", "recovered")]
    assert set(report["rounds"][0]["stages"]) == {"diagnose", "decide", "stop", "isolate", "restart"}
    # The engine ran in the task's own process: the ranks are its children.
    assert {s["ppid"] for s in starts(record)} == {os.getpid()}
    assert [s["TRAINGUARD_RESTART_ROUND"] for s in starts(record) if s["RANK"] == "1"] == ["0", "1"]


def test_deferred_job_defers_and_resumes_on_each_round(scenarios: Any, state_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fired: list[str] = []
    original = TrainingJobTrigger.run

    async def recording_run(self: TrainingJobTrigger) -> Any:
        async for event in original(self):
            fired.append(event.payload["kind"])
            yield event

    monkeypatch.setattr(TrainingJobTrigger, "run", recording_run)
    record = tmp_path / "starts.jsonl"
    plan = [{"round": 0, "rank": 1, "do": "fail", "code": 6, "say": NCCL}]
    run, ti = run_dag(scenarios.deferred, plan=json.dumps(plan), record=str(record))
    assert (run.state, ti.try_number) == ("success", 1)
    # Deferred at the start, resumed at the round (and deferred again), resumed at the end.
    assert fired == ["round", "finished"]
    assert [r["action"] for r in xcom(run)["rounds"]] == ["restart_in_place"]
    # The supervisor ran detached, not in the task's process.
    assert os.getpid() not in {s["ppid"] for s in starts(record)}


@pytest.mark.parametrize("dag_name", ["in_task", "deferred"])
def test_user_error_fails_the_task_without_airflow_retries(scenarios: Any, state_dir: Path, webhook: Any,
                                                           dag_name: str) -> None:
    url, received = webhook
    plan = [{"rank": 0, "do": "fail", "code": 1, "say": KEY_ERROR}]
    run, ti = run_dag(getattr(scenarios, dag_name), plan=json.dumps(plan), webhook=url)
    # retries=2, yet one try: a permanent failure is not worth retrying.
    assert (run.state, ti.state, ti.try_number) == ("failed", "failed", 1)
    failure = xcom(run, "trainguard_report")["failure"]
    assert (failure["action"], failure["transient"]) == ("fail", False)
    assert failure["error_code"] == "TG-USER-EXCEPTION"
    # The notifier in on_failure_callback sent the job's outcome.
    assert len(received) == 1
    assert received[0]["status"] == "failed" and received[0]["error_code"] == failure["error_code"]
    assert (received[0]["dag_id"], received[0]["task_id"]) == (run.dag_id, "train")


@pytest.mark.parametrize("dag_name", ["airflow_restarts", "airflow_restarts_deferred"])
def test_transient_give_up_is_retried_by_airflow_and_resumes_the_same_job(
        scenarios: Any, state_dir: Path, tmp_path: Path, dag_name: str) -> None:
    record = tmp_path / "starts.jsonl"
    plan = [{"rank": 1, "do": "fail", "code": 6, "say": NCCL, "once": str(tmp_path / "failed-once")}]
    run, ti = run_dag(getattr(scenarios, dag_name), plan=json.dumps(plan), record=str(record))
    assert (run.state, ti.try_number) == ("success", 2)
    report = xcom(run)
    # The retry is the job's next round (new logs, new SDK channel), not charged to its budget.
    assert (report["status"], report["restarts"]) == ("succeeded", 0)
    assert [(r["error_code"], r["consumes_budget"]) for r in report["rounds"]] == [("TG-SUPERVISOR-RESTART", False)]
    # Both tries were one trainguard job: the second resumed the first's history.
    assert {s["TRAINGUARD_JOB_ID"] for s in starts(record)} == {report["job_id"]}
    store = RunStore(state_dir)
    try:
        kinds = [e["type"] for e in store.events(report["job_id"])]
    finally:
        store.close()
    assert kinds.count("job_started") == 1 and kinds.count("job_resumed") == 1 and "job_failed" in kinds


def test_bad_policy_fails_the_task_once_without_running_anything(scenarios: Any, state_dir: Path) -> None:
    run, ti = run_dag(scenarios.bad_policy)
    assert (run.state, ti.try_number) == ("failed", 1)
    assert not (state_dir / RunStore.FILENAME).exists()


@pytest.mark.slurm
def test_deferred_slurm_job_resubmitted_without_a_failed_node(scenarios: Any, state_dir: Path, tmp_path: Path,
                                                              cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the real Slurm cluster of tests/slurm_cluster.py: a node crashes under the deferred
    task's allocation; the task resumes, classifies NODE_FAIL, resubmits without that node and
    defers again, and the job finishes with the history of both allocations."""
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    record = tmp_path / "starts.jsonl"
    failed: list[str] = []

    def fail_a_node() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and '"RANK": "1"' not in (record.read_text() if record.exists() else ""):
            time.sleep(0.2)
        node = next(s["SLURMD_NODENAME"] for s in starts(record) if s["RANK"] == "1")
        cluster.stop_slurmd(node)
        cluster.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=test-crash", check=True)
        failed.append(node)

    killer = threading.Thread(target=fail_a_node)
    killer.start()
    try:
        run, ti = run_dag(scenarios.slurm, plan=json.dumps([{"round": 0, "do": "sleep", "seconds": 8}]),
                          record=str(record))
    finally:
        killer.join()
        for node in failed:
            cluster.start_slurmd(node)
            cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
    assert (run.state, ti.try_number) == ("success", 1)
    store = RunStore(state_dir)
    try:
        events = list(store.events(xcom(run, "trainguard_job_id")))
    finally:
        store.close()
    (resubmit,) = [e for e in events if e["type"] == "slurm_resubmitting"]
    assert "NODE_FAIL" in resubmit["message"] and resubmit["data"]["exclude"] == failed
    assert [e["type"] for e in events].count("slurm_submitted") == 2
    assert failed[0] not in {s["SLURMD_NODENAME"] for s in starts(record)[2:]}


def test_job_id_is_one_per_series_of_tries() -> None:
    from types import SimpleNamespace

    from trainguard.airflow.jobs import job_id_for

    ti = SimpleNamespace(dag_id="d", task_id="t", map_index=-1, max_tries=2)
    task = SimpleNamespace(retries=2, job_id=None)
    context = {"ti": ti, "task": task, "run_id": "manual__2026-01-01T00:00:00+00:00"}
    assert job_id_for(context) == "d.t.manual__2026-01-01T00-00-00-00-00"  # tries 1-3: one job
    ti.map_index = 3
    assert job_id_for(context) == "d.t.manual__2026-01-01T00-00-00-00-00.3"
    ti.max_tries = 3 + 2  # cleared after try 3: Airflow starts a new series at try 4
    assert job_id_for(context) == "d.t.manual__2026-01-01T00-00-00-00-00.3.try4"
    task.job_id = "mine"
    assert job_id_for(context) == "mine"


# -- the trigger -----------------------------------------------------------------------------------


def test_trigger_survives_airflow_serialization() -> None:
    from airflow.models.trigger import Trigger

    trigger = TrainingJobTrigger(job_id="j", state_dir="/shared/tg", rounds_seen=2, events_seen=17,
                                 poll_interval=0.5, stop_grace_period=3,
                                 watch={"kind": "slurm", "slurm_job": "42", "resubmits": 1})
    # As the triggerer does: a database row (kwargs encrypted), then the class by its path.
    row = Trigger.from_object(trigger)
    module, _, name = row.classpath.rpartition(".")
    again = getattr(importlib.import_module(module), name)(**row.kwargs)
    assert isinstance(again, TrainingJobTrigger) and again.serialize() == trigger.serialize()


def _launch(tmp_path: Path, plan: list[dict[str, Any]]) -> tuple[LocalRunner, dict[str, Any], Path]:
    record = tmp_path / "starts.jsonl"
    spec = JobSpec(job_id="detached", command=(sys.executable, str(RANK_SCRIPT)), nproc=2, cwd=str(tmp_path),
                   env={"TG_PLAN": json.dumps(plan), "TG_RECORD": str(record), "TG_WORK": "0"})
    runner = LocalRunner(spec, build_policy({"stop_grace_period": 2}), tmp_path / "state")
    watch = runner.launch()
    deadline = time.monotonic() + 60
    while len(starts(record)) < 2:
        assert time.monotonic() < deadline, (tmp_path / "state" / "jobs" / "detached" / "supervisor.log").read_text()
        time.sleep(0.05)
    return runner, watch, record


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait_gone(pids: list[int], seconds: float = 15) -> list[int]:
    deadline = time.monotonic() + seconds
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def test_trigger_on_kill_stops_the_detached_job_and_its_ranks(tmp_path: Path) -> None:
    _, watch, record = _launch(tmp_path, [{"do": "hang"}])
    ranks = [s["pid"] for s in starts(record)]
    trigger = TrainingJobTrigger(job_id="detached", state_dir=str(tmp_path / "state"), watch=watch,
                                 stop_grace_period=2)
    asyncio.run(trigger.on_kill())
    assert _wait_gone([watch["pid"], *ranks]) == []
    store = RunStore(tmp_path / "state")
    try:
        failure = store.report("detached")["failure"]
    finally:
        store.close()
    # Stopped, not failed for good: a retry resumes it.
    assert (failure["error_code"], failure["transient"]) == ("TG-INTERRUPTED", True)


def test_trigger_reports_a_supervisor_killed_mid_job(tmp_path: Path) -> None:
    _, watch, record = _launch(tmp_path, [{"do": "hang"}])
    os.kill(watch["pid"], signal.SIGKILL)
    trigger = TrainingJobTrigger(job_id="detached", state_dir=str(tmp_path / "state"), watch=watch,
                                 poll_interval=0.1)

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(asyncio.wait_for(first_event(), 30))
    assert (event["kind"], event["state"]) == ("runner_ended", {"state": "EXITED"})
    # The supervisor's guardian took its ranks down with it.
    assert _wait_gone([s["pid"] for s in starts(record)]) == []


# -- example DAGs ----------------------------------------------------------------------------------


def test_example_dags_import_without_errors() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"trainguard_sync_training", "trainguard_async_workers",
                                "trainguard_staged_hang_detection", "trainguard_elastic_training",
                                "trainguard_tensorflow_ps", "trainguard_mpi", "trainguard_horovod_elastic"}


def test_example_sync_training_recovers_a_collective_timeout(state_dir: Path) -> None:
    dags = _load(REPO / "dags" / "train_sync.py", "example_sync")
    run, ti = run_dag(dags.dag, faults="0:1:3:nccl", steps=6, hang_interval=120)
    assert (run.state, ti.try_number) == ("success", 1)
    assert [(r["action"], r["error_code"]) for r in xcom(run)["rounds"]] == [("restart_in_place", "TG-NCCL-TIMEOUT")]


def test_example_async_workers_restart_only_the_failed_instance(state_dir: Path) -> None:
    dags = _load(REPO / "dags" / "train_async.py", "example_async")
    run, ti = run_dag(dags.dag, faults="0:2:4:exit", shard_size=8)
    assert (run.state, ti.try_number) == ("success", 1)
    assert [(r["action"], r["instance"]) for r in xcom(run)["rounds"]] == [("restart_instances", "rank-2")]


def test_example_staged_hang_is_caught_by_the_stage_interval(state_dir: Path,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    dags = _load(REPO / "dags" / "train_staged_hang.py", "example_staged")
    started = time.monotonic()
    run, ti = run_dag(dags.dag, faults="0:1:5:hang", step_interval=2, job_hang_interval=300)
    assert (run.state, ti.try_number) == ("success", 1)
    rounds = xcom(run)["rounds"]
    assert [(r["action"], r["error_source"]) for r in rounds] == [("restart_in_place", "hang")]
    assert "in stage 'train'" in rounds[0]["error_message"]
    # Caught by the training stage's 2 s, not the job's 300 s.
    assert time.monotonic() - started < 120
    # The script's custom messages reached the task log.
    assert "epoch 1 done at step 6" in capfd.readouterr().out


# -- the plugin and the provider -------------------------------------------------------------------


def test_plugin_and_provider_are_registered_through_entry_points() -> None:
    out = subprocess.run([sys.executable, "-m", "airflow", "plugins", "--output", "json"], capture_output=True,
                         text=True, check=True).stdout
    plugin = next(p for p in json.loads(out[out.index("["):]) if p["name"] == "trainguard")
    assert "trainguard.airflow.plugin" in json.dumps(plugin) and "/trainguard" in json.dumps(plugin)

    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["trainguard"]
    assert info.data["notifications"] == ["trainguard.airflow.notifiers.TrainguardNotifier"]
    assert "state_dir" in info.data["config"]["trainguard"]["options"]


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run history with rounds of several kinds: an in-place restart, then a node fault that
    isolates node-0 and moves the job, then success; plus a job whose command holds markup."""
    from trainguard.engine import supervise

    root = tmp_path_factory.mktemp("history")
    plan = [{"round": 0, "rank": 1, "do": "fail", "code": 6, "say": NCCL},
            {"round": 1, "rank": 0, "do": "fail", "code": 1,
             "say": "RuntimeError: CUDA error: uncorrectable ECC error encountered"}]
    spec = JobSpec(job_id="timeline", command=(sys.executable, str(RANK_SCRIPT)), nproc=2, nodes=3,
                   slots_per_node=1, cwd=str(root),
                   env={"TG_PLAN": json.dumps(plan), "TG_RECORD": str(root / "starts"), "TG_WORK": "0.2"})
    supervise(spec, build_policy({"enable_job_restart": True, "stop_grace_period": 2}), state_dir=root / "state")
    markup = JobSpec(job_id="markup", command=("<script>alert(1)</script>",), nproc=1, cwd=str(root))
    supervise(markup, build_policy({}), state_dir=root / "state")
    return root / "state"


def test_pages_need_an_airflow_login_and_show_the_jobs(history: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.api_fastapi.app import create_app, get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from fastapi.testclient import TestClient

    monkeypatch.setenv("TRAINGUARD_STATE_DIR", str(history))
    client = TestClient(create_app("all"))
    assert client.get("/trainguard/").status_code == 401
    assert client.get("/trainguard/", headers={"Authorization": "Bearer forged"}).status_code == 403
    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="viewer", role="viewer"))
    client.cookies.set("_token", token)  # as the Airflow UI's session does

    listing = client.get("/trainguard/")
    assert listing.status_code == 200
    assert 'href="/trainguard/jobs/timeline"' in listing.text and 'href="/trainguard/jobs/markup"' in listing.text
    assert "<script>alert(1)</script>" not in listing.text and "&lt;script&gt;" in listing.text

    page = client.get("/trainguard/jobs/timeline").text
    assert "restart_in_place" in page and "TG-NCCL-TIMEOUT" in page and "reschedule_isolated" in page
    assert page.count("<title>restart:") == 2  # one restart bar per round
    assert "goodput: ETTR" in page, "the page shows what the faults cost"
    history = client.get("/trainguard/jobs/timeline.json").json()
    assert history["rounds"][1]["isolated_nodes"] == ["node-0"] and 0 <= history["goodput"]["ettr"] <= 1
    assert client.get("/trainguard/jobs/nothing").status_code == 404
    moved = client.get("/trainguard/task", params={"dag_id": "d", "run_id": "manual__2026-01-01T00:00:00+00:00",
                                                   "task_id": "t"}, follow_redirects=False)
    assert moved.headers["location"] == "/trainguard/jobs/d.t.manual__2026-01-01T00-00-00-00-00"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_timeline_screenshot_in_headless_chromium(history: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Chromium (Debian's, headless) draws the job page; the screenshot must show every stage's
    colour, a mark per round and the status badge: the page is drawn, not only served."""
    import uvicorn

    from trainguard.airflow.plugin import create_app

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test: chromium is not installed")
        pytest.skip("chromium is not installed")
    monkeypatch.setenv("TRAINGUARD_STATE_DIR", str(history))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(authenticate=False), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        shot = tmp_path / "timeline.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--force-device-scale-factor=1", "--window-size=1200,900", f"--screenshot={shot}",
                        f"http://127.0.0.1:{port}/jobs/timeline"], check=True, capture_output=True, timeout=120)
    finally:
        server.should_exit = True
        thread.join(10)
    if os.environ.get("TRAINGUARD_SCREENSHOT"):
        shutil.copy(shot, os.environ["TRAINGUARD_SCREENSHOT"])
    counts = colour_counts(shot)
    for stage, colour in STAGE_COLOURS.items():
        assert counts[colour] >= 20, f"no {stage} bar in the screenshot"
    for action in ("restart_in_place", "reschedule_isolated"):
        assert counts[ACTION_COLOURS[action]] >= 20, f"no mark for the {action} round"
    assert counts[STATUS_COLOURS["succeeded"]] >= 50
    # Mostly white page, but not blank.
    assert counts["#ffffff"] < 0.97 * sum(counts.values())
