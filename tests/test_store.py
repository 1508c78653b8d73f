"""The run history store: durable, WAL on local disks, rollback journal on network filesystems."""

from __future__ import annotations

import time

import pytest

from trainguard.errors import JobStateError
from trainguard.model import Action, ErrorSource, JobStatus, NodeFaultEntry, RoundRecord
from trainguard.store import RunStore


def test_local_disk_uses_wal_and_network_filesystems_do_not(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "a")
    assert store.journal_mode == "wal"
    store.close()
    monkeypatch.setattr("trainguard.store.filesystem_type", lambda path: "nfs4")
    store = RunStore(tmp_path / "b")
    assert store.journal_mode == "delete"
    store.close()


def test_filesystem_type_takes_the_longest_mount_prefix(tmp_path):
    from pathlib import Path

    from trainguard.store import filesystem_type

    mounts = ("/dev/vda / ext4 rw 0 0\n"
              "server:/export /shared nfs4 rw 0 0\n"
              "/dev/vdb /shared/local xfs rw 0 0\n"
              "lustre@tcp:/fs /shared2 lustre rw 0 0\n")
    assert filesystem_type(Path("/shared/ckpt"), mounts) == "nfs4"
    assert filesystem_type(Path("/shared/local/x"), mounts) == "xfs"
    assert filesystem_type(Path("/shared2"), mounts) == "lustre"
    assert filesystem_type(Path("/shared22/x"), mounts) == "ext4", "a prefix must end at a path separator"
    assert filesystem_type(tmp_path) != "", "the real /proc/mounts is read when none is given"


def test_history_survives_reopen_and_rebuilds_counters(tmp_path):
    store = RunStore(tmp_path)
    store.begin_job("j", {"command": ["x"], "nproc": 2}, {})
    now = time.time()
    store.save_round(RoundRecord("j", 1, "r", "TG-A", "m", ErrorSource.EXIT_CODE, Action.RESTART_JOB, now,
                                 isolated=("node-1",)))
    store.add_ledger("j", NodeFaultEntry("node-1", "TG-A", now))
    store.close()
    again = RunStore(tmp_path)
    history = again.history("j")
    assert history.budget_used == 1 and history.isolated_nodes == {"node-1"}
    assert history.same_fault_on_node("node-1", "TG-A", now - 10) == 1
    assert again.begin_job("j", {"command": ["x"], "nproc": 2}, {}) is True
    again.finish_job("j", JobStatus.SUCCEEDED)
    with pytest.raises(JobStateError, match="already succeeded"):
        again.begin_job("j", {}, {})
    with pytest.raises(JobStateError, match="no such job"):
        again.report("nope")
    again.close()
