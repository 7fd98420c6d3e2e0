"""The HTTP listener's and metrics' flags (``/metrics``, ``/healthz``, ``/readyz``);
appended to the broker's flags by ``kgroupd.broker.config.settings``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgroupd.broker.config.types import at_least_one, port

DEFAULT_HTTP_PORT = 8080  # when --http-port is not given; taken, a free port instead

# (flag, BrokerConfig field, type, help)
OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--http-host",
        "http_host",
        str,
        "address of the HTTP listener (/metrics, /healthz, /readyz; unauthenticated: keep "
        "it on 127.0.0.1 unless a firewall guards it) (default: the first Kafka listener's "
        "host)",
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
        "metrics",
        "metrics",
        "collect the Prometheus metrics served on /metrics (--no-metrics: none collected; "
        "/metrics answers 404)",
    ),
]
