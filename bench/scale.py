"""How the supervisor scales: tick time, memory and the cost of a round at 1k/10k/50k instances.

The real engine, classifiers, strategy and SQLite store supervise a simulated job
(:mod:`trainguard.adapters.sim`): N instances, 8 per node, with hang detection on (so every
tick judges every instance) and three scripted faults:

* a switch burst that takes out 125 nodes (1,000 instances) in the same second: one round;
* an uncorrectable ECC error on one node: the node is isolated and the job rescheduled;
* a hang of the whole job: hang detection finds it, the job restarts in place.

Each size runs in a process of its own so its peak RSS is its own. Prints a table and writes
``bench/out/scale.png`` and ``bench/out/scale.json``.

    python bench/scale.py                 # 1k, 10k, 50k
    python bench/scale.py --sizes 1000 10000
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
SWITCH = "NCCL WARN NET/IB : Got completion from peer 10.0.3.17<52311> with error 12, opcode 0, len 0, vendor err 129"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def one(nproc: int) -> dict:
    """Supervise one simulated job of ``nproc`` instances; measure ticks, rounds and memory."""
    from trainguard.adapters.sim import FaultMix, SimAdapter
    from trainguard.engine import Supervisor
    from trainguard.hooks import PluginHost
    from trainguard.model import JobSpec
    from trainguard.policy import Policy
    from trainguard.store import RunStore

    logging.disable(logging.WARNING)
    slots = 8
    nodes = nproc // slots
    burst_nodes = tuple(f"node-{i}" for i in range(min(125, nodes)))
    mix = FaultMix.from_dict({
        "classes": {"switch": {"log": SWITCH}, "hbm": {"log": ECC, "broken": True},
                    "stuck": {"hang": True}},
        "scripted": [{"at": 3600, "fault": "switch", "nodes": list(burst_nodes)},
                     {"at": 7200, "fault": "hbm", "nodes": [f"node-{nodes - 1}"]},
                     {"at": 10800, "fault": "stuck", "nodes": ["node-0"]}]})
    policy = Policy(enable_job_restart=True, max_num_of_job_restart=100, enable_job_hang_detection=True,
                    job_hang_interval=600, enable_stack_snapshots=False)
    spec = JobSpec(job_id=f"scale-{nproc}", command=("simulated-training",), nproc=nproc, nodes=nodes,
                   slots_per_node=slots)
    adapter = SimAdapter(spec=spec, policy=policy, mix=mix, workload={"work": 4 * 3600}, spare_nodes=2)
    adapter.clock.idle_tick = 60.0  # many ticks: each one judges every instance for hangs

    ticks: list[float] = []
    rounds: list[float] = []
    state = {"last": None, "in_round": False}
    wait = adapter.wait

    def timed_wait(timeout: float):
        now = time.perf_counter()
        if state["last"] is not None and not state["in_round"]:
            ticks.append(now - state["last"])
        state["in_round"] = False
        exits = wait(timeout)
        state["last"] = time.perf_counter()
        return exits

    adapter.wait = timed_wait  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as state_dir, RunStore(state_dir) as store:
        supervisor = Supervisor(spec, policy, adapter, store, PluginHost(load_entry_points=False))
        recover = supervisor.rounds.recover

        def timed_recover(incident):
            t = time.perf_counter()
            try:
                return recover(incident)
            finally:
                rounds.append(time.perf_counter() - t)
                state["in_round"] = True

        supervisor.rounds.recover = timed_recover  # type: ignore[method-assign]
        started = time.perf_counter()
        status = supervisor.run()
        total = time.perf_counter() - started
        history = store.history(spec.job_id)
        records = store.rounds(spec.job_id)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ticks.sort()
    return {
        "instances": nproc,
        "status": str(status),
        "ticks": len(ticks),
        "tick_ms_median": round(statistics.median(ticks) * 1000, 2),
        "tick_ms_p99": round(ticks[int(len(ticks) * 0.99) - 1] * 1000, 2),
        "tick_ms_max": round(ticks[-1] * 1000, 2),
        "rss_mb": round(rss_mb, 1),
        "rounds": len(records),
        "round_actions": [r.action.value for r in records],
        "burst_round_ranks": len(records[0].ranks) if records else 0,
        "budget_used": history.budget_used,
        "round_s": [round(r, 3) for r in rounds],
        "simulated_h": round(adapter.elapsed / 3600, 2),
        "real_s": round(total, 2),
    }


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["instances"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    axes[0].plot(sizes, [r["tick_ms_median"] for r in results], "o-", label="median")
    axes[0].plot(sizes, [r["tick_ms_p99"] for r in results], "s--", label="p99")
    axes[0].axhline(50, color="red", lw=0.8, ls=":", label="50 ms target")
    axes[0].set(title="supervisor tick", xlabel="instances", ylabel="ms", xscale="log", yscale="log")
    axes[0].legend()
    axes[1].plot(sizes, [r["rss_mb"] for r in results], "o-")
    axes[1].axhline(300, color="red", lw=0.8, ls=":", label="300 MB target")
    axes[1].set(title="peak RSS", xlabel="instances", ylabel="MB", xscale="log")
    axes[1].legend()
    for i, label in enumerate(("switch burst (restart in place)", "ECC (isolate, reschedule)", "hang (in place)")):
        axes[2].plot(sizes, [r["round_s"][i] if len(r["round_s"]) > i else None for r in results], "o-", label=label)
    axes[2].set(title="real time per round", xlabel="instances", ylabel="s", xscale="log", yscale="log")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    results = []
    print(f"{'instances':>9} {'ticks':>6} {'tick median':>11} {'tick p99':>9} {'RSS MB':>7} {'rounds':>6} "
          f"{'burst ranks':>11} {'budget':>6}  round seconds (burst, ECC, hang)")
    for size in args.sizes:
        out = subprocess.run([sys.executable, __file__, "--one", str(size)], check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{r['instances']:>9} {r['ticks']:>6} {r['tick_ms_median']:>9.2f}ms {r['tick_ms_p99']:>7.2f}ms "
              f"{r['rss_mb']:>7.1f} {r['rounds']:>6} {r['burst_round_ranks']:>11} {r['budget_used']:>6}  "
              f"{', '.join(f'{s:.2f}' for s in r['round_s'])}", flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "scale.json").write_text(json.dumps(results, indent=2))
    plot(results, OUT / "scale.png")
    print(f"plot: {OUT / 'scale.png'}")


if __name__ == "__main__":
    main()
