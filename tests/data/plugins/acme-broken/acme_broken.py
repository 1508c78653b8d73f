"""Plugins with bugs, as they happen in the wild: the supervisor must name and disable them."""

from __future__ import annotations

from trainguard import hookimpl


class Raises:
    """A classifier that crashes on every fault."""

    @hookimpl
    def trainguard_classify_fault(self, fault):
        raise RuntimeError("acme classifier bug")


class Garbage:
    """A strategy that answers with a string instead of a Decision."""

    @hookimpl(tryfirst=True)
    def trainguard_decide_recovery(self, incident):
        return "restart it please"


class BadEnv:
    """An environment plugin whose values are not strings."""

    @hookimpl
    def trainguard_instance_env(self, instance):
        return {"ACME_RANK": instance.rank}


raises = Raises()
garbage = Garbage()
bad_env = BadEnv()
