"""Check items as data, and the built-in ones as an ordinary plugin.

An item says what it measures and where its code lives; the check worker (a separate process
on every node) imports ``function`` and calls it with a :class:`trainguard.sanity.measure.Context`.
Sites add items (a DCGM diagnostic, an NVLink test) by implementing the
``trainguard_sanity_items`` hook in a plugin of the entry-point group ``trainguard``.

Scopes: ``node`` items run on each node alone and a node is judged against its peers' median;
``pair`` items run a collective between two nodes, in pairwise rounds that name a bad node or
link; ``all`` items run one collective over every node.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from trainguard.errors import PluginError
from trainguard.hooks.markers import hookimpl

if TYPE_CHECKING:
    from trainguard.hooks import PluginHost

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class Scope(str, enum.Enum):
    """Where an item runs: one node, a pair of nodes, or all nodes together."""

    NODE = "node"
    PAIR = "pair"
    ALL = "all"


@dataclass(frozen=True)
class SanityItem:
    """One check item.

    :param name: the seed's name (``gemm_flops``), lower-case.
    :param scope: see :class:`Scope`.
    :param function: ``"module:callable"`` the check worker imports and calls with a context;
        it returns the measured value in ``unit`` or raises ``Unsupported``.
    :param higher_is_better: False for latencies.
    :param exclusive: where several virtual nodes share one host, run on one node at a time:
        the value depends on threads being scheduled together, which sharing the cores spoils.
    """

    name: str
    scope: Scope
    function: str
    unit: str
    higher_is_better: bool = True
    description: str = ""
    exclusive: bool = False

    def to_json(self) -> dict[str, str | bool]:
        return {"name": self.name, "scope": self.scope.value, "function": self.function, "unit": self.unit,
                "higher_is_better": self.higher_is_better, "exclusive": self.exclusive}


_M = "trainguard.sanity.measure"

BUILTIN_ITEMS: tuple[SanityItem, ...] = (
    SanityItem("gemm_flops", Scope.NODE, f"{_M}:gemm_flops", "GFLOP/s",
               description="matrix-multiply throughput (GPU GEMM; one CPU core without a GPU)"),
    SanityItem("kernel_launch", Scope.NODE, f"{_M}:kernel_launch", "us", higher_is_better=False,
               description="latency of launching a tiny kernel (operator dispatch on CPU)"),
    SanityItem("all_reduce_1", Scope.NODE, f"{_M}:all_reduce_1", "GB/s", exclusive=True,
               description="all-reduce between the node's own devices (NCCL; two gloo ranks on CPU)"),
    SanityItem("comp_comm_overlap", Scope.NODE, f"{_M}:comp_comm_overlap", "GFLOP/s", exclusive=True,
               description="GEMM throughput while an intra-node all-reduce runs alongside"),
    SanityItem("all_reduce_2", Scope.PAIR, f"{_M}:all_reduce", "GB/s",
               description="all-reduce bus bandwidth between two nodes (NCCL; gloo on CPU)"),
    SanityItem("all_to_all_2", Scope.PAIR, f"{_M}:all_to_all", "GB/s"),
    SanityItem("all_gather_2", Scope.PAIR, f"{_M}:all_gather", "GB/s"),
    SanityItem("multi_all_reduce_2", Scope.PAIR, f"{_M}:multi_all_reduce", "GB/s",
               description="several all-reduces in flight at once between two nodes"),
    SanityItem("pytorch_gloo_2", Scope.PAIR, f"{_M}:gloo_all_reduce", "GB/s",
               description="all-reduce between two nodes through PyTorch gloo, whatever the hardware"),
    SanityItem("all_reduce", Scope.ALL, f"{_M}:all_reduce", "GB/s"),
    SanityItem("all_gather", Scope.ALL, f"{_M}:all_gather", "GB/s"),
    SanityItem("multi_all_reduce", Scope.ALL, f"{_M}:multi_all_reduce", "GB/s"),
    SanityItem("network_connectivity", Scope.ALL, f"{_M}:network_connectivity", "ms", higher_is_better=False,
               description="TCP reachability and round trip to the head and tail nodes"),
)


@hookimpl
def trainguard_sanity_items() -> Sequence[SanityItem]:
    """The seed's thirteen items."""
    return BUILTIN_ITEMS


def collect_items(host: PluginHost | None = None) -> dict[str, SanityItem]:
    """Every plugin's items by name, validated: names unique and well-formed, functions importable paths.

    Like adapter registration, a malformed item is its author's bug and fails loudly.
    """
    batches: list[Sequence[SanityItem]] = [BUILTIN_ITEMS] if host is None else \
        list(host.pm.hook.trainguard_sanity_items())
    items: dict[str, SanityItem] = {}
    for batch in batches:
        for item in batch:
            if not isinstance(item, SanityItem):
                raise PluginError(f"sanity item {item!r} is not a SanityItem")
            if not _NAME.match(item.name):
                raise PluginError(f"sanity item name {item.name!r} must be lower-case letters, digits or _")
            if not _FUNCTION.match(item.function):
                raise PluginError(f"sanity item {item.name!r}: function {item.function!r} is not 'module:callable'")
            if item.name in items:
                raise PluginError(f"sanity item {item.name!r} is contributed twice")
            items[item.name] = item
    return items
