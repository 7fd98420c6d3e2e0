"""``python -m kgroupd.broker.cli.healthcheck``: exit 0 when the broker's ``/readyz`` answers 200
(its
data dir loaded and its Kafka listeners accepting), 1 otherwise: the container's
HEALTHCHECK. Under ``--no-http`` it asks the first Kafka listener for ApiVersions instead.
``/readyz`` needs no token or client certificate; under ``--http-ssl`` it is asked over HTTPS
without checking the broker's certificate (the probe only asks whether it is ready).
Reads the same flags and ``KGROUPD_*`` variables as the broker; ``--timeout`` seconds
(default 3)."""

from __future__ import annotations

import socket
import ssl
import struct
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

from kgroupd.broker.config.http import DEFAULT_HTTP_PORT, bind_host
from kgroupd.broker.config.settings import ConfigError, load_config
from kgroupd.protocol.messages import lookup

__all__ = ["check", "main", "ready"]

_ANY = ("", "0.0.0.0", "::")


def ready(host: str, port: int, timeout: float, https: bool = False) -> str | None:
    """None if ``http://host:port/readyz`` (or https) answers 200, else why not."""
    url = f"{'https' if https else 'http'}://{host}:{port}/readyz"
    context = None
    if https:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return None if resp.status == 200 else f"{url} answered {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"{url} answered {exc.code}: {exc.read().decode(errors='replace').strip()}"
    except OSError as exc:
        return f"cannot reach {url}: {exc}"


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
        config = load_config(args)
        listeners = config.listener_list()
        listener = listeners[0]
    except ConfigError as exc:
        print(f"healthcheck: {exc}", file=sys.stderr)
        return 1
    if config.http:
        host, _ = bind_host(config.http_host, listeners)
        where = "127.0.0.1" if host in _ANY else host
        port = DEFAULT_HTTP_PORT if config.http_port is None else config.http_port
        problem = ready(where, port, timeout, config.http_ssl)
    else:
        host = listener.host if listener.host not in _ANY else "127.0.0.1"
        problem = check(host, listener.port, timeout)
    if problem is not None:
        print(f"healthcheck: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
