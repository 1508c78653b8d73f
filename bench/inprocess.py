"""In-process recovery against restarting processes: time from a fault to every rank training again.

4 gloo ranks do an allreduce per step; at the first step after ``--fault-after`` seconds (4 s)
rank 2 either raises a retryable error or is SIGKILLed: a fault in steady state, when a long job's
warm spare is up (trainguard starts spares ``TRAINGUARD_SPARE_DELAY`` seconds after the ranks, 8 s
by default, so that they do not slow the ranks' own start; the bench sets 1 s to keep runs short).
Measured side by side in one run, on the same workload:

- ``trainguard in-process``: the worker under ``@inprocess.restartable()`` (restart_in_process /
  recover_in_process);
- ``trainguard restart``: the same worker without the wrapper, trainguard's ordinary restart
  (warm standbys by default);
- ``torchrun``: ``torchrun --standalone --max-restarts 1`` (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1);
- NVRx's ``inprocess.Wrapper`` where it imports (``pip install --no-deps --target DIR
  nvidia-resiliency-ext defusedxml nvidia-ml-py``, then ``PYTHONPATH=DIR``); the output says
  how it fared, and why TorchFT is not measured.

The time is from the fault (the rank writes the time just before raising or being killed) to the
last rank's first completed allreduce after it. ``loads`` counts processes that loaded the
state (once per process): what a restart pays again.

    python bench/inprocess.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORLD = 4
FAULT_RANK = 2
STEPS_AFTER_FAULT = 20


# -- the worker ----------------------------------------------------------------------------------

def _append(**fields: object) -> None:
    with open(os.environ["BENCH_OUT"], "a") as out:
        out.write(json.dumps(fields) + "\n")


def worker(mode: str, fault: str) -> None:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    fault_after = float(os.environ["BENCH_FAULT_AFTER"])
    started = time.monotonic()
    life = int(os.environ.get("TRAINGUARD_RESTART_ROUND") or os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    _append(kind="load", rank=rank, pid=os.getpid())

    def train(iteration: int, store: object | None) -> None:
        # Read again per call: NVRx renumbers the ranks left after one is lost.
        me, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if store is None:
            dist.init_process_group("gloo", rank=me, world_size=world)
        else:
            dist.init_process_group("gloo", store=store, rank=me, world_size=world)
        back = iteration > 0 or life > 0
        done = 0
        while done < STEPS_AFTER_FAULT:
            # The flag rides the step's allreduce (MAX), so every rank agrees on the step that faults.
            late = back or time.monotonic() - started >= fault_after
            flags = torch.full((1024,), float(late))
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            if back:
                _append(kind="back", rank=me, t=time.time())
                back = False
            if flags[0].item():
                if life == 0 and iteration == 0 and me == FAULT_RANK:
                    _append(kind="fault", t=time.time())
                    if fault == "raise":
                        raise RuntimeError("bench glitch: retry me")
                    os.kill(os.getpid(), signal.SIGKILL)
                done += 1
            time.sleep(0.02)
        dist.barrier()
        dist.destroy_process_group()

    if mode == "trainguard-inprocess":
        from trainguard import inprocess

        inprocess.restartable()(lambda attempt: train(attempt.iteration, attempt.store))()
    elif mode == "nvrx":
        _nvrx_worker(train)
    else:
        train(0, None)


def _nvrx_worker(train: object) -> None:
    """NVRx's Wrapper on the same loop: its base store at MASTER_PORT (rank 0 hosts it), the
    training store a PrefixStore per iteration over one at MASTER_PORT + 1, as its examples do;
    its intervals shortened to 50 ms (``last_call_wait`` 0.1 s) so that polling is not what is
    measured, its soft and hard timeouts to 20 and 30 s so that a run that does not recover ends."""
    from datetime import timedelta

    import nvidia_resiliency_ext.inprocess as nvrx  # type: ignore[import-not-found]
    import torch.distributed as dist

    quick = timedelta(milliseconds=50)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1,
                          int(os.environ["WORLD_SIZE"]), is_master=os.environ["RANK"] == "0", multi_tenant=True,
                          wait_for_workers=True)

    def run(base: object, call_wrapper: object = None) -> None:
        iteration = call_wrapper.iteration if call_wrapper is not None else 0  # type: ignore[attr-defined]
        train(iteration, dist.PrefixStore(f"it{iteration}", base))  # type: ignore[operator]

    # NVRx finds the parameter by its annotation, a class (this module's annotations are strings).
    run.__annotations__ = {"call_wrapper": nvrx.CallWrapper}
    nvrx.Wrapper(health_check=None, monitor_thread_interval=quick, monitor_process_interval=quick,
                 heartbeat_interval=quick, progress_watchdog_interval=quick, last_call_wait=timedelta(seconds=0.1),
                 soft_timeout=timedelta(seconds=20), hard_timeout=timedelta(seconds=30))(run)(store)


# -- the driver ----------------------------------------------------------------------------------

def _command(mode: str, fault: str, state: Path, fault_after: float) -> tuple[list[str], dict[str, str]]:
    me = [sys.executable, str(Path(__file__).resolve()), "worker", mode, fault]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
           "BENCH_FAULT_AFTER": str(fault_after), "TRAINGUARD_SPARE_DELAY": "1"}
    if mode in ("torchrun", "nvrx"):
        # NVRx alone: torchrun restarting the job after NVRx gave up would be torchrun's time.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={WORLD}",
                f"--max-restarts={0 if mode == 'nvrx' else 1}", "--monitor-interval=0.1", *me[1:]], env
    policy = ["--enable-job-restart", "True", "--retryable-error", "bench glitch", "--stop-grace-period", "2"]
    if fault == "kill":
        policy += ["--fault-tolerant-policy", "OnFailure"]
    return [sys.executable, "-m", "trainguard", "run", "--nproc", str(WORLD), "--job-id", f"{mode}-{fault}",
            "--state-dir", str(state), *policy, "--", *me], env


def measure(mode: str, fault: str, workdir: Path, fault_after: float) -> dict[str, object]:
    out = workdir / f"{mode}-{fault}-{time.monotonic_ns()}.jsonl"
    argv, env = _command(mode, fault, workdir / f"state-{time.monotonic_ns()}", fault_after)
    env["BENCH_OUT"] = str(out)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun's ranks too
        _, err = proc.communicate()
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    faults = [r["t"] for r in rows if r["kind"] == "fault"]
    back: dict[int, float] = {}
    for r in rows:
        if r["kind"] == "back" and faults and r["t"] > faults[0]:
            back.setdefault(r["rank"], r["t"])
    loads = sum(1 for r in rows if r["kind"] == "load")
    expected = WORLD - 1 if (mode, fault) == ("nvrx", "kill") else WORLD  # NVRx goes on without the lost rank
    if proc.returncode != 0 or len(back) < expected:
        tail = [line for line in err.decode(errors="replace").strip().splitlines()
                if "Error" in line or "error" in line][-3:]
        return {"seconds": None, "loads": loads, "why": f"exit {proc.returncode}, {len(back)} rank(s) back: "
                + " | ".join(tail)}
    return {"seconds": max(back.values()) - faults[0], "loads": loads}


def nvrx_available() -> str | None:
    """None when NVRx's in-process wrapper imports here, else why not."""
    try:
        import nvidia_resiliency_ext.inprocess  # type: ignore[import-not-found]  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import is the answer
        return (f"not measured: nvidia_resiliency_ext.inprocess does not import here ({type(exc).__name__}: "
                f"{str(exc)[:160]}); its wheel (0.4.1) downloads, but it is built for CUDA hosts "
                "(NVML health checks, CUDA-context restart)")
    return None


def torchft_available() -> str | None:
    try:
        import torchft  # type: ignore[import-not-found]  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return (f"not measured: torchft does not import here ({type(exc).__name__}: {str(exc)[:120]}); its wheel "
                "(0.2.0) downloads, but it recovers per step over replica groups behind a lighthouse server: not "
                "the same workload as one process group restarting")
    return ("not measured: torchft imports, but it recovers per step over replica groups behind a lighthouse "
            "server (a quorum per step, peers heal from a live replica): not the same workload as one process "
            "group restarting")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--modes", default="trainguard-inprocess,trainguard-restart,torchrun")
    parser.add_argument("--fault-after", type=float, default=4.0,
                        help="seconds into the job when the fault comes (the first step after them)")
    args = parser.parse_args()
    modes = args.modes.split(",")
    skipped = {"NVRx inprocess.Wrapper": nvrx_available(), "TorchFT": torchft_available()}
    if skipped["NVRx inprocess.Wrapper"] is None and "nvrx" not in modes:
        modes.append("nvrx")
    results: dict[tuple[str, str], list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="tg-bench-inprocess-") as tmp:
        for n in range(args.repeat):
            for fault in ("raise", "kill"):
                for mode in modes:  # interleaved: load on a shared host hits every mode alike
                    if mode == "nvrx" and n:
                        continue  # once: where it does not recover, each try waits out its hard timeout
                    results.setdefault((mode, fault), []).append(measure(mode, fault, Path(tmp), args.fault_after))
                    got = results[(mode, fault)][-1]
                    print(f"# {mode} {fault}: {got['seconds']} s, {got['loads']} load(s)", flush=True)
    print(f"{WORLD} gloo ranks, allreduce per step; rank {FAULT_RANK} fails {args.fault_after:g} s in; "
          f"seconds from the fault to every rank training again (median of {args.repeat}), the ratio to torchrun's, "
          "and per run the processes that loaded the state (L)")
    print(f"{'':24}{'raised error':>28}{'SIGKILLed rank':>28}")
    torchrun = {fault: _median(results.get(("torchrun", fault), [])) for fault in ("raise", "kill")}
    for mode in modes:
        cells = []
        for fault in ("raise", "kill"):
            runs = results[(mode, fault)]
            seconds = _median(runs)
            if seconds is None:
                cells.append(f"{'failed':>28}")
                continue
            ratio = f" {seconds / torchrun[fault]:.2f}x" if torchrun[fault] else ""
            loads = "/".join(str(r["loads"]) for r in runs)
            cells.append(f"{seconds:7.3f} s{ratio:>7} {loads:>8}L".rjust(28))
        print(f"{mode:24}{''.join(cells)}")
    for mode in modes:
        for fault in ("raise", "kill"):
            for run in results[(mode, fault)]:
                if run["seconds"] is None:
                    print(f"  {mode} {fault}: {run['why']}")
    for name, why in skipped.items():
        if why is not None:
            print(f"{name}: {why}")
    if "nvrx" in modes and any(r["seconds"] is None for f in ("raise", "kill") for r in results[("nvrx", f)]):
        print("NVRx inprocess.Wrapper (0.4.1, with defusedxml and nvidia-ml-py beside it; gloo on CPU; torchrun "
              "--max-restarts 0 so that only NVRx recovers): on a raised error the failed rank's neighbours got "
              "their gloo errors and NVRx's restart began, while a rank that is no neighbour stayed blocked in its "
              "allreduce until NVRx's hard timeout (30 s here) ended the job; a SIGKILLed rank ends the job under "
              "torchrun (its agent stops every rank when one exits)")


def _median(runs: list[dict[str, object]]) -> float | None:
    values = sorted(float(r["seconds"]) for r in runs if r["seconds"] is not None)  # type: ignore[arg-type]
    return values[len(values) // 2] if values else None


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
