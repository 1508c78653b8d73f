"""The command line as users and scripts call it: contracts, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RANK_SCRIPT

TG = [sys.executable, "-m", "trainguard"]


def tg(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*TG, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.mark.parametrize("args,message", [
    (["run", "--job-execution-mode=parallel", "--", "true"], "--job-execution-mode: 'parallel' is not one of Sync, Async"),
    (["run", "--job-hang-interval", "-5", "--", "true"], "--job-hang-interval: '-5' must be positive"),
    (["run", "--enable-job-restart=maybe", "--", "true"], "--enable-job-restart: 'maybe' is not True or False"),
    (["run", "--nproc", "0", "--", "true"], "must be at least 1"),
    (["run", "--nproc", "4", "--nodes", "1", "--slots-per-node", "2", "--", "true"], "cannot hold 4 rank(s)"),
    (["run", "--policy", "/nonexistent.yaml", "--", "true"], "--policy: cannot read /nonexistent.yaml"),
    (["run", "--adapter", "nomad", "--", "true"], "nomad: no such adapter (known: kubernetes, local, sim, slurm, volcano)"),
    (["run", "--nproc", "2"], "run needs a command after --"),
    (["run", "--env", "NOEQUALS", "--", "true"], "--env: 'NOEQUALS' is not KEY=VALUE"),
    (["run", "--events-file", "/proc/nope/events.jsonl", "--", "true"],
     "--events-file /proc/nope/events.jsonl: No such file or directory"),
    (["history", "nope"], "no run history in"),
    (["classify", "/nonexistent.log"], "/nonexistent.log: no such file"),
    (["classify", "/"], "/: is a directory"),
    (["classify", "x", "--signal", "SIGNOPE"], "'SIGNOPE' is not a signal"),
    (["frobnicate"], "invalid choice"),
    (["--log-level", "loud", "history"], "argument --log-level: invalid choice: 'LOUD'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    if args[:2] == ["classify", "x"]:
        (tmp_path / "x").write_text("hello\n")
    result = tg(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainguard: error: ") and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == "" and not (tmp_path / ".trainguard").exists()  # no job announced, no store opened


def test_run_history_and_events_contract(tmp_path):
    plan = json.dumps([{"round": 0, "rank": 1, "do": "fail",
                        "say": "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, unhandled system error"}])
    env = {"PATH": "/usr/bin:/bin", "TG_PLAN": plan, "TG_RECORD": str(tmp_path / "starts.jsonl")}
    result = tg("run", "--nproc", "2", "--job-id", "cli-1", "--state-dir", "st", "--events-file", "ev.jsonl",
                "--aimaster-args", "--job-execution-mode=Sync --enable-job-restart=True --max-num-of-job-restart=3",
                "--", sys.executable, str(RANK_SCRIPT), cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert "succeeded" in result.stdout and "restart_in_place" in result.stdout
    report = json.loads(tg("history", "cli-1", "--state-dir", str(tmp_path / "st"), "--json").stdout)
    assert report["job_id"] == "cli-1" and report["status"] == "succeeded"
    (rnd,) = report["rounds"]
    for key in ("round", "reason", "error_code", "error_message", "error_source", "node", "instance", "action",
                "started_at", "result", "stages"):
        assert key in rnd
    assert rnd["error_source"] == "exit_code" and rnd["action"] == "restart_in_place" and rnd["result"] == "recovered"
    assert rnd["started_at"][10] == "T" and rnd["started_at"].endswith("Z") and len(rnd["started_at"]) == 24
    assert all(isinstance(v, float) for v in rnd["stages"].values())
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events][-1] == "job_succeeded"
    listing = tg("history", "--state-dir", str(tmp_path / "st"), "--json")
    assert [j["job_id"] for j in json.loads(listing.stdout)] == ["cli-1"]
    readable = tg("history", "cli-1", "--state-dir", str(tmp_path / "st"))
    assert "restart_in_place" in readable.stdout and "TG-NCCL-ERROR" in readable.stdout


def test_failed_job_exits_1_with_a_failure_object(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "TG_PLAN": json.dumps([{"rank": 0, "do": "fail", "say": "KeyError: 'x'"}]),
           "TG_RECORD": str(tmp_path / "starts.jsonl")}
    result = tg("run", "--nproc", "2", "--job-id", "cli-2", "--state-dir", "st", "--enable-job-restart",
                "--", sys.executable, str(RANK_SCRIPT), cwd=tmp_path, env=env)
    assert result.returncode == 1
    report = json.loads(tg("history", "cli-2", "--state-dir", str(tmp_path / "st"), "--json").stdout)
    assert report["status"] == "failed" and report["rounds"] == []
    assert report["failure"]["action"] == "fail" and report["failure"]["error_code"] == "TG-USER-EXCEPTION"


def test_a_command_that_cannot_start_is_a_recorded_failure(tmp_path):
    result = tg("run", "--job-id", "missing", "--state-dir", "st", "--", "/nonexistent/train", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    report = json.loads(tg("history", "missing", "--state-dir", str(tmp_path / "st"), "--json").stdout)
    assert report["failure"]["error_code"] == "TG-START-FAILED"
    assert "cannot start '/nonexistent/train': No such file or directory" in report["failure"]["reason"]


def test_classify_contract(tmp_path):
    log = tmp_path / "rank.log"
    log.write_text("step 10 loss 1.0\n[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation "
                   "timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds\n")
    verdict = json.loads(tg("classify", str(log), "--exit-code", "6", "--json").stdout)
    assert {k: verdict[k] for k in ("category", "fault_code", "retryable", "node_fault", "user_error")} == {
        "category": "nccl_timeout", "fault_code": "TG-NCCL-TIMEOUT", "retryable": True, "node_fault": False,
        "user_error": False}
    assert "Watchdog caught collective operation timeout" in verdict["evidence"]
    readable = tg("classify", str(log))
    assert "nccl_timeout" in readable.stdout and "evidence:" in readable.stdout
    quiet = tmp_path / "quiet.log"
    quiet.write_text("epoch 1 done\n")
    assert json.loads(tg("classify", str(quiet), "--json").stdout)["category"] == "success_or_benign"
    segv = json.loads(tg("classify", str(quiet), "--signal", "SIGSEGV", "--json").stdout)
    assert segv["category"] == "segfault_or_signal" and segv["fault_code"] == "TG-SIGSEGV"


def test_classify_reads_standard_input_and_keeps_only_its_tail(tmp_path):
    # A pipe (kubectl logs POD | trainguard classify -) is read to its end; only the tail counts,
    # from its first whole line: the OOM early in a long stream is out of a 4 KiB tail.
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    timeout = ("[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds\n")
    stream = oom + "step 10 loss 1.0\n" * 5000 + timeout
    done = subprocess.run([*TG, "classify", "-", "--tail-bytes", "4096", "--json"], input=stream,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["fault_code"] == "TG-NCCL-TIMEOUT"
    whole = subprocess.run([*TG, "classify", "-", "--json"], input=oom, capture_output=True, text=True, timeout=120)
    assert json.loads(whole.stdout)["fault_code"] == "TG-CUDA-OOM"


def test_a_reader_that_closes_the_pipe_early_ends_it_quietly(tmp_path):
    log = tmp_path / "rank.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before a byte is written: the first write raises EPIPE
    with os.fdopen(write, "w") as out:
        done = subprocess.run([*TG, "classify", str(log), "--json"], stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert done.returncode == 141 and done.stderr == ""


def test_console_script_and_module_are_the_same(tmp_path):
    exe = Path(sys.executable).with_name("trainguard")
    assert exe.exists()
    assert subprocess.run([str(exe), "--help"], capture_output=True, text=True).stdout == tg("--help").stdout

