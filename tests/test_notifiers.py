"""Notifiers: the webhook against real servers on loopback, and notification off the critical path."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainguard import JobStatus, hookimpl
from trainguard.hooks import PluginHost
from trainguard.model import Event
from trainguard.plugins.notifiers import JsonLinesNotifier, WebhookNotifier


@pytest.fixture
def server():
    """A loopback HTTP server that fails the first ``fail`` POSTs with 503, then accepts."""
    state = {"fail": 0, "bodies": [], "auth": []}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state["auth"].append(self.headers.get("Authorization"))
            if state["fail"] > 0:
                state["fail"] -= 1
                self.send_response(503)
            else:
                state["bodies"].append(json.loads(body))
                self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/hooks/s3cr3t-token?key=hunter2"
    yield state
    httpd.shutdown()


def event(kind="job_failed"):
    return Event("job-1", kind, time.time(), "TG-USER-EXCEPTION: not retryable", round=None, data={"x": 1})


def test_webhook_retries_transient_failures_and_posts_the_event(server, caplog):
    server["fail"] = 2
    notifier = WebhookNotifier(server["url"], backoff=0.01, headers={"Authorization": "Bearer abc"})
    with caplog.at_level(logging.WARNING):
        notifier.trainguard_on_event(event())
    (body,) = server["bodies"]
    assert body["type"] == "job_failed" and body["job_id"] == "job-1" and body["data"] == {"x": 1}
    assert server["auth"] == ["Bearer abc"] * 3
    assert not caplog.records


def test_webhook_gives_up_quietly_and_never_logs_secrets(server, caplog):
    server["fail"] = 10
    notifier = WebhookNotifier(server["url"], attempts=2, backoff=0.01, headers={"Authorization": "Bearer abc"})
    with caplog.at_level(logging.WARNING):
        notifier.trainguard_on_event(event())
    assert server["bodies"] == [] and len(server["auth"]) == 2
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "not delivered (HTTP 503)" in text and "http://127.0.0.1:" in text
    for secret in ("s3cr3t-token", "hunter2", "Bearer abc"):
        assert secret not in text


def test_webhook_filters_types_and_survives_an_unreachable_host(caplog):
    notifier = WebhookNotifier("http://127.0.0.1:9/x", attempts=1, timeout=1, types={"job_failed"})
    with caplog.at_level(logging.WARNING):
        notifier.trainguard_on_event(event("round_started"))
        assert not caplog.records
        notifier.trainguard_on_event(event("job_failed"))
    assert "not delivered" in caplog.records[0].getMessage()
    with pytest.raises(ValueError, match="http"):
        WebhookNotifier("ftp://example/x")


# -- off the critical path: queues, a dead webhook, drops, draining ----------------------------

@pytest.fixture
def blackhole():
    """A TCP server that accepts every connection and never answers: a webhook host gone silent."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    accepted = threading.Event()

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            accepted.set()

    threading.Thread(target=accept, daemon=True).start()
    yield {"url": f"http://127.0.0.1:{listener.getsockname()[1]}/hook", "accepted": accepted}
    listener.close()
    for conn in held:
        conn.close()


def dead_webhook_host(url, **options):
    return PluginHost(load_entry_points=False, plugins={"webhook": WebhookNotifier(url, timeout=5, attempts=3)},
                      **options)


def test_a_blackholed_webhook_never_holds_up_notify(blackhole, tmp_path):
    host = dead_webhook_host(blackhole["url"], drain_timeout=0.3)
    host.pm.register(JsonLinesNotifier(tmp_path / "events.jsonl"), name="events-file")
    started = time.monotonic()
    for kind in ("job_started", "fault_detected", "round_started", "round_finished"):
        host.notify(event(kind))
    assert time.monotonic() - started < 0.2
    assert blackhole["accepted"].wait(5)
    # The events file is inline: every event is there, in order, the moment notify returns.
    lines = [json.loads(line)["type"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert lines == ["job_started", "fault_detected", "round_started", "round_finished"]
    started = time.monotonic()
    assert host.flush() is False
    assert 0.25 < time.monotonic() - started < 1.0


def test_a_full_queue_drops_notifications_counts_and_logs_them(blackhole, caplog):
    host = dead_webhook_host(blackhole["url"], notify_queue_size=2, drain_timeout=0.1)
    host.notify(event("job_started"))
    assert blackhole["accepted"].wait(5)  # the worker is now stuck in its first POST
    with caplog.at_level(logging.WARNING, logger="trainguard.hooks.delivery"):
        for _ in range(9):
            host.notify(event("sdk_message"))
    assert host.dropped_notifications == {"webhook": 7}
    # Only this host's drop is logged, once (other hosts' threads may log their own records).
    (record,) = [r for r in caplog.records if r.name == "trainguard.hooks.delivery" and "dropped" in r.getMessage()]
    assert "notifier webhook: sdk_message event dropped because its queue is full (2 waiting)" in record.getMessage()
    with caplog.at_level(logging.WARNING, logger="trainguard.hooks.host"):
        started = time.monotonic()
        host.close()
    assert time.monotonic() - started < 0.5
    assert "notifier webhook missed 10 event(s)" in caplog.text  # 7 dropped, 2 queued, 1 in its POST


def test_a_notifier_stuck_past_its_timeout_gets_no_more_events(blackhole, caplog):
    host = dead_webhook_host(blackhole["url"], drain_timeout=0.1)
    webhook = host.pm.get_plugin("webhook")
    assert webhook.notify_timeout == 3 * 5 + 2 * 10 + 1  # every attempt and every backoff at its cap
    webhook.notify_timeout = 0.2
    host.notify(event("job_started"))
    assert blackhole["accepted"].wait(5)
    time.sleep(0.3)
    with caplog.at_level(logging.WARNING, logger="trainguard.hooks.delivery"):
        host.notify(event("fault_detected"))
    assert host.dropped_notifications == {"webhook": 1}
    assert "stuck in one call for over 0.2 s" in caplog.text


def test_queued_notifiers_get_every_event_in_order_and_a_final_event_drains(server):
    host = PluginHost(load_entry_points=False, plugins={"webhook": WebhookNotifier(server["url"], backoff=0.01)})
    kinds = ["job_started", "fault_detected", "round_started", "round_finished", "job_succeeded"]
    for kind in kinds:
        host.notify(event(kind))
    # job_succeeded is final: notify returned only once the webhook had it.
    assert [body["type"] for body in server["bodies"]] == kinds
    assert host.dropped_notifications == {"webhook": 0}


def test_a_notifier_that_raises_on_its_worker_is_reported_on_the_callers_thread():
    class Broken:
        @hookimpl
        def trainguard_on_event(self, event):
            raise RuntimeError("slack is down")

    reported = []
    host = PluginHost(load_entry_points=False, plugins={"broken": Broken()},
                      on_plugin_error=lambda *args: reported.append((threading.current_thread(), *args)))
    host.notify(event("job_started"))
    host.notify(event("job_failed"))  # final: drains the queue, then reports what failed there
    ((thread, plugin, hook, error),) = reported
    assert thread is threading.main_thread() and (plugin, hook) == ("broken", "trainguard_on_event")
    assert "RuntimeError: slack is down; disabled for the rest of the job" in str(error)
    assert "broken" not in host.plugin_names


def test_detection_to_action_time_is_the_same_with_a_blackholed_webhook(run_job, blackhole, tmp_path):
    plan = [{"round": 0, "rank": 0, "do": "fail", "say": "RuntimeError: NCCL error: unhandled system error"}]
    baseline = run_job(plan, enable_job_restart=True, host=PluginHost(load_entry_points=False))
    started = time.monotonic()
    dead = run_job(plan, enable_job_restart=True, host=dead_webhook_host(blackhole["url"], drain_timeout=0.5),
                   events_file=tmp_path / "events.jsonl")
    took = time.monotonic() - started
    assert blackhole["accepted"].is_set()
    assert baseline.status is dead.status is JobStatus.SUCCEEDED and dead.actions == baseline.actions
    (base_round,), (dead_round,) = baseline.report["rounds"], dead.report["rounds"]
    # Before notifiers had queues, each event held the round ~16.5 s (3 attempts x 5 s + backoff).
    assert sum(dead_round["stages"].values()) < sum(base_round["stages"].values()) + 0.5
    assert took < 10
    from trainguard.store import RunStore

    with RunStore(dead.state_dir) as store:
        stored = [e["type"] for e in store.events(dead.job_id)]
    written = [json.loads(line)["type"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert written == stored


def test_trainguard_run_with_a_blackholed_webhook_recovers_as_fast_and_exits_within_the_drain(blackhole, tmp_path):
    from trainguard.store import RunStore

    fail_once = ("import os, sys; sys.exit(3 if os.environ['TRAINGUARD_RESTART_ROUND'] == '0' "
                 "and os.environ['RANK'] == '0' else 0)")
    env = {k: v for k, v in os.environ.items() if k != "TRAINGUARD_DISABLE_PLUGINS"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trainguard", "run", "--nproc", "2", "--state-dir", "state",
                           "--job-id", "dead-webhook", "--notify-webhook", blackhole["url"], "--events-file",
                           "events.jsonl", "--fault-tolerant-policy", "OnFailure", "--enable-job-restart", "True",
                           "--", sys.executable, "-c", fail_once],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert blackhole["accepted"].is_set()
    with RunStore(tmp_path / "state") as store:
        (round_,) = store.report("dead-webhook")["rounds"]
    # Before: ~16.5 s per event inside the diagnose stage. Now the round does not wait for the
    # webhook at all, and the supervisor exits after the final event's bounded drain (5 s).
    assert sum(round_["stages"].values()) < 1.0
    assert took < 15
    written = [json.loads(line)["type"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert written[0] == "job_started" and "round_finished" in written and written[-1] == "job_succeeded"
