"""The pluggy markers of the ``trainguard`` project; made once, imported everywhere."""

from __future__ import annotations

import pluggy

PROJECT = "trainguard"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
