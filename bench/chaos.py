"""Fault injection against ``trainguard run``, from outside, as a user would break it.

Every scenario drives the real CLI in a subprocess with ranks that leave escaping
descendants (a ``setsid`` child and a double-forked grandchild, see
``tests/helpers/chaos_rank.py``) and counts what survives by scanning ``/proc`` for processes
carrying the job's id in their environment:

- ``spawn``: SIGKILL the supervisor at a random moment while it starts 32 ranks;
- ``round``: SIGKILL it at a random moment of a recovery round, then resume the job: no round
  may stay ``in_progress``, nothing not carried out may be charged, the resumed run is a new
  round with new logs;
- ``sigterm``: SIGTERM it mid-round: it must exit 143 within 1 s plus the stop grace, and a
  rank writing its checkpoint on SIGTERM must finish writing it;
- ``owners``: two supervisors on one job id: exactly one runs ranks; ``--takeover`` moves it;
- ``idle``: the supervisor's RSS and CPU while 64 ranks run.

``python bench/chaos.py [TRIALS]`` prints the figures; tests/test_chaos.py runs the same
functions with assertions.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RANK = REPO / "tests" / "helpers" / "chaos_rank.py"
GRACE = 1.0


def job_pids(job_id: str) -> list[int]:
    """Every live process whose environment says it belongs to ``job_id``."""
    needle = f"TRAINGUARD_JOB_ID={job_id}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle not in handle.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2:][:1] != b"Z":
            out.append(int(entry))
    return out


def survivors(job_id: str, settle: float = GRACE + 3.0) -> list[int]:
    """What is still running once the guardian had its grace period and a margin."""
    deadline = time.monotonic() + settle
    pids = job_pids(job_id)
    while pids and time.monotonic() < deadline:
        time.sleep(0.1)
        pids = job_pids(job_id)
    for pid in pids:  # leave the machine clean for the next trial, but count them
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


def start(work: Path, job_id: str, nproc: int, do: str = "", *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CHAOS_DO": do, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "trainguard", "--log-level", "WARNING", "run", "--nproc", str(nproc),
         "--state-dir", str(work / "state"), "--job-id", job_id, "--events-file", str(work / f"{job_id}.events"),
         "--stop-grace-period", str(GRACE), "--enable-job-restart", "--tee", "0", *extra,
         "--", sys.executable, str(RANK)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def history(work: Path, job_id: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "trainguard", "history", job_id, "--state-dir", str(work / "state"),
                          "--json"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(out.stdout) if out.returncode == 0 else {}


def wait_event(work: Path, job_id: str, kind: str, timeout: float = 30) -> bool:
    path = work / f"{job_id}.events"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and any(json.loads(line).get("type") == kind
                                 for line in path.read_text().splitlines() if line.strip()):
            return True
        time.sleep(0.01)
    return False


@dataclass
class Trial:
    orphans: int
    detail: str = ""


def kill_during_spawn(work: Path, trial: int, nproc: int = 32) -> Trial:
    job_id = f"spawn-{trial}"
    proc = start(work, job_id, nproc)
    time.sleep(random.uniform(0.05, 0.6))  # somewhere in the start of 32 ranks
    proc.kill()
    proc.wait()
    return Trial(len(survivors(job_id)))


def kill_mid_round(work: Path, trial: int) -> Trial:
    """SIGKILL somewhere in a round, resume, and check what the history says."""
    job_id = f"round-{trial}"
    proc = start(work, job_id, 2, "fail-first", "--env", "CHAOS_DELAY=0.3")
    if not wait_event(work, job_id, "fault_detected"):
        proc.kill()
        return Trial(len(survivors(job_id)), "no fault seen")
    time.sleep(random.uniform(0.0, 0.8))
    proc.kill()
    proc.wait()
    orphans = len(survivors(job_id))
    again = start(work, job_id, 2, "")
    time.sleep(1.5)
    again.send_signal(signal.SIGTERM)
    again.wait(timeout=30)
    orphans += len(survivors(job_id))
    report = history(work, job_id)
    rounds = report.get("rounds", [])
    problems = [f"round {r['round']} left {r['result']}" for r in rounds if r["result"] == "in_progress"]
    problems += [f"round {r['round']} charged though interrupted" for r in rounds
                 if r["result"] == "interrupted" and r.get("consumes_budget")]
    logs = work / "state" / "jobs" / job_id / "logs"
    dirs = sorted(p.name for p in logs.iterdir()) if logs.exists() else []
    if rounds and f"round-{rounds[-1]['round']}" not in dirs:
        problems.append(f"the resumed run has no log directory of its own ({dirs})")
    return Trial(orphans, "; ".join(problems))


def sigterm_mid_round(work: Path, trial: int) -> tuple[Trial, float, int]:
    """SIGTERM during the stop stage of a round; returns (trial, seconds to exit, exit code)."""
    job_id = f"term-{trial}"
    ckpt = work / f"ckpt-{trial}"
    proc = start(work, job_id, 2, f"fail-first,ckpt-on-term:{ckpt}", "--env", "CHAOS_DELAY=0.3")
    if not wait_event(work, job_id, "round_started"):
        proc.kill()
        return Trial(len(survivors(job_id)), "no round seen"), 0.0, -1
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    seconds = time.monotonic() - t
    written = list(work.glob(f"ckpt-{trial}.*"))
    problems = [f"{p.name} incomplete" for p in written if p.read_text() != "complete\n"]
    if not written:
        problems.append("no checkpoint was written on SIGTERM")
    return Trial(len(survivors(job_id)), "; ".join(problems)), seconds, code


def two_owners(work: Path, trial: int) -> Trial:
    """Two supervisors with one job id: the second must refuse (exit 3) while the first runs,
    and ``--takeover`` must make the first stop its ranks and give the job up (exit 3)."""
    job_id = f"owners-{trial}"
    first = start(work, job_id, 2)
    wait_event(work, job_id, "job_started")
    second = start(work, job_id, 2)
    code = second.wait(timeout=30)
    err = second.stderr.read() if second.stderr else ""
    problems = []
    if code != 3 or "owned by a live supervisor" not in err:
        problems.append(f"second supervisor exited {code}: {err.strip()}")
    events = [json.loads(line)["type"] for line in (work / f"{job_id}.events").read_text().splitlines()]
    if events.count("job_started") != 1:
        problems.append(f"{events.count('job_started')} supervisors started the job")
    third = start(work, job_id, 2, "", "--takeover")
    if first.wait(timeout=30) != 3:
        problems.append(f"the supervisor taken over exited {first.returncode}, not 3")
    if not wait_event(work, job_id, "job_taken_over"):
        problems.append("no job_taken_over event")
    third.send_signal(signal.SIGTERM)
    third.wait(timeout=30)
    return Trial(len(survivors(job_id)), "; ".join(problems))


def idle_usage(work: Path, nproc: int = 64, seconds: float = 5.0) -> tuple[float, float]:
    """The supervisor's RSS (MB) and CPU share while ``nproc`` ranks run quietly."""
    job_id = "idle"
    proc = start(work, job_id, nproc)
    wait_event(work, job_id, "job_started")
    time.sleep(3.0)  # let the ranks start
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        with open(f"/proc/{proc.pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    before = cpu()
    time.sleep(seconds)
    used = cpu() - before
    with open(f"/proc/{proc.pid}/status") as handle:
        rss = next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:")) / 1024
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    survivors(job_id)
    return rss, used / seconds


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        spawn = [kill_during_spawn(work, i) for i in range(trials)]
        print(f"kill -9 while spawning 32 ranks: {sum(t.orphans for t in spawn)} orphan(s) in {trials} trial(s)")
        rounds = [kill_mid_round(work, i) for i in range(trials)]
        print(f"kill -9 mid-round, then resume: {sum(t.orphans for t in rounds)} orphan(s), "
              f"{sum(1 for t in rounds if t.detail)} trial(s) with history problems "
              f"{[t.detail for t in rounds if t.detail][:3]}")
        terms = [sigterm_mid_round(work, i) for i in range(min(trials, 5))]
        print(f"SIGTERM mid-round: exit codes {sorted({c for _, _, c in terms})}, exit within "
              f"{max(s for _, s, _ in terms):.2f} s (grace {GRACE:g} s), problems "
              f"{[t.detail for t, _, _ in terms if t.detail]}")
        owners = two_owners(work, 0)
        print(f"two supervisors on one job id: {owners.detail or 'the second exits 3; --takeover stops the first'}"
              f", {owners.orphans} orphan(s)")
        rss, share = idle_usage(work)
        print(f"idle with 64 ranks: supervisor RSS {rss:.1f} MB, CPU {share * 100:.2f} %")


if __name__ == "__main__":
    main()
