"""Link probes between check workers: a TCP handshake and a few round trips per pair of nodes.

Every worker listens; for each link the member listed first connects, says its node name, and
times echoed pings. A link is down when the connection is refused, reset or closed before the
reply. Collectives run only over links that answered, so a dead link costs one probe timeout
instead of a collective timeout.

``TRAINGUARD_SANITY_DROP_PEERS`` (comma-separated node names, or ``*``) makes this worker drop
its connections with those peers: the listener resets them after reading the name, and the
connecting side closes its socket before the reply. It is how tests and drills break one link
for real, at the transport, without telling the verdict anything.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Any

DROP_VAR = "TRAINGUARD_SANITY_DROP_PEERS"
PINGS = 20
_HELLO = b"TGPROBE "


def dropped_peers(env: dict[str, str] | None = None) -> frozenset[str]:
    value = (env if env is not None else os.environ).get(DROP_VAR, "")
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def _drops(drop: frozenset[str], peer: str) -> bool:
    return "*" in drop or peer in drop


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a dropping firewall or a dead NIC would look to the peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _read_line(sock: socket.socket, limit: int = 256) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("connection closed by peer")
        data += chunk
    return data.rstrip(b"\n")


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        data += chunk
    return data


def local_address(toward: str) -> str:
    """The address this host uses to reach ``toward`` (what peers should connect to)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((toward, 9))
            return str(sock.getsockname()[0])
        except OSError:
            return "127.0.0.1"


class ProbeServer:
    """Answers link probes for one node until closed."""

    def __init__(self, node: str, address: str, drop: frozenset[str] = frozenset()) -> None:
        self.node = node
        self.drop = drop
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((address, 0))
        self._sock.listen(64)
        self.address = f"{address}:{self._sock.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            hello = _read_line(conn)
            peer = hello[len(_HELLO):].decode(errors="replace") if hello.startswith(_HELLO) else "?"
            if _drops(self.drop, peer):
                _reset(conn)
                return
            conn.sendall(b"OK " + self.node.encode() + b"\n")
            while True:
                conn.sendall(_recv_exact(conn, 8))
        except (OSError, ConnectionError):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._closed = True
        self._sock.close()


def probe(node: str, peer: str, address: str, drop: frozenset[str] = frozenset(),
          timeout: float = 5.0) -> dict[str, Any]:
    """Connect to ``peer`` at ``address`` (``host:port``) and time round trips.

    :return: ``{"ok": True, "rtt_ms": median}`` or ``{"ok": False, "error": why}``.
    """
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(_HELLO + node.encode() + b"\n")
            if _drops(drop, peer):
                sock.shutdown(socket.SHUT_RDWR)
            reply = _read_line(sock)
            if reply != b"OK " + peer.encode():
                return {"ok": False, "error": f"unexpected reply {reply[:40]!r} (not {peer})"}
            times = []
            for i in range(PINGS):
                start = time.perf_counter()
                sock.sendall(struct.pack("q", i))
                _recv_exact(sock, 8)
                times.append(time.perf_counter() - start)
            times.sort()
            return {"ok": True, "rtt_ms": round(times[len(times) // 2] * 1e3, 4)}
    except (OSError, ConnectionError, ValueError) as exc:
        return {"ok": False, "error": f"{address}: {type(exc).__name__}: {exc}"}
