"""Notifiers: the webhook against a real HTTP server on loopback."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainguard.model import Event
from trainguard.plugins.notifiers import WebhookNotifier


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
