"""The group coordinator's flags (Kafka's group.* and offsets.* names in the help) and
Kafka's checks on them; appended to the broker's flags by ``kgroupd.broker.config.settings``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

from kgroupd.broker.config.types import at_least_one, non_negative

SERVER_ASSIGNOR_NAMES = ("uniform", "range")
MIGRATION_POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


def _assignors(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise argparse.ArgumentTypeError("needs at least one assignor")
    for name in names:
        if name not in SERVER_ASSIGNOR_NAMES:
            raise argparse.ArgumentTypeError(
                f"unknown assignor {name!r} (kgroupd has {', '.join(SERVER_ASSIGNOR_NAMES)})"
            )
    return names


def _policy(text: str) -> str:
    value = text.strip().lower()
    if value not in MIGRATION_POLICIES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(MIGRATION_POLICIES)}")
    return value


# (flag, BrokerConfig field, type, help)
OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--offsets-partitions",
        "offsets_partitions",
        at_least_one,
        "coordinator shards (Kafka: offsets.topic.num.partitions)",
    ),
    (
        "--initial-rebalance-delay-ms",
        "initial_rebalance_delay_ms",
        non_negative,
        "Kafka: group.initial.rebalance.delay.ms",
    ),
    (
        "--group-min-session-timeout-ms",
        "group_min_session_timeout_ms",
        non_negative,
        "Kafka: group.min.session.timeout.ms",
    ),
    (
        "--group-max-session-timeout-ms",
        "group_max_session_timeout_ms",
        non_negative,
        "Kafka: group.max.session.timeout.ms",
    ),
    (
        "--group-max-size",
        "group_max_size",
        at_least_one,
        "Kafka: group.max.size (default: unbounded)",
    ),
    (
        "--group-consumer-session-timeout-ms",
        "group_consumer_session_timeout_ms",
        at_least_one,
        "consumer groups (KIP-848): Kafka: group.consumer.session.timeout.ms",
    ),
    (
        "--group-consumer-min-session-timeout-ms",
        "group_consumer_min_session_timeout_ms",
        at_least_one,
        "Kafka: group.consumer.min.session.timeout.ms",
    ),
    (
        "--group-consumer-max-session-timeout-ms",
        "group_consumer_max_session_timeout_ms",
        at_least_one,
        "Kafka: group.consumer.max.session.timeout.ms",
    ),
    (
        "--group-consumer-heartbeat-interval-ms",
        "group_consumer_heartbeat_interval_ms",
        at_least_one,
        "Kafka: group.consumer.heartbeat.interval.ms",
    ),
    (
        "--group-consumer-min-heartbeat-interval-ms",
        "group_consumer_min_heartbeat_interval_ms",
        at_least_one,
        "Kafka: group.consumer.min.heartbeat.interval.ms",
    ),
    (
        "--group-consumer-max-heartbeat-interval-ms",
        "group_consumer_max_heartbeat_interval_ms",
        at_least_one,
        "Kafka: group.consumer.max.heartbeat.interval.ms",
    ),
    (
        "--group-consumer-max-size",
        "group_consumer_max_size",
        at_least_one,
        "Kafka: group.consumer.max.size (default: unbounded)",
    ),
    (
        "--group-consumer-assignors",
        "group_consumer_assignors",
        _assignors,
        "server assignors, comma-separated, the first the default "
        "(Kafka: group.consumer.assignors)",
    ),
    (
        "--group-consumer-migration-policy",
        "group_consumer_migration_policy",
        _policy,
        "disabled|downgrade|upgrade|bidirectional (Kafka: group.consumer.migration.policy)",
    ),
    (
        "--offsets-retention-minutes",
        "offsets_retention_minutes",
        at_least_one,
        "Kafka: offsets.retention.minutes",
    ),
    (
        "--offset-metadata-max-bytes",
        "offset_metadata_max_bytes",
        non_negative,
        "Kafka: offset.metadata.max.bytes",
    ),
]


class GroupSettings(Protocol):
    @property
    def group_min_session_timeout_ms(self) -> int: ...
    @property
    def group_max_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_min_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_max_session_timeout_ms(self) -> int: ...
    @property
    def group_consumer_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_consumer_min_heartbeat_interval_ms(self) -> int: ...
    @property
    def group_consumer_max_heartbeat_interval_ms(self) -> int: ...


def check(c: GroupSettings) -> str | None:
    """Kafka's GroupCoordinatorConfig checks: why these settings cannot be used, or None."""
    checks = [
        (
            c.group_min_session_timeout_ms <= c.group_max_session_timeout_ms,
            "--group-min-session-timeout-ms is above --group-max-session-timeout-ms",
        ),
        (
            c.group_consumer_min_session_timeout_ms
            <= c.group_consumer_session_timeout_ms
            <= c.group_consumer_max_session_timeout_ms,
            "--group-consumer-session-timeout-ms must lie within "
            "--group-consumer-min-session-timeout-ms and --group-consumer-max-session-timeout-ms",
        ),
        (
            c.group_consumer_min_heartbeat_interval_ms
            <= c.group_consumer_heartbeat_interval_ms
            <= c.group_consumer_max_heartbeat_interval_ms,
            "--group-consumer-heartbeat-interval-ms must lie within "
            "--group-consumer-min-heartbeat-interval-ms and "
            "--group-consumer-max-heartbeat-interval-ms",
        ),
        (
            c.group_consumer_heartbeat_interval_ms < c.group_consumer_session_timeout_ms,
            "--group-consumer-heartbeat-interval-ms must be less than "
            "--group-consumer-session-timeout-ms",
        ),
    ]
    for ok, message in checks:
        if not ok:
            return message
    return None
