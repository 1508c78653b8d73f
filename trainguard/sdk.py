"""The training-side SDK: tell the supervisor about progress, stages, messages and keywords.

It needs no port and works unchanged under every adapter: records go to the channel file
named by ``TRAINGUARD_SDK_CHANNEL`` (the supervisor sets it for every instance), one JSON
object per line, each written with a single ``write`` so lines never interleave::

    {"v": 1, "t": 1732233600.123, "type": "config", "job_hang_interval": 180, "stage": "train"}
    {"v": 1, "t": ..., "type": "step", "step": 42, "metrics": {"loss": 0.7}}
    {"v": 1, "t": ..., "type": "heartbeat"}
    {"v": 1, "t": ..., "type": "checkpoint", "step": 40, "path": "/ckpt/step-40"}
    {"v": 1, "t": ..., "type": "message", "content": "The training loss of the job is NaN."}
    {"v": 1, "t": ..., "type": "retryable_errors", "errors": ["connect timeout"]}

Where ranks share no filesystem with the supervisor (pods), the channel is the value
``stderr``: each record goes to the process's stderr as one line, ``@trainguard-sdk `` followed
by the JSON object, and the adapter picks it out of the log it follows (the stored log keeps it).

``job_hang_interval`` is in seconds; -1 disables hang detection for this instance; null
restores the job's interval. Outside a supervised job every call is a cheap no-op whose status
says so. The AIMaster face is :mod:`trainguard.job_monitor`::

    from trainguard import job_monitor as jm
    monitor = jm.Monitor(config=jm.PyTorchConfig(job_hang_interval=1800))

    @monitor.hang_detect(180)          # 3 minutes inside train(), the previous interval after
    def train(): ...

    with monitor.hang_detect(-1):      # no hang detection while evaluating
        evaluate()

    monitor.report_step(step, loss=loss)            # progress, and step times for slow ranks
    monitor.report_checkpoint(step, path)           # work up to here survives a restart
    monitor.send_custom_message(content="loss is NaN")
    monitor.set_retryable_errors(["connect timeout"])
    monitor.on_terminate(save_checkpoint)           # dying gasp within the stop grace period
"""

from __future__ import annotations

import functools
import json
import os
import signal
import threading
import time
from typing import Any, Callable, TypeVar

__all__ = ["CHANNEL_VAR", "Config", "Monitor", "PyTorchConfig", "Status", "TFConfig"]

CHANNEL_VAR = "TRAINGUARD_SDK_CHANNEL"
STDERR_CHANNEL = "stderr"
STDERR_MARKER = "@trainguard-sdk "
F = TypeVar("F", bound=Callable[..., Any])


class Status:
    """What a call did: ``ok()`` is True when the record reached the supervisor's channel."""

    __slots__ = ("code", "message")

    def __init__(self, code: str = "OK", message: str = "") -> None:
        self.code = code
        self.message = message

    def ok(self) -> bool:
        return self.code == "OK"

    def to_string(self) -> str:
        return self.code if not self.message else f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"Status({self.to_string()!r})"


_OK = Status()
_UNSUPERVISED = Status("NOT_SUPERVISED", f"not running under trainguard ({CHANNEL_VAR} unset); nothing sent")


class Config:
    """Monitor settings; ``job_hang_interval`` (seconds, -1 off) overrides the job's for this instance."""

    def __init__(self, **params: Any) -> None:
        unknown = set(params) - {"job_hang_interval", "stage"}
        if unknown:
            raise TypeError(f"unknown monitor parameter(s): {', '.join(sorted(unknown))}")
        self.params = dict(params)


class PyTorchConfig(Config):
    """AIMaster's config for PyTorch jobs (the same parameters)."""


class TFConfig(Config):
    """AIMaster's config for TensorFlow jobs (the same parameters)."""


class _Channel:
    """Appends records to the channel file; opened lazily, shared by every Monitor in a process."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def send(self, record: dict[str, Any]) -> Status:
        if not self.path:
            return _UNSUPERVISED
        line = json.dumps({"v": 1, "t": time.time(), **record}, default=str).encode() + b"\n"
        if self.path == STDERR_CHANNEL:
            line = STDERR_MARKER.encode() + line
            self._fd = 2
        try:
            with self._lock:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
                os.write(self._fd, line)
        except OSError as exc:
            return Status("CHANNEL_ERROR", f"{self.path}: {exc.strerror}")
        return _OK


_channels: dict[str | None, _Channel] = {}


def _channel() -> _Channel:
    path = os.environ.get(CHANNEL_VAR) or None
    channel = _channels.get(path)
    if channel is None:
        channel = _channels[path] = _Channel(path)
    return channel


class _HangScope:
    """``hang_detect(seconds)``: a decorator and a context manager that restore the interval."""

    def __init__(self, monitor: "Monitor", seconds: float, stage: str | None) -> None:
        self.monitor = monitor
        self.seconds = seconds
        self.stage = stage
        self._saved: list[tuple[float | None, str | None]] = []

    def __enter__(self) -> "_HangScope":
        self._saved.append((self.monitor._interval, self.monitor._stage))
        self.monitor._set_interval(self.seconds, self.stage or self.monitor._stage)
        return self

    def __exit__(self, *exc: object) -> None:
        interval, stage = self._saved.pop()
        self.monitor._set_interval(interval, stage)

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _HangScope(self.monitor, self.seconds, self.stage or fn.__name__):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class Monitor:
    """The training process's handle on its supervisor (AIMaster's ``job_monitor.Monitor``)."""

    def __init__(self, config: Config | None = None) -> None:
        self._channel = _channel()
        self._interval: float | None = None
        self._stage: str | None = None
        self._terminate: list[Callable[[], Any]] = []
        if config is not None and config.params:
            self.reset_config(**config.params)

    @property
    def supervised(self) -> bool:
        return self._channel.path is not None

    def _set_interval(self, seconds: float | None, stage: str | None) -> Status:
        self._interval, self._stage = seconds, stage
        return self._channel.send({"type": "config", "job_hang_interval": seconds, "stage": stage})

    def reset_config(self, **params: Any) -> Status:
        """Change this instance's settings, e.g. ``reset_config(job_hang_interval=10)``."""
        Config(**params)
        interval = params.get("job_hang_interval", self._interval)
        if interval is not None and interval != -1 and not interval > 0:
            return Status("INVALID_ARGUMENT", f"job_hang_interval must be positive or -1, got {interval!r}")
        return self._set_interval(interval, params.get("stage", self._stage))

    def hang_detect(self, seconds: float, stage: str | None = None) -> _HangScope:
        """Use ``seconds`` (-1: off) as the hang interval inside a function or ``with`` block."""
        return _HangScope(self, seconds, stage)

    def report_step(self, step: int, **metrics: float) -> Status:
        """Report a finished training step (progress, and step times for slow-rank detection)."""
        return self._channel.send({"type": "step", "step": step, "metrics": metrics})

    def report_checkpoint(self, step: int, path: str | None = None) -> Status:
        """Report a checkpoint saved at ``step``: work up to it survives a restart (goodput, and
        the no-progress guard)."""
        return self._channel.send({"type": "checkpoint", "step": step, "path": path})

    def heartbeat(self) -> Status:
        """Say the process is alive and making progress without printing anything."""
        return self._channel.send({"type": "heartbeat"})

    def send_custom_message(self, content: str) -> Status:
        """Send a message that becomes an event in the job's history and reaches notifiers."""
        return self._channel.send({"type": "message", "content": str(content)})

    def set_retryable_errors(self, errors: list[str]) -> Status:
        """Keywords that make a failure retryable when found in this instance's log tail."""
        keywords = [str(e) for e in errors]
        if any(not k.strip() for k in keywords):
            return Status("INVALID_ARGUMENT", "an empty keyword would match every log")
        return self._channel.send({"type": "retryable_errors", "errors": keywords})

    def on_terminate(self, fn: F) -> F:
        """Run ``fn`` when the supervisor stops this process (SIGTERM), before it exits.

        The supervisor waits ``--stop-grace-period`` seconds before SIGKILL: a dying-gasp
        checkpoint must fit in that. Usable as a decorator. Main thread only.
        """
        if not self._terminate and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)
        self._terminate.append(fn)
        return fn

    def _on_sigterm(self, signum: int, _frame: Any) -> None:
        for fn in self._terminate:
            fn()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
