"""Kubernetes adapter: API requests while idle and per recovery round, and failure-to-Running time.

On the stand-in cluster (tests/k8s_cluster.py: kmock's emulator over HTTP plus a fake
scheduler and kubelet; no real API server can run here), with 8, 64 and 512 rank pods, the
adapter (``trainguard.adapters.kubernetes``) is driven directly, the way the engine drives it.
The stand-in counts every request but its kubelet's. Figures:

- start: requests to create the job (pods, Service, bad-node list, the watch, log streams);
- idle: requests during an idle window, scaled to a minute. The window is shorter than a
  minute (``--idle``, default 15 s); the adapter's only periodic requests are the watch's
  reconnect every 300 s and each log stream's after 3600 s of silence, so a longer window finds
  the same zero plus those;
- replace one pod: from an injected failure of one pod (the stand-in's eviction) to its
  replacement Running: requests, and milliseconds (median of ``--rounds``);
- restart the job: delete every pod, wait until gone, recreate: requests.

Containers run ``sleep`` as real processes at 8 and 64 pods; at 512 they run no process (the
stand-in marks them Running), which is said in the output.

    python bench/k8s_requests.py [--sizes 8 64 512] [--rounds 3] [--idle 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from k8s_cluster import StandInCluster  # noqa: E402
from trainguard.adapters import Launch  # noqa: E402
from trainguard.adapters.kubernetes.adapter import SCHEDULER, KubernetesAdapter  # noqa: E402
from trainguard.adapters.kubernetes.client import load_api_client  # noqa: E402
from trainguard.model import Instance, JobSpec  # noqa: E402
from trainguard.policy import Policy  # noqa: E402


def launches(ranks: list[int], round_no: int) -> list[Launch]:
    return [Launch(Instance(rank, f"{SCHEDULER}{rank}", 0), ("sleep", "3600"), {"RANK": str(rank)}, None, round_no)
            for rank in ranks]


def delta(cluster: StandInCluster, before: Counter[str]) -> int:
    after = cluster.request_counts()
    return sum(after.values()) - sum(before.values())


def phase(adapter: KubernetesAdapter, rank: int) -> str:
    return (adapter._pods[rank].obj.get("status") or {}).get("phase", "")


def wait_running(adapter: KubernetesAdapter, ranks: list[int], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while any(phase(adapter, r) != "Running" for r in ranks):
        if time.monotonic() > deadline:
            raise SystemExit(f"pods did not run within {timeout} s")
        time.sleep(0.005)


def measure(size: int, rounds: int, idle: float) -> dict[str, object]:
    processes = size <= 64
    with tempfile.TemporaryDirectory() as tmp:
        nodes = max(3, size // 8 + 1)
        cluster = StandInCluster(Path(tmp) / "cluster", nodes=nodes, slots=8, run_processes=processes).start()
        try:
            spec = JobSpec(job_id=f"bench-{size}", command=("sleep", "3600"), nproc=size, nodes=nodes, slots_per_node=8)
            before = cluster.request_counts()
            adapter = KubernetesAdapter(spec=spec, log_dir=Path(tmp) / "logs", policy=Policy().replace(stop_grace_period=1),
                                        base_env={}, image="busybox",
                                        api_client=load_api_client(str(cluster.kubeconfig)))
            ranks = list(range(size))
            adapter.start(launches(ranks, 0))
            wait_running(adapter, ranks)
            start = delta(cluster, before)

            time.sleep(1.0)  # the log streams connect once their pods run
            before = cluster.request_counts()
            time.sleep(idle)
            idle_requests = delta(cluster, before)
            if idle_requests:
                print(f"  idle requests at {size} pods: {dict(cluster.request_counts() - before)}", flush=True)

            times, costs = [], []
            for round_no in range(1, rounds + 1):
                victim = (round_no * 7) % size
                before = cluster.request_counts()
                t0 = time.monotonic()
                cluster.evict(adapter._pods[victim].name)
                exits: list = []
                while not exits:
                    exits = adapter.wait(1.0)
                adapter.stop([e.rank for e in exits], 1.0)
                adapter.start(launches([victim], round_no))
                wait_running(adapter, [victim])
                times.append((time.monotonic() - t0) * 1000)
                costs.append(delta(cluster, before))

            before = cluster.request_counts()
            adapter.stop(ranks, 1.0)
            adapter.start(launches(ranks, rounds + 1))
            wait_running(adapter, ranks)
            restart = delta(cluster, before)
            adapter.close()
        finally:
            cluster.stop()
    return {"size": size, "processes": processes, "start": start, "idle_per_min": idle_requests * 60 / idle,
            "replace_requests": statistics.median(costs), "replace_ms": statistics.median(times),
            "replace_ms_range": (min(times), max(times)), "restart_requests": restart}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 512])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=15.0, help="idle window in seconds (scaled to a minute)")
    args = parser.parse_args()
    print(f"{'pods':>5} {'start':>6} {'idle/min':>9} {'replace 1 pod':>14} {'failure->Running':>17} "
          f"{'restart job':>12}  containers")
    for size in args.sizes:
        r = measure(size, args.rounds, args.idle)
        low, high = r["replace_ms_range"]  # type: ignore[misc]
        print(f"{r['size']:>5} {r['start']:>6} {r['idle_per_min']:>9.1f} {r['replace_requests']:>14} "
              f"{r['replace_ms']:>9.0f} ms ({low:.0f}-{high:.0f}) {r['restart_requests']:>7}  "
              f"{'sleep processes' if r['processes'] else 'no processes (stand-in marks them Running)'}",
              flush=True)
    print(f"requests counted: every client but the stand-in's kubelet; idle window {args.idle:g} s scaled to a "
          "minute; the watch reconnects every 300 s (0.2/min) and a silent log stream after 3600 s")


if __name__ == "__main__":
    main()
