"""``python -m broker.healthcheck``: exit 0 when the broker answers a Kafka ApiVersions
request on its first listener (the container's HEALTHCHECK: ready means serving Kafka, not
merely accepting TCP), 1 otherwise. Reads the same flags and ``KGROUPD_*`` variables as the
broker; ``--timeout`` seconds (default 3)."""

from __future__ import annotations

import socket
import struct
import sys
from collections.abc import Sequence

from broker.config import ConfigError, load_config
from protocol.messages import lookup

__all__ = ["check", "main"]


def check(host: str, port: int, timeout: float) -> str | None:
    """None if ``host:port`` answers ApiVersions v0 with no error, else why not."""
    spec = lookup(18, 0)
    assert spec is not None
    client = b"healthcheck"
    header = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    frame = header + spec.encode_request({})
    try:
        with socket.create_connection((host, port), timeout) as sock:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    return "the broker closed the connection"
                data += chunk
    except OSError as exc:
        return f"cannot reach {host}:{port}: {exc}"
    (correlation,) = struct.unpack_from(">i", data, 4)
    if correlation != 1:
        return "wrong correlation id"
    body = spec.decode_response(data, 8)
    if body["error_code"] != 0:
        return f"ApiVersions answered error {body['error_code']}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    timeout = 3.0
    if "--timeout" in args:
        i = args.index("--timeout")
        timeout = float(args[i + 1])
        del args[i : i + 2]
    try:
        listener = load_config(args).listener_list()[0]
    except ConfigError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1
    host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    problem = check(host, listener.port, timeout)
    if problem is not None:
        print(f"healthcheck: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
