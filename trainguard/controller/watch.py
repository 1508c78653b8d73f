"""The controller's watches: one list+watch per resource across a namespace (or all), its only
reads while idle. The loop is the Kubernetes adapter's (:class:`ListWatch`)."""

from __future__ import annotations

from trainguard.adapters.kubernetes.watch import ListWatch

__all__ = ["ListWatch"]
