"""A site's own check item, as a plugin would ship it: fails on the node ``SITE_BROKEN_NODE`` names."""

from __future__ import annotations

import os

from trainguard import hookimpl
from trainguard.sanity import SanityItem, Scope


def ecc_scan(ctx) -> float:
    if ctx.node == os.environ.get("SITE_BROKEN_NODE"):
        raise RuntimeError("2 uncorrectable ECC errors on GPU 3")
    return 1.0


def site_marker(ctx) -> float:
    """Passes everywhere: shows an item ran on every node, with no speed to compare."""
    return 1.0


class SitePlugin:
    @hookimpl
    def trainguard_sanity_items(self):
        return [SanityItem("ecc_scan", Scope.NODE, "helpers.sanity_site_items:ecc_scan", "pass"),
                SanityItem("site_marker", Scope.NODE, "helpers.sanity_site_items:site_marker", "pass")]
