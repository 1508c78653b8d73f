"""Python stacks of hung ranks through ``pods/exec`` and py-spy, where the image and RBAC allow.

``py-spy dump`` runs in the rank's container on its PID 1 (the rank's process when the command
is the container's entrypoint). It needs py-spy in the image, the ``pods/exec`` create right and
the SYS_PTRACE capability; when any is missing the rank's log says so, and the round has no
stacks rather than failing.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout
from pathlib import Path
from typing import Mapping

from trainguard.adapters.kubernetes.client import KubeApi
from trainguard.errors import AdapterError
from trainguard.stacks import ThreadStack, parse_py_spy

log = logging.getLogger(__name__)

COMMAND = ["py-spy", "dump", "--nonblocking", "--pid", "1"]


def _dump(kube: KubeApi, namespace: str, pod: str) -> str:
    from kubernetes import client
    from kubernetes.stream import stream

    # stream() swaps the request method of the ApiClient it is given while it runs: a client of
    # its own keeps the watch and the other calls, in other threads, on plain HTTP.
    core = client.CoreV1Api(client.ApiClient(kube.api_client.configuration))
    return str(stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=COMMAND,
                      stderr=True, stdin=False, stdout=True, tty=False, _request_timeout=30))


def pod_stacks(kube: KubeApi, namespace: str, pods: Mapping[int, tuple[str, Path]], timeout: float,
               job_id: str) -> list[ThreadStack]:
    """Stacks of every ``rank: (pod, log path)``, taken in parallel within ``timeout``."""
    threads: list[ThreadStack] = []
    why = "no rank pod"
    if not pods:
        return threads
    pool = ThreadPoolExecutor(max_workers=min(16, len(pods)))
    try:
        futures = {rank: pool.submit(_dump, kube, namespace, pod) for rank, (pod, _) in pods.items()}
        deadline = time.monotonic() + timeout
        for rank, future in futures.items():
            pod, log_path = pods[rank]
            try:
                out = future.result(timeout=max(0.0, deadline - time.monotonic()))
                found = parse_py_spy(rank, 1, out)
            except (Exception, FutureTimeout) as exc:
                out, found = f"{type(exc).__name__}: {exc}", []
            if not found:
                why = out.strip().splitlines()[-1][:200] if out.strip() else "no output"
                log.warning("[%s] no stacks from pod %s (%s): py-spy in the image, pods/exec and SYS_PTRACE "
                            "are needed", job_id, pod, why)
                with open(log_path, "a") as handle:
                    handle.write(f"[trainguard] no stacks from pod {pod}: {why}\n")
            threads.extend(found)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a stuck exec must not hold the round
    if not threads:
        raise AdapterError("kubernetes", f"no stacks from the rank pods ({why}): py-spy in the image, the pods/exec "
                                         "right and the SYS_PTRACE capability are needed")
    return threads
