"""The one place that builds a Kubernetes API client and retries its calls.

Configuration is found as ``kubectl`` finds it: ``--kubeconfig`` or ``KUBECONFIG``, then
``~/.kube/config``, then the pod's service account (in-cluster). Every call goes through
:meth:`KubeApi.call`, which retries what a healthy API server may answer while busy or
restarting: 429 (waiting as long as ``Retry-After`` says), 5xx, and connection errors, for up
to ``patience`` seconds. Anything else (403, 404, 409, 422) is the caller's to handle at once.
urllib3's own retries are turned off so that there is one retry policy, this one.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay, wait_exponential

from trainguard.errors import AdapterError

log = logging.getLogger(__name__)

DEFAULT_PATIENCE = 120.0


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ``ApiClient`` for the cluster named by the arguments, the environment, or the pod."""
    from kubernetes import client, config

    configuration = client.Configuration()
    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    default = Path.home() / ".kube" / "config"
    try:
        if path or default.exists():
            config.load_kube_config(config_file=path or str(default), context=context,
                                    client_configuration=configuration)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            raise AdapterError("kubernetes", "no cluster configuration: set KUBECONFIG, write ~/.kube/config, "
                                             "or run inside a pod with a service account")
    except config.ConfigException as exc:
        raise AdapterError("kubernetes", f"cannot load the cluster configuration: {exc}") from None
    configuration.retries = False
    return client.ApiClient(configuration)


def transient(exc: BaseException) -> bool:
    """Whether a failed call may succeed if tried again: busy, restarting, or unreachable."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        return exc.status in (0, 408, 429) or exc.status >= 500
    return isinstance(exc, (HTTPError, ConnectionError, TimeoutError))


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked to wait (``Retry-After``), if it did."""
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return min(float(value), 60.0) if value is not None else None
    except ValueError:
        return None


class KubeApi:
    """Retried access to the core API (and coordination leases) for one namespace."""

    def __init__(self, api_client: Any, *, patience: float = DEFAULT_PATIENCE, job_id: str = "",
                 sleep: Callable[[float], None] = time.sleep) -> None:
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.patience = patience
        self.job_id = job_id
        self.sleep = sleep  # between retries: the adapter's pause (interruptible in the main thread)
        self._backoff = wait_exponential(multiplier=0.2, max=5)
        # Seconds spent waiting for the API server to answer, and why (the last reason).
        self.waited = 0.0
        self.wait_reason = ""

    def _wait(self, state: RetryCallState) -> float:
        asked = retry_after(state.outcome.exception() if state.outcome else None)
        return asked if asked is not None else self._backoff(state)

    def _warn(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        self.waited += state.next_action.sleep if state.next_action else 0.0
        self.wait_reason = f"the API server answered {_describe(exc)}"
        log.warning("[%s] Kubernetes API call failed (%s); retrying (attempt %d)", self.job_id,
                    _describe(exc), state.attempt_number)

    def call(self, method: Callable[..., Any], *args: Any, patience: float | None = None, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)``, retried while the failure is :func:`transient`."""
        retrying = Retrying(retry=retry_if_exception(transient), wait=self._wait, reraise=True,
                            stop=stop_after_delay(self.patience if patience is None else patience),
                            before_sleep=self._warn, sleep=self.sleep)
        try:
            return retrying(method, *args, **kwargs)
        except Exception as exc:
            if transient(exc):
                raise AdapterError("kubernetes", f"the API server did not answer for {self.patience:g} s: "
                                                 f"{_describe(exc)}", permanent=False) from None
            raise

    def json(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Like :meth:`call`, returning the decoded JSON body (no model objects: faster, lossless)."""
        response = self.call(method, *args, _preload_content=False, **kwargs)
        return json.loads(response.data)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call, or None when it is not one."""
    from kubernetes.client.exceptions import ApiException

    return exc.status if isinstance(exc, ApiException) else None


def _describe(exc: BaseException | None) -> str:
    status = getattr(exc, "status", None)
    if status:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


def abort(response: Any) -> None:
    """End a streaming response that another thread is reading.

    ``close()`` would wait for the reader's buffer lock (held while it blocks in ``recv``);
    shutting the socket down wakes the reader with end-of-file instead.
    """
    sock = getattr(getattr(response, "connection", None), "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
