"""Fault detectors the engine runs between exits.

Exits themselves are detected by the adapter (event-driven); these watch for what an exit
never announces: a job that stopped making progress (:mod:`.hang`) and a job that does not
finish after one of its instances did (:mod:`.exit_hang`).
"""

from __future__ import annotations

from trainguard.detectors.exit_hang import ExitHangDetector
from trainguard.detectors.hang import HangDetector

__all__ = ["ExitHangDetector", "HangDetector"]
