"""The runtime health probe: light enough to run every minute beside the job.

Items (``aimaster.runtime_check.micro_benchmarks``): ``c4d`` checks the GPUs with ``nvidia-smi``
(a lost GPU, an error from the driver, uncorrected ECC errors); ``reachability`` connects to
each node. Virtual nodes of the local adapter are this host, so they are reachable while it
runs and share its GPUs; on other adapters a node is reachable when its name resolves and a
TCP connection to ``port`` (ssh by default) is answered or refused, that is, its kernel is up.
GPU health is read where ``nvidia-smi`` runs: on this host; elsewhere it is ``unsupported``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from trainguard.sanity.config import RuntimeConfig, RuntimeFailAction
from trainguard.timefmt import iso_ms

_QUERY = "index,pci.bus_id,ecc.errors.uncorrected.volatile.total"


@dataclass(frozen=True)
class NodeHealth:
    """One probe of one node: ``healthy`` is None when the item cannot run there."""

    node: str
    item: str
    healthy: bool | None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "item": self.item, "healthy": self.healthy, "message": self.message}


@dataclass(frozen=True)
class RuntimeReport:
    at: float
    fail_action: RuntimeFailAction
    results: tuple[NodeHealth, ...]

    @property
    def unhealthy(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.node for r in self.results if r.healthy is False))

    @property
    def isolate(self) -> tuple[str, ...]:
        """Nodes the engine should treat as faulty (``isolate`` only)."""
        return self.unhealthy if self.fail_action is RuntimeFailAction.ISOLATE else ()

    @property
    def event(self) -> str | None:
        """The event to record: ``runtime_check_failed`` unless the action is ``ignore``."""
        if not self.unhealthy or self.fail_action is RuntimeFailAction.IGNORE:
            return None
        return "runtime_check_failed"

    @property
    def reason(self) -> str:
        bad = [f"{r.node} {r.item}: {r.message}" for r in self.results if r.healthy is False]
        return "; ".join(bad) if bad else "healthy"

    def to_json(self) -> dict[str, Any]:
        return {"at": iso_ms(self.at), "fail_action": self.fail_action.value, "unhealthy": list(self.unhealthy),
                "results": [r.to_json() for r in self.results]}


def gpu_health(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> tuple[bool | None, str]:
    """``(healthy, why)`` of this host's GPUs; ``(None, why)`` without ``nvidia-smi``."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None, "nvidia-smi is not installed on this host"
    try:
        done = run([tool, f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
                   capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False, "nvidia-smi did not answer in 20 s"
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode != 0:
        return False, f"nvidia-smi exited {done.returncode}: {lines[-1] if lines else 'no output'}"
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 3 or "lost" in line.lower() or "error" in line.lower():
            return False, f"nvidia-smi: {line}"
        if fields[2].isdigit() and int(fields[2]) > 0:
            return False, f"GPU {fields[0]} ({fields[1]}): {fields[2]} uncorrected ECC error(s)"
    return True, f"{len(lines)} GPU(s) healthy"


def reachable(node: str, port: int = 22, timeout: float = 3.0) -> tuple[bool, str]:
    try:
        with socket.create_connection((node, port), timeout=timeout):
            return True, f"port {port} answered"
    except ConnectionRefusedError:
        return True, f"port {port} refused: the host is up"
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}"


def runtime_check(adapter: Any, config: RuntimeConfig, isolated: frozenset[str] = frozenset(), *,
                  port: int = 22, gpu: Callable[[], tuple[bool | None, str]] = gpu_health,
                  reach: Callable[[str, int], tuple[bool, str]] = reachable) -> RuntimeReport:
    """Probe every node the job may use (not ``isolated``); cheap enough for the supervisor loop.

    :param adapter: the job's adapter (its ``capacity`` names the nodes; ``local`` ones are this host).
    :param config: which items and what an unhealthy node leads to.
    :return: the report; ``event`` and ``isolate`` say what the engine does with it.
    """
    nodes: Sequence[str] = [n for n in adapter.capacity(frozenset(isolated)).nodes if n not in isolated]
    on_this_host = getattr(adapter, "name", "") == "local"
    here = socket.gethostname()
    results: list[NodeHealth] = []
    gpu_result: tuple[bool | None, str] | None = None
    for node in nodes:
        local = on_this_host or node in (here, here.split(".")[0])
        if "reachability" in config.items:
            ok, why = (True, "this host") if local else reach(node, port)
            results.append(NodeHealth(node, "reachability", ok, why))
        if "c4d" in config.items:
            if local:
                gpu_result = gpu_result or gpu()
                results.append(NodeHealth(node, "c4d", *gpu_result))
            else:
                results.append(NodeHealth(node, "c4d", None, "GPU health is read on the supervisor's host only"))
    return RuntimeReport(time.time(), config.fail_action, tuple(results))
