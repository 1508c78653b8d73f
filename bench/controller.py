"""``trainguard controller``: memory and CPU while watching many annotated jobs; failure-to-action time.

On the stand-in cluster (tests/k8s_cluster.py: kmock's emulator over HTTP plus a fake kubelet;
no real API server can run here) with the fake Volcano (tests/volcano_fake.py), ``--jobs``
annotated Volcano Jobs of one pod each are created; their pods run no process (the stand-in marks
them Running). The controller runs as its own process (``python -m trainguard controller``), so
its figures are its own:

- memory: the controller's resident set (VmRSS) once it has listed every job and pod, and after
  the idle window;
- CPU: the controller's CPU seconds (user + system, from /proc) during an idle window of
  ``--idle`` seconds, as a share of one core;
- API requests of the controller while idle (the stand-in counts every client but its kubelet;
  the fake Volcano's are subtracted);
- failure to action: for ``--failures`` jobs in turn, one pod is OOM-killed by the stand-in
  kubelet; the time from its status turning Failed to the controller's RestartJob Command being
  created (both seen in the stand-in's store, polled every 2 ms).

    python bench/controller.py [--jobs 1000] [--idle 30] [--failures 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from kubernetes import client  # noqa: E402

from volcano_fake import VolcanoCluster  # noqa: E402
from trainguard.adapters.kubernetes.client import load_api_client  # noqa: E402

ANNOTATIONS = {"fault-tolerance/job-retry-num": "3", "fault-tolerance/job-unconditional-retry": "true"}


def proc_figures(pid: int) -> tuple[float, float]:
    """(resident MiB, CPU seconds) of a process."""
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return rss, cpu


def job_body(name: str) -> dict:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "annotations": ANNOTATIONS},
            "spec": {"minAvailable": 1, "schedulerName": "volcano", "maxRetry": 10, "tasks": [
                {"name": "w", "replicas": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "stand-in", "command": ["sleep", "infinity"]}]}}}]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--failures", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tg-bench-controller-"))
    nodes = max(3, args.jobs // 40 + 1)
    cluster = VolcanoCluster(root / "cluster", nodes=nodes, slots=50, run_processes=False, interval=1.0).start()
    controller = None
    try:
        custom = client.CustomObjectsApi(load_api_client(str(cluster.kubeconfig)))
        started = time.monotonic()
        for i in range(args.jobs):
            custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs",
                                                   job_body(f"job-{i:04d}"))
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            running = sum(1 for (p, _, _), o in list(cluster.server.store.items())
                          if p == "pods" and (o.get("status") or {}).get("phase") == "Running")
            if running >= args.jobs:
                break
            time.sleep(0.5)
        print(f"{args.jobs} annotated Volcano Jobs, {running} pods Running (no processes) on {nodes} nodes "
              f"in {time.monotonic() - started:.1f} s")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        log = open(root / "controller.log", "wb")
        t0 = time.monotonic()
        controller = subprocess.Popen(
            [sys.executable, "-m", "trainguard", "controller", "--kubeconfig", str(cluster.kubeconfig),
             "--namespace", "default", "--state-dir", str(root / "state"), "--kinds", "volcano",
             "--lease-duration", "15"], env=env, stdout=log, stderr=subprocess.STDOUT)
        while b"leading" not in (root / "controller.log").read_bytes():
            time.sleep(0.1)
        time.sleep(3.0)  # the initial lists are processed by then (each job reconciled once)
        print(f"controller leading after {time.monotonic() - t0:.1f} s")
        rss0, cpu0 = proc_figures(controller.pid)
        fake = cluster.volcano
        assert fake is not None
        counts0, passes0 = cluster.request_counts(), fake.passes
        time.sleep(args.idle)
        rss1, cpu1 = proc_figures(controller.pid)
        counts1, passes1 = cluster.request_counts(), fake.passes
        idle_requests = sum(counts1.values()) - sum(counts0.values()) - 5 * (passes1 - passes0)
        print(f"memory: {rss0:.1f} MiB resident after the initial sync, {rss1:.1f} MiB after {args.idle:g} s idle")
        print(f"CPU while idle: {cpu1 - cpu0:.2f} s in {args.idle:g} s = {100 * (cpu1 - cpu0) / args.idle:.1f}% "
              f"of one core; startup (lists, {args.jobs} reconciles): {cpu0:.2f} s")
        print(f"controller API requests while idle: {idle_requests} in {args.idle:g} s (lease renewal: a read and "
              f"a write every 5 s; the watches reconnect every 300 s)")
        latencies = []
        for i in range(args.failures):
            name = f"job-{i:04d}"
            pod = f"{name}-w-0"
            cluster.oom_kill(pod)
            failed_at = acted_at = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and acted_at is None:
                now = time.monotonic()
                obj = cluster.server.store.get(("pods", "default", pod))
                if failed_at is None and obj is not None and (obj.get("status") or {}).get("phase") == "Failed":
                    failed_at = now
                if any(p == "vccommands" and n == "default" and o["metadata"]["name"].startswith(f"{name}-tg-")
                       for (p, n, _), o in list(cluster.server.store.items())) or any(
                        c[2] == name for c in fake.commands_done):
                    acted_at = now
                time.sleep(0.002)
            if failed_at is not None and acted_at is not None:
                latencies.append((acted_at - failed_at) * 1000)
        if latencies:
            print(f"pod failure → RestartJob Command: median {statistics.median(latencies):.0f} ms, "
                  f"min {min(latencies):.0f}, max {max(latencies):.0f} over {len(latencies)} failures "
                  f"(includes the log tail and events read, classification, decision, history write)")
        rss2, cpu2 = proc_figures(controller.pid)
        print(f"memory after the failures: {rss2:.1f} MiB")
        return 0
    finally:
        if controller is not None:
            controller.terminate()
            controller.wait(20)
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
