"""In-process recovery: 4 gloo ranks under ``@inprocess.restartable()`` (tests/helpers/inproc_train.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainguard.engine import supervise
from trainguard.errors import PolicyError
from trainguard.model import Action, JobSpec, JobStatus
from trainguard.policy import build_policy
from trainguard.store import RunStore

pytest.importorskip("torch.distributed")

TRAIN = Path(__file__).parent / "helpers" / "inproc_train.py"
RETRYABLE = "transient glitch"


@dataclass
class Run:
    status: JobStatus
    report: dict[str, Any]
    entries: list[dict[str, Any]]

    @property
    def actions(self) -> list[str]:
        return [r["action"] for r in self.report["rounds"]]

    def pids(self, iteration: int) -> dict[int, int]:
        return {e["rank"]: e["pid"] for e in self.entries if e["iteration"] == iteration}


@pytest.fixture
def train(tmp_path: Path):
    def run(fault: dict[str, Any] | None = None, *, wrapped: bool = True, nproc: int = 4,
            env: dict[str, str] | None = None, **policy: Any) -> Run:
        record = tmp_path / "entries.jsonl"
        record.unlink(missing_ok=True)
        spec = JobSpec(job_id="job", command=(sys.executable, str(TRAIN)), nproc=nproc, cwd=str(tmp_path),
                       env={"TG_FAULT": json.dumps(fault or {}), "TG_RECORD": str(record),
                            "TG_WRAPPED": "1" if wrapped else "0", **(env or {})})
        settings = {"stop_grace_period": 2, "enable_job_restart": True, "retryable_errors": [RETRYABLE], **policy}
        status = supervise(spec, build_policy(settings), state_dir=tmp_path / "state")
        with RunStore(tmp_path / "state") as store:
            report = store.report("job")
        entries = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
        return Run(status, report, entries)

    return run


def test_a_raised_retryable_error_reenters_every_rank_in_its_process(train):
    run = train({"rank": 2, "step": 5, "iteration": 0, "do": "raise"})
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_process"]
    assert run.pids(1) == run.pids(0) and sorted(run.pids(1)) == [0, 1, 2, 3], "same processes re-entered"
    assert all(e["loads"] == 1 for e in run.entries), "state loaded once per process"
    assert {e["env_iteration"] for e in run.entries if e["iteration"] == 1} == {"1"}
    (round_,) = run.report["rounds"]
    assert round_["instance"] == "rank-2" and round_["error_source"] == "sdk"
    assert "RuntimeError: transient glitch" in round_["error_message"], "the origin's error, not a follow-on"
    assert {"abort", "reenter", "barrier"} <= set(round_["stages"]) and round_["result"] == "recovered"
    assert "failure" not in run.report


def test_a_user_error_fails_the_job_at_once_without_reentry(train):
    run = train({"rank": 2, "step": 5, "iteration": 0, "do": "keyerror"})
    assert run.status is JobStatus.FAILED
    assert run.actions == [] and run.pids(1) == {}
    failure = run.report["failure"]
    assert failure["error_code"] == "TG-USER-EXCEPTION" and "KeyError" in failure["error_message"]
    assert failure["instance"] == "rank-2"


def test_a_killed_rank_starts_anew_while_its_peers_reenter(train):
    run = train({"rank": 1, "step": 5, "iteration": 0, "do": "kill"}, fault_tolerant_policy="OnFailure")
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["recover_in_process"]
    before, after = run.pids(0), run.pids(1)
    assert sorted(after) == [0, 1, 2, 3]
    assert after[1] != before[1], "rank 1 is a new process"
    assert {r: after[r] for r in (0, 2, 3)} == {r: before[r] for r in (0, 2, 3)}, "the others kept theirs"
    replacement = next(e for e in run.entries if e["rank"] == 1 and e["iteration"] == 1)
    assert replacement["env_iteration"] == "1" and replacement["fault"] is None
    (round_,) = run.report["rounds"]
    assert round_["error_source"] == "exit_code" and round_["instance"] == "rank-1"


def test_the_same_error_every_iteration_stops_reentering_at_the_budget(train):
    run = train({"rank": 2, "step": 3, "do": "raise"}, max_num_of_same_error=2)
    assert run.status is JobStatus.FAILED
    # The first occurrence re-enters; the N-th takes the ladder's own rung (a cold restart);
    # beyond N the ladder fails: never an endless loop.
    assert run.actions == ["restart_in_process", "restart_job"]
    assert "--max-num-of-same-error=2" in run.report["failure"]["reason"]


def test_a_script_without_the_wrapper_recovers_as_before(train, tmp_path):
    run = train({"rank": 2, "step": 5, "round": 0, "do": "raise"}, wrapped=False)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place"]
    assert not any(tmp_path.glob("state/jobs/job/sdk/inprocess-store.json")), "no store keeper"
    assert len({e["pid"] for e in run.entries if e["rank"] == 0}) == 2, "a new process, iteration 0 again"
    assert {e["iteration"] for e in run.entries} == {0}


def test_a_silent_rank_inside_a_step_makes_every_rank_reenter(train):
    run = train({"rank": 3, "step": 5, "iteration": 0, "do": "hang"}, enable_job_hang_detection=True,
                job_hang_interval=8, enable_stack_snapshots=False)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions[-1] == "restart_in_process"
    assert run.report["rounds"][-1]["error_source"] == "hang"
    assert run.pids(1) == run.pids(0) and len(run.pids(1)) == 4


def test_a_rank_blocked_where_no_interrupt_reaches_is_replaced_once_it_says_so(train):
    """A rank blocked in C code (DDP's backward waiting on a gloo allreduce whose peers are gone
    waits out gloo's own timeout) cannot be interrupted: its monitor says so after
    ``stuck_after`` (2 s) and the supervisor replaces it then, not after the barrier timeout."""
    run = train({"rank": 2, "step": 5, "iteration": 0, "do": "raise"}, env={"TG_BLOCK": '{"rank": 1, "step": 5}'},
                inprocess_barrier_timeout=30)
    assert run.status is JobStatus.SUCCEEDED
    (rnd,) = run.report["rounds"]
    assert rnd["action"] == "recover_in_process", (rnd["stages"], rnd["notes"])
    assert any("rank(s) [1] were blocked" in note and "they said so" in note for note in rnd["notes"]), rnd["notes"]
    assert 2 <= rnd["stages"]["abort"] < 10, rnd["stages"]
    assert sorted(e["rank"] for e in run.entries if e["iteration"] == 1) == [0, 1, 2, 3]
    before, after = run.pids(0), run.pids(1)
    assert after[1] != before[1] and all(after[r] == before[r] for r in (0, 2, 3)), (before, after)


def test_recover_strategy_without_in_process_rungs_restarts_cold(train):
    run = train({"rank": 1, "step": 5, "round": 0, "do": "raise"}, recover_strategy="exit", nproc=2)
    assert run.status is JobStatus.SUCCEEDED
    assert run.actions == ["restart_in_place"], "retry not allowed: the ladder's cold rung"


def test_recover_strategy_parses_seed_003s_list():
    assert build_policy({"recover_strategy": "retry, recover-in-place"}).recover_strategy == (
        "retry", "recover-in-place")
    assert build_policy({}).recover_strategy[:3] == ("retry", "recover", "recover-in-place")
    assert build_policy({"inprocess_barrier_timeout": "5"}).inprocess_barrier_timeout == 5.0
    with pytest.raises(PolicyError, match="recover-strategy"):
        build_policy({"recover_strategy": "retry,teleport"})
    with pytest.raises(PolicyError):
        build_policy({"inprocess_barrier_timeout": 0})
    assert not Action.RESTART_IN_PROCESS.whole_job and not Action.RECOVER_IN_PROCESS.replaces


def test_the_wrapper_restarts_without_a_supervisor(tmp_path):
    record = tmp_path / "entries.jsonl"
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(TRAIN)], env={
        **os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
        "TG_RECORD": str(record), "TG_FAULT": json.dumps({"rank": 1, "step": 2, "iteration": 0, "do": "raise"}),
        "TG_STEPS": "4"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for rank in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert sorted((e["rank"], e["iteration"]) for e in entries) == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.fixture
def standalone(monkeypatch):
    """This process as rank 0 of 1 without trainguard (it hosts the base store); the wrapper's
    gc.freeze() is undone afterwards."""
    import gc

    from trainguard import inprocess

    for name in ("TRAINGUARD_SDK_CHANNEL", inprocess.ITERATION_VAR, inprocess.STORE_VAR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    yield inprocess
    gc.unfreeze()


def test_no_monitor_thread_outlives_the_call(standalone):
    """A monitor thread left inside a store call when the interpreter finalizes is unwound
    through a noexcept frame: the rank aborts (SIGABRT) after its work is done. Every exit of
    the wrapper — a return, an exception that is not retried — must have joined it."""
    import threading

    inprocess = standalone

    def monitors() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "trainguard-inprocess-monitor" and t.is_alive()]

    calls: list[int] = []

    @inprocess.restartable(max_iterations=1, retry_on=(ValueError,))
    def flaky(attempt: inprocess.Attempt) -> int:
        calls.append(attempt.iteration)
        assert monitors(), "the iteration runs under a monitor"
        if attempt.iteration == 0:
            raise ValueError("once")
        return attempt.iteration

    assert flaky() == 1 and calls == [0, 1]
    assert not monitors()

    @inprocess.restartable(max_iterations=3, retry_on=(ValueError,))
    def broken(attempt: inprocess.Attempt) -> None:
        raise KeyError("not retried")

    with pytest.raises(inprocess.GaveUp):
        broken()
    assert not monitors()


def test_a_cycle_an_iteration_made_is_collected_when_it_ends(standalone):
    """What holds the process group may sit in a reference cycle (a DDP module and its hooks) in
    the oldest generation; ending the iteration must collect it, frozen imports or not."""
    import gc
    import weakref

    inprocess = standalone

    class Holder:
        me: object

    made: list[weakref.ref[Holder]] = []

    @inprocess.restartable(max_iterations=1, retry_on=(ValueError,))
    def train(attempt: inprocess.Attempt) -> bool:
        if attempt.iteration == 0:
            holder = Holder()
            holder.me = holder
            made.append(weakref.ref(holder))
            gc.collect()  # survives into the oldest generation, as a model built at start does
            raise ValueError("once")
        return made[0]() is None

    assert train() is True
    assert gc.get_freeze_count() > 0, "what existed before the first iteration is frozen"


def test_importing_the_wrapper_is_light():
    code = ("import sys, trainguard.inprocess; "
            "print(sorted(m for m in sys.modules if m.startswith(('torch', 'trainguard.engine'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
