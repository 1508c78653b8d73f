"""Goodput per job: a real 2-rank job's ``history --json`` carries it, ``/metrics`` serves it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import urllib.request

from trainguard.goodput import describe, goodput
from trainguard.metrics import serve_metrics

RANK = textwrap.dedent("""
    import os, sys, time, urllib.request
    from pathlib import Path
    from trainguard.sdk import Monitor

    monitor = Monitor()
    rank, round_no = int(os.environ["RANK"]), int(os.environ["TRAINGUARD_RESTART_ROUND"])
    ckpt = Path(sys.argv[1])
    start = int(ckpt.read_text()) + 1 if ckpt.exists() else 0
    for step in range(start, 8):
        time.sleep(0.15)
        monitor.report_step(step)
        if step == 3 and rank == 0:
            ckpt.write_text(str(step))
            monitor.report_checkpoint(step, str(ckpt))
        if round_no == 0 and step == 5 and rank == 1:
            print("NCCL WARN NET/IB : Got completion from peer 10.0.3.17<52311> with error 12", flush=True)
            sys.exit(1)
    if round_no == 1 and rank == 0 and len(sys.argv) > 2:
        Path(sys.argv[3]).write_bytes(urllib.request.urlopen(sys.argv[2], timeout=10).read())
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_real_two_rank_job_has_goodput_in_its_history_and_metrics_while_it_runs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(RANK)
    port = _free_port()
    scraped = tmp_path / "metrics.txt"
    state = tmp_path / "state"
    run = subprocess.run(
        [sys.executable, "-m", "trainguard", "run", "--nproc", "2", "--job-id", "goodput-2", "--state-dir",
         str(state), "--enable-job-restart", "true", "--metrics-port", str(port), "--",
         sys.executable, str(script), str(tmp_path / "ckpt"), f"http://127.0.0.1:{port}/metrics", str(scraped)],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    out = subprocess.run([sys.executable, "-m", "trainguard", "history", "goodput-2", "--state-dir", str(state),
                          "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(out.stdout)
    data = report["goodput"]
    assert data["source"] == "sdk_steps" and data["last_step"] == 7 and data["last_checkpoint"] == 3
    assert 0 < data["productive_seconds"] < data["wall_seconds"]
    assert 0 < data["ettr"] < 1
    (round_,) = data["rounds"]
    assert round_["action"] == "restart_in_place" and round_["recovery_seconds"] > 0
    assert round_["lost_work_seconds"] > 0, "steps 4 and 5 after the checkpoint at 3 were lost"
    assert set(data["stages"]) >= {"diagnose", "decide", "stop", "restart"}

    text = scraped.read_text()
    assert 'trainguard_rounds_total{action="restart_in_place",job_id="goodput-2"} 1.0' in text
    assert 'trainguard_faults_total{fault_code="TG-NCCL-ERROR",job_id="goodput-2"} 1.0' in text
    assert 'trainguard_isolated_nodes{job_id="goodput-2"} 0.0' in text
    assert 'trainguard_ettr{job_id="goodput-2"}' in text and 'trainguard_job_running{job_id="goodput-2"} 1.0' in text

    table = subprocess.run([sys.executable, "-m", "trainguard", "history", "goodput-2", "--state-dir", str(state)],
                           capture_output=True, text=True, timeout=60)
    assert "goodput: ETTR" in table.stdout

    server, store = serve_metrics(state, 0, addr="127.0.0.1")
    try:
        after = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        store.close()
    assert f'trainguard_ettr{{job_id="goodput-2"}} {data["ettr"]}' in after
    assert 'trainguard_job_running{job_id="goodput-2"} 0.0' in after


def _event(kind, at, round_no=None, **data):
    return {"type": kind, "at": at, "round": round_no, "data": data}


def test_without_sdk_reports_productive_time_is_run_time_less_recovery():
    report = {"created_at": 1000.0, "rounds": [
        {"round": 1, "action": "restart_job", "error_code": "TG-X", "started_at": 1400.0,
         "stages": {"diagnose": 1.0, "decide": 0.0, "stop": 9.0, "restart": 90.0}}]}
    events = [_event("job_started", 1000.0), _event("fault_detected", 1400.0, progress={}),
              _event("round_started", 1401.0, 1), _event("round_finished", 1500.0, 1),
              _event("job_succeeded", 2000.0)]
    data = goodput(report, events)
    assert data["wall_seconds"] == 1000 and data["recovery_seconds"] == 100
    assert data["productive_seconds"] == 900 and data["ettr"] == 0.9 and data["source"] == "run_time"
    assert data["rounds"][0]["lost_work_seconds"] is None
    assert describe(data).startswith("goodput: ETTR 0.900")


def test_with_checkpoints_the_work_since_the_last_one_is_lost():
    report = {"created_at": 0.0, "rounds": [
        {"round": 1, "action": "restart_in_place", "error_code": "TG-X", "started_at": 700.0,
         "stages": {"stop": 10.0, "restart": 40.0}}]}
    marks = {"step": None, "checkpoint": 5, "checkpoint_at": 500.0, "productive": 0}
    events = [_event("job_started", 0.0), _event("fault_detected", 700.0, progress=marks),
              _event("round_started", 700.0, 1), _event("round_finished", 750.0, 1),
              _event("job_succeeded", 1750.0, progress=marks)]
    data = goodput(report, events)
    assert data["source"] == "checkpoints"
    assert data["lost_work_seconds"] == 200 and data["rounds"][0]["lost_seconds"] == 250
    assert data["productive_seconds"] == 1750 - 50 - 200
