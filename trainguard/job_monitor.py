"""AIMaster's ``job_monitor`` face: ``from trainguard import job_monitor as jm`` ports code
written for ``from aimaster import job_monitor as jm`` by changing that one import."""

from __future__ import annotations

from trainguard.sdk import Config, Monitor, PyTorchConfig, Status, TFConfig

__all__ = ["Config", "Monitor", "PyTorchConfig", "Status", "TFConfig"]
