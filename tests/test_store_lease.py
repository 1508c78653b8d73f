"""One owner per job: a lease that dies with its holder, on SQLite (flock) and PostgreSQL
(a session advisory lock)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from pg_server import backend, pg_server  # noqa: F401  (fixtures)
from trainguard.errors import JobOwnedError, PolicyError
from trainguard.store import RunStore


def _open(backend_) -> RunStore:
    state_dir, url = backend_
    return RunStore(state_dir, url=url)


def test_a_live_owner_keeps_the_job_and_is_named(backend):
    first, second = _open(backend), _open(backend)
    lease = first.acquire("j")
    assert lease.took_over is None and not lease.lost()
    assert first.acquire("j") is lease, "the holder asking again gets its own lease"
    with pytest.raises(JobOwnedError) as caught:
        second.acquire("j")
    assert caught.value.exit_code == 3 and caught.value.pid == os.getpid()
    assert f"host {socket.gethostname()}, pid {os.getpid()}" in str(caught.value) and "--takeover" in str(caught.value)
    with pytest.raises(JobOwnedError):
        second.begin_job("j", {}, {})
    second.acquire("other").release()
    lease.release()
    assert second.acquire("j").took_over is None, "a clean release leaves no owner to take over from"
    first.close()
    second.close()


def test_closing_the_store_releases_its_leases(backend):
    store = _open(backend)
    store.begin_job("j", {}, {})
    store.close()
    again = _open(backend)
    assert again.acquire("j").took_over is None
    again.close()


def test_a_dead_owner_is_taken_over_and_said_so(backend, caplog):
    state_dir, url = backend
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from trainguard.store import RunStore
        store = RunStore({str(state_dir)!r}, url={url!r})
        store.acquire("j")
        print("owned", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "owned"
        store = _open(backend)
        with pytest.raises(JobOwnedError, match=f"pid {child.pid}"):
            store.acquire("j")
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 10
        while True:
            try:
                lease = store.acquire("j")
                break
            except JobOwnedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # the server notices the dead session's closed socket
        assert lease.took_over is not None and lease.took_over.pid == child.pid and not lease.forced
        assert "took the job over from a supervisor that died" in caplog.text
        store.close()
    finally:
        child.kill()
        child.wait()


def test_takeover_forces_out_a_live_owner_who_can_tell(backend, caplog):
    first, second = _open(backend), _open(backend)
    old = first.acquire("j")
    new = second.acquire("j", takeover=True)
    assert new.forced and new.took_over.token == old.owner.token
    assert old.lost() and not new.lost()
    assert "--takeover" in caplog.text
    assert second.owner("j").token == new.owner.token
    first.close()
    assert not new.lost(), "the old owner's close must not undo the takeover"
    with pytest.raises(JobOwnedError):
        _open(backend).acquire("j")
    second.close()


@pytest.mark.parametrize("job_id", ["../../x", "/abs", ".", "..", "a" * 129, "a b", ""])
def test_a_job_id_is_never_a_path(tmp_path, job_id):
    store = RunStore(tmp_path)
    with pytest.raises(PolicyError, match="--job-id"):
        store.acquire(job_id)
    with pytest.raises(PolicyError, match="--job-id"):
        store.begin_job(job_id, {}, {})
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [RunStore.FILENAME, *(
        [n for n in (f"{RunStore.FILENAME}-shm", f"{RunStore.FILENAME}-wal") if (tmp_path / n).exists()])]


@pytest.mark.parametrize("acted", [False, True])
def test_a_supervisor_killed_mid_round_leaves_a_round_the_next_one_closes(backend, acted):
    state_dir, url = backend
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from trainguard.model import Action, ErrorSource, RoundRecord
        from trainguard.store import RunStore
        store = RunStore({str(state_dir)!r}, url={url!r})
        store.begin_job("j", {{"command": ["x"]}}, {{}})
        store.open_round(RoundRecord("j", 1, "r", "TG-A", "m", ErrorSource.EXIT_CODE, Action.RESTART_JOB,
                                     time.time(), isolated=("node-1",)))
        if {acted!r}:
            store.mark_acted("j", 1)
        print("mid-round", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "mid-round"
        child.send_signal(signal.SIGKILL)
        child.wait()
        store = _open(backend)
        deadline = time.monotonic() + 10
        while True:
            try:
                assert store.begin_job("j", {"command": ["x"]}, {}) is True
                break
            except JobOwnedError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        (record,) = store.rounds("j")
        assert record.result.value == "interrupted" and record.consumes_budget is acted
        history = store.history("j")
        assert history.budget_used == int(acted)
        assert history.isolated_nodes == ({"node-1"} if acted else frozenset())
        assert store.next_round("j") == 2
        store.close()
    finally:
        child.kill()
        child.wait()


def test_on_network_filesystems_a_fresh_heartbeat_counts_even_when_the_lock_is_free(tmp_path, monkeypatch):
    monkeypatch.setattr("trainguard.store.backends.filesystem_type", lambda path: "lustre")
    first, second = RunStore(tmp_path), RunStore(tmp_path)
    lease = first.acquire("j")
    os.close(lease._lock.fd)  # as if the filesystem dropped the lock: the row still vouches
    lease._lock.fd = os.open(os.devnull, os.O_RDONLY)
    with pytest.raises(JobOwnedError):
        second.acquire("j")
    lease.renew(force=True)
    with pytest.raises(JobOwnedError):
        second.acquire("j")
    second._tx(lambda q: q("UPDATE leases SET heartbeat_at = heartbeat_at - 3600", ()))
    taken = second.acquire("j")
    assert taken.took_over.token == lease.owner.token and not taken.forced
    second.close()
    first.close()
