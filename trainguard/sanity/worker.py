"""The check worker: one process per node per check round (``python -m trainguard.sanity.worker``).

Its plan comes in ``TRAINGUARD_SANITY_PLAN`` (JSON)::

    {"node": "node-2", "nodes": ["node-0", ...], "master": ["127.0.0.1", 29500],
     "window": 1.0, "timeout": 60.0,
     "items": [SanityItem.to_json(), ...],                      # node-scope items
     "groups": [{"id": "r1-pair-1", "members": ["node-2", "node-3"], "items": [...]}],
     "order": ["r1-pair-0", "r1-pair-1", "r1-all"], "repeats": 3}

``order`` lists every group of the round; where all nodes share one host, groups take turns
(everyone meets at a barrier before each) and so do ``exclusive`` node items, because on shared
cores the measurements would otherwise be of each other. Node items and collectives report the
best of ``repeats`` runs.

The first node of ``nodes`` hosts the round's store (the control plane: barriers, addresses,
link results); groups use it under their id. Node items start together on every node, so a
node is measured under the same conditions as its peers. The result is printed as the last
line of the log, ``TRAINGUARD_SANITY_RESULT {json}``, so it comes back through any adapter's
``log_tail``::

    {"node": ..., "device": "cpu", "absent": [nodes that never joined],
     "items": {name: {"status": "ok"|"unsupported"|"failed", "value": float|null, "message": str}},
     "groups": {id: {"members": [...], "backend": "gloo", "links": {peer: {"ok": bool, ...}},
                     "items": {name: {...}}}}}
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import socket
import sys
import time
from typing import Any, Callable, Sequence

RESULT_PREFIX = "TRAINGUARD_SANITY_RESULT "
PLAN_VAR = "TRAINGUARD_SANITY_PLAN"


def _function(path: str) -> Callable[..., float]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


class _Round:
    """The round's store and barriers; members that never joined are left out of later barriers."""

    def __init__(self, plan: dict[str, Any]) -> None:
        import torch.distributed as dist

        self.node = plan["node"]
        self.nodes: list[str] = list(plan["nodes"])
        self.timeout = float(plan["timeout"])
        host, port = plan["master"]
        self.master = self.nodes[0] == self.node
        self.store = dist.TCPStore(host, int(port), None, self.master,
                                   datetime.timedelta(seconds=self.timeout), wait_for_workers=False)
        self.present = list(self.nodes)
        self.shared_host = False

    def barrier(self, name: str, members: Sequence[str] | None = None, store: Any = None) -> list[str]:
        """Wait for ``members`` (default: those present) at ``name``; returns those that never came."""
        store = store or self.store
        members = list(members if members is not None else self.present)
        store.set(f"barrier/{name}/{self.node}", "1")
        deadline = time.monotonic() + self.timeout
        missing = list(members)
        while missing and time.monotonic() < deadline:
            missing = [m for m in missing if not store.check([f"barrier/{name}/{m}"])]
            if missing:
                time.sleep(0.02)
        return missing

    def close(self) -> None:
        """The host keeps the store up until every other worker has left it."""
        self.barrier("end")
        if not self.master:
            self.store.add("left", 1)
            return
        deadline = time.monotonic() + self.timeout
        while self.store.add("left", 0) < len(self.present) - 1 and time.monotonic() < deadline:
            time.sleep(0.02)


def _outcome(run: Callable[[], float]) -> dict[str, Any]:
    from trainguard.sanity.measure import Unsupported

    try:
        return {"status": "ok", "value": float(run()), "message": ""}
    except Unsupported as exc:
        return {"status": "unsupported", "value": None, "message": str(exc)}
    except Exception as exc:
        return {"status": "failed", "value": None, "message": f"{type(exc).__name__}: {exc}"[:500]}


def _node_item(rnd: _Round, item: dict[str, Any], device: Any, plan: dict[str, Any]) -> dict[str, Any]:
    """The best of ``repeats`` runs started together on every node: a node is slow when even its
    best is far below its peers', which a moment of scheduling noise cannot cause. A node whose
    run fails still keeps every barrier, so its peers are not held up."""
    from trainguard.sanity.measure import Context

    # Virtual nodes sharing a host take turns on contended items; repeats interleave, so a
    # burst of load from outside spoils one sample of a node, not all of them.
    turns = rnd.present if item.get("exclusive") and rnd.shared_host else [rnd.node]
    outcomes = []
    for attempt in range(max(1, int(plan.get("repeats", 3)))):
        for turn, node in enumerate(turns):
            rnd.barrier(f"item-{item['name']}-{attempt}-{turn}")
            if node == rnd.node and not any(o["status"] != "ok" for o in outcomes):
                ctx = Context(node=rnd.node, device=device, window=float(plan["window"]), timeout=rnd.timeout)
                outcomes.append(_outcome(lambda: _function(item["function"])(ctx)))
    return _best(item, len(outcomes), iter(outcomes).__next__)


def _best(item: dict[str, Any], repeats: int, once: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The best of ``repeats`` outcomes; the first that is not ``ok`` ends the series."""
    best: dict[str, Any] | None = None
    for _ in range(max(1, repeats)):
        outcome = once()
        if outcome["status"] != "ok":
            return outcome
        if best is None or (outcome["value"] > best["value"]) == bool(item["higher_is_better"]):
            best = outcome
    assert best is not None
    return best


def _device() -> Any:
    import torch

    if torch.cuda.is_available():
        index = int(os.environ.get("TRAINGUARD_SANITY_GPU", "0")) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    torch.set_num_threads(1)
    return torch.device("cpu")


def _device_id(device: Any) -> str:
    if device.type != "cuda":
        return f"{socket.gethostname()}/cpu"
    import torch

    return f"{socket.gethostname()}/{torch.cuda.get_device_properties(device).uuid}"


def _run_group(rnd: _Round, group: dict[str, Any], server: Any, device: Any, plan: dict[str, Any],
               drop: frozenset[str]) -> dict[str, Any]:
    import torch.distributed as dist

    from trainguard.sanity.link import probe
    from trainguard.sanity.measure import Context

    members: list[str] = list(group["members"])
    rank = members.index(rnd.node)
    store = dist.PrefixStore(group["id"], rnd.store)
    out: dict[str, Any] = {"members": members, "links": {}, "items": {}}
    absent = [m for m in members if m not in rnd.present]
    store.set(f"addr/{rnd.node}", server.address)
    store.set(f"dev/{rnd.node}", _device_id(device))
    missing = rnd.barrier("joined", [m for m in members if m not in absent], store) + absent
    if missing:
        reason = f"{', '.join(missing)} did not join"
        out["items"] = {i["name"]: {"status": "failed", "value": None, "message": reason} for i in group["items"]}
        out["links"] = {m: {"ok": False, "error": "did not join"} for m in missing}
        return out
    for peer in members[rank + 1:]:
        result = probe(rnd.node, peer, store.get(f"addr/{peer}").decode(), drop)
        store.set(f"link/{rnd.node}/{peer}", json.dumps(result))
    rnd.barrier("probed", members, store)
    down = []
    for i, a in enumerate(members):
        for b in members[i + 1:]:
            key = f"link/{a}/{b}"
            result = json.loads(store.get(key)) if store.check([key]) else {"ok": False, "error": "not probed"}
            if rnd.node in (a, b):
                out["links"][b if a == rnd.node else a] = result
            if not result["ok"]:
                down.append(f"{a}<->{b} ({result['error']})")
    devices = {store.get(f"dev/{m}").decode() for m in members}
    ctx = Context(node=rnd.node, device=device, window=float(plan["window"]), timeout=rnd.timeout, rank=rank,
                  members=tuple(members), store=store, links=out["links"],
                  distinct_devices=len(devices) == len(members))
    out["backend"] = ctx.backend
    broken = ""
    for item in group["items"]:
        if item["name"] == "network_connectivity":
            out["items"][item["name"]] = _outcome(lambda: _function(item["function"])(ctx))
            continue
        if down or broken:
            message = f"link down: {'; '.join(down)}" if down else f"skipped after {broken}"
            out["items"][item["name"]] = {"status": "failed", "value": None, "message": message}
            continue
        result = _best(item, int(plan.get("repeats", 3)), lambda: _outcome(lambda: _function(item["function"])(ctx)))
        out["items"][item["name"]] = result
        # A collective that failed on one member leaves the others out of step: stop here.
        if result["status"] == "failed":
            broken = f"{item['name']} failed"
    return out


def main() -> int:
    plan = json.loads(os.environ[PLAN_VAR])
    from trainguard.sanity.link import ProbeServer, dropped_peers, local_address

    drop = dropped_peers()
    result: dict[str, Any] = {"node": plan["node"], "items": {}, "groups": {}, "absent": []}
    try:
        device = _device()
        result["device"] = str(device)
        rnd = _Round(plan)
        server = ProbeServer(plan["node"], local_address(plan["master"][0]), drop)
        rnd.store.set(f"host/{plan['node']}", socket.gethostname())
        missing = rnd.barrier("start")
        rnd.present = [n for n in rnd.nodes if n not in missing]
        rnd.shared_host = len(rnd.present) > 1 and len({rnd.store.get(f"host/{n}") for n in rnd.present}) == 1
        result["absent"] = missing
        for item in plan["items"]:
            result["items"][item["name"]] = _node_item(rnd, item, device, plan)
        own = {group["id"]: group for group in plan["groups"]}
        for gid in plan.get("order", list(own)):
            # Pairs on one shared host take turns, as if each pair had its own machines.
            if rnd.shared_host:
                rnd.barrier(f"turn-{gid}")
            if gid in own:
                result["groups"][gid] = _run_group(rnd, own[gid], server, device, plan, drop)
        rnd.close()
        server.close()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"[:500]
    sys.stdout.write("\n" + RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    # Gloo and NCCL threads may still hold sockets to peers that left: do not wait for them.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
