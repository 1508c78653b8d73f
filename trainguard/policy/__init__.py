"""One :class:`Policy` object: how a job is supervised and when it is given up.

The parameters and defaults are AIMaster's (seed 000), spelled ``--job-hang-interval`` on the
command line and in AIMaster-style argument strings, ``job_hang_interval`` or
``job-hang-interval`` in YAML, and ``trainguard/job-hang-interval`` in job annotations. The
degradation ladder of seed 002 adds a few parameters of its own, and its annotations
(``fault-tolerance/job-retry-num`` ...) are understood as well.

Sources stack in this order, later ones winning: defaults, ``--policy FILE.yaml``, an
AIMaster-style string, explicit command-line flags. Values are case-insensitive; a bad one
raises :class:`~trainguard.errors.PolicyError` naming the parameter.
"""

from __future__ import annotations

from trainguard.policy.parameters import (
    ALIASES,
    ANNOTATION_PREFIX,
    BOOLEAN_PARAMETERS,
    PARSERS,
    POLICY_FILE_MAX_BYTES,
    POLICY_FILE_MAX_DEPTH,
    RECOVER_STRATEGIES,
    ROLE_BEHAVIOURS,
    WARM_STANDBY_MODES,
    Policy,
    build_policy,
    flag,
)
from trainguard.policy.sources import from_annotations, load_policy_file, parse_aimaster_args

__all__ = [
    "ALIASES", "ANNOTATION_PREFIX", "BOOLEAN_PARAMETERS", "PARSERS", "POLICY_FILE_MAX_BYTES", "POLICY_FILE_MAX_DEPTH",
    "RECOVER_STRATEGIES", "ROLE_BEHAVIOURS", "WARM_STANDBY_MODES", "Policy", "build_policy", "flag",
    "from_annotations", "load_policy_file", "parse_aimaster_args",
]
