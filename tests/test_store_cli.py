"""The store from the command line: one owner per job (exit 3), job ids that are never paths,
a corrupted history, ``--state-url`` and ``trainguard nodes``; each error one line, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pg_server import pg_server  # noqa: F401  (fixture)
from trainguard.model import Action, ErrorSource, JobStatus, RoundRecord, RoundResult
from trainguard.store import RunStore


def _cli(tmp_path, *args: str, wait: bool = True):
    command = [sys.executable, "-m", "trainguard", "--log-level", "WARNING", *args]
    env = {**os.environ, "TRAINGUARD_STATE_DIR": str(tmp_path / "state")}
    env.pop("TRAINGUARD_STATE_URL", None)
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                env=env)
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)


def _one_line_error(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


@pytest.mark.parametrize("job_id,expected", [
    ("a" * 300, "is longer than 128 characters"),
    ("../../x", "'../../x' must be"),
    ("/abs", "'/abs' must be"),
    ("..", "'..' must be"),
])
def test_a_job_id_that_is_a_path_or_too_long_is_refused(tmp_path, job_id, expected):
    err = _one_line_error(_cli(tmp_path, "run", "--job-id", job_id, "--", "true"))
    assert "--job-id" in err and expected in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing is written anywhere"


def test_a_corrupted_history_is_one_clear_line(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / RunStore.FILENAME).write_bytes(b"\x00garbage" * 1000)
    err = _one_line_error(_cli(tmp_path, "history", "j", "--json"))
    assert "cannot open run history" in err and "file is not a database" in err


def test_a_second_supervisor_for_a_live_job_exits_3_naming_the_owner(tmp_path):
    first = _cli(tmp_path, "run", "--job-id", "twice", "--", sys.executable, "-c", "import time; time.sleep(30)",
                 wait=False)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "state" / "locks" / "twice.lock").exists() or \
                not (tmp_path / "state" / "locks" / "twice.lock").read_text():
            assert time.monotonic() < deadline and first.poll() is None, first.communicate()
            time.sleep(0.1)
        err = _one_line_error(_cli(tmp_path, "run", "--job-id", "twice", "--", "true"), code=3)
        assert f"pid {first.pid}" in err and "--takeover" in err
    finally:
        first.kill()
        first.communicate()
    # Killed -9: its lease died with it, so the next supervisor takes the job over.
    done = _cli(tmp_path, "run", "--job-id", "twice", "--", "true")
    assert done.returncode == 0, done.stderr
    assert "took the job over from a supervisor that died" in done.stderr


def test_the_run_parser_takes_takeover_and_state_url(tmp_path):
    from trainguard.cli import build_parser

    args = build_parser().parse_args(["run", "--takeover", "--state-url", "postgresql://db/tg", "--job-id", "x"])
    assert args.takeover and args.state_url == "postgresql://db/tg"
    err = _one_line_error(_cli(tmp_path, "history", "--state-url", "mysql://db/x"))
    assert "--state-url" in err and "not a postgresql:// URL" in err


def _isolate(store: RunStore, job_id: str, node: str) -> None:
    store.begin_job(job_id, {}, {"isolate_window": 3600})
    store.save_round(RoundRecord(job_id, 1, "node fault", "TG-XID", "m", ErrorSource.LOG,
                                 Action.RESCHEDULE_ISOLATED, time.time(), result=RoundResult.RECOVERED,
                                 isolated=(node,)))
    store.finish_job(job_id, JobStatus.SUCCEEDED)


def test_nodes_lists_and_releases_isolated_nodes(tmp_path):
    with RunStore(tmp_path / "state") as store:
        _isolate(store, "a", "node-9")
    done = _cli(tmp_path, "nodes", "--json")
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)
    assert entry["node"] == "node-9" and entry["job_id"] == "a" and entry["active"]
    assert "node-9" in _cli(tmp_path, "nodes").stdout
    done = _cli(tmp_path, "nodes", "release", "node-9")
    assert done.returncode == 0 and "1 isolation(s) ended" in done.stdout
    assert json.loads(_cli(tmp_path, "nodes", "--json").stdout) == []
    assert json.loads(_cli(tmp_path, "nodes", "--json", "--all").stdout)[0]["released_at"]
    _one_line_error(_cli(tmp_path, "nodes", "release"))


def test_history_and_nodes_read_a_postgresql_store(tmp_path, pg_server):
    url = pg_server.new_database()
    with RunStore(tmp_path / "elsewhere", url=url) as store:
        _isolate(store, "shared", "node-4")
    done = _cli(tmp_path, "history", "shared", "--json", "--state-url", url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "succeeded" and report["rounds"][0]["isolated_nodes"] == ["node-4"]
    done = _cli(tmp_path, "nodes", "--json", "--state-url", url)
    assert [e["node"] for e in json.loads(done.stdout)] == ["node-4"]
