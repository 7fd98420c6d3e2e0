"""The raw wire pieces of ``bench_scale.py``: frames, the timed call, the bystander."""

from __future__ import annotations

import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h

_SIZE = struct.Struct(">i")


def recv_frame(s: socket.socket) -> bytes:
    (size,) = _SIZE.unpack(recv_exact(s, 4))
    return recv_exact(s, size)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


class Bystander(threading.Thread):
    """ApiVersions v3 round trips, one at a time, timed; ``mark()`` starts a new phase."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.frame = h.request_frame(
            18, 3, 1, {"client_software_name": "b", "client_software_version": "1"}
        )
        self.samples: list[float] = []
        self.done = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stopping.is_set():
            t0 = time.perf_counter()
            self.sock.sendall(self.frame)
            recv_frame(self.sock)
            took = time.perf_counter() - t0
            with self.lock:
                self.samples.append(took)
                self.done += 1
            time.sleep(0.002)

    def mark(self) -> None:
        with self.lock:
            self.samples = []

    def take(self) -> list[float]:
        """The round trips since ``mark``, with the one in flight now (it may span the
        whole phase)."""
        with self.lock:
            seen = self.done
        while self.is_alive():
            with self.lock:
                if self.done > seen:
                    break
            time.sleep(0.001)
        with self.lock:
            out, self.samples = self.samples, []
        return out

    def stop(self) -> None:
        self.stopping.set()
        self.join()
        self.sock.close()


def stall(samples: list[float]) -> str:
    if not samples:
        return "no round trip"
    s = sorted(samples)
    p99 = s[min(len(s) - 1, int(len(s) * 0.99))]
    return f"max {max(s) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms ({len(s)} round trips)"


def raw_call(s: socket.socket, api: int, version: int, body: dict[str, Any]) -> tuple[bytes, float]:
    frame = h.request_frame(api, version, 7, body)
    t0 = time.perf_counter()
    s.sendall(frame)
    got = recv_frame(s)
    return got, time.perf_counter() - t0
