"""Warm standbys: a spare is the rank's next start minus the fault (see trainguard/adapters/standby_pool.py)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.adapters import Launch
from trainguard.adapters import headroom
from trainguard.adapters.preload import Learner, install_hook, learning_env
from trainguard.adapters.standby_pool import (
    PER_START_VARS,
    PythonEntry,
    env_differences,
    next_round_env,
    python_entry,
)
from trainguard.engine import supervise
from trainguard.model import Instance, JobSpec, JobStatus
from trainguard.errors import PolicyError
from trainguard.policy import build_policy

WARM_RANK = Path(__file__).parent / "helpers" / "warm_rank.py"


@pytest.fixture(autouse=True)
def spares_at_once(monkeypatch):
    """These tests restart ranks within seconds; spares need not wait for cold ranks to settle
    (that wait is tested on its own below)."""
    monkeypatch.setenv("TRAINGUARD_SPARE_DELAY", "0")

# Reads the rank's variables at import time, and prints while stdout is still buffered.
SITE_MODULE = '''import os
SEEN = {name: os.environ.get(name) for name in
        ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TRAINGUARD_RESTART_ROUND",
         "MASTER_PORT")}
print("warm_site_mod imported, LOCAL_RANK", SEEN["LOCAL_RANK"])
'''
THREADING_MODULE = '''import threading, time
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
'''


def run_warm_job(root: Path, *, warm: str, command_flags: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 watch: str = "warm_site_mod") -> tuple[JobStatus, list[dict], Path]:
    """Supervise tests/helpers/warm_rank.py (rank 1 fails once in round 0) under ``root``."""
    root.mkdir(parents=True)
    site = root.parent / "site"
    site.mkdir(exist_ok=True)
    (site / "warm_site_mod.py").write_text(SITE_MODULE)
    (site / "warm_threading_mod.py").write_text(THREADING_MODULE)
    record = root / "starts.jsonl"
    work = root.parent / "work"
    work.mkdir(exist_ok=True)
    spec = JobSpec(job_id="warm-job", command=(sys.executable, *command_flags, str(WARM_RANK)), nproc=2,
                   cwd=str(work), env={"PYTHONPATH": str(site), "TG_RECORD": str(record), "TG_WATCH": watch,
                                       "CUDA_VISIBLE_DEVICES": "", **(env or {})})
    policy = build_policy({"stop_grace_period": 2, "enable_job_restart": True, "warm_standby": warm})
    status = supervise(spec, policy, state_dir=root / "state")
    starts = [json.loads(line) for line in record.read_text().splitlines()]
    return status, starts, root / "state"


def comparable(start: dict, root: Path) -> dict:
    """A start's record with what differs between two runs by construction taken out: the
    state directory, the random rendezvous port and process-tag token, and whether it was warm."""
    text = json.dumps({k: v for k, v in start.items() if k not in ("preloaded", "cmdline")}, sort_keys=True)
    out = json.loads(text.replace(str(root), "ROOT"))
    out["env"].pop("MASTER_PORT")
    for seen in out["seen_at_import"].values():
        seen.pop("MASTER_PORT", None)
    out["env"]["TRAINGUARD_PROCESS_TAG"] = out["env"]["TRAINGUARD_PROCESS_TAG"].split(":")[1]
    return out


def log_of(state: Path, rnd: int, rank: int) -> str:
    return (state / "jobs" / "warm-job" / "logs" / f"round-{rnd}" / f"rank-{rank}.log").read_text()


@pytest.mark.parametrize("flags, env", [((), {}), (("-u",), {}), ((), {"PYTHONUNBUFFERED": ""})],
                         ids=["PYTHONUNBUFFERED=1", "python -u", "buffered"])
def test_cold_and_warm_ranks_see_the_same_start(tmp_path, flags, env):
    cold_status, cold, cold_state = run_warm_job(tmp_path / "cold", warm="false", command_flags=flags, env=env)
    warm_status, warm, warm_state = run_warm_job(tmp_path / "warm", warm="true", command_flags=flags, env=env)
    assert cold_status is warm_status is JobStatus.SUCCEEDED

    def start(starts, rnd):
        return next(s for s in starts if s["rank"] == 1 and s["round"] == rnd)

    cold_1, warm_1 = start(cold, 1), start(warm, 1)
    assert warm_1["cmdline"][-1].endswith("standby.py") and not cold_1["cmdline"][-1].endswith("standby.py")
    assert warm_1["preloaded"] == ["warm_site_mod"] and cold_1["preloaded"] == [], "learned from round 0"
    assert comparable(warm_1, tmp_path / "warm") == comparable(cold_1, tmp_path / "cold")
    # The learning hook of the first start leaves no trace the script can see.
    assert comparable(start(warm, 0), tmp_path / "warm") == comparable(start(cold, 0), tmp_path / "cold")
    # Preloaded with the rank's environment already set, the rendezvous port reserved ahead included.
    seen = dict(warm_1["seen_at_import"]["warm_site_mod"])
    assert seen.pop("MASTER_PORT") == warm_1["env"]["MASTER_PORT"]
    assert seen == {
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
        "TRAINGUARD_RESTART_ROUND": "1"}
    # Same output, in the same order (which shows the buffering), import-time output included.
    assert log_of(warm_state, 1, 1) == log_of(cold_state, 1, 1)
    assert "warm_site_mod imported, LOCAL_RANK 1" in log_of(warm_state, 1, 1)


def test_every_spare_has_files_of_its_own(tmp_path):
    """The spare that just became a rank copies its import-time output from its own file while
    the next spare of the same rank is being started: a file they shared would be truncated
    under it (the import-time output then missing from the log under ``python -u``)."""
    from trainguard.adapters.standby_pool import StandbyPool

    pids: list[int] = []
    pool = StandbyPool(job_id="job", mode="true", preload=(), log_dir=tmp_path, register=pids.append,
                       unregister=lambda pid: None, kill=lambda pid: os.killpg(pid, 9),
                       per_start_env=lambda rank, rnd: {}, spare_tag=("TRAINGUARD_PROCESS_TAG", "t:x"))
    command = (sys.executable, str(WARM_RANK))
    launch = Launch(Instance(rank=1, node="node-0", local_rank=1), command, dict(os.environ), str(tmp_path), 0)
    entry = python_entry(command)
    assert entry is not None
    first = pool._spawn(1, launch, entry, launch.env)
    second = pool._spawn(1, launch, entry, launch.env)
    try:
        assert first.out != second.out and first.status != second.status
        assert {first.out.parent, second.out.parent} == {tmp_path / "standby"}
    finally:
        pool._end(first)
        pool._end(second)
    assert not list((tmp_path / "standby").iterdir())


def test_a_module_that_starts_a_thread_is_dropped_and_said(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="trainguard.adapters.standby_pool")
    status, starts, _ = run_warm_job(tmp_path / "run", warm="true", watch="warm_site_mod,warm_threading_mod")
    assert status is JobStatus.SUCCEEDED
    restarted = next(s for s in starts if s["rank"] == 1 and s["round"] == 1)
    assert "warm_threading_mod" not in restarted["preloaded"]
    said = [r.getMessage() for r in caplog.records if "not preloaded any more: warm_threading_mod" in r.getMessage()]
    assert len(said) == 1 and "started a thread" in said[0]


def test_too_little_memory_falls_back_to_cold_starts_and_says_so_once(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(headroom.MEMAVAILABLE_VAR, str(64 << 20))
    caplog.set_level(logging.WARNING, logger="trainguard.adapters.standby_pool")
    status, starts, state = run_warm_job(tmp_path / "run", warm="auto")
    assert status is JobStatus.SUCCEEDED
    assert not any(s["cmdline"][-1].endswith("standby.py") for s in starts), "every start is cold"
    assert not list((state / "jobs" / "warm-job" / "logs" / "standby").glob("*.status")), "no spare was started"
    said = [r for r in caplog.records if "start cold while memory is short" in r.getMessage()]
    assert len(said) == 1 and "64 MiB available" in said[0].getMessage()


def test_auto_keeps_spares_with_headroom(tmp_path, monkeypatch):
    monkeypatch.setenv(headroom.MEMAVAILABLE_VAR, str(1 << 50))
    status, starts, _ = run_warm_job(tmp_path / "run", warm="auto")
    assert status is JobStatus.SUCCEEDED
    assert next(s for s in starts if s["round"] == 1)["cmdline"][-1].endswith("standby.py")


def test_headroom_judgement(monkeypatch):
    monkeypatch.setenv(headroom.MEMAVAILABLE_VAR, str(10 << 30))
    margin = headroom.margin()
    assert margin >= headroom.MARGIN_MIN
    spare = 300 << 20
    fits = ((10 << 30) - margin) // spare
    assert headroom.judge(fits, spare).ok and not headroom.judge(fits + 1, spare).ok
    assert "need" in headroom.judge(fits + 1, spare).reason
    monkeypatch.setenv(headroom.MEMAVAILABLE_VAR, "lots")
    with pytest.raises(ValueError, match=headroom.MEMAVAILABLE_VAR):
        headroom.available()


def test_warm_standby_setting():
    assert build_policy({}).warm_standby == "auto"
    assert build_policy({"warm_standby": "True"}).warm_standby == "true"  # ``--warm-standby`` with no value
    assert build_policy({"--warm-standby": "off"}).warm_standby == "false"
    with pytest.raises(PolicyError, match="auto, true or false"):
        build_policy({"warm_standby": "sometimes"})


@pytest.mark.parametrize("command, entry", [
    (["python", "train.py", "--lr", "1"], PythonEntry("python", (), ("train.py", "--lr", "1"), False)),
    (["python3.11", "-u", "-m", "pkg.train", "x"], PythonEntry("python3.11", ("-u",), ("pkg.train", "x"), True)),
    (["/usr/bin/python3", "-B", "t.py"], PythonEntry("/usr/bin/python3", ("-B",), ("t.py",), False)),
    (["python", "-c", "print(1)"], None),
    (["python", "-X", "importtime", "t.py"], None),
    (["bash", "run.sh"], None),
    (["python"], None),
])
def test_which_commands_a_spare_can_run(command, entry):
    assert python_entry(command) == entry


def test_the_next_round_is_predicted_and_only_per_start_variables_may_differ():
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "1234", "TRAINGUARD_RESTART_ROUND": "0",
           "TORCHELASTIC_RESTART_COUNT": "0", "TRAINGUARD_PROC_START_COUNT": "1", "TRAINGUARD_SCHEDULE_COUNT": "1"}
    nxt = next_round_env(env, port=4321)
    assert nxt["TRAINGUARD_RESTART_ROUND"] == nxt["TORCHELASTIC_RESTART_COUNT"] == "1"
    assert nxt["TRAINGUARD_PROC_START_COUNT"] == "2" and nxt["MASTER_PORT"] == "4321"
    assert env_differences(nxt, {**env, "TRAINGUARD_SCHEDULE_COUNT": "2"}) == []
    assert env_differences(nxt, {**env, "LOCAL_RANK": "0", "WORLD_SIZE": "3"}) == ["LOCAL_RANK", "WORLD_SIZE"]
    assert env_differences(nxt, {**env, "NEW_VAR": "x"}) == ["NEW_VAR"]
    assert {"MASTER_PORT", "TRAINGUARD_RESTART_ROUND", "TRAINGUARD_PROCESS_TAG"} <= PER_START_VARS
    assert not {"RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"} & PER_START_VARS


def test_a_changed_placement_means_a_cold_start(tmp_path):
    from trainguard.adapters.local import LocalAdapter

    spec = JobSpec(job_id="j", command=(sys.executable, str(WARM_RANK)), nproc=1, cwd=str(tmp_path))
    adapter = LocalAdapter(spec=spec, log_dir=tmp_path / "logs", policy=build_policy({"warm_standby": "true"}))
    try:
        pool = adapter._standbys
        assert pool is not None
        env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "TRAINGUARD_RESTART_ROUND": "0", "MASTER_PORT": "1",
               "TG_RECORD": str(tmp_path / "r"), "TRAINGUARD_NODE": "node-0"}
        first = Launch(Instance(rank=0, node="node-0", local_rank=0), spec.command, env, spec.cwd, 0)
        pool.started([first], {0: os.getpid()}, frozenset())
        assert 0 in pool._spares
        moved = Launch(Instance(rank=0, node="node-1", local_rank=0), spec.command, {**env, "TRAINGUARD_NODE": "node-1"},
                       spec.cwd, 1)
        assert pool.take(moved, tmp_path / "rank-0.log") is None
        assert pool.notes() == ("rank 0 started cold: its spare was unusable (prepared with other TRAINGUARD_NODE)",)
        assert 0 not in pool._spares
    finally:
        adapter.close()


def test_learning_stops_at_the_first_step(tmp_path):
    path = tmp_path / "imports"
    path.write_text("100.0 numpy\n100.5 numpy.linalg\n101.0 late_module\n102.0 partial")
    learner = Learner(path, seconds=60)
    learner.stop_at(100.5)
    assert learner.read() == ["numpy", "numpy.linalg"] and learner.done


def test_the_learning_hook_removes_itself(tmp_path):
    hook = install_hook(tmp_path / "hook")
    (tmp_path / "pkg_site").mkdir()
    (tmp_path / "pkg_site" / "warm_learn_me.py").write_text("import json\n")
    (tmp_path / "pkg_site" / "warm_broken.py").write_text("import os\nraise ImportError('needs h2')\n")
    script = tmp_path / "script.py"
    script.write_text("try:\n    import warm_broken\nexcept ImportError:\n    pass\n"
                      "import os, sys, json, warm_learn_me\n"
                      "print(json.dumps([sys.path, os.environ.get('PYTHONPATH'), sorted(k for k in os.environ "
                      "if k.startswith('TRAINGUARD_PRELOAD'))]))\n")
    base = {**os.environ, "PYTHONPATH": str(tmp_path / "pkg_site")}
    plain = subprocess.run([sys.executable, str(script)], env=base, capture_output=True, text=True, check=True)
    out = tmp_path / "names"
    learning = learning_env(base, hook, out, 30.0)
    hooked = subprocess.run([sys.executable, str(script)], env=learning, capture_output=True, text=True, check=True)
    assert json.loads(hooked.stdout) == json.loads(plain.stdout)
    names = [line.split(" ", 1)[1] for line in out.read_text().splitlines()]
    assert names == ["warm_learn_me"], "third-party names only, not the stdlib, not a failed import"


def test_the_round_says_whether_its_restart_used_spares(run_job):
    """Through the engine, with no warm-standby flag: the round's notes (``history --json``) say
    which ranks ran in spares; with ``--warm-standby=false`` they started cold and say nothing."""
    nccl = "NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error, NCCL version 2.21.5"
    plan = [{"round": 0, "rank": 1, "do": "fail", "say": nccl, "after": 3.0}]
    warm = run_job(plan, enable_job_restart=True)
    (record,) = warm.report["rounds"]
    assert record["result"] == "recovered"
    assert any(note.startswith("warm start: rank(s) [0, 1] ran in spares") for note in record["notes"]), record
    cold = run_job(plan, enable_job_restart=True, warm_standby="false")
    assert cold.report["rounds"][0]["notes"] == []


def test_spares_wait_for_cold_ranks_to_settle(run_job, monkeypatch):
    """Spares started beside ranks that import cold would take their CPU: while the ranks of a
    cold start have reported no SDK step, spares wait ``TRAINGUARD_SPARE_DELAY`` seconds."""
    monkeypatch.setenv("TRAINGUARD_SPARE_DELAY", "60")
    nccl = "NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system error, NCCL version 2.21.5"
    run = run_job([{"round": 0, "rank": 1, "do": "fail", "say": nccl, "after": 3.0}], enable_job_restart=True)
    (record,) = run.report["rounds"]
    assert record["notes"][0] == "cold start: rank(s) [0, 1]", record
