"""Shared fixtures: run a real job through the engine and read back what happened."""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainguard.engine import supervise
from trainguard.hooks import PluginHost
from trainguard.model import JobSpec, JobStatus
from trainguard.policy import build_policy
from trainguard.store import RunStore

RANK_SCRIPT = Path(__file__).parent / "helpers" / "rank.py"
REPO = Path(__file__).resolve().parents[1]

# Airflow reads its configuration once, when first imported: give it a private home (SQLite
# database, no example DAGs) before any test module imports it, so no test touches a real
# installation. Its DAGs folder links the example DAGs and the tests' scenario DAGs, because
# ``dag.test()`` runs only DAGs it finds serialized from the DAGs folder.
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="tg-airflow-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, True)
(AIRFLOW_HOME / "dags").mkdir()
(AIRFLOW_HOME / "dags" / "examples").symlink_to(REPO / "dags")
(AIRFLOW_HOME / "dags" / "scenarios").symlink_to(REPO / "tests" / "airflow_dags")
os.environ.update({
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": str(AIRFLOW_HOME / "dags"),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
})


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated Airflow metadata database in the private home; skips (fails in CI) without Airflow."""
    try:
        import airflow  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Airflow tests: {exc}")
        pytest.skip(f"Airflow is not installed: {exc}")
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, timeout=300)
    return AIRFLOW_HOME


@dataclass
class JobRun:
    status: JobStatus
    report: dict[str, Any]
    starts: list[dict[str, Any]]
    state_dir: Path
    job_id: str

    @property
    def actions(self) -> list[str]:
        return [r["action"] for r in self.report["rounds"]]

    def starts_of(self, rank: int) -> list[dict[str, Any]]:
        return [s for s in self.starts if s["RANK"] == str(rank)]

    def events(self) -> list[dict[str, Any]]:
        with RunStore(self.state_dir) as store:
            return list(store.events(self.job_id))


@pytest.fixture
def run_job(tmp_path: Path):
    """Supervise ``tests/helpers/rank.py`` with a plan and policy; returns a :class:`JobRun`."""
    counter = iter(range(1000))

    def run(plan: list[dict[str, Any]] | None = None, *, nproc: int = 2, nodes: int = 1, slots: int = 0,
            work: float = 0.3, host: PluginHost | None = None, job_id: str | None = None,
            events_file: Path | None = None, **policy: Any) -> JobRun:
        job_id = job_id or f"job-{next(counter)}"
        record = tmp_path / f"{job_id}.starts.jsonl"
        spec = JobSpec(job_id=job_id, command=(sys.executable, str(RANK_SCRIPT)), nproc=nproc, nodes=nodes,
                       slots_per_node=slots, cwd=str(tmp_path),
                       env={"TG_PLAN": json.dumps(plan or []), "TG_RECORD": str(record), "TG_WORK": str(work)})
        settings = {"stop_grace_period": 2, **policy}
        status = supervise(spec, build_policy(settings), state_dir=tmp_path / "state", host=host,
                           events_file=events_file)
        store = RunStore(tmp_path / "state")
        try:
            report = store.report(job_id)
        finally:
            store.close()
        starts = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
        return JobRun(status, report, starts, tmp_path / "state", job_id)

    return run


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False
