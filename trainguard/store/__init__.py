"""The run history: jobs, rounds, faults, events, the bad-node ledger and job ownership.

SQLite (the embedded default, one file in the state directory: WAL on local disks, the
rollback journal on network filesystems) and PostgreSQL (``--state-url postgresql://...``,
for many supervisors sharing one store) hold the same schema (:mod:`.schema`) and answer the
same queries (:mod:`.runstore`, which lists the modules it is made of); :mod:`.backends` is
the only place they differ and :mod:`.lease` says who owns a job.
"""

from __future__ import annotations

from trainguard.store.access import default_state_dir, default_state_url, parse_state_url
from trainguard.store.backends import NETWORK_FILESYSTEMS, filesystem_type
from trainguard.store.lease import LEASE_TTL, Lease, Owner
from trainguard.store.runstore import RESUMABLE_CODES, RunStore, cut_off, is_resumable, resumable_failure
from trainguard.store.schema import SCHEMA_VERSION

__all__ = [
    "LEASE_TTL",
    "NETWORK_FILESYSTEMS",
    "RESUMABLE_CODES",
    "SCHEMA_VERSION",
    "Lease",
    "Owner",
    "RunStore",
    "cut_off",
    "default_state_dir",
    "default_state_url",
    "filesystem_type",
    "is_resumable",
    "parse_state_url",
    "resumable_failure",
]
