"""``trainguard controller``: fault tolerance for Volcano and batch/v1 Jobs, driven by annotations."""

from __future__ import annotations

from trainguard.controller.annotations import JobSettings, parse, supervised
from trainguard.controller.controller import Controller, ControllerOptions

__all__ = ["Controller", "ControllerOptions", "JobSettings", "parse", "supervised"]
