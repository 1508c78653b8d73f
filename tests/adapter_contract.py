"""The adapter contract: what the engine relies on from every scheduler adapter, as tests.

Every adapter's test module subclasses :class:`AdapterContract` and provides a fixture
``make_adapter(nproc, nodes, slots, policy)`` returning a fresh adapter (closed by the suite)
running real processes on its scheduler (or its stand-in). The suite starts, stops with grace,
detects exits, watches output, isolates, adopts after a supervisor restart and reads the SDK,
through the :class:`~trainguard.adapters.Adapter` methods only.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from trainguard.adapters import Adapter, Exit, Launch
from trainguard.adapters.processes import alive as _alive
from trainguard.errors import AdapterError
from trainguard.model import Instance
from trainguard.policy import Policy

RANK = Path(__file__).parent / "helpers" / "contract_rank.py"
REPO = Path(__file__).resolve().parent.parent

MakeAdapter = Callable[..., Adapter]


def launches(adapter: Adapter, do: str, ranks: list[int], round_no: int = 0,
             current: dict[int, str] | None = None, isolated: frozenset[str] = frozenset()) -> list[Launch]:
    placement = adapter.place(ranks, current or {}, isolated)
    master = adapter.rendezvous(placement)
    out = []
    for rank in ranks:
        env = {**os.environ, "CONTRACT_DO": do, "RANK": str(rank), "TRAINGUARD_NODE": placement[rank],
               "MASTER_ADDR": master[0], "MASTER_PORT": str(master[1]), "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": str(REPO)}
        out.append(Launch(Instance(rank, placement[rank], 0), (sys.executable, str(RANK)), env, None, round_no))
    return out


def wait_for(adapter: Adapter, ranks: set[int], timeout: float) -> list[Exit]:
    deadline = time.monotonic() + timeout
    exits: list[Exit] = []
    while {e.rank for e in exits} < ranks and time.monotonic() < deadline:
        exits += adapter.wait(min(0.5, deadline - time.monotonic()))
    return exits


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class AdapterContract:
    """Subclass in an adapter's test module and provide the ``make_adapter`` fixture."""

    # How long a start may take on this scheduler before the rank prints.
    start_timeout = 20.0

    @pytest.fixture
    def adapter(self, make_adapter: MakeAdapter):
        made: list[Adapter] = []

        def make(nproc: int = 2, nodes: int = 2, slots: int = 1, **policy: object) -> Adapter:
            adapter = make_adapter(nproc=nproc, nodes=nodes, slots=slots,
                                   policy=Policy().replace(**policy) if policy else Policy())
            made.append(adapter)
            return adapter

        yield make
        for adapter in made:
            adapter.close()

    def test_start_runs_every_rank_and_its_output_is_logged(self, adapter):
        a = adapter()
        started = a.start(launches(a, "sleep", [0, 1]))
        assert set(started) == {0, 1} and all(i.pid and i.log_path for i in started.values())
        assert a.running() == frozenset({0, 1})
        assert wait_until(lambda: all("up on" in a.log_tail(r, 4096) for r in (0, 1)), self.start_timeout)
        assert all(a.last_output(r) is not None for r in (0, 1))

    def test_an_exit_is_detected_with_its_code(self, adapter):
        a = adapter()
        a.start(launches(a, "exit:3", [0]) + launches(a, "sleep", [1], current={}))
        exits = wait_for(a, {0}, self.start_timeout)
        assert [(e.rank, e.exit_code) for e in exits] == [(0, 3)]
        assert a.running() == frozenset({1})

    def test_stop_honours_the_grace_period(self, adapter, tmp_path):
        a = adapter(stop_grace_period=5)
        a.start(launches(a, f"term-write:{tmp_path / 'ckpt'}", [0, 1]))
        assert wait_until(lambda: all("up on" in a.log_tail(r, 4096) for r in (0, 1)), self.start_timeout)
        t = time.monotonic()
        a.stop([0, 1], 5.0)
        assert time.monotonic() - t < 5.0, "ranks that finish within the grace are not waited on longer"
        assert sorted(p.name for p in tmp_path.glob("ckpt.*")) == ["ckpt.0", "ckpt.1"]
        assert all(p.read_text() == "complete\n" for p in tmp_path.glob("ckpt.*")), "killed mid-write"
        assert a.running() == frozenset()

    def test_stop_kills_a_rank_that_ignores_sigterm_after_the_grace(self, adapter):
        a = adapter()
        a.start(launches(a, "ignore-term", [0]))
        assert wait_until(lambda: "up on" in a.log_tail(0, 4096), self.start_timeout)
        t = time.monotonic()
        a.stop([0], 1.0)
        assert 0.9 <= time.monotonic() - t < 8.0
        assert a.running() == frozenset()

    def test_silence_shows_in_last_output(self, adapter):
        a = adapter()
        a.start(launches(a, "quiet", [0]) + launches(a, "sleep", [1], current={}))
        assert wait_until(lambda: "up on" in a.log_tail(1, 4096), self.start_timeout)
        quiet_before = a.last_output(0)
        time.sleep(1.2)
        assert a.last_output(0) == quiet_before, "a silent rank's log does not advance"
        assert 0 in a.running()

    def test_placement_avoids_isolated_nodes_and_says_when_none_is_left(self, adapter):
        a = adapter(nproc=2, nodes=3, slots=1)
        nodes = a.capacity(frozenset()).nodes
        placement = a.place([0, 1], {}, frozenset({nodes[0]}))
        assert nodes[0] not in placement.values() and len(set(placement.values())) == 2
        with pytest.raises(AdapterError):
            a.place([0, 1], {}, frozenset(nodes[:2]))
        a.isolate([nodes[0]], "TG-GPU-ECC: test")
        assert a.capacity(frozenset({nodes[0]})).healthy_slots() == 2

    def test_sdk_records_arrive_and_a_restart_does_not_redeliver_them(self, adapter):
        a = adapter(nproc=1, nodes=1)
        a.start(launches(a, "sdk", [0]))
        records: list[dict] = []

        def steps() -> int:
            a.wait(0.1)  # SDK records wake the loop's wait like exits do
            records.extend(r for _, r in a.sdk_records())
            return sum(1 for r in records if r.get("type") == "step")

        assert wait_until(lambda: steps() >= 3, self.start_timeout)
        a.stop([0], 1.0)
        a.start(launches(a, "exit:0", [0], round_no=1))
        wait_for(a, {0}, self.start_timeout)
        assert [r for _, r in a.sdk_records() if r.get("type") == "step"] == []
        assert "up on" in a.log_tail(0, 4096)

    # Whether the scheduler keeps ranks running without their supervisor (pods do).
    ranks_outlive_supervisor = False

    def test_adopt_after_a_supervisor_restart(self, adapter):
        """A new adapter for the same job finds the running ranks where they outlive the
        supervisor, and nothing where they cannot."""
        a = adapter()
        a.start(launches(a, "sleep", [0, 1]))
        assert wait_until(lambda: a.running() == frozenset({0, 1}), self.start_timeout)
        found = adapter().adopt()
        assert set(found) == ({0, 1} if self.ranks_outlive_supervisor else set())

    # Whether instance pids are processes of this machine that the suite can watch.
    processes_are_local = True

    def test_close_is_idempotent_and_leaves_nothing_running(self, adapter):
        a = adapter()
        started = a.start(launches(a, "sleep", [0, 1]))
        a.close()
        a.close()
        for instance in started.values():
            if self.processes_are_local and instance.pid:
                assert wait_until(lambda: not _alive(instance.pid), 10), f"pid {instance.pid} survived close()"
