"""The engine: the supervisor loop and the recovery rounds it runs.

Layering: it talks to schedulers only through :mod:`trainguard.adapters` and to behaviour only
through :class:`trainguard.hooks.PluginHost`.

| module | what it owns |
| --- | --- |
| ``supervisor`` | the loop, signals, the first start (or resume, or adoption), :func:`supervise` |
| ``rounds`` | one recovery round: diagnose, decide, stop, isolate, restart, record |
| ``launcher`` | placing, starting and stopping ranks; seed 002's restart counters |
| ``rank_env`` | the environment a rank gets (torchrun's variables, then trainguard's) |
| ``inbox`` | what the ranks' SDK monitors said |
| ``watch`` | hang and exit-hang detection |
| ``recorder`` | events and final verdicts |
"""

from __future__ import annotations

from trainguard.engine.state import SupervisorInterrupted
from trainguard.engine.supervisor import Supervisor, supervise

__all__ = ["Supervisor", "SupervisorInterrupted", "supervise"]
