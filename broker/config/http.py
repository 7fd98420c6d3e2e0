"""The HTTP listener's and metrics' flags (``/metrics``, ``/healthz``, ``/readyz``);
appended to the broker's flags by ``kgroupd.broker.config.settings``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgroupd.broker.config.types import at_least_one, port

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
        "port of the HTTP listener; 0 binds a free port (logged as 'http_listening')",
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
    (
        "test-controls",
        "test_controls",
        "serve the test controls on the HTTP listener (/api/test/*: injected errors, a clock "
        "tests can move, forced rebalances; docs/testing.md); never in production",
    ),
]
