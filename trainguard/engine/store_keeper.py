"""The supervisor's handle on the in-process store keeper (:mod:`trainguard.inprocess.keeper`).

The keeper is a small process, run with the ranks' interpreter (it has torch; the supervisor
need not), that hosts the base ``TCPStore`` of in-process recovery where no rank's death can take
it. It writes ``{"host", "port", "pid"}`` to the address file the ranks read, and takes
``{"set": key, "value": value}`` lines on its stdin. Where in-process recovery is off, or the
keeper could not start, the address file says ``{"disabled": true}`` and the ranks run their
function once, as if unwrapped.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)


class StoreKeeper:
    """One job's keeper: started by the first hello, stopped after the ranks."""

    def __init__(self, job_id: str, address_file: Path, *, python: str, host: str, enabled: bool) -> None:
        self.job_id = job_id
        self.address_file = address_file
        self._address = ""
        self.process: subprocess.Popen[bytes] | None = None
        address_file.unlink(missing_ok=True)
        if not enabled:
            self._disable()
            return
        self.process = subprocess.Popen([python, "-m", "trainguard.inprocess.keeper", str(address_file), host],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        close_fds=True)
        log.info("[%s] in-process store keeper started (pid %s)", job_id, self.process.pid)

    def up(self) -> bool:
        """Running, and its address known."""
        return self.process is not None and self.process.poll() is None and bool(self.address())

    def check_started(self) -> None:
        """A keeper that ended before it wrote its address could not start: say so, and turn
        in-process recovery off for the ranks."""
        if self.process is not None and self.process.poll() is not None and not self.address():
            log.warning("[%s] the in-process store keeper ended (exit %s): in-process recovery is off",
                        self.job_id, self.process.returncode)
            self.process = None
            self._disable()

    def address(self) -> str:
        """``host:port`` of the base store, once the keeper wrote it; '' before."""
        if not self._address:
            try:
                data = json.loads(self.address_file.read_text())
                self._address = f"{data['host']}:{data['port']}" if data.get("port") else ""
            except (OSError, ValueError, KeyError):
                return ""
        return self._address

    def set(self, key: str, value: str) -> None:
        if self.process is None or self.process.stdin is None:
            return
        try:
            self.process.stdin.write(json.dumps({"set": key, "value": value}).encode() + b"\n")
            self.process.stdin.flush()
        except OSError as exc:
            log.warning("[%s] the in-process store keeper is gone: %s", self.job_id, exc)

    def close(self) -> None:
        """Stop the keeper (after the ranks: they may still read the store while stopping)."""
        if self.process is None:
            return
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.address_file.unlink(missing_ok=True)
        self.process = None

    def _disable(self) -> None:
        self.address_file.write_text(json.dumps({"disabled": True}))
