"""What the built-in items measure; runs inside the check worker, one process per node.

Each function takes a :class:`Context` and returns one number in its item's unit, or raises
:class:`Unsupported` when this hardware cannot run it (then the report says so instead of
passing). GPUs are used when torch sees them (NCCL between nodes with distinct GPUs), one CPU
core and gloo otherwise, so nodes stay comparable. Collectives agree on an iteration count
first (the minimum over the members), because every member must issue the same calls.
"""

from __future__ import annotations

import datetime
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

CPU_ELEMENTS = 1 << 22          # 16 MiB of float32 per collective on CPU
GPU_ELEMENTS = 1 << 25          # 128 MiB on GPU
MULTI = 4                       # all-reduces in flight for the multi_* items


class Unsupported(Exception):
    """This item cannot run on this node's hardware; the message says why."""


@dataclass
class Context:
    """What an item may use: the node, its device, the measuring window and, for group items,
    the members, this node's rank among them, a store and the link-probe results.

    ``links`` maps a peer to its probe result (``{"ok": bool, "rtt_ms": float, "error": str}``)
    as seen between this node and the peer.
    """

    node: str
    device: torch.device
    window: float
    timeout: float
    rank: int = 0
    members: tuple[str, ...] = ()
    store: Any = None
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    distinct_devices: bool = True
    _groups: dict[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def backend(self) -> str:
        """NCCL when every member has its own GPU, gloo otherwise (virtual nodes sharing a GPU)."""
        return "nccl" if self.device.type == "cuda" and self.distinct_devices else "gloo"

    def group(self, backend: str | None = None) -> Any:
        """The members' process group for ``backend`` (made once, on this context's store)."""
        backend = backend or self.backend
        if backend not in self._groups:
            if self.size < 2:
                raise Unsupported("needs at least two nodes")
            store = dist.PrefixStore(f"pg-{backend}", self.store)
            timeout = datetime.timedelta(seconds=self.timeout)
            if backend == "nccl":
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                self._groups[backend] = dist.ProcessGroupNCCL(store, self.rank, self.size, options)
            else:
                self._groups[backend] = dist.ProcessGroupGloo(store, self.rank, self.size, timeout)
        return self._groups[backend]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _elements(device: torch.device) -> int:
    return GPU_ELEMENTS if device.type == "cuda" else CPU_ELEMENTS


def _rate(step: Callable[[], None], device: torch.device, window: float, batch: int = 1) -> float:
    """Calls of ``step`` per second, run for ``window`` seconds of wall time."""
    step()
    _sync(device)
    calls = 0
    start = time.perf_counter()
    while True:
        for _ in range(batch):
            step()
        calls += batch
        _sync(device)
        elapsed = time.perf_counter() - start
        if elapsed >= window:
            return calls / elapsed


# -- node items ------------------------------------------------------------------------------


def gemm_flops(ctx: Context) -> float:
    """GFLOP/s of square matrix multiplies (fp16 4096 on GPU, fp32 256 on one CPU core)."""
    n, dtype = (4096, torch.float16) if ctx.device.type == "cuda" else (256, torch.float32)
    a = torch.randn(n, n, device=ctx.device, dtype=dtype)
    b = torch.randn(n, n, device=ctx.device, dtype=dtype)
    out = torch.empty(n, n, device=ctx.device, dtype=dtype)
    per_second = _rate(lambda: torch.mm(a, b, out=out), ctx.device, ctx.window, batch=10)
    return per_second * 2 * n ** 3 / 1e9


def kernel_launch(ctx: Context) -> float:
    """Microseconds per launch of a one-element kernel (operator dispatch on CPU)."""
    x = torch.zeros(1, device=ctx.device)
    per_second = _rate(lambda: x.add_(1), ctx.device, ctx.window, batch=200)
    return 1e6 / per_second


def _local_devices(ctx: Context) -> list[torch.device]:
    if ctx.device.type != "cuda":
        return [torch.device("cpu")] * 2
    count = torch.cuda.device_count()
    if count < 2:
        raise Unsupported(f"{count} GPU on this node: no intra-node all-reduce")
    return [torch.device("cuda", i) for i in range(count)]


class _LocalRing:
    """The node's own devices as ranks of one in-process group (a thread per rank)."""

    def __init__(self, ctx: Context) -> None:
        self.devices = _local_devices(ctx)
        self.size = len(self.devices)
        store = dist.HashStore()
        timeout = datetime.timedelta(seconds=ctx.timeout)
        self.groups: list[Any] = [None] * self.size
        self.tensors: list[torch.Tensor] = [torch.empty(0)] * self.size
        elements = _elements(ctx.device)

        def make(rank: int) -> None:
            device = self.devices[rank]
            if device.type == "cuda":
                torch.cuda.set_device(device)
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                self.groups[rank] = dist.ProcessGroupNCCL(store, rank, self.size, options)
            else:
                self.groups[rank] = dist.ProcessGroupGloo(store, rank, self.size, timeout)
            self.tensors[rank] = torch.ones(elements, device=device)

        self._each(make)
        self.bytes = elements * 4

    def _each(self, fn: Callable[[int], None]) -> None:
        errors: list[BaseException] = []

        def guarded(rank: int) -> None:
            try:
                fn(rank)
            except BaseException as exc:  # re-raised below, in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=guarded, args=(r,), daemon=True) for r in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def all_reduce(self, iterations: int) -> float:
        """Seconds for ``iterations`` all-reduces on every local rank."""
        def run(rank: int) -> None:
            for _ in range(iterations):
                self.groups[rank].allreduce([self.tensors[rank]]).wait()
            _sync(self.devices[rank])

        start = time.perf_counter()
        self._each(run)
        return time.perf_counter() - start

    def bus_bandwidth(self, window: float) -> float:
        once = self.all_reduce(1)
        iterations = max(1, int(window / max(once, 1e-6)))
        elapsed = self.all_reduce(iterations)
        return 2 * (self.size - 1) / self.size * self.bytes * iterations / elapsed / 1e9


def all_reduce_1(ctx: Context) -> float:
    """GB/s bus bandwidth of an all-reduce among the node's own devices."""
    return _LocalRing(ctx).bus_bandwidth(ctx.window)


def comp_comm_overlap(ctx: Context) -> float:
    """GFLOP/s of GEMM while the node's devices all-reduce alongside (interference shows here)."""
    ring = _LocalRing(ctx)
    stop = threading.Event()

    def communicate() -> None:
        while not stop.is_set():
            ring.all_reduce(1)

    background = threading.Thread(target=communicate, daemon=True)
    background.start()
    try:
        return gemm_flops(ctx)
    finally:
        stop.set()
        background.join()


# -- collectives between nodes --------------------------------------------------------------


def _agreed_iterations(ctx: Context, group: Any, once: float, device: torch.device) -> int:
    """The same iteration count on every member: the smallest any member asks for."""
    wanted = torch.tensor([max(1, min(10_000, int(ctx.window / max(once, 1e-6))))], device=device)
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MIN
    group.allreduce([wanted], options).wait()
    _sync(device)
    return int(wanted.item())


def _bandwidth(ctx: Context, op: Callable[[], None], device: torch.device, group: Any, moved: float) -> float:
    """GB/s of ``moved`` bytes per call of ``op``, timed over an agreed number of calls."""
    op()
    _sync(device)
    start = time.perf_counter()
    op()
    _sync(device)
    iterations = _agreed_iterations(ctx, group, time.perf_counter() - start, device)
    start = time.perf_counter()
    for _ in range(iterations):
        op()
    _sync(device)
    return moved * iterations / (time.perf_counter() - start) / 1e9


def _device_for(backend: str, ctx: Context) -> torch.device:
    return ctx.device if backend == "nccl" else torch.device("cpu")


def _all_reduce(ctx: Context, backend: str) -> float:
    group = ctx.group(backend)
    device = _device_for(backend, ctx)
    tensor = torch.ones(_elements(device), device=device)
    k = ctx.size
    return _bandwidth(ctx, lambda: group.allreduce([tensor]).wait(), device, group,
                      2 * (k - 1) / k * tensor.numel() * 4)


def all_reduce(ctx: Context) -> float:
    """GB/s bus bandwidth of an all-reduce over the members (NCCL on GPUs, gloo otherwise)."""
    return _all_reduce(ctx, ctx.backend)


def gloo_all_reduce(ctx: Context) -> float:
    """GB/s bus bandwidth of a gloo all-reduce of CPU tensors, GPUs or not."""
    return _all_reduce(ctx, "gloo")


def all_gather(ctx: Context) -> float:
    """GB/s bus bandwidth of an all-gather over the members."""
    group, device, k = ctx.group(), _device_for(ctx.backend, ctx), ctx.size
    chunk = _elements(device) // k
    mine = torch.ones(chunk, device=device)
    outputs = [torch.empty(chunk, device=device) for _ in range(k)]
    return _bandwidth(ctx, lambda: group.allgather([outputs], [mine]).wait(), device, group,
                      (k - 1) * chunk * 4)


def all_to_all(ctx: Context) -> float:
    """GB/s bus bandwidth of an all-to-all over the members."""
    group, device, k = ctx.group(), _device_for(ctx.backend, ctx), ctx.size
    elements = _elements(device) // k * k
    source = torch.ones(elements, device=device)
    target = torch.empty(elements, device=device)
    return _bandwidth(ctx, lambda: group.alltoall_base(target, source, [], []).wait(), device, group,
                      (k - 1) / k * elements * 4)


def multi_all_reduce(ctx: Context) -> float:
    """GB/s bus bandwidth with several all-reduces in flight at once."""
    group, device, k = ctx.group(), _device_for(ctx.backend, ctx), ctx.size
    tensors = [torch.ones(_elements(device) // MULTI, device=device) for _ in range(MULTI)]

    def op() -> None:
        for work in [group.allreduce([t]) for t in tensors]:
            work.wait()

    return _bandwidth(ctx, op, device, group, 2 * (k - 1) / k * sum(t.numel() for t in tensors) * 4)


def network_connectivity(ctx: Context) -> float:
    """Milliseconds of TCP round trip to the head and tail nodes (the worse one); unreachable fails."""
    targets = [m for m in (ctx.members[0], ctx.members[-1]) if m != ctx.node] if ctx.members else []
    if not targets:
        raise Unsupported("needs at least two nodes")
    worst = 0.0
    for peer in dict.fromkeys(targets):
        link = ctx.links.get(peer)
        if link is None or not link.get("ok"):
            raise RuntimeError(f"cannot reach {peer}: {(link or {}).get('error', 'not probed')}")
        worst = max(worst, float(link["rtt_ms"]))
    return worst
