"""The HTTP listener's and metrics' flags (``/metrics``, ``/healthz``, ``/readyz``);
appended to the broker's flags by ``kgroupd.broker.config.settings``. Also where the listener
binds by default (loopback when a Kafka listener is secured) and the bearer token file's
checks; the checks on requests are ``kgroupd.broker.http.auth``'s."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kgroupd.broker.config.listeners import Listener
from kgroupd.broker.config.types import at_least_one, port

SECURED_PROTOCOLS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOOPBACK = "127.0.0.1"
DEFAULT_HTTP_PORT = 8080  # when --http-port is not given; taken, a free port instead

# (flag, BrokerConfig field, type, help)
OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--http-host",
        "http_host",
        str,
        "address of the HTTP listener (/metrics, /api, the live page, /healthz, /readyz) "
        "(default: the first Kafka listener's host; 127.0.0.1 when any Kafka listener is "
        "SSL, SASL_PLAINTEXT or SASL_SSL)",
    ),
    (
        "--http-auth-token-file",
        "http_auth_token_file",
        str,
        "file holding a token every HTTP request but /healthz and /readyz must carry "
        "('Authorization: Bearer TOKEN'; a browser visits /?token=TOKEN once for a cookie); "
        "read at start-up (default: no token asked)",
    ),
    (
        "--http-port",
        "http_port",
        port,
        "port of the HTTP listener; 0 binds a free port (logged as 'http_listening'); "
        "unset: 8080, or a free port when 8080 is taken (logged as 'http_port_taken'); a "
        "port given here or in the variable that cannot be bound stops start-up",
    ),
    (
        "--metrics-max-groups",
        "metrics_max_groups",
        at_least_one,
        "groups (and topics) with series of their own in /metrics; the rest are summed "
        "into one series labelled __other__",
    ),
]

# (flag without --, BrokerConfig field, help): --FLAG / --no-FLAG, KGROUPD_<FIELD>=true|false
BOOL_OPTIONS: list[tuple[str, str, str]] = [
    ("http", "http", "serve the HTTP listener (--no-http: no HTTP port at all)"),
    (
        "http-ssl",
        "http_ssl",
        "serve HTTPS with --ssl-certfile/--ssl-keyfile; with --ssl-client-auth required, "
        "every path but /healthz and /readyz needs a client certificate signed by --ssl-cafile",
    ),
    (
        "metrics",
        "metrics",
        "collect the Prometheus metrics served on /metrics (--no-metrics: none collected; "
        "/metrics answers 404)",
    ),
    (
        "test-controls",
        "test_controls",
        "serve the test controls on the HTTP listener (/api/test/*: injected errors, a clock "
        "tests can move, forced rebalances; docs/testing.md); never in production",
    ),
]


class HttpSettings(Protocol):
    @property
    def http(self) -> bool: ...

    @property
    def http_host(self) -> str | None: ...

    @property
    def http_auth_token_file(self) -> str | None: ...

    @property
    def http_ssl(self) -> bool: ...

    @property
    def ssl_certfile(self) -> str | None: ...


class TokenFileError(ValueError):
    """A token file that cannot be used; the message says which and why."""


def bind_host(given: str | None, listeners: Sequence[Listener]) -> tuple[str, bool]:
    """Where the HTTP listener binds: ``--http-host`` when given; else 127.0.0.1 when any
    Kafka listener is secured (True: defaulted so), else the first Kafka listener's host."""
    if given is not None:
        return given, False
    if any(listener.protocol in SECURED_PROTOCOLS for listener in listeners):
        return LOOPBACK, True
    return listeners[0].host, False


def read_token(path: str) -> str:
    """The token in ``path`` (one line; surrounding whitespace dropped)."""
    what = f"--http-auth-token-file {path}"
    try:
        with open(path, "rb") as f:
            raw = f.read(64 * 1024 + 1)
    except OSError as exc:
        raise TokenFileError(f"{what}: cannot read it: {exc.strerror or exc}") from None
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"{what}: the token must be ASCII text") from None
    if len(raw) > 64 * 1024:
        raise TokenFileError(f"{what}: more than 64 KiB; the file holds one token")
    if not token:
        raise TokenFileError(f"{what}: the file is empty; it must hold the token")
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise TokenFileError(f"{what}: the token must be one word of printable characters")
    return token


def exposed(path: str) -> bool:
    """Whether group or other may read the token file."""
    try:
        return bool(os.stat(path).st_mode & (stat.S_IRGRP | stat.S_IROTH))
    except OSError:
        return False


def check(settings: HttpSettings) -> str | None:
    """Why these HTTP settings cannot be served, or None."""
    if not settings.http:
        return None
    if settings.http_host == "":
        return "--http-host must not be empty (0.0.0.0 listens on every address)"
    if settings.http_ssl and settings.ssl_certfile is None:
        return "--http-ssl needs --ssl-certfile (and --ssl-keyfile)"
    if settings.http_auth_token_file is not None:
        try:
            read_token(settings.http_auth_token_file)
        except TokenFileError as exc:
            return str(exc)
    return None
