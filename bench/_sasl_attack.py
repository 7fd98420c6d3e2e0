"""The attacker of ``bench_security.py --only abuse`` (issue 27), blocking sockets: run in a
process of its own, since its TLS encryption of 50 MB, or its handshakes, would otherwise stall
the event loop the bystander is timed on."""

from __future__ import annotations

import contextlib
import socket
import ssl
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h
import scramp

USER = "bench"
MECHANISM = "SCRAM-SHA-512"


def _tls(port: int, cafile: str) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=cafile)
    raw = socket.create_connection(("127.0.0.1", port))
    return context.wrap_socket(raw, server_hostname="localhost")


def _call(sock: ssl.SSLSocket, api_key: int, version: int, body: dict[str, object]) -> dict:
    sock.sendall(h.request_frame(api_key, version, 1, body))
    size = int.from_bytes(_recv(sock, 4), "big")
    return h.decode_response(api_key, version, _recv(sock, size))


def _recv(sock: ssl.SSLSocket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def guess(port: int, cafile: str, mechanism: str, user: str) -> float:
    """One login with a wrong password on a new connection; seconds from its last token
    sent to the answer."""
    with _tls(port, cafile) as sock:
        _call(sock, 17, 1, {"mechanism": mechanism})
        if mechanism == "PLAIN":
            token = f"\0{user}\0wrong".encode()
        else:
            client = scramp.ScramClient([mechanism], user, "wrong")
            first = _call(sock, 36, 2, {"auth_bytes": client.get_client_first().encode()})
            client.set_server_first(first["auth_bytes"].decode())
            token = client.get_client_final().encode()
        t0 = time.perf_counter()
        if _call(sock, 36, 2, {"auth_bytes": token})["error_code"] == 0:
            raise RuntimeError(f"{user} logged in with a wrong password")
        return time.perf_counter() - t0


def guesses(port: int, cafile: str, mechanism: str, seconds: float) -> float:
    """Wrong passwords back to back for ``seconds``: guesses per second."""
    count, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        guess(port, cafile, mechanism, USER)
        count += 1
    return count / seconds


def token_attack(port: int, cafile: str, size: int, cap: float) -> tuple[float, bool]:
    """A SCRAM client-first whose user name is ``size`` bytes: (seconds from its first byte
    sent until the broker closed or answered, whether that came before ``cap``)."""
    token = b"n,,n=" + b"u" * size + b",r=bench-nonce"
    frame = h.request_frame(36, 2, 1, {"auth_bytes": token})
    with _tls(port, cafile) as sock:
        _call(sock, 17, 1, {"mechanism": MECHANISM})
        sock.settimeout(cap)
        t0 = time.perf_counter()
        try:
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                sock.sendall(frame)
                sock.recv(1)  # the answer's first byte, or the close
        except TimeoutError:
            return cap, False
        return time.perf_counter() - t0, True
