"""Virtual nodes with real defects for the sanity-check tests, and the engine's side of a check.

:class:`DrillAdapter` is the real :class:`LocalAdapter` with two defects a site could have: the
processes of node ``slow`` run under a CPU quota (``sanity_throttle.py``), and ``node_env``
adds environment variables to one node's processes (``TRAINGUARD_SANITY_DROP_PEERS`` breaks a
link at the transport). """

from __future__ import annotations

import secrets
import sys
import time
from dataclasses import replace
from pathlib import Path

from trainguard.adapters import Launch
from trainguard.adapters.local import LocalAdapter
from trainguard.model import Event, Instance

THROTTLE = Path(__file__).with_name("sanity_throttle.py")


class DrillAdapter(LocalAdapter):
    def __init__(self, *, slow: str | None = None, percent: int = 10, node_env=None, **options) -> None:
        super().__init__(**options)
        self.slow, self.percent = slow, percent
        self.node_env = dict(node_env or {})
        self.cgroup = f"trainguard-test-{secrets.token_hex(4)}"

    def start(self, launches):
        launches = [replace(l, env={**l.env, **self.node_env.get(l.instance.node, {})}) for l in launches]
        return super().start(launches)

    def _argv(self, launch: Launch, log_path: Path) -> list[str]:
        if launch.instance.node == self.slow:
            return [sys.executable, str(THROTTLE), self.cgroup, str(self.percent), "--", *launch.command]
        return list(launch.command)

    def close(self) -> None:
        super().close()
        from helpers.sanity_throttle import cgroup_dir

        found = cgroup_dir(self.cgroup)
        if found is not None and found[0].exists():
            for _ in range(50):
                try:
                    found[0].rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
