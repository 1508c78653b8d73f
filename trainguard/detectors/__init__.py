"""Fault detectors the engine runs between exits.

Exits themselves are detected by the adapter (event-driven); these watch for what an exit
never announces: a job that stopped making progress (:mod:`.hang`), a job that does not
finish after one of its instances did (:mod:`.exit_hang`), and a rank that is persistently
slower than its peers (:mod:`.slow_rank`).
"""

from __future__ import annotations

from trainguard.detectors.exit_hang import ExitHangDetector
from trainguard.detectors.hang import HangDetector, advise_hang_interval
from trainguard.detectors.slow_rank import SlowRankDetector

__all__ = ["ExitHangDetector", "HangDetector", "SlowRankDetector", "advise_hang_interval"]
